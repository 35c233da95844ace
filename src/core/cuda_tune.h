// FERRY_CUDA_TUNE: the CUDA kernel choices kept for comparisons, as one typed option the matmul plan and the
// backend read (backends/cuda/matmul/plan.h). Unset, every field is the measured default; a comparison names only
// what it changes, e.g. FERRY_CUDA_TUNE=matvec=tiled,ring=0. Plain data, so core can hold it.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

enum class GemmTune {
  kFerry,     // ferry's TMA + wgmma GEMMs where they take the shape (default)
  kCublas,    // cuBLASLt for every GEMM
  kFerryPdl,  // ferry's Hopper GEMM launched with programmatic dependent launch
};
enum class SkinnyTune {
  kRule,   // the measured rule (default)
  kWgmma,  // the wgmma skinny GEMM for every 17..255-token matmul it takes
  kMma,    // the mma.sync skinny GEMM for every 17..255-token matmul it takes
};
enum class MatvecTune {
  kRule,   // the measured rule (default)
  kRows,   // the row-block matvec for every matvec
  kTiled,  // the tiled matvec for every matvec (no streamed kernels)
};
enum class PeerTune {
  kLamport,  // the peer all-reduce sees a peer's values land by the values themselves (default)
  kFlags,    // a system-scope fence and a flag per block
};

struct CudaTune {
  GemmTune gemm = GemmTune::kFerry;        // gemm=ferry|cublas|pdl
  SkinnyTune skinny = SkinnyTune::kRule;   // skinny=rule|wgmma|mma
  MatvecTune matvec = MatvecTune::kRule;   // matvec=rule|rows|tiled
  int ring_quant = 3;  // ring=N (0..16): ring stages in flight per block of a streamed quantized matvec; 0: all
  int ring_half = 0;   // ring_half=N (0..16): the same for BF16/F16
  int act_levels = 1;  // act_levels=1|2: int8 levels of a one-token quantized matvec's activations
  PeerTune peer = PeerTune::kLamport;      // peer=lamport|flags

  // "key=value,key=value" (empty: the defaults); a ferry::Error names an unknown key or a bad value.
  static CudaTune parse(std::string_view spec);
  std::string str() const;  // the same form, every key
};

}  // namespace ferry

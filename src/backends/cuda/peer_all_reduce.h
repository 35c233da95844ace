// One-shot all-reduce over peer memory for small f32 messages (a decode step's hidden states: up to
// kMaxBytes), the custom all-reduce of vLLM / TensorRT-LLM written for ferry. One kernel per call, no host
// involvement, capturable in a CUDA graph:
//
//   each block b of every rank pushes its chunk of x into slot [set][rank] of every peer's buffer (NVLink
//   stores), fences (system scope) and sets flag [set][rank][b] = gen in every peer's buffer (st.release.sys);
//   it then waits until flag [set][q][b] == gen in its own buffer for every peer q (ld.acquire.sys) and sums
//   the slots in rank order 0..world-1 (its own values from x) into x: the same bits on every rank.
//
// gen is a call counter kept in device memory (the last block of a call to finish increments it), so a
// replayed graph sees a new value every call and nothing is ever reset. Two buffer sets (set = gen & 1)
// alternate: a rank can run at most one call ahead of a peer (it needs the peer's flags of the call before),
// so it never overwrites a slot the peer still reads.
//
// No timeout in the kernel: a dead or stuck peer leaves the kernel spinning, and the communicator's watchdog
// (dist/nccl_communicator: the link sees the death, or the step outlives FERRY_TP_TIMEOUT) prints why and exits
// the process, which ends the kernel with it.
//
// Buffers: one cudaMalloc per rank, shared with the other processes through cudaIpcMemHandle_t (open_ipc) or,
// for one process driving every GPU (bench, tests), through plain device pointers (connect_local).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

struct CUstream_st;

namespace ferry {

class PeerAllReduce {
 public:
  static constexpr size_t kMaxBytes = size_t(512) << 10;  // 32 tokens x 4096 f32
  static constexpr int kMaxWorld = 8;

  // Allocates and zeroes this rank's buffer on the current device (synchronously).
  PeerAllReduce(int rank, int world, size_t max_bytes = kMaxBytes);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  // True when a message of n f32 values goes through this all-reduce (else the caller uses NCCL).
  bool fits(size_t n) const { return n > 0 && n <= max_elems_; }

  // This rank's buffer as cudaIpcMemHandle_t bytes, for the other processes.
  std::vector<uint8_t> ipc_handle() const;
  // Every rank's ipc_handle() in rank order (this rank's own entry is not opened). Call once.
  void open_ipc(const std::vector<std::vector<uint8_t>>& handles);
  // One process, every rank's object (rank order), each made with its own device current; enables peer
  // access between the devices. Call once on every object.
  void connect_local(const std::vector<PeerAllReduce*>& ranks);

  // x: [n] f32, contiguous, in this rank's device memory; replaced by the sum over ranks. Enqueued on stream
  // (the device current at construction must be current). Every rank must make the same sequence of calls.
  void run(float* x, size_t n, CUstream_st* stream);

  // run() on delta fused with the residual add and RMSNorm that follow it, one row per block:
  //   delta += the other ranks' delta (rank order); residual += delta; out = residual / rms(residual) * weight.
  // delta, residual, out: [rows, cols] f32 row-major; weight: [cols] f32; all 16-byte aligned, in this rank's
  // device memory. Same call-sequence rule as run() (the two share the call counter).
  static constexpr int64_t kNormMaxCols = 8192;
  bool fits_add_rms_norm(int64_t rows, int64_t cols) const;
  void run_add_rms_norm(float* delta, float* residual, float* out, const float* weight, int64_t rows, int64_t cols,
                        float eps, CUstream_st* stream);

 private:
  int rank_, world_, device_ = 0;
  size_t max_elems_;                  // f32 values per slot
  void* buffer_ = nullptr;            // this rank's: data [2][world][max_elems] f32, flags [2][world][kMaxBlocks]
                                      // u32, call counter u32, blocks-done u32
  std::vector<void*> peers_;          // [world] every rank's buffer as seen from this device (own: buffer_)
  std::vector<void*> opened_;         // ipc-opened pointers to close
  bool connected_ = false;
};

}  // namespace ferry

// Fused projections at decode (issue 3): one Llama-3-8B layer's projection work, unfused against fused, run
// through the CUDA backend (the same dispatch, kernels and step graphs the model uses):
//   attention in:  matmul wq, wk, wv; rope q; rope k; store_kv      vs  matmul wqkv; qkv_epilogue
//   epilogue only: rope q; rope k; store_kv                         vs  qkv_epilogue
//   ffn in:        matmul w_gate, w_up; swiglu                      vs  matmul w_gate_up; swiglu_fused
//   ffn swiglu:    matmul w_gate_up; swiglu_fused                   vs  matmul_swiglu (SwiGLU in the matmul)
// n = 1, 2, 4 tokens (the matvec range); then "ffn swiglu" at n = 512 (prefill: the Hopper GEMM with and without
// its SwiGLU epilogue), for the full w_gate_up (28672 x 4096) and its TP=2 shard (14336 x 4096), in TFLOP/s. Each variant is captured as a CUDA graph over kCopies layers with their
// own weight copies (so L2, 60 MB, never holds the next layer's weights) and replayed: microseconds per layer
// (median of 15 replays / kCopies; the graph launch itself is shared by the kCopies layers), the weights' GB/s
// and % of the 4.30 TB/s copy roofline, and the saving x 32 layers = ms per decode token.
// Usage: fusion_bench [--type bf16|q8_0|q4_0] [--json FILE]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/check.h"
#include "cuda_bench.h"
#include "formats/quant.h"
#include "kernel_json.h"

namespace {

using namespace ferry;

constexpr int64_t kDim = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kHidden = 14336, kLayers = 32;
constexpr int kCopies = 4;
constexpr int32_t kBlocks = 64, kBlockSize = 16;

// Host rows (rows, kDim) of `type` with small random values (xorshift; the values do not change the speed).
std::vector<uint8_t> random_rows(DType type, int64_t rows, uint64_t seed) {
  const size_t rb = row_bytes(type, kDim);
  std::vector<uint8_t> out(size_t(rows) * rb);
  std::vector<float> f(kDim);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : f) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v = (float(x >> 40) / float(1 << 24) - 0.5f) * 0.04f;
    }
    quantize_row(type, f.data(), out.data() + size_t(r) * rb, kDim);
  }
  return out;
}

std::vector<uint8_t> concat(std::initializer_list<const std::vector<uint8_t>*> parts) {
  std::vector<uint8_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, type_name = "bf16";
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--json" && a + 1 < argc) {
      json_path = argv[++a];
    } else if (arg == "--type" && a + 1 < argc) {
      type_name = argv[++a];
    } else {
      std::fprintf(stderr, "usage: fusion_bench [--type bf16|q8_0|q4_0] [--json FILE]\n");
      return 2;
    }
  }
  const DType type = type_name == "q8_0" ? DType::Q8_0 : type_name == "q4_0" ? DType::Q4_0 : DType::BF16;
  try {
    CudaBackend be;
    const auto s = static_cast<cudaStream_t>(be.stream());
    const int64_t q_rows = kHeads * kHeadDim, kv_rows = kKvHeads * kHeadDim;
    const std::vector<uint8_t> hq = random_rows(type, q_rows, 1), hk = random_rows(type, kv_rows, 2),
                               hv = random_rows(type, kv_rows, 3), hg = random_rows(type, kHidden, 4),
                               hu = random_rows(type, kHidden, 5);
    const std::vector<uint8_t> hqkv = concat({&hq, &hk, &hv}), hgu = concat({&hg, &hu});
    std::vector<DeviceBuffer> keep;
    const auto prep = [&](const std::vector<uint8_t>& h, int64_t rows) {
      return be.prepare_weight(Tensor::make(type, {rows, kDim}, const_cast<uint8_t*>(h.data())), keep);
    };
    struct Layer {
      Tensor wq, wk, wv, wqkv, wg, wu, wgu;  // (rows, dim) prepared weights of one layer copy
    };
    std::vector<Layer> layers;
    for (int c = 0; c < kCopies; ++c) {
      layers.push_back({prep(hq, q_rows), prep(hk, kv_rows), prep(hv, kv_rows),
                        prep(hqkv, q_rows + 2 * kv_rows), prep(hg, kHidden), prep(hu, kHidden),
                        prep(hgu, 2 * kHidden)});
    }
    const auto buf = [&](DType dt, std::initializer_list<int64_t> dims) {
      Tensor shape = Tensor::make(dt, dims, nullptr);
      keep.push_back(be.alloc(shape.nbytes()));
      Tensor t = Tensor::make(dt, dims, keep.back().data(), Device::Cuda);
      BENCH_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), s));
      return t;
    };
    constexpr int64_t kMaxN = 4;
    const Tensor k_cache = buf(DType::BF16, {kBlocks, kBlockSize, kKvHeads, kHeadDim});
    const Tensor v_cache = buf(DType::BF16, {kBlocks, kBlockSize, kKvHeads, kHeadDim});
    const Tensor inv_freq = buf(DType::F32, {kHeadDim / 2});
    std::vector<float> inv(kHeadDim / 2);
    for (size_t i = 0; i < inv.size(); ++i) inv[i] = float(std::pow(500000.0, -2.0 * double(i) / double(kHeadDim)));
    be.copy_to_device(inv_freq, inv.data(), inv.size() * 4);
    std::vector<float> hx(size_t(kMaxN * kDim));
    for (size_t i = 0; i < hx.size(); ++i) hx[i] = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    const Tensor x_all = buf(DType::F32, {kMaxN, kDim});
    be.copy_to_device(x_all, hx.data(), hx.size() * 4);
    const Tensor pos_all = buf(DType::I32, {kMaxN}), slots_all = buf(DType::I64, {kMaxN});
    const std::vector<int32_t> hpos = {1000, 1001, 1002, 1003};
    const std::vector<int64_t> hslots = {100, 101, 102, 103};
    be.copy_to_device(pos_all, hpos.data(), 16);
    be.copy_to_device(slots_all, hslots.data(), 32);
    float* q_b = static_cast<float*>(buf(DType::F32, {kMaxN, q_rows}).data);
    float* k_b = static_cast<float*>(buf(DType::F32, {kMaxN, kv_rows}).data);
    float* v_b = static_cast<float*>(buf(DType::F32, {kMaxN, kv_rows}).data);
    float* qkv_b = static_cast<float*>(buf(DType::F32, {kMaxN, q_rows + 2 * kv_rows}).data);
    float* g_b = static_cast<float*>(buf(DType::F32, {kMaxN, kHidden}).data);
    float* u_b = static_cast<float*>(buf(DType::F32, {kMaxN, kHidden}).data);
    float* gu_b = static_cast<float*>(buf(DType::F32, {kMaxN, 2 * kHidden}).data);
    be.synchronize();

    bench::KernelJson json;
    const double weight_bytes_attn = double(hqkv.size()), weight_bytes_ffn = double(hgu.size());
    std::printf("fusion_bench: Llama-3-8B layer, %s weights, %s; us per layer (graph of %d layers, median of 15)\n",
                dtype_name(type).data(), be.name().c_str(), kCopies);
    std::printf("%-14s %2s %10s %10s %9s %9s %7s %12s\n", "part", "n", "unfused", "fused", "saved", "GB/s fus",
                "%roof", "x32 ms/tok");
    for (const int64_t n : {1, 2, 4}) {
      const Tensor x = Tensor::make(DType::F32, {n, kDim}, x_all.data, Device::Cuda);
      const Tensor pos = Tensor::make(DType::I32, {n}, pos_all.data, Device::Cuda);
      const Tensor slots = Tensor::make(DType::I64, {n}, slots_all.data, Device::Cuda);
      const Tensor q = Tensor::make(DType::F32, {n, kHeads, kHeadDim}, q_b, Device::Cuda);
      const Tensor k = Tensor::make(DType::F32, {n, kKvHeads, kHeadDim}, k_b, Device::Cuda);
      const Tensor v = Tensor::make(DType::F32, {n, kKvHeads, kHeadDim}, v_b, Device::Cuda);
      const Tensor qkv = Tensor::make(DType::F32, {n, kHeads + 2 * kKvHeads, kHeadDim}, qkv_b, Device::Cuda);
      const Tensor gate = Tensor::make(DType::F32, {n, kHidden}, g_b, Device::Cuda);
      const Tensor up = Tensor::make(DType::F32, {n, kHidden}, u_b, Device::Cuda);
      const Tensor gate_up = Tensor::make(DType::F32, {n, 2 * kHidden}, gu_b, Device::Cuda);
      const auto flat = [](const Tensor& t) {
        return Tensor::make(t.dtype, {t.shape[0], t.shape[1] * t.shape[2]}, t.data, t.device);
      };
      const auto epilogue_unfused = [&] {
        be.rope(q, pos, inv_freq, RopeOrdering::Interleaved);
        be.rope(k, pos, inv_freq, RopeOrdering::Interleaved);
        be.store_kv(k_cache, v_cache, k, v, slots);
      };
      const auto epilogue_fused = [&] {
        be.qkv_epilogue({.qkv = qkv, .positions = pos, .slots = slots, .inv_freq = inv_freq,
                         .ordering = RopeOrdering::Interleaved, .q = q, .k_cache = k_cache, .v_cache = v_cache});
      };
      struct Variant {
        const char* part;
        std::function<void(const Layer&)> unfused, fused;
        double weight_bytes;
        int64_t weight_rows;  // rows of the fused weight (each kDim values): 2 * n * rows * kDim flops
      };
      const auto ffn_swiglu_unfused = [&](const Tensor& w, const Tensor& out, const Tensor& gu) {
        be.matmul(gu, x, w, Tensor{});
        be.swiglu_fused(out, gu);
      };
      const std::vector<Variant> variants = {
          {"attention in",
           [&](const Layer& L) {
             be.matmul(flat(q), x, L.wq, Tensor{});
             be.matmul(flat(k), x, L.wk, Tensor{});
             be.matmul(flat(v), x, L.wv, Tensor{});
             epilogue_unfused();
           },
           [&](const Layer& L) {
             be.matmul(flat(qkv), x, L.wqkv, Tensor{});
             epilogue_fused();
           },
           weight_bytes_attn, q_rows + 2 * kv_rows},
          {"epilogue only", [&](const Layer&) { epilogue_unfused(); }, [&](const Layer&) { epilogue_fused(); }, 0.0, 0},
          {"ffn in",
           [&](const Layer& L) {
             be.matmul(gate, x, L.wg, Tensor{});
             be.matmul(up, x, L.wu, Tensor{});
             be.swiglu(gate, gate, up);
           },
           [&](const Layer& L) {
             be.matmul(gate_up, x, L.wgu, Tensor{});
             be.swiglu_fused(gate, gate_up);
           },
           weight_bytes_ffn, 2 * kHidden},
          {"ffn swiglu", [&](const Layer& L) { ffn_swiglu_unfused(L.wgu, gate, gate_up); },
           [&](const Layer& L) { be.matmul_swiglu(gate, gate_up, x, L.wgu); }, weight_bytes_ffn, 2 * kHidden},
      };
      for (const Variant& var : variants) {
        double us[2];
        for (int fused = 0; fused < 2; ++fused) {
          const auto& run = fused ? var.fused : var.unfused;
          for (const Layer& L : layers) run(L);  // eager first: sizes every scratch buffer
          be.synchronize();
          be.begin_capture();
          for (const Layer& L : layers) run(L);
          const std::unique_ptr<StepGraph> g = be.end_capture();
          us[fused] = 1e3 * bench::median_ms(s, [&] { FERRY_CHECK(be.replay(*g), "stale graph"); }, 15, 1, 3) / kCopies;
        }
        const double gbs = var.weight_bytes > 0 ? var.weight_bytes / (us[1] * 1e-6) / 1e9 : 0.0;
        std::printf("%-14s %2lld %10.2f %10.2f %9.2f %9.0f %6.1f%% %12.3f\n", var.part, (long long)n, us[0], us[1],
                    us[0] - us[1], gbs, 100.0 * gbs * 1e9 / bench::kCopyBytesPerSecond,
                    (us[0] - us[1]) * kLayers * 1e-3);
        for (int fused = 0; fused < 2; ++fused) {
          json.add(std::string(var.part) + (fused ? " fused" : " unfused") + " n" + std::to_string(n),
                   2.0 * double(n) * double(var.weight_rows) * double(kDim),
                   var.weight_bytes, us[fused] * 1e-6);
        }
      }
    }

    // Prefill: n = 512 tokens through the Hopper GEMM, unfused (GEMM into (n, 2 hidden) + swiglu_fused) against the
    // GEMM with the SwiGLU epilogue; the full w_gate_up and the TP=2 shard ([gate rows 0..7167; up rows 0..7167]).
    {
      constexpr int64_t kN = 512;
      std::vector<float> hxp(size_t(kN * kDim));
      for (size_t i = 0; i < hxp.size(); ++i) hxp[i] = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
      const Tensor xp = buf(DType::F32, {kN, kDim});  // (512, dim) f32
      be.copy_to_device(xp, hxp.data(), hxp.size() * 4);
      const Tensor gp = buf(DType::F32, {kN, kHidden});       // (512, hidden) f32 output
      const Tensor gup = buf(DType::F32, {kN, 2 * kHidden});  // (512, 2 hidden) f32 unfused intermediate
      const size_t rb = hg.size() / size_t(kHidden);
      const std::vector<uint8_t> hg2(hg.begin(), hg.begin() + ptrdiff_t(rb * kHidden / 2)),
          hu2(hu.begin(), hu.begin() + ptrdiff_t(rb * kHidden / 2));
      const std::vector<uint8_t> hgu2 = concat({&hg2, &hu2});
      std::vector<Tensor> shard;
      for (int c = 0; c < kCopies; ++c) shard.push_back(prep(hgu2, kHidden));
      std::printf("\nprefill n = %lld (%s): us per call (graph of %d calls, median of 15)\n", (long long)kN,
                  dtype_name(type).data(), kCopies);
      std::printf("%-22s %10s %10s %9s %9s %9s\n", "w_gate_up", "unfused", "fused", "saved", "TF/s unf", "TF/s fus");
      for (const int64_t hidden : {kHidden, kHidden / 2}) {
        const Tensor out = Tensor::make(DType::F32, {kN, hidden}, gp.data, Device::Cuda);
        const Tensor gu = Tensor::make(DType::F32, {kN, 2 * hidden}, gup.data, Device::Cuda);
        double us[2];
        for (int fused = 0; fused < 2; ++fused) {
          const auto run = [&](const Tensor& w) {
            if (fused) {
              be.matmul_swiglu(out, gu, xp, w);
            } else {
              be.matmul(gu, xp, w, Tensor{});
              be.swiglu_fused(out, gu);
            }
          };
          const auto all = [&] {
            for (int c = 0; c < kCopies; ++c) run(hidden == kHidden ? layers[size_t(c)].wgu : shard[size_t(c)]);
          };
          all();
          be.synchronize();
          be.begin_capture();
          all();
          const std::unique_ptr<StepGraph> g = be.end_capture();
          us[fused] = 1e3 * bench::median_ms(s, [&] { FERRY_CHECK(be.replay(*g), "stale graph"); }, 15, 1, 3) / kCopies;
        }
        const double flops = 2.0 * double(kN) * double(2 * hidden) * double(kDim);
        std::printf("%-22s %10.2f %10.2f %9.2f %9.0f %9.0f\n",
                    (std::to_string(2 * hidden) + "x" + std::to_string(kDim)).c_str(), us[0], us[1], us[0] - us[1],
                    flops / (us[0] * 1e-6) / 1e12, flops / (us[1] * 1e-6) / 1e12);
        for (int fused = 0; fused < 2; ++fused) {
          json.add(std::string("ffn swiglu prefill ") + (fused ? "fused" : "unfused") + " " + std::to_string(2 * hidden),
                   flops, double(2 * hidden * kDim) * double(row_bytes(type, kDim)) / double(kDim), us[fused] * 1e-6);
        }
      }
    }
    be.synchronize();
    return json.write(json_path) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusion_bench: %s\n", e.what());
    return 1;
  }
}

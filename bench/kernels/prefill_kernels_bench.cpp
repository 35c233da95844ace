// Prefill-side CUDA kernel harness (needs a GPU; prints one table per section):
//   gemm   : bf16 GEMM, ferry's cached-plan cuBLASLt wrapper vs plain cublasGemmEx, Llama-3-8B shapes,
//            n = 512 and 2048 tokens; TFLOP/s (779 measured for cuBLAS 8192^3 on the H200).
//   matmul : CudaBackend::matmul end to end (activation rounding + dequant pass + GEMM) for BF16, Q8_0,
//            Q4_0 weights at n = 512, and the dequantize pass alone in GB/s (read + written; copy 4.30 TB/s).
//   prefill: causal attention, H 32, KVH 8, D 128, paged bf16 cache (block 16), one launch over B sequences
//            of L tokens (B * L = 16384), flash kernel vs the first-version kernel; TFLOP/s counted as
//            torch does for causal SDPA (2 * 2 * B * H * L^2 * D / 2); torch SDPA: 433 (L 1024) / 611 (8192).
//   decode : one query row per sequence at context C, B sequences; GB/s of K + V read (copy 4.30 TB/s).
//   (bench/kernels/attention_bench.cpp is the fuller attention harness: variants, torch SDPA comparison.)
// Usage: prefill_kernels_bench [--json FILE] [gemm|matmul|prefill|decode]... (none: all). --json writes every
// ferry row as {name, flops, bytes, seconds} (bench/kernels/kernel_json.h) for `ferry bench --plot --kernels`;
// bytes there = the least traffic of one call (operands read once, results written once).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/attention/attention.cuh"
#include "backends/cuda/common/device_errors.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/matmul/gemm_cublaslt.h"
#include "cuda_bench.h"
#include "formats/quant.h"
#include "kernel_json.h"

namespace {

using namespace ferry;

// Mean milliseconds per call over `iters` back-to-back calls (one event pair), after 3 warm-up calls.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int iters = 20) {
  return bench::median_ms(s, fn, 1, iters, 3);
}

void* dev_alloc(size_t bytes, uint8_t fill) {
  void* p = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&p, bytes));
  BENCH_CUDA_CHECK(cudaMemset(p, fill, bytes));  // 0x3C...: small finite floats / bf16s; speed does not depend on values
  return p;
}

struct Shape {
  const char* name;
  int64_t n_out, n_in;
};
const Shape kShapes[] = {{"wq/wo 4096x4096", 4096, 4096}, {"wk/wv 1024x4096", 1024, 4096},
                         {"gate/up 14336x4096", 14336, 4096}, {"down 4096x14336", 4096, 14336}};

void bench_gemm(bench::KernelJson& json) {
  std::printf("\n== gemm: bf16, fp32 out (TFLOP/s) ==\n%-22s %6s %12s %12s\n", "shape", "n", "ferry Lt", "cublasGemmEx");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  cuda_ops::CublasLtGemm lt;
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = dev_alloc(ws_bytes, 0);
  cublasSetWorkspace(h, ws, ws_bytes);
  for (const int64_t n : {512, 2048}) {
    for (const Shape& sh : kShapes) {
      auto* x = static_cast<uint16_t*>(dev_alloc(size_t(n * sh.n_in) * 2, 0x3C));
      auto* w = static_cast<uint16_t*>(dev_alloc(size_t(sh.n_out * sh.n_in) * 2, 0x3C));
      auto* out = static_cast<float*>(dev_alloc(size_t(n * sh.n_out) * 4, 0));
      void* ws2 = dev_alloc(ws_bytes, 0);
      const double flop = 2.0 * double(n) * double(sh.n_out) * double(sh.n_in);
      const double t_lt = time_ms(s, [&] { lt.run(out, x, w, n, sh.n_out, sh.n_in, ws2, ws_bytes, s); });
      const float alpha = 1, beta = 0;
      const double t_cb = time_ms(s, [&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(sh.n_out), int(n), int(sh.n_in), &alpha, w, CUDA_R_16BF,
                     int(sh.n_in), x, CUDA_R_16BF, int(sh.n_in), &beta, out, CUDA_R_32F, int(sh.n_out),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      std::printf("%-22s %6ld %12.1f %12.1f\n", sh.name, long(n), flop / t_lt * 1e-9, flop / t_cb * 1e-9);
      const double gemm_bytes = double(n * sh.n_in) * 2 + double(sh.n_out * sh.n_in) * 2 + double(n * sh.n_out) * 4;
      json.add(std::string("gemm Lt bf16 ") + sh.name + " n" + std::to_string(n), flop, gemm_bytes, t_lt * 1e-3);
      cudaFree(x), cudaFree(w), cudaFree(out), cudaFree(ws2);
    }
  }
  cudaFree(ws);
  cublasDestroy(h);
  cudaStreamDestroy(s);
}

void bench_matmul(bench::KernelJson& json) {
  std::printf("\n== matmul via CudaBackend, n = 512 (ms per call, TFLOP/s) ==\n%-22s %6s %10s %10s\n", "shape",
              "type", "ms", "TFLOP/s");
  CudaBackend be;
  const int64_t n = 512;
  for (const Shape& sh : kShapes) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0, 0.5f);
    std::vector<float> wf(size_t(sh.n_out * sh.n_in));
    for (float& v : wf) v = dist(rng);
    for (const DType t : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
      std::vector<uint8_t> wq(size_t(sh.n_out) * row_bytes(t, sh.n_in));
      for (int64_t r = 0; r < sh.n_out; ++r)
        quantize_row(t, wf.data() + r * sh.n_in, wq.data() + size_t(r) * row_bytes(t, sh.n_in), sh.n_in);
      std::vector<DeviceBuffer> keep;
      const Tensor w = be.prepare_weight(Tensor::make(t, {sh.n_out, sh.n_in}, wq.data()), keep);
      keep.push_back(be.alloc(size_t(n * sh.n_in) * 4));
      const Tensor x = Tensor::make(DType::F32, {n, sh.n_in}, keep.back().data(), Device::Cuda);
      BENCH_CUDA_CHECK(cudaMemset(x.data, 0x3C, x.nbytes()));
      keep.push_back(be.alloc(size_t(n * sh.n_out) * 4));
      const Tensor out = Tensor::make(DType::F32, {n, sh.n_out}, keep.back().data(), Device::Cuda);
      for (int i = 0; i < 3; ++i) be.matmul(out, x, w, Tensor{});
      be.synchronize();
      const int iters = 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) be.matmul(out, x, w, Tensor{});
      be.synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
      std::printf("%-22s %6s %10.3f %10.1f\n", sh.name, std::string(dtype_name(t)).c_str(), ms,
                  2.0 * double(n) * double(sh.n_out) * double(sh.n_in) / ms * 1e-9);
      json.add("matmul " + std::string(dtype_name(t)) + " " + sh.name + " n" + std::to_string(n),
               2.0 * double(n) * double(sh.n_out) * double(sh.n_in),
               double(wq.size()) + double(n) * double(sh.n_in + sh.n_out) * 4, ms * 1e-3);
    }
  }
}

struct AttnSetup {
  std::vector<void*> bufs;
  cuda_ops::AttentionParams p{};
  ~AttnSetup() {
    for (void* b : bufs) cudaFree(b);
  }
};

// B sequences, each q_len queries at the end of kv_len cached positions; blocks laid out contiguously.
void make_attention(AttnSetup& a, int B, int q_len, int kv_len, cuda_ops::DeviceErrors* errors) {
  const int H = 32, KVH = 8, D = 128, bs = 16;
  const int max_blocks = (kv_len + bs - 1) / bs;
  const int n_blocks = B * max_blocks;
  std::vector<int32_t> q_start(static_cast<size_t>(B)), ql(static_cast<size_t>(B), q_len),
      kl(static_cast<size_t>(B), kv_len), table(static_cast<size_t>(B) * static_cast<size_t>(max_blocks));
  for (int s = 0; s < B; ++s) {
    q_start[size_t(s)] = s * q_len;
    for (int b = 0; b < max_blocks; ++b) table[size_t(s * max_blocks + b)] = s * max_blocks + b;
  }
  auto upload = [&](const std::vector<int32_t>& v) {
    void* d = dev_alloc(v.size() * 4, 0);
    BENCH_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    a.bufs.push_back(d);
    return static_cast<const int32_t*>(d);
  };
  const size_t cache = size_t(n_blocks) * bs * KVH * D * 2;  // bf16 (CudaBackend::kv_dtype())
  const size_t n_tok = size_t(B) * size_t(q_len);
  a.bufs.push_back(dev_alloc(cache, 0x3C));
  a.bufs.push_back(dev_alloc(cache, 0x3C));
  a.bufs.push_back(dev_alloc(n_tok * H * D * 4, 0x3C));
  a.bufs.push_back(dev_alloc(n_tok * H * D * 4, 0));
  a.p = cuda_ops::AttentionParams{.out = static_cast<float*>(a.bufs[3]), .q = static_cast<const float*>(a.bufs[2]),
                                  .k_cache = static_cast<const __nv_bfloat16*>(a.bufs[0]),
                                  .v_cache = static_cast<const __nv_bfloat16*>(a.bufs[1]), .q_start = nullptr,
                                  .q_len = nullptr, .kv_len = nullptr, .block_tables = nullptr, .n_seqs = B,
                                  .max_blocks_per_seq = max_blocks, .block_size = bs, .n_blocks = n_blocks,
                                  .n_tokens = int32_t(n_tok), .n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                                  .scale = 0.0884f, .errors = errors};
  a.p.q_start = upload(q_start);
  a.p.q_len = upload(ql);
  a.p.kv_len = upload(kl);
  a.p.block_tables = upload(table);
  a.p.scratch_bytes = cuda_ops::attention_scratch_bytes(a.p);
  if (a.p.scratch_bytes) {
    a.bufs.push_back(dev_alloc(a.p.scratch_bytes, 0));
    a.p.scratch = static_cast<float*>(a.bufs.back());
  }
}

void bench_prefill(cuda_ops::DeviceErrors* errors, bench::KernelJson& json) {
  std::printf("\n== prefill attention, H 32 KVH 8 D 128, B*L = 16384 (TFLOP/s causal) ==\n%6s %4s %10s %10s %10s\n",
              "L", "B", "flash ms", "TFLOP/s", "simple");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  for (const int L : {512, 1024, 2048, 4096, 8192}) {
    const int B = 16384 / L;
    AttnSetup a;
    make_attention(a, B, L, L, errors);
    const double flop = 4.0 * B * 32 * double(L) * double(L) * 128 / 2;
    const double t = time_ms(s, [&] { cuda_ops::attention(a.p, s); }, 10);
    std::string simple = "-";
    if (L <= 2048) {
      const double ts = time_ms(s, [&] { cuda_ops::attention_simple(a.p, s); }, 3);
      simple = std::to_string(flop / ts * 1e-9);
    }
    std::printf("%6d %4d %10.3f %10.1f %10s\n", L, B, t, flop / t * 1e-9, simple.c_str());
    const double qkvo = double(B) * L * (2.0 * 32 * 4 + 2.0 * 8 * 2) * 128;  // q, out (f32); k, v (bf16)
    json.add("flash prefill attention L" + std::to_string(L) + " B" + std::to_string(B), flop, qkvo, t * 1e-3);
  }
  cudaStreamDestroy(s);
}

void bench_decode(cuda_ops::DeviceErrors* errors, bench::KernelJson& json) {
  std::printf("\n== decode attention, H 32 KVH 8 D 128 (GB/s of K+V; copy 4300) ==\n%6s %4s %10s %10s %10s\n",
              "ctx", "B", "split us", "GB/s", "simple");
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreate(&s));
  for (const int B : {1, 8, 32}) {
    for (const int C : {4096, 16384, 32768}) {
      AttnSetup a;
      make_attention(a, B, 1, C, errors);
      const double bytes = double(B) * C * 8 * 128 * 2 * 2;  // bf16 K + V
      const double t = time_ms(s, [&] { cuda_ops::attention(a.p, s); });
      const double ts = time_ms(s, [&] { cuda_ops::attention_simple(a.p, s); }, 5);
      std::printf("%6d %4d %10.1f %10.0f %10.0f\n", C, B, t * 1e3, bytes / t * 1e-6, bytes / ts * 1e-6);
      json.add("decode attention ctx" + std::to_string(C) + " B" + std::to_string(B), 4.0 * B * 32 * double(C) * 128,
               bytes + double(B) * 2 * 32 * 128 * 4, t * 1e-3);
    }
  }
  cudaStreamDestroy(s);
}

void bench_dequant_pass() {
  std::printf("\n(the matmul rows above minus the BF16 row of the same shape: activation rounding is shared;\n"
              " Q8_0/Q4_0 add the dequantize pass, 2 bytes written + read per weight)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (CudaBackend::device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  std::vector<std::string> what;
  std::string json_path;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--json") {
      if (a + 1 == argc) {
        std::fprintf(stderr, "--json needs a file name\n");
        return 2;
      }
      json_path = argv[++a];
    } else {
      what.push_back(arg);
    }
  }
  bench::KernelJson json;
  auto want = [&](const char* w) {
    if (what.empty()) return true;
    for (const auto& x : what)
      if (x == w) return true;
    return false;
  };
  void* host_errors = nullptr;
  BENCH_CUDA_CHECK(cudaHostAlloc(&host_errors, sizeof(cuda_ops::DeviceErrors), cudaHostAllocMapped));
  auto* errors = static_cast<cuda_ops::DeviceErrors*>(host_errors);
  *errors = cuda_ops::DeviceErrors{0, 0};
  if (want("gemm")) bench_gemm(json);
  if (want("matmul")) {
    bench_matmul(json);
    bench_dequant_pass();
  }
  if (want("prefill")) bench_prefill(errors, json);
  if (want("decode")) bench_decode(errors, json);
  BENCH_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("\ndevice error word: bits %u (0 expected)\n", errors->bits);
  cudaFreeHost(host_errors);
  return json.write(json_path) ? 0 : 1;
}

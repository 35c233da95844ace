// The roofline model of ferry's benchmark tests: how many bytes a test moves and how many FLOPs it does, and
// how close a measured run came to the bound min(peak FLOP/s, intensity × bandwidth).
//
// What is counted (the least traffic and work a forward pass needs, not what a kernel happens to do):
//   bytes  = weights streamed once per forward step (every layer's matrices and norms; the output head only
//            on steps that compute logits), one embedding row per token (a gather, not the table), the KV
//            cache: each token's K and V written once, and each step reading the K and V of every position
//            its queries can see once, plus the f32 logits rows written. Activations are not counted
//            (they live in caches at these sizes; small against the weights in decode).
//   FLOPs  = 2 × matmul parameters per token (q, k, v, o, gate, up, down per layer; the output head per
//            logits row) + attention 4 × n_layers × n_heads × head_dim per (query, visible key) pair:
//            q·k and p·v are head_dim multiply-adds each. Causal: a query at position p sees p + 1 keys.
//            Norms, RoPE, softmax and SwiGLU are not counted (O(dim) per token against O(dim²)).
// Weight bytes are the file's tensor bytes (a backend that repacks keeps the same bytes per weight).
//
// The tests (tools/ferry/bench.cpp, measure/bench_run.h), after D = depth tokens already in the KV cache (0: an
// empty cache; filling it is not timed, and not counted):
//   pp N: an N-token prompt, in chunks of S = max_step_tokens; c = ceil(N / S) steps; only the last chunk
//         computes logits (one row); chunk k's queries see the D cached keys and the prompt's keys up to its end.
//         bytes = c × W_layers + W_head + N × E_row + N × KV (write) + KV × Σ_chunks (D + end_k) (read) + 4V
//         FLOPs = 2 N P_layers + 2 P_head + A × (N D + N(N+1)/2)
//   tg N: N decode steps after a 1-token prompt; step j (0-based) runs position D + j + 1 and sees D + j + 2 keys.
//         bytes = N × (W_layers + W_head + E_row + KV + 4V) + KV × (N D + N(N+3)/2)
//         FLOPs = 2 N (P_layers + P_head) + A × (N D + N(N+3)/2)
//   with W = weight bytes, E_row = embedding bytes / V, KV = K + V bytes of one token over all layers,
//   P_layers = n_layers × (dim × head_dim × (2 n_heads + 2 n_kv_heads) + 3 × dim × hidden), P_head = V × dim,
//   A = 4 × n_layers × n_heads × head_dim, V = vocab size.
//
// Worked example, Llama-3-8B shape (32 layers, dim 4096, 32 heads, 8 KV heads, head_dim 128, hidden 14336,
// vocab 128256), bf16 weights, f32 KV cache:
//   P_layers = 32 × (4096·128·80 + 3·4096·14336) = 32 × 218,103,808 = 6,979,321,856; P_head = 525,336,576.
//   W_layers = 2 × P_layers + f32 norms (65 × 4096 × 4 B) = 13,959,708,672 B; W_head = 1,050,673,152 B;
//   E_row = 8,192 B; KV = 2 × 32 × 8 × 128 × 4 = 262,144 B; logits row 513,024 B; A = 524,288.
//   tg128 per token: 15,010,381,824 + 8,192 + 262,144 + 513,024 + 262,144 × 65.5 = 15,028,335,616 B and
//     15,009,316,864 + 524,288 × 65.5 = 15,043,657,728 FLOP: intensity 1.00 FLOP/B, memory-bound on the
//     H200 (4.30 TB/s, 779 TFLOP/s): 3.49 ms per token, 286 tok/s. (The often-quoted 268 tok/s divides the
//     whole 16.06 GB file by 4.30 TB/s (2 × 8.03e9 parameters); decode does not stream the 1.05 GB embedding table.)
//   pp512 (one chunk): 15,283,524,608 B and 7,216,729,948,160 FLOP: intensity 472, compute-bound:
//     9.26 ms, 55,300 tok/s.
//   tg128 @ d8192 with the bf16 KV cache (KV = 131,072 B, 128 KiB a token of depth, as the CUDA backend stores it):
//     per token 15,010,381,824 + 8,192 + 131,072 + 513,024 + 131,072 × (8192 + 65.5) = 16,093,361,152 B:
//     3.74 ms, 267 tok/s on the H200 (at d32768: 19,314,586,624 B, 223 tok/s).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/engine.h"

namespace ferry {

// What one token costs a forward pass of a model: its shape and the bytes of its parts.
struct RooflineModel {
  int n_layers = 0, dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden_dim = 0, vocab_size = 0;
  double layer_weight_bytes = 0;   // every weight a step streams except the output head (matrices, norms)
  double head_weight_bytes = 0;    // the output head (vocab × dim): output.weight, or the tied embedding table
  double embedding_row_bytes = 0;  // one row of the token embedding table
  double kv_bytes_per_token = 0;   // K + V of one token over all layers, as the cache stores them
  double logits_row_bytes = 0;     // vocab × 4 (f32 logits)

  double layer_matmul_params() const;  // P_layers
  double head_params() const;          // P_head
  double attention_flops_per_pair() const;  // A: per (query, visible key) pair, all layers and heads
};

// The model of an opened engine. Weight bytes come from ModelInfo::tensors (GGUF or Hugging Face names);
// kv_capacity_tokens: the tokens the allocated KV cache holds (blocks × block size).
RooflineModel roofline_model(const ModelInfo& info, int64_t kv_capacity_tokens);

enum class TestKind { Prompt, Generate };  // pp N, tg N

struct BenchTest {
  TestKind kind = TestKind::Prompt;
  int n_tokens = 0;         // N
  int max_step_tokens = 0;  // S (pp only): prompt chunk size
  int depth = 0;            // D: tokens already in the KV cache when the test starts
  std::string label() const;  // "pp512", "tg128", "tg128 @ d8192" (llama-bench's names)
};

struct TestCost {
  double flops = 0, bytes = 0;
  double tokens = 0;  // tokens the test's rate is counted in (N)
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }  // FLOP per byte
};

TestCost test_cost(const RooflineModel& m, const BenchTest& t);

// The roof: memory bandwidth (bytes read + written per second) and peak arithmetic (FLOP/s).
struct Ceilings {
  double bytes_per_s = 0;
  double flops_per_s = 0;
  std::string source;  // where the figures come from, for the report
};

// "GBPS,TFLOPS", e.g. "4300,779": throws ferry::Error unless both are positive finite numbers.
Ceilings parse_ceilings(const std::string& text);
// The H200 figures measured for this project (shared/GPU.md, 2026-11-29): 4.30 TB/s device copy,
// 779 TFLOP/s cuBLAS bf16 GEMM.
Ceilings h200_ceilings();

enum class Bound { Memory, Compute };

double ridge_intensity(const Ceilings& c);                    // FLOP/byte where the two roofs meet
double roofline_flops(double intensity, const Ceilings& c);   // min(peak, intensity × bandwidth)
Bound binding_ceiling(double intensity, const Ceilings& c);
std::string_view bound_name(Bound b);                         // "memory", "compute"

// One measured run against the roof.
struct RooflinePoint {
  double seconds = 0;
  double tokens_per_s = 0;
  double flops_per_s = 0, bytes_per_s = 0, intensity = 0;
  double roof_flops_per_s = 0;   // the bound at this intensity
  double roof_tokens_per_s = 0;  // the fastest this test could run: tokens / max(F / peak, B / bandwidth)
  double fraction = 0;           // achieved / bound (1 = on the roof)
  Bound bound = Bound::Memory;
};
RooflinePoint place_on_roofline(const TestCost& cost, double seconds, const Ceilings& c);

}  // namespace ferry

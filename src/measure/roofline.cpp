// The roofline model: formulas and the worked example are in roofline.h.
#include "measure/roofline.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/check.h"

namespace ferry {

double RooflineModel::layer_matmul_params() const {
  const double attn = double(dim) * head_dim * (2.0 * n_heads + 2.0 * n_kv_heads);
  const double ffn = 3.0 * dim * double(hidden_dim);
  return double(n_layers) * (attn + ffn);
}

double RooflineModel::head_params() const { return double(vocab_size) * dim; }

double RooflineModel::attention_flops_per_pair() const { return 4.0 * n_layers * n_heads * double(head_dim); }

RooflineModel roofline_model(const ModelInfo& info, int64_t kv_capacity_tokens) {
  RooflineModel m;
  m.n_layers = info.n_layers;
  m.dim = info.dim;
  m.n_heads = info.n_heads;
  m.n_kv_heads = info.n_kv_heads;
  m.head_dim = info.head_dim;
  m.hidden_dim = info.hidden_dim;
  m.vocab_size = info.vocab_size;
  double embedding = 0, output = 0;
  for (const auto& t : info.tensors) {
    if (t.name == "token_embd.weight" || t.name == "model.embed_tokens.weight") embedding += double(t.bytes);
    if (t.name == "output.weight" || t.name == "lm_head.weight") output += double(t.bytes);
  }
  // Tied embeddings: the table is the output head, streamed on logits steps (and gathered a row per token).
  m.head_weight_bytes = output > 0 ? output : embedding;
  m.layer_weight_bytes = std::max(0.0, double(info.weight_bytes) - embedding - output);
  if (info.n_experts > 0) {
    // Mixture of experts: the bytes and FLOPs of the experts one token is routed to (a decode step's; a prompt step
    // of many tokens touches more experts, so its byte count here is a lower bound). active_bytes holds the head.
    m.hidden_dim = info.n_experts_used * info.expert_hidden_dim;
    m.layer_weight_bytes = std::max(0.0, double(info.active_bytes) - m.head_weight_bytes);
  }
  m.embedding_row_bytes = info.vocab_size > 0 ? embedding / info.vocab_size : 0;
  m.kv_bytes_per_token = kv_capacity_tokens > 0 ? double(info.kv_bytes) / double(kv_capacity_tokens) : 0;
  m.logits_row_bytes = 4.0 * info.vocab_size;
  return m;
}

std::string BenchTest::label() const {
  const std::string test = (kind == TestKind::Prompt ? "pp" : "tg") + std::to_string(n_tokens);
  return depth > 0 ? test + " @ d" + std::to_string(depth) : test;
}

TestCost test_cost(const RooflineModel& m, const BenchTest& t) {
  FERRY_CHECK(t.n_tokens > 0, "a benchmark test needs at least one token (got {})", t.n_tokens);
  FERRY_CHECK(t.depth >= 0, "a benchmark test's depth must not be negative (got {})", t.depth);
  const double n = t.n_tokens, d = t.depth;
  const double a = m.attention_flops_per_pair();
  TestCost c;
  c.tokens = n;
  if (t.kind == TestKind::Prompt) {
    FERRY_CHECK(t.max_step_tokens > 0, "prompt chunk size must be positive (got {})", t.max_step_tokens);
    // Chunk k covers prompt positions [k S, min((k+1) S, N)) after the D cached ones; its queries see the keys
    // up to its end.
    double steps = 0, kv_read_tokens = 0;
    for (int64_t start = 0; start < t.n_tokens; start += t.max_step_tokens) {
      steps += 1;
      kv_read_tokens += d + double(std::min<int64_t>(start + t.max_step_tokens, t.n_tokens));
    }
    c.bytes = steps * m.layer_weight_bytes + m.head_weight_bytes + n * m.embedding_row_bytes +
              n * m.kv_bytes_per_token + kv_read_tokens * m.kv_bytes_per_token + m.logits_row_bytes;
    c.flops = 2.0 * n * m.layer_matmul_params() + 2.0 * m.head_params() + a * (n * d + n * (n + 1) / 2);
  } else {
    // Step j runs position D + j + 1 (after the 1-token prompt) and sees D + j + 2 keys: Σ_j = N D + N(N+3)/2.
    const double pairs = n * d + n * (n + 3) / 2;
    c.bytes = n * (m.layer_weight_bytes + m.head_weight_bytes + m.embedding_row_bytes + m.kv_bytes_per_token +
                   m.logits_row_bytes) +
              pairs * m.kv_bytes_per_token;
    c.flops = 2.0 * n * (m.layer_matmul_params() + m.head_params()) + a * pairs;
  }
  return c;
}

Ceilings parse_ceilings(const std::string& text) {
  const size_t comma = text.find(',');
  FERRY_CHECK(comma != std::string::npos && text.find(',', comma + 1) == std::string::npos,
              "--ceilings '{}': expected GBPS,TFLOPS (e.g. 4300,779)", text);
  const auto number = [&](const std::string& s, const char* what) {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    FERRY_CHECK(!s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isfinite(v) && v > 0,
                "--ceilings '{}': {} must be a positive number, got '{}'", text, what, s);
    return v;
  };
  Ceilings c;
  c.bytes_per_s = number(text.substr(0, comma), "the bandwidth (GB/s)") * 1e9;
  c.flops_per_s = number(text.substr(comma + 1), "the peak (TFLOP/s)") * 1e12;
  c.source = "--ceilings " + text;
  return c;
}

Ceilings h200_ceilings() {
  return {4.30e12, 779e12, "H200 defaults (GPU.md, 2026-11-29: 4.30 TB/s device copy, 779 TFLOP/s cuBLAS bf16 GEMM)"};
}

double ridge_intensity(const Ceilings& c) { return c.flops_per_s / c.bytes_per_s; }

double roofline_flops(double intensity, const Ceilings& c) { return std::min(c.flops_per_s, intensity * c.bytes_per_s); }

Bound binding_ceiling(double intensity, const Ceilings& c) {
  return intensity * c.bytes_per_s < c.flops_per_s ? Bound::Memory : Bound::Compute;
}

std::string_view bound_name(Bound b) { return b == Bound::Memory ? "memory" : "compute"; }

RooflinePoint place_on_roofline(const TestCost& cost, double seconds, const Ceilings& c) {
  FERRY_CHECK(seconds > 0 && std::isfinite(seconds), "a measured time must be positive (got {})", seconds);
  FERRY_CHECK(c.bytes_per_s > 0 && c.flops_per_s > 0, "ceilings must be positive");
  RooflinePoint p;
  p.seconds = seconds;
  p.tokens_per_s = cost.tokens / seconds;
  p.flops_per_s = cost.flops / seconds;
  p.bytes_per_s = cost.bytes / seconds;
  p.intensity = cost.intensity();
  p.roof_flops_per_s = roofline_flops(p.intensity, c);
  p.bound = binding_ceiling(p.intensity, c);
  const double best_seconds = std::max(cost.flops / c.flops_per_s, cost.bytes / c.bytes_per_s);
  p.roof_tokens_per_s = best_seconds > 0 ? cost.tokens / best_seconds : 0;
  p.fraction = best_seconds / seconds;  // = achieved FLOP/s / roof FLOP/s
  return p;
}

}  // namespace ferry

#include "model/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "core/fp16.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "model/gguf_export.h"
#include "model/quant_mix.h"

namespace ferry {
namespace {

struct Shape {
  const char* name;
  Arch arch;
  int n_layers, dim, n_heads, n_kv_heads, head_dim, hidden_dim, vocab_size, context;
  float rope_theta;
  bool tied;
  int n_experts = 0, n_experts_used = 0, expert_hidden_dim = 0;  // mixture of experts (every layer), or 0
};

constexpr Shape kShapes[] = {
    {"tiny", Arch::Llama, 2, 64, 4, 2, 16, 128, 512, 256, 10000.0f, false},
    {"smollm2-135m", Arch::Llama, 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, true},
    // Llama 3.1's context (131072), so `ferry bench -d` can measure decode at 8k..128k tokens of depth on this shape.
    {"llama3-8b", Arch::Llama, 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, false},
    {"qwen3-8b", Arch::Qwen3, 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1000000.0f, false},
    {"llama3-70b", Arch::Llama, 80, 8192, 64, 8, 128, 28672, 128256, 8192, 500000.0f, false},
    // Llama-3's depth, vocabulary and GQA ratio at 1/8 the width: a CPU stand-in for llama3-8b (--tp 2 and 4).
    {"llama3-mini", Arch::Llama, 32, 512, 8, 2, 64, 1792, 128256, 8192, 500000.0f, false},
    // Mixtures of experts: hidden_dim is the dense FFN size of the config (unused when every layer is MoE).
    {"qwen3-30b-a3b", Arch::Qwen3Moe, 48, 2048, 32, 4, 128, 6144, 151936, 40960, 1000000.0f, false, 128, 8, 768},
    {"mixtral-8x7b", Arch::Llama, 32, 4096, 32, 8, 128, 14336, 32000, 32768, 1000000.0f, false, 8, 2, 14336},
    // Qwen3-30B-A3B's routing (128 experts, top-8, 768-unit experts) and heads at 1/2 the width and 1/6 the depth:
    // a CPU stand-in for benchmarks and tests of the expert kernels.
    {"qwen3-moe-mini", Arch::Qwen3Moe, 8, 1024, 16, 4, 64, 3072, 32000, 8192, 1000000.0f, false, 128, 8, 768},
    {"tiny-moe", Arch::Qwen3Moe, 2, 64, 4, 2, 16, 128, 512, 256, 10000.0f, false, 8, 2, 64},
    // Every matrix row a whole number of 256-value super-blocks, small enough for the CPU reference kernels: the
    // K-quant mixes as they lay out the 8B model (tests/cuda/e2e_test.cpp).
    {"llama3-micro", Arch::Llama, 4, 256, 4, 2, 64, 768, 4096, 2048, 500000.0f, false, 0, 0, 0},
    // The decode kernels' column counts (dim and hidden multiples of 2048, where the streamed K-quant matvecs apply)
    // in a model the CPU reference kernels still run in seconds (tests/cuda/e2e_test.cpp).
    {"llama3-small", Arch::Llama, 2, 2048, 16, 4, 128, 4096, 4096, 2048, 500000.0f, false, 0, 0, 0},
    // Gemma 2 2B, Gemma 3 4B (text) and Phi-3-mini as their configs give them (random_model_config adds each family's
    // windows, soft-caps and norms), and a Gemma 3 and a Gemma 2 small enough for the CPU reference kernels (the
    // Gemma 2 one with head_dim 128, the GPU's tensor-core attention, and a 128-token window in a 256-token context).
    {"gemma2-2b", Arch::Gemma2, 26, 2304, 8, 4, 256, 9216, 256000, 8192, 10000.0f, true},
    {"gemma3-4b", Arch::Gemma3, 34, 2560, 8, 4, 256, 10240, 262208, 131072, 1000000.0f, true},
    {"phi3-mini", Arch::Phi3, 32, 3072, 32, 32, 96, 8192, 32064, 4096, 10000.0f, false},
    {"gemma3-micro", Arch::Gemma3, 6, 256, 4, 2, 64, 768, 4096, 2048, 1000000.0f, true},
    {"gemma2-micro", Arch::Gemma2, 4, 256, 4, 2, 128, 768, 4096, 256, 10000.0f, true},
};

// Each family's settings beyond the sizes, as its Hub configs give them (Gemma: 1 + w norms are stored as GGUF's 1 + w,
// so no offset here).
void apply_family(ModelConfig& c) {
  if (c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3) {
    c.post_norms = true;
    c.ffn_activation = FfnActivation::GeluTanh;
    c.embedding_scale = std::sqrt(float(c.dim));
    c.query_pre_attn_scalar = float(c.head_dim);
    const int period = c.arch == Arch::Gemma2 ? 2 : 6;
    const int window = std::min(c.arch == Arch::Gemma2 ? 4096 : 1024, c.max_context / 2);
    c.layer_window.assign(size_t(c.n_layers), window);
    for (int l = period - 1; l < c.n_layers; l += period) c.layer_window[size_t(l)] = 0;
  }
  if (c.arch == Arch::Gemma2) c.attn_softcap = 50.0f, c.final_softcap = 30.0f;
  if (c.arch == Arch::Gemma3) c.qk_norm = true, c.rope_theta_local = 10000.0f;
  if (c.arch == Arch::Phi3) c.layer_window.assign(size_t(c.n_layers), 2047);  // Phi-3-mini-4k's sliding_window
}

// xorshift-style generator: fast, deterministic, no global state.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E5ull) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  // Approximately normal (sum of 4 uniforms), mean 0, std 1.
  float normal() {
    const uint64_t r = next();
    float acc = 0;
    for (int i = 0; i < 4; ++i) acc += float((r >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
    return (acc - 2.0f) * 1.7320508f;
  }
};

uint64_t mix(uint64_t seed, const std::string& name) {
  uint64_t h = seed ^ 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace

// Row r's generator is seeded by (seed, r) and draws one value per column in order: a column range skips the
// draws before it.
void fill_random_part(const RandomTensor& t, int64_t row0, int64_t n_rows, int64_t col0, int64_t n_cols, uint8_t* dst,
                      int n_threads) {
  const int block = dtype_info(t.type).block_elems;
  FERRY_ASSERT(row0 >= 0 && row0 + n_rows <= t.rows && col0 >= 0 && col0 + n_cols <= t.cols && col0 % block == 0 &&
               n_cols % block == 0);
  const size_t rb = row_bytes(t.type, n_cols);
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(std::max(1, n_threads), n_rows)));
  std::vector<std::thread> threads;
  for (int w = 0; w < nt; ++w) {
    threads.emplace_back([=, &t] {
      std::vector<float> row(static_cast<size_t>(n_cols));
      for (int64_t i = w; i < n_rows; i += nt) {
        Rng rng(t.seed + uint64_t(row0 + i) * 0x9E37ull);
        for (int64_t c = 0; c < col0; ++c) rng.next();
        for (auto& x : row) x = t.mean + t.scale * rng.normal();
        if (t.tie_scale != 0.0f) {  // the N(0,1) draws of row (r + shift) mod rows of the tensor seeded tie_seed
          Rng tie(t.tie_seed + uint64_t((row0 + i + t.tie_row_shift) % t.rows) * 0x9E37ull);
          for (int64_t c = 0; c < col0; ++c) tie.next();
          for (auto& x : row) x += t.tie_scale * tie.normal();
        }
        quantize_row(t.type, row.data(), dst + size_t(i) * rb, n_cols);
      }
    });
  }
  for (auto& th : threads) th.join();
}

// Peaked init (RandomInit::Peaked): the values a trained model's forward is closer to than std 0.02 everywhere.
//  - token_embd: std 1 (the residual stream starts at RMS 1);
//  - wq, wk, wv, w_gate, w_up: std 1/sqrt(dim) (fan-in: outputs of unit variance from a normalized input);
//  - wo, w_down: std 1/sqrt(fan_in) / sqrt(2 n_layers) (GPT-2's residual scaling: the 2L blocks together add
//    about as much to the residual stream as the embedding holds, so the blocks matter but do not swamp it);
//  - output: kPeakedLogitStd / sqrt(dim) random rows plus a bigram component: row v also holds
//    kPeakedBigram / sqrt(dim) times embedding row (v - 1) mod vocab, so after token t the logit of t + 1 stands
//    about kPeakedBigram * 0.87 (the embedding's share of the final hidden state) standard deviations of the
//    other logits above their mean; the max of 128k other logits is ~4.9 sd, so t + 1 wins at most positions
//    with a clear margin and the context (the blocks) decides the rest;
//  - norms as flat (1 +- 0.05).
// Worked example, dim 4096, vocab 128256: other logits ~N(0, 3^2), their max ~4.9 sd = ~14.7; t + 1's logit
// ~N(6 * 0.87 * 3, 3^2) = N(15.7, 9): it wins at ~60-75% of positions. Measured on llama3-mini (dim 512, CPU):
// t + 1 the argmax at 72-77%, median top-2 margin 0.7 sd, median top-1 probability 0.34.
// Why: with std 0.02 at dim 4096 every matmul has a gain of ~1.3, the blocks swamp the 0.02 embedding, and a
// change of f32 summation order grows ~10x over 32 layers into near-tied Gaussian logits (top-2 gap ~0.15 sd):
// TP=1 vs TP=1 with another GEMM agreed on 95.7% of argmaxes. Tied shapes have no output matrix: their
// embedding takes the output's std (kPeakedLogitStd / sqrt(dim)) and there is no bigram component.
constexpr float kPeakedLogitStd = 3.0f;
constexpr float kPeakedBigram = 6.0f;

std::vector<RandomTensor> random_model_tensors(const ModelConfig& c, DType wt, uint64_t seed, RandomInit init) {
  std::vector<RandomTensor> out;
  const bool peaked = init == RandomInit::Peaked;
  const float inv_sqrt_dim = 1.0f / std::sqrt(float(c.dim));
  const float residual = 1.0f / std::sqrt(2.0f * float(c.n_layers));
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, DType t, float peaked_scale) {
    out.push_back({name, t, 2, rows, cols, peaked ? peaked_scale : 0.02f, 0.0f, mix(seed, name)});
  };
  const auto fan_in = [](int64_t cols) { return 1.0f / std::sqrt(float(cols)); };
  const auto norm = [&](const std::string& name, int64_t n) {
    out.push_back({name, DType::F32, 1, 1, n, 0.05f, 1.0f, mix(seed, name)});
  };
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  // Embeddings in Q8_0 for quantized models (like llama.cpp's mixes), else the weight type.
  const DType embd_type = is_quantized(wt) ? DType::Q8_0 : wt;
  matrix("token_embd.weight", c.vocab_size, c.dim, embd_type, c.tied_embeddings ? kPeakedLogitStd * inv_sqrt_dim : 1.0f);
  const RandomTensor embd = out.back();
  norm("output_norm.weight", c.dim);
  if (!c.tied_embeddings) {
    matrix("output.weight", c.vocab_size, c.dim, is_quantized(wt) ? DType::Q8_0 : wt, kPeakedLogitStd * inv_sqrt_dim);
    if (peaked) {  // row v += bigram * embedding row (v - 1) mod vocab's N(0,1) draws
      out.back().tie_seed = embd.seed;
      out.back().tie_scale = kPeakedLogitStd * kPeakedBigram / float(c.dim);
      out.back().tie_row_shift = c.vocab_size - 1;
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", c.dim);
    matrix(b + "attn_q.weight", q_dim, c.dim, wt, fan_in(c.dim));
    matrix(b + "attn_k.weight", kv_dim, c.dim, wt, fan_in(c.dim));
    matrix(b + "attn_v.weight", kv_dim, c.dim, wt, fan_in(c.dim));
    if (c.qk_norm) {
      norm(b + "attn_q_norm.weight", c.head_dim);
      norm(b + "attn_k_norm.weight", c.head_dim);
    }
    matrix(b + "attn_output.weight", c.dim, q_dim, wt, residual * fan_in(q_dim));
    if (c.post_norms) norm(b + "post_attention_norm.weight", c.dim);
    norm(b + "ffn_norm.weight", c.dim);
    if (c.post_norms) norm(b + "post_ffw_norm.weight", c.dim);
    if (c.is_moe_layer(l)) {  // the router (F32, as llama.cpp keeps it), then the experts stacked: (E, rows, cols)
      const int64_t E = c.n_experts, H = c.expert_hidden_dim;
      matrix(b + "ffn_gate_inp.weight", E, c.dim, DType::F32, fan_in(c.dim));
      const auto experts = [&](const std::string& name, int64_t rows, int64_t cols, float peaked_scale) {
        matrix(name, E * rows, cols, wt, peaked_scale);
        out.back().n_dims = 3;
        out.back().outer = E;
      };
      experts(b + "ffn_gate_exps.weight", H, c.dim, fan_in(c.dim));
      experts(b + "ffn_up_exps.weight", H, c.dim, fan_in(c.dim));
      experts(b + "ffn_down_exps.weight", c.dim, H, residual * fan_in(H));
      continue;
    }
    matrix(b + "ffn_gate.weight", c.hidden_dim, c.dim, wt, fan_in(c.dim));
    matrix(b + "ffn_up.weight", c.hidden_dim, c.dim, wt, fan_in(c.dim));
    matrix(b + "ffn_down.weight", c.dim, c.hidden_dim, wt, residual * fan_in(c.hidden_dim));
  }
  return out;
}

const char* random_init_name(RandomInit init) { return init == RandomInit::Peaked ? "peaked" : "flat"; }

RandomInit parse_random_init(const std::string& name) {
  for (RandomInit i : {RandomInit::Flat, RandomInit::Peaked})
    if (name == random_init_name(i)) return i;
  fail("random model init '{}': use flat or peaked", name);
}

std::vector<std::string> random_model_shapes() {
  std::vector<std::string> names;
  for (const Shape& s : kShapes) names.emplace_back(s.name);
  return names;
}

ModelConfig random_model_config(const std::string& shape) {
  for (const Shape& s : kShapes) {
    if (shape != s.name) continue;
    ModelConfig c;
    c.arch = s.arch;
    c.name = std::string("random ") + s.name;
    c.n_layers = s.n_layers;
    c.dim = s.dim;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.head_dim = s.head_dim;
    c.rope_dims = s.head_dim;
    c.hidden_dim = s.hidden_dim;
    c.vocab_size = s.vocab_size;
    c.max_context = s.context;
    c.rope_theta = s.rope_theta;
    c.tied_embeddings = s.tied;
    c.qk_norm = s.arch == Arch::Qwen3 || s.arch == Arch::Qwen3Moe;
    c.n_experts = s.n_experts;
    c.n_experts_used = s.n_experts_used;
    c.expert_hidden_dim = s.expert_hidden_dim;
    c.moe_norm = MoeNorm::Renormalize;  // Qwen3-30B-A3B (norm_topk_prob) and Mixtral alike
    c.rope_ordering = s.arch == Arch::Llama ? RopeOrdering::Interleaved : RopeOrdering::Neox;
    apply_family(c);
    c.validate();
    return c;
  }
  std::string known;
  for (const Shape& s : kShapes) known += std::string(known.empty() ? "" : ", ") + s.name;
  fail("unknown model shape '{}' (known: {})", shape, known);
}

SyntheticVocab synthetic_vocab(int vocab_size) {
  // Synthetic byte-level BPE vocabulary: specials, the 256 byte symbols, merges, plain words to vocab_size.
  std::vector<std::string> tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types = {3, 3, 3, 3};
  for (int b = 0; b < 256; ++b) {  // GPT-2 byte-to-unicode mapping
    uint32_t cp = uint32_t(b);
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
      int n = 0;
      for (int x = 0; x < b; ++x)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
      cp = 256 + uint32_t(n);
    }
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    tokens.push_back(s);
    types.push_back(1);
  }
  FERRY_CHECK(vocab_size >= int(tokens.size()), "vocab_size {} is smaller than the {} base tokens", vocab_size,
              tokens.size());
  // Some merges (space+letter, then letter pairs) so that text is not only single bytes. In the GPT-2 byte
  // mapping a space is "Ġ" (U+0120) and ASCII letters are themselves.
  std::vector<std::string> merges;
  const std::string space = "\xC4\xA0";
  std::vector<std::pair<std::string, std::string>> pairs;
  for (char a = 'a'; a <= 'z'; ++a) pairs.emplace_back(space, std::string(1, a));
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) pairs.emplace_back(std::string(1, a), std::string(1, b));
  for (const auto& [a, b] : pairs) {
    if (int(tokens.size()) >= vocab_size) break;
    merges.push_back(a + " " + b);
    tokens.push_back(a + b);
    types.push_back(1);
  }
  // The rest: plain words " w<id>" (no merge makes them, so encoding never produces them). They render as
  // text, so a random model's output streams visibly (a serving benchmark measures the time between chunks of
  // text; control tokens would render as nothing).
  while (int(tokens.size()) < vocab_size) {
    tokens.push_back(space + "w" + std::to_string(tokens.size()));
    types.push_back(1);
  }
  SyntheticVocab v;
  v.tokens = std::move(tokens);
  v.types = std::move(types);
  v.merges = std::move(merges);
  v.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return v;
}

namespace {

// Metadata and the synthetic vocabulary of a random model.
void set_random_model_metadata(GgufWriter& w, const ModelConfig& c) {
  set_gguf_config(w, c);

  const SyntheticVocab v = synthetic_vocab(c.vocab_size);
  w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(v.tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(v.types));
  w.set("tokenizer.ggml.merges", GgufValue::strings(v.merges));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(0));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  w.set("tokenizer.chat_template", GgufValue::str(v.chat_template));
}

// The writer fills tensors in order, one at a time: tensor i done means i + 1 of them are.
void add_random_tensors(GgufWriter& w, const std::vector<RandomTensor>& tensors, int n_threads, const TensorDoneFn& on_tensor) {
  const int count = int(tensors.size());
  for (int i = 0; i < count; ++i) {
    const RandomTensor& t = tensors[size_t(i)];
    const int nt = t.n_dims == 1 ? 1 : n_threads;
    const auto done = [on_tensor, i, count] {
      if (on_tensor) on_tensor(i + 1, count);
    };
    if (t.n_dims == 1) {
      w.add_tensor(t.name, t.type, {t.cols}, [t, nt, done](uint8_t* dst, size_t) {
        fill_random_part(t, 0, 1, 0, t.cols, dst, nt);
        done();
      });
    } else if (t.n_dims == 3) {
      w.add_tensor(t.name, t.type, {t.outer, t.rows / t.outer, t.cols}, [t, nt, done](uint8_t* dst, size_t) {
        fill_random_part(t, 0, t.rows, 0, t.cols, dst, nt);
        done();
      });
    } else {
      w.add_tensor(t.name, t.type, {t.rows, t.cols}, [t, nt, done](uint8_t* dst, size_t) {
        fill_random_part(t, 0, t.rows, 0, t.cols, dst, nt);
        done();
      });
    }
  }
}

}  // namespace

GgufWriter random_model_gguf(const ModelConfig& c, DType wt, uint64_t seed, int n_threads, bool with_weights,
                             RandomInit init, const TensorDoneFn& on_tensor) {
  FERRY_CHECK(wt == DType::F32 || wt == DType::F16 || wt == DType::BF16 || wt == DType::Q8_0 || wt == DType::Q4_0 ||
                  wt == DType::Q4_1,
              "ferry gen writes f32, f16, bf16, q8_0, q4_0 or q4_1 weights, not {}", dtype_name(wt));
  FERRY_CHECK(c.dim % 32 == 0 && c.hidden_dim % 32 == 0 && (c.n_heads * c.head_dim) % 32 == 0 &&
                  c.expert_hidden_dim % 32 == 0,
              "shape dims must be multiples of 32 for block formats");
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  GgufWriter w;
  set_random_model_metadata(w, c);
  if (!with_weights) {
    // One-value stand-ins for the tensors the config reader looks at (token_embd.weight must exist; output.weight
    // exists when the embeddings are not tied); the vocabulary size is the metadata key above.
    const auto stand_in = [&](const std::string& name) {
      w.add_tensor(name, DType::F32, {1}, [](uint8_t* dst, size_t n) { std::memset(dst, 0, n); });
    };
    stand_in("token_embd.weight");
    if (!c.tied_embeddings) stand_in("output.weight");
    for (int l = 0; l < c.n_layers; ++l)  // the config reader finds an MoE layer by its router
      if (c.is_moe_layer(l)) stand_in("blk." + std::to_string(l) + ".ffn_gate_inp.weight");
  } else {
    add_random_tensors(w, random_model_tensors(c, wt, seed, init), n_threads, on_tensor);
  }
  return w;
}

GgufWriter random_model_gguf(const ModelConfig& c, const QuantTarget& target, uint64_t seed, int n_threads,
                             RandomInit init, const TensorDoneFn& on_tensor) {
  FERRY_CHECK(c.dim % 32 == 0 && c.hidden_dim % 32 == 0 && (c.n_heads * c.head_dim) % 32 == 0 &&
                  c.expert_hidden_dim % 32 == 0,
              "shape dims must be multiples of 32 for block formats");
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<RandomTensor> tensors = random_model_tensors(c, DType::F32, seed, init);
  std::vector<TensorShapeInfo> infos;
  for (const RandomTensor& t : tensors) infos.push_back({t.name, t.n_dims, t.cols});
  const QuantPlanner planner(target, c.n_layers, infos);
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].type = planner.type_for(infos[i]);
  GgufWriter w;
  set_random_model_metadata(w, c);
  w.set("general.quantization_version", GgufValue::u32(2));
  w.set("general.file_type", GgufValue::u32(target.file_type));
  add_random_tensors(w, tensors, n_threads, on_tensor);
  return w;
}

void write_random_model(const std::string& path, const ModelConfig& c, DType wt, uint64_t seed, int n_threads,
                        bool with_weights, RandomInit init, const TensorDoneFn& on_tensor) {
  random_model_gguf(c, wt, seed, n_threads, with_weights, init, on_tensor).write(path);
}

void write_random_model(const std::string& path, const ModelConfig& c, const QuantTarget& target, uint64_t seed,
                        int n_threads, RandomInit init, const TensorDoneFn& on_tensor) {
  random_model_gguf(c, target, seed, n_threads, init, on_tensor).write(path);
}

}  // namespace ferry

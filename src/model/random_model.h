// Random-weight models of real shapes, written as GGUF: for tests (tiny) and benchmarks (8B, 70B shapes).
// Speed and memory traffic do not depend on the weight values, but the values are never zeros: they are
// drawn like a trained model's (normal-ish, std 0.02) so kernels see realistic data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/gguf.h"
#include "model/config.h"
#include "model/quant_mix.h"

namespace ferry {

// How the values are drawn. Flat (ferry gen's, the default): every matrix std 0.02, norms 1 +- 0.05: at dim 4096
// the logits come out nearly tied (top-2 gap ~0.15 of their sd), fine for speed, useless for argmax checks.
// Peaked: fan-in scaled, GPT-2 residual scaling, a bigram component in the output matrix (random_model.cpp):
// the next-token distribution is peaked like a trained model's and the top logit usually stands clear.
enum class RandomInit { Flat, Peaked };
const char* random_init_name(RandomInit init);  // "flat", "peaked"
// Throws ferry::Error naming the known inits.
RandomInit parse_random_init(const std::string& name);

std::vector<std::string> random_model_shapes();  // tiny, smollm2-135m, llama3-8b, ..., qwen3-30b-a3b, mixtral-8x7b
// The config of a named shape; throws ferry::Error listing the known names.
ModelConfig random_model_config(const std::string& shape);

// Writes a GGUF model with a synthetic byte-level vocabulary (a few specials, 256 byte tokens, letter merges, the
// rest plain words " w<id>") so that it loads, tokenizes and generates visible text like a real one.
// weight_type: F32, F16, BF16, Q8_0, Q4_0, Q4_1 (matmul weights); norms stay F32.
// with_weights false: the metadata and vocabulary only (plus one-value stand-ins of token_embd.weight and
// output.weight that the config reader checks for), for a model whose weights are generated in memory
// (parallel/random_weights.h).
// on_tensor(done, count): after each tensor's values are made (for a progress line).
using TensorDoneFn = std::function<void(int done, int count)>;
void write_random_model(const std::string& path, const ModelConfig& config, DType weight_type, uint64_t seed,
                        int n_threads = 0, bool with_weights = true, RandomInit init = RandomInit::Flat,
                        const TensorDoneFn& on_tensor = {});

// As above with the matrices typed by a quantization target (model/quant_mix.h: one type or a K-quant mix, the same
// per-tensor rules as `ferry quantize`, so benchmarks get Q4_K_M-like files); general.file_type is set.
void write_random_model(const std::string& path, const ModelConfig& config, const QuantTarget& target, uint64_t seed,
                        int n_threads = 0, RandomInit init = RandomInit::Flat, const TensorDoneFn& on_tensor = {});

// The two models above as a writer whose tensors are made while it writes (GgufWriter::write, or write_split for
// the shards of a split GGUF).
GgufWriter random_model_gguf(const ModelConfig& config, DType weight_type, uint64_t seed, int n_threads = 0,
                             bool with_weights = true, RandomInit init = RandomInit::Flat, const TensorDoneFn& on_tensor = {});
GgufWriter random_model_gguf(const ModelConfig& config, const QuantTarget& target, uint64_t seed, int n_threads = 0,
                             RandomInit init = RandomInit::Flat, const TensorDoneFn& on_tensor = {});

// The synthetic byte-level BPE vocabulary of the random models: 4 specials (<|begin_of_text|> = bos 0,
// <|end_of_text|> = eos 1, <|im_start|>, <|im_end|>), the 256 GPT-2 byte symbols, merges (space+letter, letter
// pairs), then plain words " w<id>" up to vocab_size; and its chat template.
struct SyntheticVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;        // llama.cpp token types: 3 control, 1 normal
  std::vector<std::string> merges;   // "a b"
  std::string chat_template;
};
SyntheticVocab synthetic_vocab(int vocab_size);

// One tensor of a random model, exactly as write_random_model draws it: row r of the (rows, cols) tensor holds
// mean + scale * N(0,1)-ish values from a generator seeded by (seed, r), plus, when tie_scale != 0,
// tie_scale * the draws of the generator seeded by (tie_seed, (r + tie_row_shift) mod rows) (the peaked init's
// bigram component: another tensor's row), quantized to `type` (a vector is one row of `cols`).
struct RandomTensor {
  std::string name;
  DType type = DType::F32;
  int n_dims = 2;
  int64_t rows = 1, cols = 1;  // a 3-D tensor (n_dims 3: stacked experts) is (outer, rows / outer, cols)
  float scale = 0.02f, mean = 0.0f;
  uint64_t seed = 0;
  float tie_scale = 0.0f;
  uint64_t tie_seed = 0;
  int64_t tie_row_shift = 0;
  int64_t outer = 1;  // n_dims 3: the experts stacked in rows
};
// A view of t's shape over data: (cols), (rows, cols) or (outer, rows / outer, cols).
inline Tensor random_tensor_view(const RandomTensor& t, void* data) {
  if (t.n_dims == 1) return Tensor::make(t.type, {t.cols}, data, Device::Cpu);
  if (t.n_dims == 3) return Tensor::make(t.type, {t.outer, t.rows / t.outer, t.cols}, data, Device::Cpu);
  return Tensor::make(t.type, {t.rows, t.cols}, data, Device::Cpu);
}
// Every tensor of the model in file order.
std::vector<RandomTensor> random_model_tensors(const ModelConfig& config, DType weight_type, uint64_t seed,
                                               RandomInit init = RandomInit::Flat);
// Rows [row0, row0 + n_rows) x columns [col0, col0 + n_cols) of tensor t (col0 and n_cols on block boundaries of
// t.type), the same values the whole tensor has there: n_rows * row_bytes(t.type, n_cols) bytes at dst.
void fill_random_part(const RandomTensor& t, int64_t row0, int64_t n_rows, int64_t col0, int64_t n_cols, uint8_t* dst,
                      int n_threads);

}  // namespace ferry

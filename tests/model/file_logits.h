// Logits of a model file on the CPU backend, for tests that compare two files of the same weights (a conversion,
// a split GGUF against its single file).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd.h"
#include "fixtures/batches.h"
#include "model/llama_model.h"
#include "model/model_file.h"

namespace ferry::test {

// Logits of every row of a 24-token prompt (ids spread over the vocabulary), then of 4 greedy decode steps:
// (24 + 4, vocab_size) row-major, on a KV cache of 4 blocks of 16 tokens, one thread.
inline std::vector<float> logits_of(const std::string& path, CpuKernels kernels) {
  constexpr int32_t kBlock = 16, kBlocks = 4;
  const ModelFile f = open_model(path);
  CpuBackendOptions o;
  o.kernels = kernels;
  o.n_threads = 1;
  o.simd = detect_simd();
  CpuBackend backend(o);
  ModelWeights w = load_weights(f.config, *f.weights, f.gguf_names, backend);
  LlamaModel model(f.config, std::move(w), backend, KvCacheShape{kBlocks, kBlock}, 32);
  const int32_t vocab = f.config.vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back((i * 53 + 7) % vocab);
  std::vector<float> all, step;
  model.forward(single_sequence_batch(prompt, 0, true, kBlocks), step);
  all = step;
  int32_t pos = int32_t(prompt.size());
  for (int i = 0; i < 4; ++i) {
    const int32_t tok = int32_t(std::max_element(step.end() - vocab, step.end()) - (step.end() - vocab));
    model.forward(single_sequence_batch({tok}, pos++, false, kBlocks), step);
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

}  // namespace ferry::test

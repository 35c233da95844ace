// Opens a model from disk: a GGUF file, or a Hugging Face folder (config.json, *.safetensors, tokenizer.json).
// Gives the config, the weights as named host tensors (mmapped), and the tokenizer vocabulary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/vocab.h"

namespace ferry {

enum class ModelFormat { Gguf, Safetensors };

struct ModelFile {
  std::string path;
  ModelFormat format = ModelFormat::Gguf;
  ModelConfig config;
  Vocab vocab;
  std::unique_ptr<WeightSource> weights;
  bool gguf_names = true;                                  // tensor naming scheme of `weights`
  std::vector<std::pair<std::string, Tensor>> tensors;     // every tensor in the file(s), in file order
  std::vector<std::pair<std::string, std::string>> facts;  // notable metadata for `ferry inspect`
};

ModelFile open_model(const std::string& path);  // throws ferry::Error naming the path and the problem

}  // namespace ferry

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
// The config and vocabulary of a file whose tensors come from elsewhere (a `random:` model's metadata-only GGUF):
// open_model without its tensor checks; the caller runs check_config_against_tensors once it has the tensors.
ModelFile open_model_metadata(const std::string& path);
// The sizes of the config against the tensors (layer count, vocabulary x dim, KV and FFN sizes): a ferry::Error
// naming the first that disagrees, before anything is sized from the config.
void check_config_against_tensors(const ModelFile& m);

}  // namespace ferry

// Which files of a repo make the model a name asks for, the same rule for a cached snapshot (resolution) and for
// the Hub's file list (`ferry pull`):
//   :QUANT given  -> the one .gguf whose file name holds the tag as a word (Q4_K matches "x-Q4_K.gguf", not "x-Q4_K_M.gguf")
//   no tag, safetensors present -> a Hugging Face folder: the top-level *.safetensors, *.json, *.model, *.txt,
//                                  *.jinja files (weights in other formats, code and docs are not fetched)
//   no tag, GGUFs only -> the only .gguf, else the Q4_K_M one (llama.cpp's default), else an error listing the tags
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::hub {

struct ModelFiles {
  std::vector<std::string> files;  // repo-relative paths to have
  std::string gguf;                // the .gguf to load; "" : the folder itself is the model
};

// Throws ferry::Error naming the repo and what is there (the tags found) when nothing fits.
ModelFiles select_model_files(const std::vector<std::string>& repo_paths, const std::string& quant,
                              std::string_view repo_name);

// The quantization tag in a GGUF file name ("Q4_K_M", "Q8_0", "F16", "IQ4_XS", "BF16"), upper-cased; "" when none.
std::string quant_tag_of(std::string_view file_name);

// A repo-relative path that stays inside the folder it is joined to: 1..1024 bytes, '/'-separated segments
// that are not empty, "." or "..", no backslash, no control characters, no leading '/', at most 16 deep.
bool is_safe_repo_path(std::string_view path);

}  // namespace ferry::hub

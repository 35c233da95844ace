// Which files of a repo make the model a name asks for, the same rule for a cached snapshot (resolution) and for
// the Hub's file list (`ferry pull`):
//   :QUANT given  -> the one .gguf whose file name holds the tag as a word (Q4_K matches "x-Q4_K.gguf", not "x-Q4_K_M.gguf")
//                    or the one split GGUF (every shard, formats/gguf_split_name.h) whose first shard's name does
//   no tag, safetensors present -> a Hugging Face folder: the top-level *.safetensors, *.json, *.model, *.txt,
//                                  *.jinja files (weights in other formats, code and docs are not fetched)
//   no tag, GGUFs only -> the only .gguf, else the Q4_K_M one (llama.cpp's default), else an error listing the tags
// A split GGUF counts as one file everywhere: all its shards are selected, the first is the one to load.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::hub {

struct ModelFiles {
  std::vector<std::string> files;  // repo-relative paths to have
  std::string gguf;                // the .gguf to load (a split GGUF's first shard); "" : the folder itself is the model
};

// One GGUF model among a repo's files: a plain .gguf, or a split GGUF's shards 1..N (every shard its name
// implies, listed or not, so a missing one can be named).
struct GgufChoice {
  std::string first;               // the file to load: the plain .gguf, or shard 1
  std::vector<std::string> files;  // the plain .gguf, or every shard in order
  bool split = false;
};
// The GGUF choices among `paths` (other files ignored), sorted by `first`.
std::vector<GgufChoice> gguf_choices(const std::vector<std::string>& paths);

// Throws ferry::Error naming the repo and what is there (the tags found) when nothing fits.
ModelFiles select_model_files(const std::vector<std::string>& repo_paths, const std::string& quant,
                              std::string_view repo_name);

// The quantization tag in a GGUF file name ("Q4_K_M", "Q8_0", "F16", "IQ4_XS", "BF16"), upper-cased; "" when none.
std::string quant_tag_of(std::string_view file_name);

// A repo-relative path that stays inside the folder it is joined to: 1..1024 bytes, '/'-separated segments
// that are not empty, "." or "..", no backslash, no control characters, no leading '/', at most 16 deep.
bool is_safe_repo_path(std::string_view path);

}  // namespace ferry::hub

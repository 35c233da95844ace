// A model named the way the Hugging Face tools name it: `org/repo[@revision][:QUANT]` (llama.cpp's `-hf` tag
// picks one GGUF of a repo, e.g. `bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M`). Parsing checks every part
// against the Hub's own rules, so a name can never become a path outside the cache (no "..", no "/" in a part).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ferry::hub {

struct ModelRef {
  std::string repo;               // "org/repo"
  std::string revision = "main";  // a branch, a tag or a 40-hex commit
  std::string quant;              // "" or a tag matched against GGUF file names ("Q4_K_M"), upper-cased
};

// nullopt when `spec` is not shaped like a repo name (the caller then treats it as a path); throws ferry::Error
// when it is shaped like one but a part is invalid (naming the part).
std::optional<ModelRef> parse_model_ref(std::string_view spec);

// "org/repo[@revision][:QUANT]" again (revision shown unless "main").
std::string to_string(const ModelRef& ref);

// A repo id part ("org" or "repo"): 1..96 of [A-Za-z0-9._-], not starting or ending with '.' or '-', no "..".
bool is_valid_repo_part(std::string_view part);
// A revision: 1..255 of [A-Za-z0-9._-/], no "..", no empty or "." segment (refs/pr/1 is one).
bool is_valid_revision(std::string_view rev);
// A 40-hex commit id.
bool is_commit_hash(std::string_view s);

}  // namespace ferry::hub

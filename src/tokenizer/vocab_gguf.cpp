// Vocab from GGUF metadata (tokenizer.ggml.*), every value checked for type, length and range.
#include <optional>

#include "core/check.h"
#include "formats/gguf.h"
#include "tokenizer/vocab.h"

namespace ferry {

namespace {

const char* type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

bool is_integer_type(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 ||
         t == GgufType::U32 || t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}

// The array at key (nullptr when absent), checked to hold `want`-typed elements (integers: any width).
const GgufArray* find_array(const GgufFile& gguf, const std::string& key, GgufType want) {
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return nullptr;
  FERRY_CHECK(v->type == GgufType::Array, "{}: expected an array, found {}", key, type_name(v->type));
  const GgufArray& arr = v->as_array();
  const bool ok = want == GgufType::I32 ? is_integer_type(arr.elem_type)
                  : want == GgufType::F32 ? (arr.elem_type == GgufType::F32 || arr.elem_type == GgufType::F64)
                                          : arr.elem_type == want;
  FERRY_CHECK(ok, "{}: expected an array of {}, found an array of {}", key, type_name(want),
              type_name(arr.elem_type));
  return &arr;
}

// A token id: absent -> -1; -1 (or u32 0xFFFFFFFF, its unsigned spelling) -> -1; else within [0, n).
int32_t read_id(const GgufFile& gguf, const std::string& key, size_t n) {
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return -1;
  FERRY_CHECK(v->is_integer(), "{}: expected an integer token id, found {}", key, type_name(v->type));
  const int64_t id = v->as_int();
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  FERRY_CHECK(id >= 0 && id < static_cast<int64_t>(n), "{} = {} is out of range (vocab size {})", key, id, n);
  return static_cast<int32_t>(id);
}

std::optional<bool> read_bool(const GgufFile& gguf, const std::string& key) {
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return std::nullopt;
  FERRY_CHECK(v->type == GgufType::Bool, "{}: expected a bool, found {}", key, type_name(v->type));
  return v->as_bool();
}

}  // namespace

Vocab vocab_from_gguf(const GgufFile& gguf) {
  Vocab vocab;
  const GgufValue* model = gguf.find("tokenizer.ggml.model");
  FERRY_CHECK(model != nullptr, "{}: no tokenizer (tokenizer.ggml.model is missing)", gguf.name());
  FERRY_CHECK(model->type == GgufType::String, "tokenizer.ggml.model: expected a string, found {}",
              type_name(model->type));
  const std::string& model_name = model->as_string();
  if (model_name == "gpt2") {
    vocab.kind = TokenizerKind::BytePairGpt2;
  } else if (model_name == "llama") {
    vocab.kind = TokenizerKind::SentencePiece;
  } else {
    fail("unsupported tokenizer model '{}' (tokenizer.ggml.model; supported: gpt2, llama)", model_name);
  }

  const GgufValue* pre = gguf.find("tokenizer.ggml.pre");
  if (pre != nullptr) {
    FERRY_CHECK(pre->type == GgufType::String, "tokenizer.ggml.pre: expected a string, found {}",
                type_name(pre->type));
    vocab.pre = pre->as_string();
  }
  if (vocab.kind == TokenizerKind::BytePairGpt2 && vocab.pre.empty()) vocab.pre = "default";

  const GgufArray* tokens = find_array(gguf, "tokenizer.ggml.tokens", GgufType::String);
  FERRY_CHECK(tokens != nullptr, "tokenizer.ggml.tokens is missing");
  const size_t n = tokens->items.size();
  FERRY_CHECK(n > 0, "tokenizer.ggml.tokens is empty");
  vocab.tokens.reserve(n);
  for (const GgufValue& t : tokens->items) vocab.tokens.push_back(t.as_string());

  if (const GgufArray* scores = find_array(gguf, "tokenizer.ggml.scores", GgufType::F32)) {
    FERRY_CHECK(scores->items.size() == n, "tokenizer.ggml.scores has {} entries for {} tokens",
                scores->items.size(), n);
    vocab.scores.reserve(n);
    for (const GgufValue& s : scores->items) vocab.scores.push_back(static_cast<float>(s.as_float()));
  }
  if (const GgufArray* types = find_array(gguf, "tokenizer.ggml.token_type", GgufType::I32)) {
    FERRY_CHECK(types->items.size() == n, "tokenizer.ggml.token_type has {} entries for {} tokens",
                types->items.size(), n);
    vocab.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->items[i].as_int();
      FERRY_CHECK(t >= 0 && t <= 6, "tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", i, t);
      vocab.token_types.push_back(static_cast<int32_t>(t));
    }
  } else {
    vocab.token_types.assign(n, static_cast<int32_t>(TokenType::Normal));
  }
  if (const GgufArray* merges = find_array(gguf, "tokenizer.ggml.merges", GgufType::String)) {
    vocab.merges.reserve(merges->items.size());
    for (size_t i = 0; i < merges->items.size(); ++i) {
      const std::string& m = merges->items[i].as_string();
      const size_t space = m.empty() ? std::string::npos : m.find(' ', 1);
      FERRY_CHECK(space != std::string::npos && space + 1 < m.size(),
                  "tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", i, m);
      vocab.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
  }
  FERRY_CHECK(vocab.kind != TokenizerKind::BytePairGpt2 || !vocab.merges.empty(),
              "tokenizer.ggml.merges is missing (required for a gpt2 tokenizer)");

  vocab.bos_id = read_id(gguf, "tokenizer.ggml.bos_token_id", n);
  vocab.eos_id = read_id(gguf, "tokenizer.ggml.eos_token_id", n);
  vocab.eot_id = read_id(gguf, "tokenizer.ggml.eot_token_id", n);
  vocab.unk_id = read_id(gguf, "tokenizer.ggml.unknown_token_id", n);
  vocab.pad_id = read_id(gguf, "tokenizer.ggml.padding_token_id", n);

  // Defaults as llama.cpp has them, then the metadata's word.
  const bool spm = vocab.kind == TokenizerKind::SentencePiece;
  const bool llama3 = vocab.pre == "llama-bpe" || vocab.pre == "llama3";
  vocab.add_bos = read_bool(gguf, "tokenizer.ggml.add_bos_token").value_or(spm || llama3);
  vocab.add_eos = read_bool(gguf, "tokenizer.ggml.add_eos_token").value_or(false);
  vocab.add_space_prefix = read_bool(gguf, "tokenizer.ggml.add_space_prefix").value_or(spm);
  vocab.ignore_merges = llama3;

  if (const GgufValue* tmpl = gguf.find("tokenizer.chat_template")) {
    FERRY_CHECK(tmpl->type == GgufType::String, "tokenizer.chat_template: expected a string, found {}",
                type_name(tmpl->type));
    vocab.chat_template = tmpl->as_string();
  }
  validate_vocab(vocab);
  return vocab;
}

}  // namespace ferry

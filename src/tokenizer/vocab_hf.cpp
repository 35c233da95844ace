// Vocab from a Hugging Face folder: tokenizer.json (model BPE: vocab, merges, added_tokens, pre_tokenizer,
// normalizer, decoder) and tokenizer_config.json (chat_template, bos/eos tokens, add_bos_token).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/mapped_file.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace ferry {

namespace {

using nlohmann::json;
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // "▁"

json read_json(const std::string& path) {
  check_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.good(), "cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

std::string escape_regex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// What the tokenizer.json pipeline says, reduced to what ferry's tokenizers implement.
struct Pipeline {
  bool byte_level = false;    // a ByteLevel pre-tokenizer or decoder
  bool metaspace = false;     // SentencePiece-style "▁" handling (Metaspace or Replace " " -> "▁")
  bool space_prefix = false;  // ByteLevel add_prefix_space / Metaspace prepend / Prepend "▁"
  std::vector<std::string> regexes;
};

void read_pre_tokenizer(const json& p, Pipeline& pipe) {
  if (p.is_null()) return;
  FERRY_CHECK(p.is_object() && p.contains("type"), "tokenizer.json: pre_tokenizer has no type");
  const std::string type = p.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& step : p.at("pretokenizers")) read_pre_tokenizer(step, pipe);
  } else if (type == "ByteLevel") {
    pipe.byte_level = true;
    if (p.value("use_regex", true)) pipe.regexes.push_back(kGpt2Regex);
    if (p.value("add_prefix_space", false)) pipe.space_prefix = true;
  } else if (type == "Split") {
    const json& pattern = p.at("pattern");
    const std::string behavior = p.value("behavior", "Isolated");
    FERRY_CHECK(behavior == "Isolated", "tokenizer.json: Split behavior '{}' is not supported (only Isolated)",
                behavior);
    FERRY_CHECK(!p.value("invert", false), "tokenizer.json: Split with invert=true is not supported");
    if (pattern.contains("Regex")) {
      pipe.regexes.push_back(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      pipe.regexes.push_back(escape_regex(pattern.at("String").get<std::string>()));
    } else {
      fail("tokenizer.json: Split pattern is neither Regex nor String");
    }
  } else if (type == "Digits") {
    pipe.regexes.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Punctuation") {
    const std::string behavior = p.value("behavior", "Isolated");
    FERRY_CHECK(behavior == "Isolated" || behavior == "Contiguous",
                "tokenizer.json: Punctuation behavior '{}' is not supported", behavior);
    pipe.regexes.push_back(std::string(kPunctuationClass) + (behavior == "Contiguous" ? "+" : ""));
  } else if (type == "Metaspace") {
    pipe.metaspace = true;
    const std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
    pipe.space_prefix = scheme != "never";
  } else {
    fail("tokenizer.json: pre_tokenizer type '{}' is not supported", type);
  }
}

void read_normalizer(const json& n, Pipeline& pipe) {
  if (n.is_null()) return;
  const std::string type = n.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& step : n.at("normalizers")) read_normalizer(step, pipe);
  } else if (type == "Prepend") {
    FERRY_CHECK(n.at("prepend").get<std::string>() == kSpaceMark,
                "tokenizer.json: Prepend normalizer with anything but \"▁\" is not supported");
    pipe.space_prefix = true;
  } else if (type == "Replace") {
    const json& pattern = n.at("pattern");
    FERRY_CHECK(pattern.contains("String") && pattern.at("String") == " " && n.at("content") == kSpaceMark,
                "tokenizer.json: only the Replace normalizer \" \" -> \"▁\" is supported");
    pipe.metaspace = true;
  } else if (type == "NFC") {
    // Accepted: ferry does not normalize; text already in NFC (nearly all text) tokenizes identically.
  } else {
    fail("tokenizer.json: normalizer type '{}' is not supported", type);
  }
}

void read_decoder(const json& d, Pipeline& pipe) {
  if (d.is_null()) return;
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const json& step : d.at("decoders")) read_decoder(step, pipe);
  } else if (type == "ByteLevel") {
    pipe.byte_level = true;
  }
}

std::optional<std::string> token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j.at("content").get<std::string>();
  return std::nullopt;
}

int32_t id_of(const Vocab& vocab, const std::optional<std::string>& text, const char* what) {
  if (!text) return -1;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.tokens[i] == *text) return static_cast<int32_t>(i);
  }
  fail("tokenizer_config.json: {} '{}' is not in the vocabulary", what, *text);
}

}  // namespace

Vocab vocab_from_hf(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string tok_path = (fs::path(model_dir) / "tokenizer.json").string();
  const json tj = read_json(tok_path);
  Vocab vocab;
  try {
    const json& model = tj.at("model");
    const std::string model_type = model.value("type", "BPE");
    FERRY_CHECK(model_type == "BPE", "{}: model type '{}' is not supported (only BPE)", tok_path, model_type);

    // id -> text from model.vocab and added_tokens; ids must be dense enough to index a table.
    const json& entries = model.at("vocab");
    FERRY_CHECK(entries.is_object() && !entries.empty(), "{}: model.vocab is not a non-empty object", tok_path);
    const json added = tj.value("added_tokens", json::array());
    const size_t n_entries = entries.size() + added.size();
    const auto check_id = [&](int64_t id) {
      FERRY_CHECK(id >= 0 && static_cast<size_t>(id) < n_entries + 1024, "{}: token id {} is out of range",
                  tok_path, id);
      return static_cast<size_t>(id);
    };
    std::vector<std::optional<std::string>> texts;
    std::vector<int32_t> types;
    const auto put = [&](size_t id, const std::string& text, TokenType type) {
      if (id >= texts.size()) {
        texts.resize(id + 1);
        types.resize(id + 1, static_cast<int32_t>(TokenType::Unused));
      }
      texts[id] = text;
      types[id] = static_cast<int32_t>(type);
    };
    for (const auto& [text, id] : entries.items()) put(check_id(id.get<int64_t>()), text, TokenType::Normal);
    for (const json& a : added) {
      const size_t id = check_id(a.at("id").get<int64_t>());
      put(id, a.at("content").get<std::string>(), a.value("special", false) ? TokenType::Control
                                                                             : TokenType::UserDefined);
    }
    vocab.tokens.resize(texts.size());
    for (size_t id = 0; id < texts.size(); ++id) {
      vocab.tokens[id] = texts[id] ? *texts[id] : "<ferry_unused_" + std::to_string(id) + ">";
    }
    vocab.token_types = std::move(types);

    for (const json& m : model.value("merges", json::array())) {
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.empty() ? std::string::npos : s.find(' ', 1);
        FERRY_CHECK(space != std::string::npos && space + 1 < s.size(), "{}: merge '{}' is not 'a b'", tok_path, s);
        vocab.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else {
        FERRY_CHECK(m.is_array() && m.size() == 2, "{}: a merge is neither 'a b' nor a pair", tok_path);
        vocab.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      }
    }
    vocab.ignore_merges = model.value("ignore_merges", false);

    Pipeline pipe;
    read_normalizer(tj.value("normalizer", json()), pipe);
    read_pre_tokenizer(tj.value("pre_tokenizer", json()), pipe);
    read_decoder(tj.value("decoder", json()), pipe);
    const bool byte_fallback = model.value("byte_fallback", false);
    if (pipe.byte_level) {
      vocab.kind = TokenizerKind::BytePairGpt2;
      vocab.pre = "tokenizer.json";
      vocab.pre_regexes = pipe.regexes;
      vocab.add_space_prefix = pipe.space_prefix;
    } else if (pipe.metaspace || byte_fallback) {
      vocab.kind = TokenizerKind::SentencePiece;
      vocab.add_space_prefix = pipe.space_prefix;
      FERRY_CHECK(pipe.regexes.empty(), "{}: Split pre-tokenizers with SentencePiece-style BPE are not supported",
                  tok_path);
      for (size_t id = 0; id < vocab.tokens.size(); ++id) {
        const std::string& t = vocab.tokens[id];
        if (vocab.token_types[id] == 1 && t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
          vocab.token_types[id] = static_cast<int32_t>(TokenType::Byte);
        }
      }
    } else {
      fail("{}: neither a ByteLevel nor a Metaspace/byte-fallback tokenizer; not supported", tok_path);
    }
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
      const std::string unk = model.at("unk_token").get<std::string>();
      for (size_t id = 0; id < vocab.tokens.size(); ++id) {
        if (vocab.tokens[id] == unk) vocab.unk_id = static_cast<int32_t>(id);
      }
    }
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", tok_path, e.what());
  }

  const fs::path config_path = fs::path(model_dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json cfg = read_json(config_path.string());
    try {
      vocab.bos_id = id_of(vocab, token_content(cfg.value("bos_token", json())), "bos_token");
      vocab.eos_id = id_of(vocab, token_content(cfg.value("eos_token", json())), "eos_token");
      vocab.pad_id = id_of(vocab, token_content(cfg.value("pad_token", json())), "pad_token");
      if (vocab.unk_id < 0) vocab.unk_id = id_of(vocab, token_content(cfg.value("unk_token", json())), "unk_token");
      vocab.add_bos = cfg.value("add_bos_token", false) && vocab.bos_id >= 0;
      vocab.add_eos = cfg.value("add_eos_token", false) && vocab.eos_id >= 0;
      const json tmpl = cfg.value("chat_template", json());
      if (tmpl.is_string()) {
        vocab.chat_template = tmpl.get<std::string>();
      } else if (tmpl.is_array()) {  // [{name, template}, ...]: the "default" one
        for (const json& t : tmpl) {
          if (t.value("name", "") == "default") vocab.chat_template = t.at("template").get<std::string>();
        }
      }
    } catch (const json::exception& e) {
      fail("{}: unexpected structure: {}", config_path.string(), e.what());
    }
  }
  const fs::path jinja_path = fs::path(model_dir) / "chat_template.jinja";
  if (!vocab.chat_template && fs::exists(jinja_path)) {
    check_regular_file(jinja_path.string());
    std::ifstream in(jinja_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    vocab.chat_template = ss.str();
  }
  validate_vocab(vocab);
  return vocab;
}

}  // namespace ferry

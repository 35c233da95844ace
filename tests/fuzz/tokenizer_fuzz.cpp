// Fuzz target for the tokenizer. The first input byte picks a path:
//   0..3: byte-level BPE (pre-tokenizer gpt-2 / llama-bpe / smollm / deepseek-llm) on the remaining bytes
//   4:    SentencePiece BPE with byte fallback
//   5:    the bytes as a GGUF file: vocab_from_gguf, and when that succeeds, a Tokenizer on its own tokens
// Checks: no crash; for valid UTF-8 input, decode(encode(s)) == s and streaming equals decode.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/check.h"
#include "formats/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using namespace ferry;

// A small byte-level vocab: the 256 byte symbols, merges that build a few words, and special tokens.
Vocab byte_level_vocab(const std::string& pre) {
  Vocab v;
  v.kind = TokenizerKind::BytePairGpt2;
  v.pre = pre;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_codepoint(static_cast<uint8_t>(b)));
    v.tokens.push_back(s);
  }
  for (const char* word : {" the", "hello", " world", "ing", "123", "\xE4\xBD\xA0\xE5\xA5\xBD", "  ", "\n\n",
                           " 'll", "\xF0\x9F\x98\x80"}) {
    const std::string mapped = byte_level_encode(word);
    // left-to-right merges over the mapped characters
    size_t first = utf8_sequence_length(mapped, 0);
    std::string prefix = mapped.substr(0, first);
    for (size_t pos = first; pos < mapped.size();) {
      const size_t len = utf8_sequence_length(mapped, pos);
      const std::string next = mapped.substr(pos, len);
      v.merges.emplace_back(prefix, next);
      prefix += next;
      v.tokens.push_back(prefix);
      pos += len;
    }
  }
  v.token_types.assign(v.tokens.size(), 1);
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(special);
    v.token_types.push_back(3);
  }
  v.tokens.push_back("<tool>");
  v.token_types.push_back(4);
  v.eos_id = static_cast<int32_t>(v.tokens.size()) - 2;
  return v;
}

Vocab spm_vocab() {
  Vocab v;
  v.kind = TokenizerKind::SentencePiece;
  v.add_space_prefix = true;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.token_types.push_back(6);
  }
  for (const char* t : {"\xE2\x96\x81", "a", "e", "h", "l", "o", "t", "w", "r", "d", "he", "ll", "\xE2\x96\x81t",
                        "\xE2\x96\x81the", "hello", "\xE2\x96\x81hello", "\xE2\x96\x81\xE2\x96\x81", "wor", "ld",
                        "\xE4\xBD\xA0"}) {
    v.tokens.push_back(t);
    v.token_types.push_back(1);
  }
  v.scores.resize(v.tokens.size());
  for (size_t i = 0; i < v.scores.size(); ++i) v.scores[i] = -static_cast<float>(i % 17);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  return v;
}

void check_tokenizer(const Tokenizer& tok, std::string_view text, bool parse_special) {
  const auto ids = tok.encode(text, true, parse_special);
  const auto plain = tok.encode(text, false, false);
  const std::string decoded = tok.decode(plain);
  if (is_valid_utf8(text) && tok.vocab().kind == TokenizerKind::BytePairGpt2 && decoded != text) std::abort();
  IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    if (utf8_complete_prefix(chunk) != chunk.size()) std::abort();  // ends inside a sequence
    streamed += chunk;
  }
  streamed += detok.flush();
  if (!is_valid_utf8(streamed)) std::abort();
  (void)tok.decode(ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer kGpt2(byte_level_vocab("gpt-2"));
  static const Tokenizer kLlama3(byte_level_vocab("llama-bpe"));
  static const Tokenizer kSmollm(byte_level_vocab("smollm"));
  static const Tokenizer kDeepseek(byte_level_vocab("deepseek-llm"));
  static const Tokenizer kSpm(spm_vocab());
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool parse_special = (data[0] & 0x80) != 0;
  switch (data[0] % 6) {
    case 0: check_tokenizer(kGpt2, text, parse_special); break;
    case 1: check_tokenizer(kLlama3, text, parse_special); break;
    case 2: check_tokenizer(kSmollm, text, parse_special); break;
    case 3: check_tokenizer(kDeepseek, text, parse_special); break;
    case 4: check_tokenizer(kSpm, text, parse_special); break;
    default:
      try {
        const GgufFile gguf = GgufFile::parse(data + 1, size - 1);
        const Tokenizer tok(vocab_from_gguf(gguf));
        const std::string sample = "Hello world 123 <|im_start|>";
        const auto ids = tok.encode(sample, true, true);
        (void)tok.decode(ids);
      } catch (const Error&) {
      }
      break;
  }
  return 0;
}

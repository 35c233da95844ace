// Regex lists of the pre-tokenizers named by tokenizer.ggml.pre, as the models' Hugging Face tokenizer.json
// files define them (Split / ByteLevel / Digits / Punctuation steps, in order).
#include "core/check.h"
#include "tokenizer/pre_tokenizer.h"

namespace ferry {

const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kPunctuationClass = R"([\p{P}\$\+<=>\^`\|~])";

namespace {

// Llama 3: case-insensitive contractions, numbers in groups of up to three digits.
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen 2: as Llama 3 but every digit on its own.
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

std::vector<std::string> pre_tokenizer_regexes(std::string_view pre) {
  const std::string punct_run = std::string(kPunctuationClass) + "+";
  if (pre == "gpt-2" || pre == "gpt2" || pre == "mpt" || pre == "olmo" || pre == "jais" ||
      pre == "default") {
    return {kGpt2Regex};
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "dbrx" || pre == "smaug-bpe") {
    return {kLlama3Regex};
  }
  if (pre == "qwen2" || pre == "stablelm2" || pre == "deepseek-r1-qwen") return {kQwen2Regex};
  // Digits(individual_digits=true) then ByteLevel.
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
      pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
    return {R"(\p{N})", kGpt2Regex};
  }
  // Punctuation(Contiguous), ByteLevel, Split "[0-9][0-9][0-9]".
  if (pre == "falcon") return {punct_run, kGpt2Regex, "[0-9][0-9][0-9]"};
  if (pre == "deepseek-llm") {
    return {
        R"([\r\n])",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)",
        R"(\s+$)",
        R"([一-龥ࠀ-一가-퟿]+)",
        R"(\p{N}+)",
    };
  }
  if (pre == "deepseek-coder") {
    return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N})"};
  }
  if (pre == "deepseek-v3") {
    return {
        R"(\p{N}{1,3})",
        R"([一-龥぀-ゟ゠-ヿ]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    };
  }
  fail("unsupported pre-tokenizer '{}' (tokenizer.ggml.pre)", pre);
}

}  // namespace ferry

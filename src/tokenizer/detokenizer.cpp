#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry {

namespace {

// Appends bytes, replacing each byte that is not part of a well-formed sequence with U+FFFD.
void append_sanitized(std::string& out, std::string_view bytes) {
  if (is_valid_utf8(bytes)) {
    out += bytes;
  } else {
    out += utf8_sanitize(bytes);
  }
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  const bool control = tok_.is_control(id);
  if (control && skip_special_) return {};
  std::string piece = tok_.token_to_piece(id);
  if (!control && !seen_text_) {
    seen_text_ = true;
    const Vocab& v = tok_.vocab();
    if (v.kind == TokenizerKind::SentencePiece && v.add_space_prefix && !piece.empty() && piece[0] == ' ') {
      piece.erase(0, 1);  // as decode() does
    }
  }
  pending_ += piece;
  const size_t n = utf8_complete_prefix(pending_);
  std::string out;
  append_sanitized(out, std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  append_sanitized(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace ferry

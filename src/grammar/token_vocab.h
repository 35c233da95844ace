// The model's vocabulary as the matcher needs it: token id -> the bytes it stands for, the ids sorted by
// bytes with each one's common prefix length with the previous (so a walk over the sorted list reuses the
// parse of the shared prefix, a trie walk without the trie), and the stop tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::grammar {

class TokenVocab {
 public:
  // token_bytes[id]: the raw bytes (empty for control/special tokens: never allowed by a grammar);
  // stop_ids: end-of-generation tokens, allowed exactly when the grammar is complete.
  TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids);

  size_t size() const { return bytes_.size(); }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& sorted() const { return sorted_; }   // non-empty tokens, by bytes
  const std::vector<uint32_t>& lcp() const { return lcp_; }         // lcp_[i]: with sorted_[i-1] (0 at 0)
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // sorted()[first_byte_start(b) .. first_byte_start(b+1)) are the tokens whose first byte is b (b <= 256).
  size_t first_byte_start(int b) const { return first_byte_start_[static_cast<size_t>(b)]; }
  size_t max_length() const { return max_length_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
  std::vector<int32_t> stop_ids_;
  std::vector<size_t> first_byte_start_;  // (257,)
  size_t max_length_ = 0;
};

}  // namespace ferry::grammar

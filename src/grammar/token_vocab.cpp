#include "grammar/token_vocab.h"

#include <algorithm>

#include "core/check.h"

namespace ferry::grammar {

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
  FERRY_CHECK(bytes_.size() < (1u << 30), "grammar: vocabulary of {} tokens is too large", bytes_.size());
  for (int32_t id : stop_ids_) {
    FERRY_CHECK(id >= 0 && static_cast<size_t>(id) < bytes_.size(), "grammar: stop token {} out of range", id);
  }
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (bytes_[id].empty()) continue;
    if (std::find(stop_ids_.begin(), stop_ids_.end(), static_cast<int32_t>(id)) != stop_ids_.end()) continue;
    sorted_.push_back(static_cast<int32_t>(id));
    max_length_ = std::max(max_length_, bytes_[id].size());
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  // std::string compares bytes as unsigned char, so the first bytes ascend along sorted_.
  first_byte_start_.assign(257, sorted_.size());
  for (size_t i = sorted_.size(); i-- > 0;) {
    first_byte_start_[static_cast<unsigned char>(bytes_[sorted_[i]][0])] = i;
  }
  for (int b = 255; b >= 0; --b) {
    first_byte_start_[b] = std::min(first_byte_start_[b], first_byte_start_[b + 1]);
  }
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = bytes_[sorted_[i - 1]];
    const std::string& b = bytes_[sorted_[i]];
    uint32_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    lcp_[i] = n;
  }
}

}  // namespace ferry::grammar

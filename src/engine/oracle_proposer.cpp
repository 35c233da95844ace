#include "engine/oracle_proposer.h"

#include <algorithm>

namespace ferry {

void OracleProposer::propose(std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& out) {
  out.clear();
  if (max_tokens <= 0 || history.size() >= recorded_.size() ||
      !std::equal(history.begin(), history.end(), recorded_.begin()))
    return;
  const size_t n = std::min(size_t(max_tokens), recorded_.size() - history.size());
  out.assign(recorded_.begin() + ptrdiff_t(history.size()), recorded_.begin() + ptrdiff_t(history.size() + n));
}

}  // namespace ferry

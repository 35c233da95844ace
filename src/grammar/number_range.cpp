#include "grammar/number_range.h"

#include <algorithm>
#include <vector>

#include "core/check.h"

namespace ferry::grammar {

namespace {

std::string join(const std::vector<std::string>& alts) {
  if (alts.empty()) return "[]";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string digits_class(char a, char b) { return a == b ? std::string("\"") + a + "\"" : std::string("[") + a + "-" + b + "]"; }

// Fixed-width digit strings between a and b (same length, a <= b).
std::string same_length(const std::string& a, const std::string& b) {
  if (a.empty()) return "\"\"";
  if (a == b) return "\"" + a + "\"";
  const size_t rest = a.size() - 1;
  const std::string ra = a.substr(1), rb = b.substr(1);
  if (a[0] == b[0]) return "\"" + std::string(1, a[0]) + "\" " + same_length(ra, rb);
  auto any = [&](size_t n) { return n == 0 ? std::string() : " [0-9]{" + std::to_string(n) + "}"; };
  const std::string zeros(rest, '0'), nines(rest, '9');
  if (ra == zeros && rb == nines) return digits_class(a[0], b[0]) + any(rest);
  std::vector<std::string> alts;
  char lo = a[0], hi = b[0];
  if (ra == zeros) {
    // a's first digit takes everything after it: merge into the middle block
  } else {
    alts.push_back("\"" + std::string(1, a[0]) + "\" " + same_length(ra, nines));
    ++lo;
  }
  const bool hi_full = rb == nines;
  if (!hi_full) --hi;
  if (lo <= hi) alts.push_back("(" + digits_class(lo, hi) + any(rest) + ")");
  if (!hi_full) alts.push_back("\"" + std::string(1, b[0]) + "\" " + same_length(zeros, rb));
  return join(alts);
}

uint64_t pow10(size_t n) {
  uint64_t v = 1;
  for (size_t i = 0; i < n; ++i) v *= 10;
  return v;
}

// Non-negative integers in [a, b] (b nullopt: unbounded), no leading zeros.
std::string nonneg_range(uint64_t a, std::optional<uint64_t> b) {
  std::vector<std::string> alts;
  const size_t da = std::to_string(a).size();
  const size_t db = b ? std::to_string(*b).size() : 15;
  for (size_t d = da; d <= db; ++d) {
    const uint64_t lo = std::max<uint64_t>(a, d == 1 ? 0 : pow10(d - 1));
    const uint64_t hi = b ? std::min<uint64_t>(*b, pow10(d) - 1) : pow10(d) - 1;
    if (lo > hi) continue;
    if (!b && d > da) {  // every longer number: one block
      alts.push_back("([1-9] [0-9]{" + std::to_string(d - 1) + "," + std::to_string(db - 1) + "})");
      break;
    }
    alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  return join(alts);
}

void check_bound(std::optional<int64_t> v) {
  FERRY_CHECK(!v || (*v >= -kMaxMagnitude && *v <= kMaxMagnitude),
              "json schema: numeric bound {} beyond the supported magnitude {}", *v, kMaxMagnitude);
}

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  check_bound(lo);
  check_bound(hi);
  if (lo && hi && *lo > *hi) return "[]";
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negatives -k, k in [max(1, -hi), -lo]
    const uint64_t kmin = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    const std::optional<uint64_t> kmax = lo ? std::optional<uint64_t>(static_cast<uint64_t>(-*lo)) : std::nullopt;
    if (!kmax || kmin <= *kmax) alts.push_back("(\"-\" " + nonneg_range(kmin, kmax) + ")");
  }
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alts.push_back(nonneg_range(a, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  return join(alts);
}

std::string number_range_gbnf(std::optional<int64_t> lo, bool lo_exclusive, std::optional<int64_t> hi,
                              bool hi_exclusive) {
  check_bound(lo);
  check_bound(hi);
  const std::string frac = "\".\" [0-9]{1,15}";
  const std::string nonzero_frac = "\".\" \"0\"{0,7} [1-9] [0-9]{0,7}";
  std::vector<std::string> alts;
  const auto ilo = lo ? std::optional<int64_t>(*lo + (lo_exclusive ? 1 : 0)) : std::nullopt;
  const auto ihi = hi ? std::optional<int64_t>(*hi - (hi_exclusive ? 1 : 0)) : std::nullopt;
  alts.push_back(integer_range_gbnf(ilo, ihi));
  // i.frac, i >= 0: value in [i, i+1): i >= lo (> lo when exclusive: i >= lo+1), i <= hi-1.
  {
    const int64_t a = std::max<int64_t>(ilo.value_or(0), 0);
    const auto b = hi ? std::optional<int64_t>(*hi - 1) : std::nullopt;
    if (!b || a <= *b) alts.push_back("(" + integer_range_gbnf(a, b) + " " + frac + ")");
    // x > lo with lo >= 0: lo itself with a non-zero fraction
    if (lo && lo_exclusive && *lo >= 0 && (!hi || *lo <= *hi - 1)) {
      alts.push_back("(\"" + std::to_string(*lo) + "\" " + nonzero_frac + ")");
    }
  }
  // -k.frac, k >= 0: value in (-(k+1), -k]: k <= -lo-1, and -k <= hi (k >= 1-hi when exclusive).
  if (!lo || *lo < 0) {
    const int64_t kmin = std::max<int64_t>(hi ? -*hi + (hi_exclusive ? 1 : 0) : 0, 0);
    const auto kmax = lo ? std::optional<int64_t>(-*lo - 1) : std::nullopt;
    if (!kmax || kmin <= *kmax) alts.push_back("(\"-\" " + integer_range_gbnf(kmin, kmax) + " " + frac + ")");
    // x < hi with hi <= 0: -(-hi) with a non-zero fraction
    if (hi && hi_exclusive && *hi <= 0 && (!lo || -*hi <= -*lo - 1)) {
      alts.push_back("(\"-" + std::to_string(-*hi) + "\" " + nonzero_frac + ")");
    }
  }
  return join(alts);
}

}  // namespace ferry::grammar

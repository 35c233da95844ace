// The oracle speculation bench: oracle_bench.h.
#include "measure/oracle_bench.h"

#include <algorithm>

#include "core/check.h"

namespace ferry {

std::vector<OracleRun> run_oracle_tests(Engine& engine, const BenchTest& t, std::span<const int32_t> depth_tokens,
                                        std::span<const int32_t> test_tokens, std::span<const int> ks, BenchRun& plain) {
  FERRY_CHECK(t.kind == TestKind::Generate, "{}: the oracle runs generation tests only", t.label());
  engine.replay_proposals({}, 0);
  plain = run_bench_test(engine, t, depth_tokens, test_tokens);
  // The recording: the plain run's whole history (depth, test token, its output).
  std::vector<int32_t> recorded(depth_tokens.begin(), depth_tokens.end());
  recorded.insert(recorded.end(), test_tokens.begin(), test_tokens.end());
  recorded.insert(recorded.end(), plain.timed.tokens.begin(), plain.timed.tokens.end());
  const double plain_step = plain.timed.gen_seconds / double(std::max<int64_t>(1, plain.timed.target_steps));
  std::vector<OracleRun> out;
  try {
    for (const int k : ks) {
      engine.replay_proposals(recorded, k);
      OracleRun o;
      o.k = k;
      o.run = run_bench_test(engine, t, depth_tokens, test_tokens);
      const GenerateResult& g = o.run.timed;
      o.step_ratio = g.gen_seconds / double(std::max<int64_t>(1, g.target_steps)) / plain_step;
      const std::vector<int32_t>& a = plain.timed.tokens;
      const auto [ia, ib] = std::mismatch(a.begin(), a.end(), g.tokens.begin(), g.tokens.end());
      const auto same = int64_t(ia - a.begin());
      o.changed = ia != a.end() || ib != g.tokens.end() ? 1 : 0;
      o.compared = same + o.changed;
      out.push_back(std::move(o));
    }
  } catch (...) {
    engine.replay_proposals({}, 0);
    throw;
  }
  engine.replay_proposals({}, 0);
  return out;
}

}  // namespace ferry

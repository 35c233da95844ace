// `ferry bench --spec oracle`: the ceiling of speculative decoding and the verify step's cost on this machine. A tg
// test runs plainly (greedy), and then, on the same tokens, with the oracle proposer (Engine::replay_proposals:
// the plain run's own output replayed, so every proposal is kept while the verify step's argmax agrees with the
// plain decode's) at each k asked for. Per k: tok/s, the time of one verify step (1 + k rows) as a multiple of one
// plain decode step (gen_seconds / target_steps of each run), and whether the tokens stayed the same.
//
// The argmax-change count: at every generated position before the first difference the two runs had the same
// history, so the first position where the oracle run's token differs is a position whose argmax changed between
// the plain decode and the verify step; past it the histories differ (the oracle proposes nothing) and nothing
// more is compared. Worked example: 128 tokens, the oracle run's differ from index 57 on: 58 compared, 1 changed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "measure/bench_run.h"

namespace ferry {

struct OracleRun {
  int k = 0;
  BenchRun run;            // the oracle run
  double step_ratio = 0;   // its time per target step / the plain run's
  int64_t compared = 0;    // generated positions compared with the plain run (see above)
  int64_t changed = 0;     // of them, where the token differs (0 or 1)
};

// Runs tg test t plainly (into `plain`), then with the oracle at each of ks (1..kMaxSpecTokens) on the same depth
// and test tokens; the engine is left without the oracle. ferry::Error as run_bench_test, and for a pp test.
std::vector<OracleRun> run_oracle_tests(Engine& engine, const BenchTest& t, std::span<const int32_t> depth_tokens,
                                        std::span<const int32_t> test_tokens, std::span<const int> ks, BenchRun& plain);

}  // namespace ferry

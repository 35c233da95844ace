// Starts processes of the built ferry binary as mpirun would (OMPI_COMM_WORLD_* variables), without mpirun:
// for the tests of `mpirun -np N ferry ...` (parallel/launcher, parallel/tcp_rendezvous).
#pragma once

#include <string>
#include <vector>

namespace ferry::test {

struct RankSpec {
  int rank = 0;
  std::vector<std::string> args;  // ferry's arguments (after the binary)
  std::vector<std::string> env;   // extra NAME=value settings for this process
  int kill_after_s = 0;           // > 0: SIGKILL after this many seconds (a rank that dies mid-run)
};

struct RankResult {
  int exit_code = -1;  // -1: killed by a signal; 124: ran past the bound
  std::string output;  // stdout + stderr
};

// Runs every spec as one process of a world of `world` ranks on this host (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/
// LOCAL_SIZE set; other OMPI_*, PMI_* and FERRY_TP_* variables of this process removed), all at once, each
// bounded by `timeout <seconds>`; waits for all. Results in the order of `specs`.
std::vector<RankResult> run_ranks(int world, const std::vector<RankSpec>& specs, int seconds = 120);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

}  // namespace ferry::test

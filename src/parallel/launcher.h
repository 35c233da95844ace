// How a process joins a tensor-parallel group (one process per GPU):
//  - `ferry ... --tp N` on one host: the process the user started is rank 0; it starts ranks 1..N-1 as
//    children running the same binary with the same arguments (posix_spawn of /proc/self/exe), each given
//    FERRY_TP_CHILD=RANK,WORLD,FD (its end of a socketpair to rank 0: the host link).
//    A child's Engine never returns to the command: it follows rank 0's steps and exits when rank 0 ends.
//  - `mpirun -np N [--hostfile H] ferry ...` (any host): rank, world and local rank from mpirun's variables
//    (core/env.h; no MPI library is used); the ranks meet over TCP at FERRY_TP_ADDR (parallel/tcp_rendezvous.h),
//    rank 0 listening. --tp must be N or left out. The device of a rank is its local rank. Followers run rank
//    0's steps and exit when it ends, as for the children above.
// NCCL_NVLS_ENABLE is set to 0 when unset (NVLink SHARP stays off; ../shared/GPU.md).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <sys/types.h>

#include "core/env.h"
#include "parallel/host_link.h"

namespace ferry {

struct TpLaunch {
  int rank = 0, world = 1;
  int local_rank = 0;               // which GPU of this host
  std::unique_ptr<HostLink> link;   // null at world 1
  std::vector<pid_t> children;      // rank 0 of a single-host launch: ranks 1..N-1
  bool same_host = true;            // every rank runs on this host (all ranks agree: rank 0 decided)

  TpLaunch() = default;
  TpLaunch(const TpLaunch&) = delete;
  TpLaunch& operator=(const TpLaunch&) = delete;
  ~TpLaunch();  // closes the link, then reaps the children (SIGKILL after a grace period)
};

// tp: the --tp option (1: no parallelism unless the environment says this process is a rank).
std::unique_ptr<TpLaunch> launch_tp(int tp, const Env& env);

// The number of processes mpirun started this one among (1 when not started by mpirun).
int mpi_world(const Env& env);

// FERRY_TP_TIMEOUT (default 300 s).
std::chrono::seconds tp_timeout(const Env& env);

}  // namespace ferry

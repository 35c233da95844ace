// How the processes mpirun started meet: over TCP, in the star the host link uses (parallel/host_link.h).
// Rank 0 listens on FERRY_TP_ADDR (host:port) and accepts the other N-1 ranks; each of them connects (retrying
// while rank 0 is not up yet) and sends a hello {magic, version, rank, world, host name}; rank 0 orders the
// sockets by rank, rejects a wrong world size or a duplicate rank with a clear error (sent to the rank too),
// and answers every rank once all have come, with whether all ranks run on one host (rank 0 decides, so every
// rank agrees). Connections that are not a ferry rank (wrong magic) are dropped. TCP_NODELAY is on.
// Everything is bounded by `timeout` (FERRY_TP_TIMEOUT): an error names the address and the missing ranks.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ferry {

struct TcpRendezvousOptions {
  int rank = 0, world = 1;
  std::string addr;          // "host:port" or "[v6-address]:port": rank 0's listening address
  bool one_host = false;     // mpirun says every rank is on this host (rank 0 may then listen on loopback only)
  std::chrono::milliseconds timeout{300'000};
};

struct TcpRendezvous {
  std::vector<int> fds;   // rank 0: sockets to ranks 1..N-1 in rank order; a follower: {its socket to rank 0}
  bool same_host = true;  // every rank reported rank 0's host name
};

TcpRendezvous tcp_rendezvous(const TcpRendezvousOptions& options);

struct HostPort {
  std::string host;
  int port = 0;
};
// "host:port" / "[::1]:port" -> parts; a clear error naming `what` (e.g. "FERRY_TP_ADDR") otherwise.
HostPort parse_host_port(const std::string& addr, const char* what);

}  // namespace ferry

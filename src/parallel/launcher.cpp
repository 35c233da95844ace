#include "parallel/launcher.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/check.h"
#include "parallel/tcp_rendezvous.h"

extern char** environ;

namespace ferry {
namespace {

int parse_int(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    const int v = std::stoi(s, &used);
    FERRY_CHECK(used == s.size(), "{}='{}' is not an integer", what, s);
    return v;
  } catch (const std::logic_error&) {
    fail("{}='{}' is not an integer", what, s);
  }
}

// This process's arguments, as the kernel has them.
std::vector<std::string> self_args() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  FERRY_CHECK(f.good(), "cannot read /proc/self/cmdline to start the tensor-parallel ranks");
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t at = 0;
  while (at < all.size()) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

constexpr int kChildFd = 3;  // where a child finds its socket to rank 0
constexpr const char* kDefaultAddr = "127.0.0.1:29517";

// A process started by mpirun among `world`: meets the others over TCP (parallel/tcp_rendezvous.h).
std::unique_ptr<TpLaunch> join_mpi_group(std::unique_ptr<TpLaunch> L, int tp, int world, const Env& env) {
  FERRY_CHECK(tp == 1 || tp == world,
              "--tp {} does not match the {} processes mpirun started (one rank per process): pass --tp {} or leave "
              "--tp out",
              tp, world, world);
  FERRY_CHECK(env.mpi.rank.has_value(),
              "mpirun gave the world size ({}) but not this process's rank (OMPI_COMM_WORLD_RANK or PMI_RANK)", world);
  L->rank = parse_int(*env.mpi.rank, "the MPI rank");
  L->world = world;
  FERRY_CHECK(L->rank >= 0 && L->rank < world, "MPI rank {} outside a world of {}", L->rank, world);
  const int local_size = env.mpi.local_size ? parse_int(*env.mpi.local_size, "the MPI local size") : 0;
  const bool one_host = local_size == world;
  L->local_rank = env.mpi.local_rank ? parse_int(*env.mpi.local_rank, "the MPI local rank") : one_host ? L->rank : 0;
  FERRY_CHECK(L->local_rank >= 0, "MPI local rank {} is negative", L->local_rank);
  FERRY_CHECK(env.tp_addr || one_host,
              "started by mpirun with {} ranks over more than one host: pass mpirun -x FERRY_TP_ADDR=<rank-0 "
              "host>:<port> (where rank 0 listens and the others connect)",
              world);
  const TcpRendezvous met = tcp_rendezvous(TcpRendezvousOptions{.rank = L->rank,
                                                                .world = world,
                                                                .addr = env.tp_addr.value_or(kDefaultAddr),
                                                                .one_host = one_host,
                                                                .timeout = tp_timeout(env)});
  L->same_host = met.same_host;
  L->link = make_socket_link(L->rank, world, met.fds);
  return L;
}

}  // namespace

int mpi_world(const Env& env) { return env.mpi.size ? parse_int(*env.mpi.size, "the MPI world size") : 1; }

std::chrono::seconds tp_timeout(const Env& env) { return std::chrono::seconds(env.tp_timeout_s); }

TpLaunch::~TpLaunch() {
  link.reset();  // followers see the socket close (after the stop message they exit on their own)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : children) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

std::unique_ptr<TpLaunch> launch_tp(int tp, const Env& env) {
  FERRY_CHECK(tp >= 1 && tp <= 64, "--tp {} out of range (1..64)", tp);
  auto L = std::make_unique<TpLaunch>();
  if (!env.nccl_nvls_set) ::setenv("NCCL_NVLS_ENABLE", "0", 1);

  if (env.tp_child) {  // a rank started by the launcher below (Env::read checked rank < world)
    L->rank = env.tp_child->rank;
    L->world = env.tp_child->world;
    L->local_rank = L->rank;
    L->link = make_socket_link(L->rank, L->world, {env.tp_child->fd});
    return L;
  }
  if (const int world = mpi_world(env); world > 1) return join_mpi_group(std::move(L), tp, world, env);
  if (tp == 1) return L;

  // Rank 0 of a single-host launch: start ranks 1..tp-1.
  L->world = tp;
  const std::vector<std::string> args = self_args();
  std::vector<int> parent_fds;
  for (int r = 1; r < tp; ++r) {
    int sv[2];
    FERRY_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: {}", std::strerror(errno));
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      // This rank's identity is set below; every other setting (FERRY_TP_TIMEOUT, FERRY_TP_ALLREDUCE, ...) is
      // inherited, so all ranks agree on it.
      if (kv.rfind("FERRY_TP_CHILD=", 0) != 0) envs.push_back(kv);
    }
    envs.push_back("FERRY_TP_CHILD=" + std::to_string(r) + "," + std::to_string(tp) + "," + std::to_string(kChildFd));
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], kChildFd);  // dup2 clears close-on-exec on the copy
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      for (int fd : parent_fds) ::close(fd);
      fail("starting tensor-parallel rank {}: {}", r, std::strerror(rc));
    }
    L->children.push_back(pid);
    parent_fds.push_back(sv[0]);
  }
  L->link = make_socket_link(0, tp, std::move(parent_fds));
  return L;
}

}  // namespace ferry

#include "dist/launcher.h"

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

}  // namespace

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
  if (!env.nccl_nvls_enable) ::setenv("NCCL_NVLS_ENABLE", "0", 1);

  if (env.tp_rank) {  // a rank started by the launcher below
    FERRY_CHECK(env.tp_world && env.tp_fd, "FERRY_TP_RANK is set without FERRY_TP_WORLD and FERRY_TP_FD");
    L->rank = parse_int(*env.tp_rank, "FERRY_TP_RANK");
    L->world = parse_int(*env.tp_world, "FERRY_TP_WORLD");
    FERRY_CHECK(L->rank >= 1 && L->rank < L->world, "FERRY_TP_RANK={} outside a world of {}", L->rank, L->world);
    L->local_rank = L->rank;
    L->link = make_socket_link(L->rank, L->world, {parse_int(*env.tp_fd, "FERRY_TP_FD")});
    return L;
  }
  if (env.mpi_size && parse_int(*env.mpi_size, "the MPI world size") > 1) {
    fail("started by mpirun with {} processes, but this ferry is built without MPI: use --tp N on one host",
         *env.mpi_size);
  }
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
      const bool identity = kv.rfind("FERRY_TP_RANK=", 0) == 0 || kv.rfind("FERRY_TP_WORLD=", 0) == 0 ||
                            kv.rfind("FERRY_TP_FD=", 0) == 0;
      if (!identity) envs.push_back(kv);
    }
    envs.push_back("FERRY_TP_RANK=" + std::to_string(r));
    envs.push_back("FERRY_TP_WORLD=" + std::to_string(tp));
    envs.push_back("FERRY_TP_FD=" + std::to_string(kChildFd));
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

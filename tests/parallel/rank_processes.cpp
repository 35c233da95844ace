#include "parallel/rank_processes.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "fixtures/test_paths.h"

extern char** environ;

namespace ferry::test {

std::vector<RankResult> run_ranks(int world, const std::vector<RankSpec>& specs, int seconds) {
  const std::string ferry = std::string(FERRY_BINARY_DIR) + "/ferry";
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("OMPI_", 0) == 0 || kv.rfind("PMI_", 0) == 0 || kv.rfind("MPI_LOCAL", 0) == 0 ||
        kv.rfind("FERRY_TP_", 0) == 0)
      continue;
    base_env.push_back(kv);
  }
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const RankSpec& s = specs[i];
    // glibc's getenv returns the first match: the spec's settings first, then the rank's identity, then ours.
    std::vector<std::string> env = s.env;
    env.push_back("OMPI_COMM_WORLD_RANK=" + std::to_string(s.rank));
    env.push_back("OMPI_COMM_WORLD_SIZE=" + std::to_string(world));
    env.push_back("OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(s.rank));
    env.push_back("OMPI_COMM_WORLD_LOCAL_SIZE=" + std::to_string(world));
    env.insert(env.end(), base_env.begin(), base_env.end());
    std::vector<std::string> args = {"timeout"};
    if (s.kill_after_s > 0) args.insert(args.end(), {"-s", "KILL"});
    args.insert(args.end(), {std::to_string(s.kill_after_s > 0 ? s.kill_after_s : seconds), ferry});
    args.insert(args.end(), s.args.begin(), s.args.end());
    logs.push_back(temp_path("rank_" + std::to_string(getpid()) + "_" + std::to_string(i) + ".log"));
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, "timeout", &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error(std::string("posix_spawnp timeout: ") + std::strerror(rc));
    pids.push_back(pid);
  }
  std::vector<RankResult> out(specs.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    if (WIFEXITED(status)) out[i].exit_code = WEXITSTATUS(status);
    out[i].output = read_file(logs[i]);
    std::remove(logs[i].c_str());
  }
  return out;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot find a free port");
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace ferry::test

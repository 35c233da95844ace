// A `ferry serve` child process for end-to-end tests (127.0.0.1, port 0, 2 threads, context 1024 unless the
// caller's arguments give --ctx, plus those arguments); killed when the object goes away unless terminate() saw it exit.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace ferry::test {

// A `ferry serve` child process; its stdout is read until "listening on http://HOST:PORT".
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra_args) {
    const std::string bin = std::string(FERRY_BINARY_DIR) + "/ferry";
    std::vector<std::string> args = {bin, "serve", "--host", "127.0.0.1", "--port", "0", "-t", "2"};
    if (std::find(extra_args.begin(), extra_args.end(), "--ctx") == extra_args.end()) {
      args.insert(args.end(), {"--ctx", "1024"});
    }
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    std::array<char, 512> line{};
    while (f != nullptr && std::fgets(line.data(), int(line.size()), f) != nullptr) {
      const std::string s(line.data());
      const size_t at = s.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::stoi(s.substr(at + 30));
        break;
      }
    }
    if (f != nullptr) std::fclose(f);  // the server's later stdout writes are few; it ignores SIGPIPE
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // SIGTERM, then the exit status (-1: killed by a signal or still running after `timeout_s`).
  int terminate(int timeout_s) {
    kill(pid_, SIGTERM);
    for (int i = 0; i < timeout_s * 20; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
};

}  // namespace ferry::test

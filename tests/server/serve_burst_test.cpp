// A burst of connections: many clients connect at the same moment and each streams a few completions over its
// keep-alive connection (what serve_bench --clients 256 does). Every request must succeed. With a listen
// backlog of 5 (cpp-httplib 0.11's), the kernel's accept queue overflowed under such a burst: connects were
// retried a second later or reset ("connection: Read" in serve_bench, 15-108 of 768 requests at 256 clients).
// Uses a tiny random model made by `ferry gen`, so it runs in a few seconds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "fixtures/run_ferry.h"
#include "fixtures/test_paths.h"
#include "serve_process.h"

namespace ferry::test {
namespace {

using nlohmann::json;

constexpr int kClients = 256;
constexpr int kRequestsPerClient = 2;

TEST(ServeBurst, ManySimultaneousConnectionsAllSucceed) {
  if (!std::filesystem::exists(std::string(FERRY_BINARY_DIR) + "/ferry")) GTEST_SKIP() << "the ferry binary is not built";
  const std::string model = temp_path("serve_burst_" + std::to_string(getpid()) + ".gguf");
  const FerryRun g = run_ferry("gen --shape tiny --type f32 -t 1 -o " + model);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  ServeProcess server({"-m", model, "--ctx", "256", "--max-running", "64", "--max-waiting", "2048"});
  ASSERT_GT(server.port(), 0) << "ferry serve did not start";

  std::atomic<int> ready{0}, ok{0};
  std::atomic<bool> go{false};
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", server.port());
      client.set_keep_alive(true);
      client.set_connection_timeout(30, 0);
      client.set_read_timeout(60, 0);
      ++ready;
      while (!go.load()) std::this_thread::yield();  // connect all at once
      for (int r = 0; r < kRequestsPerClient; ++r) {
        const json body = {{"prompt", std::vector<int>{10 + c % 100, 20, 30, 40}}, {"max_tokens", 4},
                           {"ignore_eos", true}, {"stream", true}};
        std::string received;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = body.dump();
        req.headers = {{"Content-Type", "application/json"}};
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
          received.append(data, n);
          return true;
        };
        const httplib::Result res = client.send(req);
        if (!res) {
          errors[size_t(c)] = "connection: " + httplib::to_string(res.error());
          return;
        }
        if (res->status != 200 || received.find("data: [DONE]") == std::string::npos) {
          errors[size_t(c)] = "HTTP " + std::to_string(res->status) + ": " + received.substr(0, 200);
          return;
        }
        ++ok;
      }
    });
  }
  while (ready.load() < kClients) std::this_thread::yield();
  go.store(true);
  for (auto& t : threads) t.join();
  int failed = 0;
  std::string first;
  for (const std::string& e : errors) {
    if (e.empty()) continue;
    if (failed++ == 0) first = e;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << kClients << " clients failed; first: " << first;
  EXPECT_EQ(ok.load(), kClients * kRequestsPerClient);
  EXPECT_EQ(server.terminate(30), 0) << "SIGTERM must exit 0";
  std::filesystem::remove(model);
}

}  // namespace
}  // namespace ferry::test

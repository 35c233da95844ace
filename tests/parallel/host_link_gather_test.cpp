// HostLink::all_gather over the launcher's socketpair star (parallel/host_link.h): every rank gets every rank's
// bytes in rank order, twice in a row (the peer all-reduce's setup does a handle exchange, then a status
// exchange), and step broadcasts that follow still arrive in order.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <future>
#include <latch>
#include <string>
#include <vector>

#include "parallel/host_link.h"

namespace ferry {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(HostLinkGather, EveryRankGetsEveryRanksBytesInOrder) {
  constexpr int kWorld = 3;
  std::vector<int> leader_fds, follower_fds;
  for (int r = 1; r < kWorld; ++r) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    leader_fds.push_back(sv[0]);
    follower_fds.push_back(sv[1]);
  }
  // Different lengths per rank, one of them empty (a rank that could not make its handle sends nothing).
  const auto mine = [](int r, int round) {
    return r == 2 && round == 0 ? std::vector<uint8_t>{} : bytes_of("rank" + std::to_string(r) + std::string(size_t(r * 7 + round), 'x'));
  };
  std::latch done(kWorld);  // links close only when every rank is through (a closed peer is a failure)
  const auto run_rank = [&](int r) {
    auto link = make_socket_link(r, kWorld, r == 0 ? leader_fds : std::vector<int>{follower_fds[size_t(r - 1)]});
    std::vector<std::vector<std::vector<uint8_t>>> got;
    for (int round = 0; round < 2; ++round) got.push_back(link->all_gather(mine(r, round)));
    std::vector<uint8_t> step = r == 0 ? bytes_of("step after gather") : std::vector<uint8_t>{};
    link->broadcast(step);
    EXPECT_EQ(std::string(step.begin(), step.end()), "step after gather") << "rank " << r;
    link->barrier();
    done.arrive_and_wait();
    return got;
  };
  std::vector<std::future<std::vector<std::vector<std::vector<uint8_t>>>>> ranks;
  for (int r = 0; r < kWorld; ++r) ranks.push_back(std::async(std::launch::async, run_rank, r));
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(ranks[size_t(r)].wait_for(std::chrono::seconds(30)), std::future_status::ready) << "rank " << r << " hung";
    const auto got = ranks[size_t(r)].get();
    ASSERT_EQ(got.size(), 2u);
    for (int round = 0; round < 2; ++round) {
      ASSERT_EQ(got[size_t(round)].size(), size_t(kWorld)) << "rank " << r;
      for (int q = 0; q < kWorld; ++q) EXPECT_EQ(got[size_t(round)][size_t(q)], mine(q, round)) << "rank " << r << " from " << q;
    }
  }
}

}  // namespace
}  // namespace ferry

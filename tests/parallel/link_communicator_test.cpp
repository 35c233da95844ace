// LinkCommunicator (parallel/link_communicator.h): the CPU collectives of ranks as processes, over the host link.
// Here the ranks are threads joined by socketpairs (the same SocketLink the TCP rendezvous builds). Sums are
// compared with ThreadCommunicator's (the same rank order: the same bits) and a serial sum; a rank that
// never arrives times out and the group stays failed on every rank.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "fixtures/numeric.h"
#include "parallel/host_link.h"
#include "parallel/link_communicator.h"
#include "parallel/thread_communicator.h"

namespace ferry {
namespace {

// links[r]: rank r's end of a socketpair star of `world` ranks.
std::vector<std::unique_ptr<HostLink>> make_links(int world) {
  std::vector<int> leader, follower;
  for (int r = 1; r < world; ++r) {
    int sv[2];
    FERRY_CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    leader.push_back(sv[0]);
    follower.push_back(sv[1]);
  }
  std::vector<std::unique_ptr<HostLink>> links;
  links.push_back(make_socket_link(0, world, leader));
  for (int r = 1; r < world; ++r) links.push_back(make_socket_link(r, world, {follower[size_t(r - 1)]}));
  return links;
}

TEST(LinkCommunicator, SameBitsAsThreadCommunicator) {
  for (int world : {2, 3}) {
    const size_t n = 1001;      // elements of the all-reduce
    const size_t part = 7;      // floats per rank of the all-gather
    std::vector<std::vector<float>> link_bufs, thread_bufs, gathers;
    std::vector<float> serial(n, 0.0f);
    for (int r = 0; r < world; ++r) {
      link_bufs.push_back(test::random_floats(n, 40 + r));
      for (size_t i = 0; i < n; ++i) serial[i] += link_bufs.back()[i];
      std::vector<float> g(size_t(world) * part, -1.0f);
      for (size_t i = 0; i < part; ++i) g[size_t(r) * part + i] = float(r * 100) + float(i);
      gathers.push_back(g);
    }
    thread_bufs = link_bufs;
    auto links = make_links(world);
    auto thread_comms = make_thread_group(ThreadGroupOptions{world, std::chrono::milliseconds(10'000)});
    std::latch done(world);  // a link must not close while a peer still uses it
    std::vector<std::thread> th;
    for (int r = 0; r < world; ++r) {
      th.emplace_back([&, r] {
        LinkCommunicator comm(LinkCommunicatorOptions{links[size_t(r)].get(), std::chrono::milliseconds(10'000)});
        comm.all_reduce_sum(Tensor::make(DType::F32, {int64_t(n)}, link_bufs[size_t(r)].data()));
        comm.all_gather_inplace(Tensor::make(DType::F32, {int64_t(world * part)}, gathers[size_t(r)].data()));
        comm.barrier();
        std::vector<uint8_t> bytes;
        if (r == 0) bytes = {4, 5, 6};
        comm.broadcast(bytes);
        EXPECT_EQ(bytes, (std::vector<uint8_t>{4, 5, 6})) << "rank " << r;
        thread_comms[size_t(r)]->all_reduce_sum(Tensor::make(DType::F32, {int64_t(n)}, thread_bufs[size_t(r)].data()));
        done.arrive_and_wait();
      });
    }
    for (auto& t : th) t.join();
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(link_bufs[size_t(r)], thread_bufs[0]) << "world " << world << " rank " << r;  // bit for bit
      EXPECT_LE(test::rel_l2(link_bufs[size_t(r)], serial), 1e-6);
      for (int q = 0; q < world; ++q)
        for (size_t i = 0; i < part; ++i)
          EXPECT_EQ(gathers[size_t(r)][size_t(q) * part + i], float(q * 100) + float(i)) << "rank " << r;
    }
  }
}

TEST(LinkCommunicator, RankThatNeverArrivesTimesOutAndFailsTheGroup) {
  auto links = make_links(2);
  LinkCommunicator leader(LinkCommunicatorOptions{links[0].get(), std::chrono::milliseconds(200)});
  LinkCommunicator follower(LinkCommunicatorOptions{links[1].get(), std::chrono::milliseconds(200)});
  std::vector<float> x = test::random_floats(16, 3);
  try {
    leader.all_reduce_sum(Tensor::make(DType::F32, {16}, x.data()));  // rank 1 never joins this one
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_THROW(leader.barrier(), Error);  // stays failed
  try {  // the follower was told
    follower.all_reduce_sum(Tensor::make(DType::F32, {16}, x.data()));
    FAIL() << "the follower did not see the failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel rank 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry

// ServingEngine basics on the tiny fixture model: greedy output equals the synchronous Engine's, alone and
// with other requests in the batch; max_tokens and context limits; bad requests name their field; a full
// queue throws QueueFull; cancellation; shutdown both ways.
#include <gtest/gtest.h>

#include <thread>

#include "core/check.h"
#include "engine/serving_test_util.h"
#include "tokenizer/utf8.h"

namespace ferry {
namespace {

using test::collect;
using test::greedy_request;
using test::tiny_options;

std::vector<int32_t> engine_greedy(const std::vector<int32_t>& prompt, int max_tokens, int context = 128) {
  Engine e(tiny_options(context));
  SamplingParams g;
  g.temperature = 0;
  return e.generate(prompt, g, max_tokens, nullptr, false).tokens;
}

TEST(ServingBasic, GreedyMatchesTheSynchronousEngine) {
  const std::vector<int32_t> prompt = test::random_prompt(1, 11);
  const std::vector<int32_t> want = engine_greedy(prompt, 20);
  ServingEngine s(tiny_options(), {.max_running = 4, .max_step_tokens = 8});
  auto h = s.submit(greedy_request(prompt, 20));
  const test::Collected c = collect(*h);
  EXPECT_EQ(c.finish, FinishReason::Length) << c.error;
  EXPECT_EQ(c.ids(), want);
  EXPECT_EQ(c.usage.prompt_tokens, 11);
  EXPECT_EQ(c.usage.completion_tokens, 20);
  // The streamed text is the tokens' text, each invalid byte replaced (the random tiny model makes some).
  EXPECT_EQ(c.text, utf8_sanitize(s.detokenize(want)));
  EXPECT_TRUE(h->finished());
  RequestUpdate u;
  EXPECT_FALSE(h->wait(u, std::chrono::milliseconds(0)));  // nothing after the final update
}

TEST(ServingBasic, ManyConcurrentRequestsEachMatchAlone) {
  ServingEngine s(tiny_options(), {.max_running = 8, .max_step_tokens = 16});
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(test::random_prompt(100 + i, 5 + 7 * i));
    handles.push_back(s.submit(greedy_request(prompts.back(), 12 + i)));
  }
  for (int i = 0; i < 6; ++i) {
    const test::Collected c = collect(*handles[size_t(i)]);
    EXPECT_EQ(c.finish, FinishReason::Length);
    EXPECT_EQ(c.ids(), engine_greedy(prompts[size_t(i)], 12 + i)) << "request " << i;
  }
  const ServingStats st = s.stats();
  EXPECT_EQ(st.requests_finished, 6);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_GT(st.steps, 0);
}

TEST(ServingBasic, ZeroMaxTokensAndContextFull) {
  ServingEngine s(tiny_options(32), {.max_running = 2, .max_step_tokens = 8});
  const test::Collected zero = collect(*s.submit(greedy_request(test::random_prompt(2, 5), 0)));
  EXPECT_EQ(zero.finish, FinishReason::Length);
  EXPECT_TRUE(zero.tokens.empty());
  EXPECT_EQ(zero.usage.prompt_tokens, 5);
  // 30 prompt tokens in a context of 32: the tokens at positions 30 and 31 are computed, a third is sampled
  // from position 31's logits and the context is full.
  const std::vector<int32_t> prompt = test::random_prompt(3, 30);
  const test::Collected full = collect(*s.submit(greedy_request(prompt, 100)));
  EXPECT_EQ(full.finish, FinishReason::Length);
  EXPECT_EQ(full.ids(), engine_greedy(prompt, 100, 32));
  EXPECT_EQ(full.tokens.size(), 3u);
}

TEST(ServingBasic, BadRequestsNameTheirField) {
  ServingEngine s(tiny_options(32), {.max_running = 2, .max_step_tokens = 8});
  const auto expect_error = [&](GenerationRequest r, const std::string& field) {
    try {
      s.submit(std::move(r));
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const QueueFull&) {
      ADD_FAILURE() << "QueueFull for a bad " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error(greedy_request({}, 4), "prompt");
  expect_error(greedy_request(test::random_prompt(4, 32), 4), "prompt");
  expect_error(greedy_request({1, 2, 512}, 4), "prompt");
  expect_error(greedy_request({1, 2, -1}, 4), "prompt");
  expect_error(greedy_request({5}, -1), "max_tokens");
  GenerationRequest r = greedy_request({5}, 4);
  r.sampling.temperature = -1;
  expect_error(r, "temperature");
  r = greedy_request({5}, 4);
  r.sampling.top_p = 1.5f;
  expect_error(r, "top_p");
  r = greedy_request({5}, 4);
  r.logprobs = 21;
  expect_error(r, "logprobs");
  r = greedy_request({5}, 4);
  r.stop = {""};
  expect_error(r, "stop");
  r = greedy_request({5}, 4);
  r.stop.assign(17, "x");
  expect_error(r, "stop");
  // The engine still serves good requests.
  EXPECT_EQ(collect(*s.submit(greedy_request({5, 6}, 3))).tokens.size(), 3u);
}

TEST(ServingBasic, BadOptionsAreRefused) {
  EXPECT_THROW(ServingEngine(tiny_options(), {.max_running = 0}), Error);
  EXPECT_THROW(ServingEngine(tiny_options(), {.max_running = 8, .max_step_tokens = 4}), Error);
  EXPECT_THROW(ServingEngine(tiny_options(128), {.max_running = 2, .max_step_tokens = 8, .kv_tokens = 64}), Error);
  EXPECT_THROW(ServingEngine(tiny_options(), {.max_running = 2, .max_step_tokens = 8, .max_waiting = -1}), Error);
}

TEST(ServingBasic, QueueFullThrowsAndCounts) {
  // One running sequence at a time, two may wait: long requests keep the queue full.
  ServingEngine s(tiny_options(512), {.max_running = 1, .max_step_tokens = 4, .max_waiting = 2});
  std::vector<std::shared_ptr<RequestHandle>> hs;
  int rejected = 0;
  for (int i = 0; i < 8; ++i) {
    try {
      hs.push_back(s.submit(greedy_request(test::random_prompt(10 + i, 8), 500)));
    } catch (const QueueFull&) {
      ++rejected;
    }
  }
  EXPECT_GE(rejected, 1);
  EXPECT_EQ(s.stats().requests_rejected, rejected);
  for (auto& h : hs) h->cancel();
  for (auto& h : hs) EXPECT_EQ(collect(*h).finish, FinishReason::Cancelled);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

TEST(ServingBasic, CancelStopsARequestAndFreesItsBlocks) {
  ServingEngine s(tiny_options(256), {.max_running = 2, .max_step_tokens = 8});
  auto h = s.submit(greedy_request(test::random_prompt(5, 20), 200));
  RequestUpdate u;
  ASSERT_TRUE(h->wait(u, std::chrono::seconds(30)));  // it is running
  h->cancel();
  h->cancel();  // idempotent
  const test::Collected c = collect(*h);
  EXPECT_EQ(c.finish, FinishReason::Cancelled);
  EXPECT_LT(c.tokens.size() + u.tokens.size(), 200u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.stats().kv_blocks_used != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_EQ(s.stats().requests_cancelled, 1);
  h->cancel();  // after the end: nothing happens
}

TEST(ServingBasic, ShutdownFinishingInFlight) {
  auto s = std::make_unique<ServingEngine>(tiny_options(), ServingOptions{.max_running = 2, .max_step_tokens = 8});
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(s->submit(greedy_request(test::random_prompt(20 + i, 6), 10)));
  s->shutdown(true);
  EXPECT_THROW(s->submit(greedy_request({5}, 1)), Error);
  for (auto& h : hs) {
    const test::Collected c = collect(*h, std::chrono::seconds(1));
    EXPECT_EQ(c.finish, FinishReason::Length);
    EXPECT_EQ(c.tokens.size(), 10u);
  }
  s->shutdown(false);  // idempotent
  s.reset();
  for (auto& h : hs) h->cancel();  // handles outlive the engine
}

TEST(ServingBasic, ShutdownCancellingInFlight) {
  auto s = std::make_unique<ServingEngine>(tiny_options(256), ServingOptions{.max_running = 2, .max_step_tokens = 8});
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(s->submit(greedy_request(test::random_prompt(30 + i, 6), 200)));
  s.reset();  // the destructor cancels and joins
  for (auto& h : hs) {
    const test::Collected c = collect(*h, std::chrono::seconds(1));
    EXPECT_EQ(c.finish, FinishReason::Cancelled);
    EXPECT_LT(c.tokens.size(), 200u);
  }
}

}  // namespace
}  // namespace ferry

// One usage for n choices: the prompt and its cached tokens once (choice 0's: the later choices' hits on
// the K/V choice 0 wrote are the request's own reuse, not cached prompt tokens), completions summed.
#include <gtest/gtest.h>

#include <vector>

#include "core/check.h"
#include "server/request_usage.h"

namespace ferry::server {
namespace {

TEST(RequestUsage, PromptOnceCachedAsTheRequestFoundItCompletionsSummed) {
  RequestUsage first, later;
  first.prompt_tokens = later.prompt_tokens = 40;
  first.cached_prompt_tokens = 8;   // what the cache held before the request
  later.cached_prompt_tokens = 36;  // the full blocks choice 0 had just written
  first.completion_tokens = 5;
  later.completion_tokens = 7;
  const std::vector<RequestUsage> choices = {first, later, later};
  const RequestUsage u = request_usage(choices);
  EXPECT_EQ(u.prompt_tokens, 40);
  EXPECT_EQ(u.cached_prompt_tokens, 8);
  EXPECT_EQ(u.completion_tokens, 19);
  EXPECT_EQ(request_usage(std::vector<RequestUsage>{later}).cached_prompt_tokens, 36);
  EXPECT_THROW(request_usage({}), Error);
}

}  // namespace
}  // namespace ferry::server

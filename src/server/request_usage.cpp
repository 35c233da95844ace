#include "server/request_usage.h"

#include "core/check.h"

namespace ferry::server {

RequestUsage request_usage(std::span<const RequestUsage> choices) {
  FERRY_CHECK(!choices.empty(), "request usage: no choice");
  RequestUsage u = choices[0];  // the prompt and its cached tokens, once
  u.completion_tokens = 0;
  for (const RequestUsage& c : choices) u.completion_tokens += c.completion_tokens;
  return u;
}

}  // namespace ferry::server

// One usage for a request of n choices, as OpenAI reports it: the prompt counted once, the completion tokens
// of every choice, and the prompt's cached tokens as the request found them. Choices 1..n-1 are submitted
// after choice 0 has written the prompt's K/V (routes.cpp), so they find it in the prefix cache; that reuse
// inside the request is not a cache hit of the request's prompt (the prompt was computed once, by choice 0),
// so their figures are not reported: cached_tokens is choice 0's.
#pragma once

#include <span>

#include "ferry/serving.h"

namespace ferry::server {

// choices: each choice's last usage, choice 0 first (at least one).
RequestUsage request_usage(std::span<const RequestUsage> choices);

}  // namespace ferry::server

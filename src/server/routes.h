// The HTTP routes of `ferry serve` on a cpp-httplib server: the OpenAI endpoints, /v1/models, /health,
// /metrics, and OpenAI-shaped errors for everything else (404 unknown route, 413 body too large, 500).
#pragma once

#include <atomic>
#include <cstdint>

#include <httplib.h>

#include "server/generation.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace ferry::server {

struct RouteContext {
  ServingEngine& engine;
  ServerMetrics& metrics;
  ModelFacts facts;
  RequestLimits limits;
  const std::atomic<bool>& draining;  // set on shutdown: generation requests get 503 + Retry-After
  uint64_t id_salt = 0;               // makes response ids differ between server runs
};

// Installs every handler (and the error, exception and logging hooks) on `http`. `ctx` must outlive it.
void install_routes(httplib::Server& http, RouteContext& ctx);

}  // namespace ferry::server

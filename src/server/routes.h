// The HTTP routes of `ferry serve` on a cpp-httplib server: the OpenAI endpoints, /v1/models, /health,
// /metrics, and OpenAI-shaped errors for everything else (404 unknown route, 413 body too large, 500).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include <httplib.h>

#include "server/access.h"
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
  size_t max_prompt_bytes = 0;        // longer prompt texts cannot fit the context: 400 before tokenizing (0: no check)
  size_t max_body_bytes = 32u << 20;  // POST bodies, whatever their transfer encoding: 413 past this
  AccessPolicy access;
  bool stream_error_on_cancel = true;  // a cancelled stream ends with an error event (else finish_reason "abort")
  std::function<bool(const httplib::Request&)> client_gone;  // the client closed its connection (null: never)
  std::function<void(const httplib::Request&)> close_connection;  // after this response (null: no-op)
  std::function<bool(const httplib::Request&)> closing;  // close_connection was called for this response's socket
};

// Installs every handler (and the error, exception and logging hooks) on `http`. `ctx` must outlive it.
void install_routes(httplib::Server& http, RouteContext& ctx);

}  // namespace ferry::server

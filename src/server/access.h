// Who may use the server: API keys (Authorization: Bearer KEY, compared in constant time on every route,
// /health optionally open), the Host header (DNS rebinding), the Origin header (CORS: off unless origins are
// listed), and the body's Content-Type on JSON routes (a web page's "simple" text/plain POST needs no
// preflight). check_access runs before routing; it answers preflights itself.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/api_error.h"

namespace ferry::server {

struct AccessPolicy {
  std::vector<std::string> api_keys;      // empty: no key needed
  bool open_health = false;               // GET /health without a key
  std::vector<std::string> cors_origins;  // origins whose pages may call the API ("*": any); empty: none
  std::string listen_host;                // --host
  std::vector<std::string> allowed_hosts; // Host names accepted besides IP literals and localhost (wildcard --host only)
};

// Whether a and b are equal, in time that depends only on b's length (b: the secret).
bool constant_time_equal(const std::string& a, const std::string& b);
bool is_wildcard_host(const std::string& host);

// The error `req` gets before routing, or nullopt when it may proceed. Sets CORS headers on `res` for
// allowed origins; a preflight (OPTIONS) from an allowed origin is answered 204 and reported as handled.
struct AccessDecision {
  std::optional<ApiError> error;
  bool preflight_answered = false;
};
AccessDecision check_access(const AccessPolicy& policy, const httplib::Request& req, httplib::Response& res);

}  // namespace ferry::server

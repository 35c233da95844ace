#include "server/access.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace ferry::server {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The name part of a Host header: "[::1]:8080" -> "::1", "example.com:80" -> "example.com".
std::string host_name(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    return close == std::string::npos ? host : host.substr(1, close - 1);
  }
  const size_t colon = host.find(':');
  return lower(colon == std::string::npos ? host : host.substr(0, colon));
}

bool is_ip_literal(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool host_allowed(const AccessPolicy& p, const std::string& header) {
  const std::string name = host_name(header);
  // DNS rebinding needs a name that resolves to this machine; an IP literal is not one.
  if (is_ip_literal(name) || name == "localhost" || name == lower(p.listen_host)) return true;
  if (!is_wildcard_host(p.listen_host)) return false;
  return std::any_of(p.allowed_hosts.begin(), p.allowed_hosts.end(), [&](const std::string& h) { return lower(h) == name; });
}

bool origin_allowed(const AccessPolicy& p, const std::string& origin) {
  return std::any_of(p.cors_origins.begin(), p.cors_origins.end(),
                     [&](const std::string& o) { return o == "*" || o == origin; });
}

bool key_valid(const AccessPolicy& p, const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
  bool ok = false;
  for (const std::string& key : p.api_keys) ok |= constant_time_equal(given, key);  // no early exit
  return ok;
}

bool is_json_content_type(const std::string& type) {
  const std::string t = lower(type.substr(0, type.find(';')));
  const size_t b = t.find_first_not_of(" \t"), e = t.find_last_not_of(" \t");
  return b != std::string::npos && t.substr(b, e - b + 1) == "application/json";
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = a.empty() ? 1 : a.size();
  for (size_t i = 0; i < b.size(); ++i) diff |= unsigned(uint8_t(b[i]) ^ uint8_t(a.empty() ? 0 : a[i % n]));
  return diff == 0 && !b.empty();
}

bool is_wildcard_host(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]"; }

AccessDecision check_access(const AccessPolicy& p, const httplib::Request& req, httplib::Response& res) {
  AccessDecision d;
  if (req.has_header("Host") && !host_allowed(p, req.get_header_value("Host"))) {
    d.error = ApiError(403, "the Host header names a host this server does not serve (see --allow-host)", "", "host_not_allowed");
    return d;
  }
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    if (!origin_allowed(p, origin)) {
      d.error = ApiError(403, "cross-origin requests from " + origin + " are not allowed (see --cors-origin)", "", "origin_not_allowed");
      return d;
    }
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    if (req.method == "OPTIONS") {  // a preflight carries no credentials
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      d.preflight_answered = true;
      return d;
    }
  }
  const bool needs_key = !p.api_keys.empty() && !(p.open_health && req.path == "/health");
  if (needs_key && !key_valid(p, req)) {
    res.set_header("WWW-Authenticate", "Bearer");
    d.error = ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", "", "invalid_api_key");
    return d;
  }
  if (req.method == "POST" && !is_json_content_type(req.get_header_value("Content-Type"))) {
    d.error = ApiError(415, "the request body must be application/json", "", "unsupported_media_type");
    return d;
  }
  return d;
}

}  // namespace ferry::server

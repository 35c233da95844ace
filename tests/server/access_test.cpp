// check_access (server/access.h) on synthetic requests: API keys, Host, Origin / CORS preflight, Content-Type.
#include <gtest/gtest.h>

#include "server/access.h"

namespace ferry::server {
namespace {

httplib::Request make(const std::string& method, const std::string& path, httplib::Headers headers) {
  httplib::Request r;
  r.method = method;
  r.path = path;
  r.headers = std::move(headers);
  return r;
}

int status(const AccessPolicy& p, const httplib::Request& req) {
  httplib::Response res;
  const AccessDecision d = check_access(p, req, res);
  return d.error ? d.error->status() : d.preflight_answered ? 204 : 0;
}

TEST(Access, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secre", "secret"));
  EXPECT_FALSE(constant_time_equal("secrets", "secret"));
  EXPECT_FALSE(constant_time_equal("", "secret"));
  EXPECT_FALSE(constant_time_equal("", ""));  // an empty key never matches
  EXPECT_FALSE(constant_time_equal("Secret", "secret"));
}

TEST(Access, KeysAreRequiredOnEveryRouteButAnOpenHealth) {
  AccessPolicy p;
  p.api_keys = {"k1", "k2"};
  p.listen_host = "127.0.0.1";
  EXPECT_EQ(status(p, make("GET", "/health", {})), 401);
  EXPECT_EQ(status(p, make("GET", "/metrics", {{"Authorization", "Bearer k3"}})), 401);
  EXPECT_EQ(status(p, make("GET", "/metrics", {{"Authorization", "k1"}})), 401);
  EXPECT_EQ(status(p, make("GET", "/metrics", {{"Authorization", "Bearer k2"}})), 0);
  EXPECT_EQ(status(p, make("GET", "/nope", {})), 401);  // unknown routes too: nothing is learned without a key
  p.open_health = true;
  EXPECT_EQ(status(p, make("GET", "/health", {})), 0);
  EXPECT_EQ(status(p, make("GET", "/v1/models", {})), 401);
}

TEST(Access, ForeignHostNamesAreRefused) {
  AccessPolicy p;
  p.listen_host = "127.0.0.1";
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "attacker.example"}})), 403);
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "127.0.0.1:8080"}})), 0);
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "LOCALHOST:8080"}})), 0);
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "[::1]:8080"}})), 0);
  p.allowed_hosts = {"api.example"};  // honoured with a wildcard --host only
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "api.example"}})), 403);
  p.listen_host = "0.0.0.0";
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "api.example:80"}})), 0);
  EXPECT_EQ(status(p, make("GET", "/health", {{"Host", "other.example"}})), 403);
  EXPECT_TRUE(is_wildcard_host("::"));
  EXPECT_FALSE(is_wildcard_host("127.0.0.1"));
}

TEST(Access, CorsIsOffUnlessOriginsAreListed) {
  AccessPolicy p;
  p.listen_host = "127.0.0.1";
  p.api_keys = {"k"};
  EXPECT_EQ(status(p, make("POST", "/v1/completions", {{"Origin", "http://a.example"}})), 403);
  p.cors_origins = {"http://a.example"};
  httplib::Response res;
  const AccessDecision pre = check_access(p, make("OPTIONS", "/v1/completions", {{"Origin", "http://a.example"}}), res);
  EXPECT_TRUE(pre.preflight_answered);  // a preflight carries no key
  EXPECT_EQ(res.get_header_value("Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(status(p, make("POST", "/v1/completions", {{"Origin", "http://b.example"}})), 403);
}

TEST(Access, JsonRoutesTakeOnlyJson) {
  AccessPolicy p;
  p.listen_host = "127.0.0.1";
  EXPECT_EQ(status(p, make("POST", "/v1/completions", {{"Content-Type", "text/plain"}})), 415);
  EXPECT_EQ(status(p, make("POST", "/v1/completions", {})), 415);
  EXPECT_EQ(status(p, make("POST", "/v1/completions", {{"Content-Type", "application/x-www-form-urlencoded"}})), 415);
  EXPECT_EQ(status(p, make("POST", "/v1/completions", {{"Content-Type", "Application/JSON; charset=utf-8"}})), 0);
}

}  // namespace
}  // namespace ferry::server

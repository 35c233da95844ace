#include "hub/hub_http.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/check.h"

namespace ferry::hub {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::string Url::origin() const { return scheme + "://" + host + ":" + std::to_string(port); }

Url parse_url(std::string_view url) {
  Url u;
  const size_t sep = url.find("://");
  FERRY_CHECK(sep != std::string_view::npos, "'{}' is not an http(s) URL", url);
  u.scheme = lower(std::string(url.substr(0, sep)));
  FERRY_CHECK(u.scheme == "http" || u.scheme == "https", "'{}': only http and https URLs", url);
  std::string_view rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  FERRY_CHECK(authority.find('@') == std::string_view::npos, "'{}': credentials in URLs are not accepted", url);
  u.port = u.scheme == "https" ? 443 : 80;
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    FERRY_CHECK(close != std::string_view::npos, "'{}': malformed host", url);
    u.host = std::string(authority.substr(1, close - 1));
    authority = authority.substr(close + 1);
    if (!authority.empty()) {
      FERRY_CHECK(authority.front() == ':', "'{}': malformed host", url);
      authority = authority.substr(1);
    } else {
      authority = {};
    }
    if (!authority.empty()) {
      const auto [p, ec] = std::from_chars(authority.data(), authority.data() + authority.size(), u.port);
      FERRY_CHECK(ec == std::errc() && p == authority.data() + authority.size() && u.port > 0 && u.port < 65536,
                  "'{}': bad port", url);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      const std::string_view port = authority.substr(colon + 1);
      const auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), u.port);
      FERRY_CHECK(ec == std::errc() && p == port.data() + port.size() && u.port > 0 && u.port < 65536, "'{}': bad port", url);
    }
  }
  FERRY_CHECK(!u.host.empty(), "'{}' has no host", url);
  for (char c : u.host)
    FERRY_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_',
                "'{}': malformed host", url);
  for (char c : u.target)
    FERRY_CHECK(static_cast<unsigned char>(c) > 0x20 && c != 0x7f, "'{}': control characters or spaces in the URL", url);
  return u;
}

Url resolve_location(const Url& base, std::string_view location) {
  if (location.find("://") != std::string_view::npos) return parse_url(location);
  FERRY_CHECK(!location.empty() && location.front() == '/', "unsupported redirect target '{}'", location.substr(0, 200));
  FERRY_CHECK(location.size() < 2 || location[1] != '/', "unsupported redirect target '{}'", location.substr(0, 200));
  Url u = base;
  u.target = std::string(location);
  for (char c : u.target)
    FERRY_CHECK(static_cast<unsigned char>(c) > 0x20 && c != 0x7f, "a redirect to a malformed URL");
  return u;
}

std::string url_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += char(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

HttpResponse http_get(const std::string& url, const std::map<std::string, std::string>& headers, const HttpOptions& o,
                      const std::function<bool(int, const std::map<std::string, std::string>&)>& on_head,
                      const std::function<bool(const char*, size_t)>& on_body) {
  Url u = parse_url(url);
  HttpResponse out;
  for (int hop = 0;; ++hop) {
    FERRY_CHECK(hop <= kMaxRedirects, "{}: more than {} redirects", url, kMaxRedirects);
    httplib::Client client(u.scheme + "://" + (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" +
                           std::to_string(u.port));
    const auto secs = [](double s, time_t& whole, time_t& usec) {
      whole = time_t(s);
      usec = time_t((s - double(whole)) * 1e6);
    };
    time_t cs, cu, rs, ru;
    secs(o.connect_timeout_s, cs, cu);
    secs(o.read_timeout_s, rs, ru);
    client.set_connection_timeout(cs, cu);
    client.set_read_timeout(rs, ru);
    client.set_follow_location(false);
    httplib::Headers h;
    for (const auto& [k, v] : headers) h.emplace(k, v);
    if (!o.token.empty() && u.origin() == o.token_origin) h.emplace("Authorization", "Bearer " + o.token);
    h.emplace("User-Agent", "ferry/0.1");
    out = HttpResponse{};
    out.final_url = u.scheme + "://" + u.host + ":" + std::to_string(u.port) + u.target;
    bool stopped = false, redirect = false;
    httplib::Result r = client.Get(
        u.target, h,
        [&](const httplib::Response& res) {
          out.status = res.status;
          for (const auto& [k, v] : res.headers) out.headers[lower(k)] = v;
          redirect = res.status >= 300 && res.status < 400 && out.headers.count("location");
          if (redirect || !(res.status == 200 || res.status == 206)) return true;  // small body kept below
          if (on_head && !on_head(res.status, out.headers)) {
            stopped = true;
            return false;
          }
          return true;
        },
        [&](const char* data, size_t n) {
          if (redirect || !(out.status == 200 || out.status == 206)) {
            if (out.body.size() < kMaxErrorBody) out.body.append(data, std::min(n, kMaxErrorBody - out.body.size()));
            return true;
          }
          if (on_body && !on_body(data, n)) {
            stopped = true;
            return false;
          }
          return true;
        });
    if (!r) {  // no response, or its body broke off (status says which)
      out.transport_error = stopped ? "stopped" : httplib::to_string(r.error());
      return out;
    }
    if (!redirect) return out;
    u = resolve_location(u, out.headers["location"]);
  }
}

HttpResponse http_get_text(const std::string& url, const HttpOptions& o, size_t max_bytes) {
  std::string body;
  bool too_big = false;
  HttpResponse r = http_get(url, {}, o, nullptr, [&](const char* p, size_t n) {
    if (body.size() + n > max_bytes) {
      too_big = true;
      return false;
    }
    body.append(p, n);
    return true;
  });
  FERRY_CHECK(!too_big, "{}: the response is larger than {} bytes", url, max_bytes);
  if (r.status == 200) r.body = std::move(body);
  return r;
}

}  // namespace ferry::hub

// HTTP(S) GETs against the Hub (cpp-httplib's client; https through its OpenSSL build): redirects followed by
// hand (at most kMaxRedirects, the token sent only to the endpoint's own origin, never to the CDN a resolve route
// redirects to), timeouts on connect and on every read so a silent server cannot hang a pull, and bodies
// streamed to a receiver that may refuse more bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace ferry::hub {

inline constexpr int kMaxRedirects = 10;

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;
  std::string target;  // path and query, starting with '/'
  std::string origin() const;  // "scheme://host:port"
};
// Throws ferry::Error for anything but http(s)://host[:port][/path].
Url parse_url(std::string_view url);
// `location` (absolute or origin-relative) against the URL it came from.
Url resolve_location(const Url& base, std::string_view location);
// Percent-encodes a path segment (RFC 3986 unreserved kept), '/' too when `keep_slash` is false.
std::string url_encode(std::string_view s, bool keep_slash);

struct HttpOptions {
  std::string token;              // "Bearer <token>" to the endpoint's origin ("" : none)
  std::string token_origin;       // the origin the token may go to
  double connect_timeout_s = 15;
  double read_timeout_s = 60;     // per read: a server that stops sending fails the request after this
};

struct HttpResponse {
  int status = 0;                  // the last response's (after redirects); 0: the transfer failed
  std::string transport_error;     // set when status is 0 or the body broke off
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                // non-2xx bodies (at most 64 KiB), or the whole body for get_text
  std::string final_url;
};

// `on_head(status, headers)` is called for the final response before its body (return false to stop);
// `on_body(data, n)` for each chunk of a 200/206 body (return false to stop: transport_error says "stopped").
// Other statuses' bodies go to HttpResponse::body.
HttpResponse http_get(const std::string& url, const std::map<std::string, std::string>& headers, const HttpOptions& o,
                      const std::function<bool(int, const std::map<std::string, std::string>&)>& on_head,
                      const std::function<bool(const char*, size_t)>& on_body);

// A whole body of at most `max_bytes` (more: a ferry::Error).
HttpResponse http_get_text(const std::string& url, const HttpOptions& o, size_t max_bytes);

}  // namespace ferry::hub

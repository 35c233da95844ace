// HTTP errors in OpenAI's JSON shape: {"error": {"message", "type", "param", "code"}}. Request parsing and the
// routes throw ApiError; the route wrapper turns it into the response.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace ferry::server {

class ApiError : public std::runtime_error {
 public:
  // status: the HTTP status (400, 404, 429, ...); param: the request field at fault ("" : none);
  // code: OpenAI's machine-readable code ("" : null), e.g. "context_length_exceeded".
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, code_;
};

// OpenAI's error type for an HTTP status: "invalid_request_error" (4xx), "rate_limit_error" (429),
// "server_error" (5xx).
std::string error_type_for_status(int status);

// {"error": {"message": ..., "type": ..., "param": null|"...", "code": null|"..."}}
nlohmann::json error_json(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
inline nlohmann::json error_json(const ApiError& e) { return error_json(e.status(), e.what(), e.param(), e.code()); }

}  // namespace ferry::server

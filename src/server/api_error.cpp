#include "server/api_error.h"

namespace ferry::server {

std::string error_type_for_status(int status) {
  if (status == 429) return "rate_limit_error";
  if (status == 404) return "not_found_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  nlohmann::json e = {{"message", message}, {"type", error_type_for_status(status)}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", std::move(e)}};
}

}  // namespace ferry::server

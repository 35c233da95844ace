#include "server/tokenize.h"

#include "server/api_error.h"

namespace ferry::server {

namespace {

using nlohmann::json;

json parse_object(std::string_view body) {
  if (body.size() > (8u << 20)) throw ApiError(400, "the request body is larger than 8 MiB");
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

}  // namespace

json tokenize_response(std::string_view body, const ServingEngine& engine, const ModelFacts& facts) {
  const json j = parse_object(body);
  const char* name = j.contains("content") ? "content" : "prompt";
  if (!j.contains(name) || !j[name].is_string()) throw ApiError(400, "'content': is required and must be a string", "content");
  bool add_special = true;
  if (j.contains("add_special") && !j["add_special"].is_null()) {
    if (!j["add_special"].is_boolean()) throw ApiError(400, "'add_special': must be a boolean", "add_special");
    add_special = j["add_special"].get<bool>();
  }
  std::vector<int32_t> tokens;
  try {
    tokens = engine.tokenize(j[name].get<std::string>(), add_special, true);
  } catch (const Error& e) {
    throw ApiError(400, std::string("'") + name + "': " + e.what(), name);
  }
  return {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", facts.context}};
}

json detokenize_response(std::string_view body, const ServingEngine& engine, const ModelFacts& facts) {
  const json j = parse_object(body);
  if (!j.contains("tokens") || !j["tokens"].is_array()) throw ApiError(400, "'tokens': is required and must be a list", "tokens");
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= facts.vocab_size)
      throw ApiError(400, "'tokens': every entry must be a token id in 0.." + std::to_string(facts.vocab_size - 1), "tokens");
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  const std::string text = engine.detokenize(ids);
  return {{"content", text}, {"prompt", text}};
}

}  // namespace ferry::server

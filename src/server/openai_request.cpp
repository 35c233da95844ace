#include "server/openai_request.h"

#include <cmath>
#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace ferry::server {
namespace {

using json = nlohmann::ordered_json;  // key order kept: schemas and tool arguments are rendered as sent

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "': " + message, param);
}

// The deepest nesting of [ and { outside strings; stops counting past `limit`. Bounded work, no recursion:
// nlohmann's DOM would otherwise take any depth (and its destructor recurses).
size_t json_depth(std::string_view s, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return deepest;
}

// A field that is absent or null reads as absent.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad(name, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(name, "must be between " + json(lo).dump() + " and " + json(hi).dump() + ", got " + v.dump());
  return x;
}

int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) bad(name, "is out of range");
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>())) {
    // 16.0 is an integer too; one past int64's range counts as its nearest end (then the range check applies).
    const double d = v.get<double>();
    x = d >= 9.2e18 ? std::numeric_limits<int64_t>::max() : d <= -9.2e18 ? std::numeric_limits<int64_t>::min() : int64_t(d);
  } else {
    bad(name, "must be an integer");
  }
  if (x < lo || x > hi) bad(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + std::to_string(x));
  return x;
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, "must be a boolean");
  return v.get<bool>();
}

// A message's content: a string, or a list of {"type": "text", "text": "..."} parts (joined).
std::string message_content(const json& v, const std::string& name) {
  if (v.is_null()) return {};
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(name, "must be a string or a list of text parts");
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad(pname, "must be an object");
    const json* type = field(part, "type");
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") bad(pname + ".type", "only \"text\" parts are supported");
    const json* text = field(part, "text");
    if (text == nullptr || !text->is_string()) bad(pname + ".text", "must be a string");
    out += text->get<std::string>();
  }
  return out;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}].
// For the chat template the arguments become the object they encode (templates apply tojson to them), as
// vLLM and transformers do; text that is not a JSON object stays a string.
json parse_tool_calls(const json& v, const std::string& name) {
  if (!v.is_array()) bad(name, "must be a list");
  json out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const json& c = v[i];
    const std::string cname = name + "[" + std::to_string(i) + "]";
    if (!c.is_object()) bad(cname, "must be an object");
    const json* fn = field(c, "function");
    if (fn == nullptr || !fn->is_object()) bad(cname + ".function", "is required and must be an object");
    const json* fname = field(*fn, "name");
    if (fname == nullptr || !fname->is_string()) bad(cname + ".function.name", "is required and must be a string");
    json call = json::object();
    if (const json* id = field(c, "id")) {
      if (!id->is_string()) bad(cname + ".id", "must be a string");
      call["id"] = *id;
    }
    call["type"] = "function";
    json args = json::object();
    if (const json* a = field(*fn, "arguments")) {
      if (a->is_string()) {
        json parsed = json::parse(a->get<std::string>(), nullptr, false);
        args = parsed.is_object() ? std::move(parsed) : *a;
      } else if (a->is_object()) {
        args = *a;
      } else {
        bad(cname + ".function.arguments", "must be a string of JSON");
      }
    }
    call["function"] = {{"name", *fname}, {"arguments", std::move(args)}};
    out.push_back(std::move(call));
  }
  return out;
}

void parse_messages(const json& body, ParsedRequest& r) {
  const json* msgs = field(body, "messages");
  if (msgs == nullptr) bad("messages", "is required");
  if (!msgs->is_array() || msgs->empty()) bad("messages", "must be a non-empty list");
  r.template_messages = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(name, "must be an object");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) bad(name + ".role", "is required and must be a string");
    std::string r_name = role->get<std::string>();
    if (r_name == "developer") r_name = "system";
    if (r_name != "system" && r_name != "user" && r_name != "assistant" && r_name != "tool")
      bad(name + ".role", "must be one of system, developer, user, assistant, tool, got " + role->dump());
    json tm = {{"role", r_name}};
    const json* calls = r_name == "assistant" ? field(m, "tool_calls") : nullptr;
    const auto content = m.find("content");
    // OpenAI: an assistant turn's content is optional (a turn with neither content nor calls is empty text).
    const bool empty_turn = r_name == "assistant" && calls == nullptr && (content == m.end() || content->is_null());
    if (content == m.end() && calls == nullptr && !empty_turn) bad(name + ".content", "is required");
    const std::string text = content == m.end() ? std::string() : message_content(*content, name + ".content");
    tm["content"] = empty_turn ? json("") : content == m.end() || content->is_null() ? json(nullptr) : json(text);
    if (calls != nullptr) tm["tool_calls"] = parse_tool_calls(*calls, name + ".tool_calls");
    if (const json* rc = r_name == "assistant" ? field(m, "reasoning_content") : nullptr) {  // Qwen3's template reads it
      if (!rc->is_string()) bad(name + ".reasoning_content", "must be a string");
      tm["reasoning_content"] = *rc;
    }
    if (r_name == "tool") {
      if (const json* id = field(m, "tool_call_id")) {
        if (!id->is_string()) bad(name + ".tool_call_id", "must be a string");
        tm["tool_call_id"] = *id;
      }
    }
    if (const json* n = field(m, "name")) {
      if (!n->is_string()) bad(name + ".name", "must be a string");
      tm["name"] = *n;
    }
    r.messages.push_back({r_name, text});
    r.template_messages.push_back(std::move(tm));
  }
}

// chat_template_kwargs (vLLM, llama-server): variables for the chat template, e.g. {"enable_thinking": false};
// reasoning_format (llama-server): "none" leaves <think> blocks in the content; include_reasoning (vLLM).
void parse_chat_options(const json& body, ParsedRequest& r) {
  if (const json* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", "must be an object");
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      if (k->contains(reserved)) bad("chat_template_kwargs", std::string("may not set \"") + reserved + "\"");
    r.template_kwargs = *k;
  }
  if (const json* f = field(body, "reasoning_format")) {
    if (!f->is_string()) bad("reasoning_format", "must be a string");
    const std::string v = f->get<std::string>();
    if (v == "none") r.split_reasoning = false;
    else if (v == "auto" || v == "deepseek" || v == "parsed") r.split_reasoning = true;
    else bad("reasoning_format", "must be one of none, auto, deepseek, parsed, got " + f->dump());
  }
  if (const json* v = field(body, "include_reasoning")) r.include_reasoning = boolean(*v, "include_reasoning");
  r.tools = parse_tool_request(body);
}

void parse_prompt(const json& body, ParsedRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr) {  // OpenAI's default, "<|endoftext|>": the start of a new document (build_generation_request)
    r.prompt_absent = true;
    return;
  }
  const json* v = p;
  // A list of one prompt (OpenAI's batch form) is accepted; more than one is not.
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) v = &(*v)[0];
  if (v->is_string()) {
    r.prompt_text = v->get<std::string>();
    return;
  }
  if (!v->is_array() || v->empty()) bad("prompt", "must be a string, a non-empty list of token ids, or a list of one of these");
  r.prompt_tokens.reserve(v->size());
  for (const json& t : *v) {
    if (!t.is_number()) bad("prompt", "must be a string, a non-empty list of token ids, or a list of one of these");
    const int64_t id = integer(t, "prompt", 0, std::numeric_limits<int32_t>::max());  // 313.0 is a token id too
    r.prompt_tokens.push_back(int32_t(id));
  }
}

void parse_stop(const json& body, ParsedRequest& r, const RequestLimits& limits) {
  const json* s = field(body, "stop");
  if (s == nullptr) return;
  const auto add = [&](const json& v) {
    if (!v.is_string()) bad("stop", "must be a string or a list of strings");
    std::string str = v.get<std::string>();
    if (str.size() > limits.max_stop_bytes) bad("stop", "strings must be at most " + std::to_string(limits.max_stop_bytes) + " bytes");
    if (!str.empty()) r.stop.push_back(std::move(str));
  };
  if (s->is_array()) {
    if (s->size() > limits.max_stop_strings) bad("stop", "at most " + std::to_string(limits.max_stop_strings) + " stop strings");
    for (const json& v : *s) add(v);
  } else {
    add(*s);
  }
}

void parse_logprobs(const json& body, ParsedRequest& r, const RequestLimits& limits) {
  const json* lp = field(body, "logprobs");
  const json* top = field(body, "top_logprobs");
  if (r.endpoint == Endpoint::Chat) {
    // chat: logprobs is a bool, top_logprobs (0..20) the number of alternatives and needs logprobs: true.
    const bool on = lp != nullptr && boolean(*lp, "logprobs");
    if (top != nullptr) {
      const int32_t n = int32_t(integer(*top, "top_logprobs", 0, limits.max_top_logprobs));
      if (!on) bad("top_logprobs", "needs \"logprobs\": true");
      r.logprobs = n;
    } else if (on) {
      r.logprobs = 0;
    }
  } else {
    // completions: logprobs is the number of alternatives (0..20).
    if (top != nullptr) bad("top_logprobs", "is a chat completions parameter; completions take \"logprobs\": N");
    if (lp != nullptr) r.logprobs = int32_t(integer(*lp, "logprobs", 0, limits.max_top_logprobs));
  }
}

void parse_sampling(const json& body, ParsedRequest& r) {
  SamplingParams& s = r.sampling;
  s.temperature = 1.0f;  // OpenAI's defaults: plain sampling
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  s.repetition_penalty = 1.0f;
  s.presence_penalty = 0.0f;
  s.frequency_penalty = 0.0f;
  if (const json* v = field(body, "temperature")) s.temperature = float(number(*v, "temperature", 0.0, 2.0));
  if (const json* v = field(body, "top_p")) {
    s.top_p = float(number(*v, "top_p", 0.0, 1.0));
    // 0 (OpenAI's range is 0..1): the smallest nucleus, the most likely token alone.
    if (s.top_p <= 0.0f) s.top_p = std::numeric_limits<float>::min();
  }
  if (const json* v = field(body, "top_k")) s.top_k = int32_t(integer(*v, "top_k", -1, 1 << 20));  // -1 or 0: off
  if (s.top_k < 0) s.top_k = 0;
  if (const json* v = field(body, "min_p")) s.min_p = float(number(*v, "min_p", 0.0, 1.0));
  if (const json* v = field(body, "presence_penalty")) s.presence_penalty = float(number(*v, "presence_penalty", -2.0, 2.0));
  if (const json* v = field(body, "frequency_penalty")) s.frequency_penalty = float(number(*v, "frequency_penalty", -2.0, 2.0));
  if (const json* v = field(body, "repetition_penalty"))  // vLLM's extension
    s.repetition_penalty = float(number(*v, "repetition_penalty", 0.01, 100.0));
  if (const json* v = field(body, "seed")) {
    // An integral float (1937.0) is an integer too, as JSON Schema counts it.
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>()
                                     : uint64_t(integer(*v, "seed", std::numeric_limits<int64_t>::min(),
                                                        std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
}

void reject_unsupported(const json& body) {
  if (const json* n = field(body, "best_of"); n != nullptr && integer(*n, "best_of", 1, 1 << 20) != 1) bad("best_of", "only best_of = 1 is supported");
  if (const json* e = field(body, "echo"); e != nullptr && boolean(*e, "echo")) bad("echo", "echo is not supported");
  if (field(body, "functions") != nullptr || field(body, "function_call") != nullptr)
    bad(field(body, "functions") ? "functions" : "function_call", "the deprecated functions API is not supported; send tools");
  // Accepted and not used, as OpenAI accepts them: checked for their type only.
  if (const json* u = field(body, "user"); u != nullptr && !u->is_string()) bad("user", "must be a string");
  if (const json* m = field(body, "metadata"); m != nullptr && !m->is_object()) bad("metadata", "must be an object");
  if (const json* s = field(body, "store"); s != nullptr) boolean(*s, "store");
}

// The schema keeps its declared key order (properties are generated in that order).
void parse_response_format(const json& body, ParsedRequest& r) {
  const json* f = field(body, "response_format");
  if (f == nullptr) return;
  if (!f->is_object()) bad("response_format", "must be an object");
  const json* type = field(*f, "type");
  if (type == nullptr || !type->is_string()) bad("response_format.type", "is required and must be a string");
  const std::string t = type->get<std::string>();
  auto text_field = [&](const char* name) {
    const json* v = field(*f, name);
    if (v == nullptr || !v->is_string()) bad(std::string("response_format.") + name, "is required and must be a string");
    return v->get<std::string>();
  };
  if (t == "text") return;
  if (t == "json_object") {
    r.format.kind = OutputFormatKind::JsonObject;
  } else if (t == "json_schema") {
    const json* js = field(*f, "json_schema");
    if (js == nullptr || !js->is_object()) bad("response_format.json_schema", "is required and must be an object");
    if (const json* n = field(*js, "name"); n != nullptr && !n->is_string()) bad("response_format.json_schema.name", "must be a string");
    if (const json* st = field(*js, "strict")) boolean(*st, "response_format.json_schema.strict");
    const json* schema = field(*js, "schema");
    if (schema != nullptr && !schema->is_object() && !schema->is_boolean())
      bad("response_format.json_schema.schema", "must be an object");
    r.format.kind = OutputFormatKind::JsonSchema;
    // no schema: any JSON value
    r.format.text = schema == nullptr ? "{}" : schema->dump();
  } else if (t == "regex") {
    r.format = {OutputFormatKind::Regex, text_field("regex")};
  } else if (t == "grammar") {
    r.format = {OutputFormatKind::Gbnf, text_field("grammar")};
  } else {
    bad("response_format.type", "must be one of text, json_object, json_schema, regex, grammar, got " + type->dump());
  }
}

}  // namespace

ParsedRequest parse_request(Endpoint endpoint, std::string_view body_text, const RequestLimits& limits) {
  if (json_depth(body_text, limits.max_json_depth) > limits.max_json_depth)
    throw ApiError(400, "malformed JSON: nested deeper than " + std::to_string(limits.max_json_depth) + " levels");
  json body;
  try {
    body = json::parse(body_text.begin(), body_text.end());
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("malformed JSON: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");

  ParsedRequest r;
  r.endpoint = endpoint;
  try {
    if (const json* m = field(body, "model")) {
      if (!m->is_string()) bad("model", "must be a string");
      r.model = m->get<std::string>();
    }
    if (endpoint == Endpoint::Chat) {
      parse_messages(body, r);
      parse_chat_options(body, r);
    } else {
      parse_prompt(body, r);
    }
    reject_unsupported(body);
    if (const json* n = field(body, "n")) r.n = int32_t(integer(*n, "n", 1, limits.max_n));
    parse_response_format(body, r);
    if (const json* b = field(body, "logit_bias")) {
      if (!b->is_object()) bad("logit_bias", "must be an object of token id -> bias");
      if (b->size() > kMaxLogitBias) bad("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries");
      for (const auto& [key, value] : b->items()) {
        size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(key, &used);
        } catch (const std::exception&) {
        }
        if (used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
          bad("logit_bias", "keys must be token ids, got \"" + key + "\"");
        r.logit_bias.push_back({int32_t(id), float(number(value, "logit_bias", -100, 100))});
      }
    }
    parse_sampling(body, r);
    const char* max_name = "max_tokens";
    const json* mt = field(body, "max_tokens");
    if (const json* mct = field(body, "max_completion_tokens"); mct != nullptr) {
      mt = mct;
      max_name = "max_completion_tokens";
    }
    // 0 (OpenAI's minimum): nothing is generated, finish_reason "length".
    // Larger than any context (OpenAI takes any integer): up to the context's end.
    if (mt != nullptr)
      r.max_tokens = int32_t(std::min<int64_t>(integer(*mt, max_name, 0, std::numeric_limits<int64_t>::max()),
                                               std::numeric_limits<int32_t>::max()));
    parse_stop(body, r, limits);
    if (const json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
    if (const json* so = field(body, "stream_options")) {
      if (!so->is_object()) bad("stream_options", "must be an object");
      if (!r.stream) bad("stream_options", "is only allowed when \"stream\" is true");
      if (const json* iu = field(*so, "include_usage")) r.include_usage = boolean(*iu, "stream_options.include_usage");
    }
    if (const json* v = field(body, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
    if (const json* v = field(body, "cache_salt")) {
      if (!v->is_string() || v->get<std::string>().empty() || v->get<std::string>().size() > 1024)
        bad("cache_salt", "must be a non-empty string of at most 1024 bytes");
      r.cache_salt = v->get<std::string>();
    }
    if (const json* v = field(body, "spec")) {
      const std::string mode = v->is_string() ? v->get<std::string>() : std::string();
      if (mode == "off") r.spec = SpecMode::Off;
      else if (mode == "ngram") r.spec = SpecMode::Ngram;
      else if (mode == "draft") r.spec = SpecMode::Draft;
      else bad("spec", "must be \"off\", \"ngram\" or \"draft\" (the server's draft model)");
    }
    if (const json* v = field(body, "spec_k")) r.spec_k = int32_t(integer(*v, "spec_k", 1, kMaxSpecTokens));
    parse_logprobs(body, r, limits);
  } catch (const json::exception& e) {  // a type surprise inside nlohmann (should not happen): still a 400
    throw ApiError(400, std::string("bad request: ") + e.what());
  }
  return r;
}

}  // namespace ferry::server

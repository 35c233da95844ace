#include "server/openai_response.h"

#include <cstdio>

namespace ferry::server {

using nlohmann::json;

std::string response_id(Endpoint endpoint, uint64_t request_id, uint64_t salt) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%016llx%08llx", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(salt), static_cast<unsigned long long>(request_id & 0xffffffffu));
  return buf;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "abort";
    case FinishReason::Error: return "error";
  }
  return "error";
}

json usage_json(const RequestUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

json chat_token(const TokenLogprobOut& t) {
  return {{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)}};
}

}  // namespace

json logprobs_json(Endpoint endpoint, std::span<const GeneratedToken> tokens, size_t text_offset0) {
  if (endpoint == Endpoint::Chat) {
    json content = json::array();
    for (const GeneratedToken& g : tokens) {
      json item = chat_token(g.chosen);
      json top = json::array();
      for (const TokenLogprobOut& t : g.top) top.push_back(chat_token(t));
      item["top_logprobs"] = std::move(top);
      content.push_back(std::move(item));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};  // both required by OpenAI's schema
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset0;
  for (const GeneratedToken& g : tokens) {
    toks.push_back(g.chosen.text);
    lps.push_back(g.chosen.logprob);
    json top = json::object();
    for (const TokenLogprobOut& t : g.top) top[t.text] = t.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += g.chosen.text.size();
  }
  return {{"tokens", std::move(toks)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

namespace {

json message_json(const ChatMessageOut& m) {
  json msg = {{"role", "assistant"}, {"content", m.content ? json(*m.content) : json(nullptr)}, {"refusal", nullptr}};
  if (m.reasoning) msg["reasoning_content"] = *m.reasoning;
  if (!m.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& c : m.tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    msg["tool_calls"] = std::move(calls);
  }
  return msg;
}

json object_name(const ResponseMeta& meta, bool chunk) {
  if (meta.endpoint != Endpoint::Chat) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

}  // namespace

json full_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const RequestUsage& usage) {
  json list = json::array();
  for (const ChoiceResult& c : choices) {
    json choice = {{"index", c.index}};
    if (meta.endpoint == Endpoint::Chat) choice["message"] = message_json(c.message);
    else choice["text"] = c.text;
    choice["logprobs"] = c.logprobs ? *c.logprobs : json(nullptr);
    choice["finish_reason"] = c.finish_reason;
    list.push_back(std::move(choice));
  }
  return {{"id", meta.id},       {"object", object_name(meta, false)}, {"created", meta.created},
          {"model", meta.model}, {"choices", std::move(list)},         {"usage", usage_json(usage)}};
}

json stream_chunk(const ResponseMeta& meta, const ChunkChoice& c) {
  json choice = {{"index", c.index}};
  if (meta.endpoint == Endpoint::Chat) {
    json delta = json::object();
    if (c.role) delta = {{"role", "assistant"}, {"content", ""}};
    if (!c.delta.reasoning.empty()) delta["reasoning_content"] = c.delta.reasoning;
    if (!c.delta.content.empty()) delta["content"] = c.delta.content;
    if (!c.delta.calls.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& d : c.delta.calls) {
        json call = {{"index", d.index}};
        if (!d.id.empty()) {
          call["id"] = d.id;
          call["type"] = "function";
          call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
        } else {
          call["function"] = {{"arguments", d.arguments}};
        }
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = c.delta.content;
  }
  choice["logprobs"] = c.logprobs ? *c.logprobs : json(nullptr);
  choice["finish_reason"] = c.finish_reason ? json(*c.finish_reason) : json(nullptr);
  return {{"id", meta.id}, {"object", object_name(meta, true)}, {"created", meta.created}, {"model", meta.model},
          {"choices", json::array({std::move(choice)})}};
}

json usage_chunk(const ResponseMeta& meta, const RequestUsage& usage) {
  return {{"id", meta.id},
          {"object", object_name(meta, true)},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace ferry::server

// A chat request's prompt tokens: the chat template rendered over the messages (with their tool calls and
// tool results), the tools and the request's chat_template_kwargs; the template's markers are special tokens
// and the messages' content is plain text: "<|im_start|>system" typed by a user is tokenized as those
// characters, so a user cannot forge turns (unless the server runs with --parse-special-in-content). Tool
// definitions and tool-call arguments holding special-token text are refused likewise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ferry/serving.h"

namespace ferry::server {

struct ChatContext {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // as ParsedRequest::template_messages
  nlohmann::ordered_json tools;                                        // null, or the tools list
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();    // extra template variables
};

struct ChatPrompt {
  std::vector<int32_t> tokens;
  std::string text;  // the rendered prompt (with placeholders where content was tokenized apart)
};

// Throws ferry::Error when a message holds special-token text that the template did not copy verbatim (so
// its place in the rendered prompt cannot be found), or tools / tool calls hold special-token text.
ChatPrompt tokenize_chat(const ServingEngine& engine, const ChatContext& chat, bool parse_special_in_content);

}  // namespace ferry::server

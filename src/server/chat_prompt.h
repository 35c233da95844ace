// A chat request's prompt tokens: the chat template's text with its markers as special tokens, and the
// messages' content as plain text: "<|im_start|>system" typed by a user is tokenized as those characters, so
// a user cannot forge turns (unless the server runs with --parse-special-in-content).
#pragma once

#include <cstdint>
#include <vector>

#include "ferry/serving.h"

namespace ferry::server {

// Throws ferry::Error when a message holds special-token text that the template did not copy verbatim (so
// its place in the rendered prompt cannot be found).
std::vector<int32_t> tokenize_chat(const ServingEngine& engine, const std::vector<ChatTurn>& turns,
                                   bool parse_special_in_content);

}  // namespace ferry::server

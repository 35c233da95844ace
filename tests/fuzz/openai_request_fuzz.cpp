// Fuzz target: arbitrary bytes as the body of POST /v1/chat/completions and /v1/completions. Every rejection
// must be an ApiError(400); crashes, hangs, other exceptions and unbounded memory are bugs. Accepted requests
// also go through the prompt checks and the response builders.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "server/tool_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (const Endpoint e : {Endpoint::Chat, Endpoint::Completion}) {
    try {
      const ParsedRequest r = parse_request(e, body);
      if (r.stop.size() > 16 || r.logprobs > 20) __builtin_trap();  // limits hold
      const ModelFacts facts{{"m"}, 64, 1000};
      try {
        check_model(r.model, facts);
        if (!r.prompt_tokens.empty()) check_prompt(r.prompt_tokens, e, facts);
      } catch (const ApiError& err) {
        if (err.status() != 400 && err.status() != 404) __builtin_trap();
      }
      std::string text;
      for (const auto& m : r.messages) text += m.content;  // arbitrary bytes: the builders must not throw
      const ResponseMeta meta{"id", 0, r.model, e};
      ChoiceResult choice{.text = text, .finish_reason = "stop"};
      choice.message.content = text;
      (void)sse_data(full_response(meta, {choice}, {}));
      ChunkChoice chunk;
      chunk.delta.content = text;
      (void)sse_data(stream_chunk(meta, chunk));
      if (r.n < 1 || r.n > 16 || r.tools.functions.size() > kMaxTools) __builtin_trap();
      if (r.tools.forced()) {  // the forced-call grammar's schema is built for any accepted tools
        for (const ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Llama3, ToolCallFormat::Mistral})
          (void)forced_tool_call_format(f, r.tools);
      }
    } catch (const ApiError& err) {
      if (err.status() != 400) __builtin_trap();
    }
  }
  ferry::server::SseParser parser;  // the client side too
  (void)parser.feed(body);
  return 0;
}

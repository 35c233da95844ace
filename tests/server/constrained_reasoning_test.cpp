// A constrained chat request (response_format, a forced tool call) on a template that thinks: the plan lets
// the model reason and applies the format after "</think>" (GenerationRequest.format.starts_after), opening
// the block in the prompt when the template's generation prompt does not (Qwen3's), and not when the prompt
// closes it (enable_thinking false) or the request turns the split off. Then the R1-style plan on the tiny
// fixture model, whose random weights never close the block: max_tokens ends it, all reasoning, no content.
#include <gtest/gtest.h>

#include <chrono>

#include "fixtures/test_paths.h"
#include "server/chat_output.h"
#include "server/generation.h"
#include "server/openai_request.h"

namespace ferry::server {
namespace {

constexpr const char* kOpensInPrompt =  // DeepSeek-R1's shape: the generation prompt opens the block
    "{% for m in messages %}<｜User｜>{{ m['content'] }}{% endfor %}<｜Assistant｜><think>\n";
constexpr const char* kModelOpens =  // Qwen3's shape: the model writes <think>; enable_thinking false closes it
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}";

struct Fixture {
  explicit Fixture(const std::string& chat_template) : engine(options(chat_template), {}) {
    facts = {{"tiny"}, 512, engine.info().vocab_size};
    learn_chat_template(engine, facts);
  }
  static EngineOptions options(const std::string& chat_template) {
    EngineOptions o;
    o.model_path = test::source_dir() + "/tests/fixtures/models/tiny-llama";
    o.context = 512;
    o.block_size = 4;
    o.n_threads = 1;
    o.chat_template = chat_template;
    return o;
  }
  GenerationPlan plan(const std::string& extra) const {
    const std::string body = R"({"messages": [{"role": "user", "content": "Give me JSON."}])" + extra + "}";
    return build_generation_request(parse_request(Endpoint::Chat, body), engine, facts, 7);
  }
  ServingEngine engine;
  ModelFacts facts;
};

constexpr const char* kJson = R"(, "response_format": {"type": "json_object"})";

TEST(ConstrainedReasoning, FormatStartsAfterTheBlock) {
  const Fixture r1(kOpensInPrompt);
  ASSERT_TRUE(r1.facts.template_thinks);
  const GenerationPlan p = r1.plan(kJson);
  EXPECT_EQ(p.request.format.kind, OutputFormatKind::JsonObject);
  EXPECT_EQ(p.request.format.starts_after, "</think>");
  EXPECT_TRUE(p.output.split_reasoning);
  EXPECT_TRUE(p.output.starts_in_reasoning);
  EXPECT_EQ(p.request.prompt, r1.plan("").request.prompt);  // the prompt opened it already
  // Text requests have no gate; reasoning_format none keeps the format from the first token.
  EXPECT_EQ(r1.plan("").request.format.starts_after, "");
  EXPECT_EQ(r1.plan(std::string(kJson) + R"(, "reasoning_format": "none")").request.format.starts_after, "");
  // A forced tool call is gated the same way.
  const GenerationPlan tool = r1.plan(R"(, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  EXPECT_EQ(tool.request.format.starts_after, "</think>");
}

TEST(ConstrainedReasoning, BlockOpenedInThePromptWhenTheModelWouldOpenIt) {
  const Fixture q(kModelOpens);
  ASSERT_TRUE(q.facts.template_thinks);
  const GenerationPlan text = q.plan("");
  EXPECT_FALSE(text.output.starts_in_reasoning);
  const GenerationPlan p = q.plan(kJson);
  EXPECT_EQ(p.request.format.starts_after, "</think>");
  EXPECT_TRUE(p.output.starts_in_reasoning);
  const std::vector<int32_t> open = q.engine.tokenize("<think>\n", false, true);
  ASSERT_EQ(p.request.prompt.size(), text.request.prompt.size() + open.size());
  EXPECT_TRUE(std::equal(open.begin(), open.end(), p.request.prompt.end() - std::ptrdiff_t(open.size())));
  // enable_thinking false: the prompt closes the block, so the format applies from the first token.
  const GenerationPlan off = q.plan(std::string(kJson) + R"(, "chat_template_kwargs": {"enable_thinking": false})");
  EXPECT_EQ(off.request.format.starts_after, "");
  EXPECT_FALSE(off.output.starts_in_reasoning);
}

TEST(ConstrainedReasoning, NeverClosedEndsAtMaxTokensAsReasoning) {
  Fixture r1(kOpensInPrompt);
  const GenerationPlan p = r1.plan(std::string(kJson) + R"(, "max_tokens": 8)");
  const std::shared_ptr<RequestHandle> h = r1.engine.submit(p.request);
  ChatOutputParser out(p.output);
  RequestUpdate u;
  FinishReason finish = FinishReason::Error;
  int32_t tokens = 0;
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       std::chrono::steady_clock::now() < deadline;) {
    if (!h->wait(u, std::chrono::milliseconds(100))) continue;
    (void)out.feed(u.text);
    tokens = u.usage.completion_tokens;
    if (u.finished) {
      finish = u.finish;
      break;
    }
  }
  (void)out.finish();
  EXPECT_EQ(finish, FinishReason::Length);
  EXPECT_EQ(tokens, 8);
  const ChatMessageOut m = out.message();
  EXPECT_EQ(m.content.value_or(""), "");
  EXPECT_TRUE(m.reasoning.has_value());
}

}  // namespace
}  // namespace ferry::server

// ChatTemplate API: apply() with the built-in templates and SmolLM2's template from its GGUF.
#include <gtest/gtest.h>

#include <gmock/gmock.h>

#include "core/check.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "tokenizer/chat_template.h"

namespace ferry {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(ChatTemplate, ChatMLBuiltin) {
  ChatTemplate t(ChatTemplate::chatml_source(), "<s>", "</s>");
  EXPECT_EQ(t.apply({{"user", "Hi!"}}, true), "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.apply({{"user", "Hi!"}}, false), "<|im_start|>user\nHi!<|im_end|>\n");
}

TEST(ChatTemplate, Llama3Builtin) {
  ChatTemplate t(ChatTemplate::llama3_source(), "<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(t.apply({{"user", " Hi! "}}, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MistralBuiltinRejectsNonAlternatingRoles) {
  ChatTemplate t(ChatTemplate::mistral_source(), "<s>", "</s>");
  EXPECT_EQ(t.apply({{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, true), "<s>[INST] a [/INST]b</s>[INST] c [/INST]");
  try {
    t.apply({{"user", "a"}, {"user", "b"}}, true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplate, RenderAddsSpecialTokensAndAcceptsPlainJson) {
  ChatTemplate t("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ enable_thinking }}", "<s>",
                 "</s>");
  nlohmann::json ctx = {{"messages", nlohmann::json::array()}, {"enable_thinking", false}};
  EXPECT_EQ(t.render(ctx), "<s>|</s>|False|None|False");
}

TEST(ChatTemplate, SyntaxErrorThrowsAtConstruction) {
  EXPECT_THROW(ChatTemplate("{% if %}", "", ""), Error);
}

TEST(ChatTemplate, SmolLM2TemplateFromGguf) {
  const auto model = test::default_model();
  if (!model) GTEST_SKIP() << "default model absent";
  const auto gguf = GgufFile::open(*model);
  ChatTemplate t(gguf.get_string("tokenizer.chat_template"), "<|im_start|>", "<|im_end|>");
  // No system message: the template inserts its default one.
  EXPECT_EQ(t.apply({{"user", "Hi!"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  const std::string with_system = t.apply(kConversation, false);
  EXPECT_EQ(with_system.rfind("<|im_start|>system\nYou are terse.<|im_end|>\n", 0), 0u);
  EXPECT_THAT(with_system, ::testing::EndsWith("<|im_start|>user\nBye<|im_end|>\n"));
}

}  // namespace
}  // namespace ferry

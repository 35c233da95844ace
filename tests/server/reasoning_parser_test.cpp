// The <think> splitter: Qwen3-style output that opens its own block, DeepSeek-R1-style prompts that open it,
// no block, a block cut off, tags split across stream pieces; and the template / prompt detection on the
// real templates in ../shared/testdata.
#include <gtest/gtest.h>

#include "fixtures/test_paths.h"
#include "server/reasoning_parser.h"

namespace ferry::server {
namespace {

using test::read_file;
using test::shared_testdata;

ReasoningSplit split(const std::string& text, bool open, size_t piece) {
  ReasoningParser p(open);
  ReasoningSplit out;
  for (size_t i = 0; i < text.size(); i += piece) {
    const ReasoningSplit s = p.feed(text.substr(i, piece));
    out.reasoning += s.reasoning;
    out.content += s.content;
  }
  const ReasoningSplit s = p.finish();
  return {out.reasoning + s.reasoning, out.content + s.content};
}

TEST(ReasoningParser, SplitsInEveryPieceSize) {
  for (const size_t piece : {size_t(1), size_t(2), size_t(5), size_t(1000)}) {
    ReasoningSplit s = split("<think>\nLet me see.\n</think>\n\nParis.", false, piece);
    EXPECT_EQ(s.reasoning, "\nLet me see.\n");
    EXPECT_EQ(s.content, "Paris.");
    s = split("Let me see.</think>Paris.", true, piece);  // the prompt opened the block (DeepSeek-R1)
    EXPECT_EQ(s.reasoning, "Let me see.");
    EXPECT_EQ(s.content, "Paris.");
    s = split("Just an answer with <b> and </think", false, piece);  // no block
    EXPECT_EQ(s.reasoning, "");
    EXPECT_EQ(s.content, "Just an answer with <b> and </think");
    s = split("still thinking <", true, piece);  // cut off inside the block: all reasoning
    EXPECT_EQ(s.reasoning, "still thinking <");
    EXPECT_EQ(s.content, "");
    s = split("<thi", false, piece);  // a tag that never completes is content
    EXPECT_EQ(s.content, "<thi");
    s = split("<think></think>", false, piece);
    EXPECT_EQ(s.reasoning, "");
    EXPECT_EQ(s.content, "");
  }
}

TEST(ReasoningParser, DetectsTemplatesAndOpenPrompts) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // Qwen3, thinking off
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  const auto dir = shared_testdata();
  if (!dir) GTEST_SKIP() << "no ../shared/testdata";
  EXPECT_TRUE(template_thinks(read_file(*dir + "/chat-templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")));
  EXPECT_TRUE(template_thinks(read_file(*dir + "/chat-templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")));
  EXPECT_FALSE(template_thinks(read_file(*dir + "/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja")));
  EXPECT_FALSE(template_thinks(read_file(*dir + "/chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja")));
}

}  // namespace
}  // namespace ferry::server

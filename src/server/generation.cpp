#include "server/generation.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/reasoning_parser.h"
#include "server/tool_arguments_form.h"

namespace ferry::server {

void check_model(const std::string& model, const ModelFacts& facts) {
  if (model.empty()) return;
  if (std::find(facts.names.begin(), facts.names.end(), model) != facts.names.end()) return;
  throw ApiError(404, "The model '" + model + "' does not exist (this server serves '" +
                          (facts.names.empty() ? std::string() : facts.names.front()) + "')",
                 "model", "model_not_found");
}

void check_prompt(const std::vector<int32_t>& prompt, Endpoint endpoint, const ModelFacts& facts) {
  const char* param = endpoint == Endpoint::Chat ? "messages" : "prompt";
  if (prompt.empty()) throw ApiError(400, std::string("'") + param + "': the prompt is empty", param);
  for (const int32_t id : prompt)
    if (id < 0 || id >= facts.vocab_size)
      throw ApiError(400, "'prompt': token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(facts.vocab_size - 1) + ")", "prompt");
  if (int64_t(prompt.size()) >= facts.context)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(facts.context) +
                            " tokens. However, your prompt has " + std::to_string(prompt.size()) +
                            " tokens (at most " + std::to_string(facts.context - 1) + " leave room for one to generate).",
                   param, "context_length_exceeded");
}

namespace {

// The template's context for a chat request: the tools it renders itself, or the Hermes fallback.
ChatContext chat_context(const ParsedRequest& parsed, const ModelFacts& facts) {
  ChatContext c;
  c.kwargs = parsed.template_kwargs;
  const bool tools = parsed.tools.active();
  bool history_has_tools = false;
  for (const auto& m : parsed.template_messages) history_has_tools |= m["role"] == "tool" || m.contains("tool_calls");
  if (facts.tool_template.renders_tools) {
    c.messages = facts.tool_template.text_arguments ? with_text_arguments(parsed.template_messages) : parsed.template_messages;
    if (tools) c.tools = parsed.tools.tools;
  } else if (tools || history_has_tools) {
    c.messages = hermes_fallback_messages(parsed.template_messages, tools ? &parsed.tools : nullptr);
  } else {
    c.messages = parsed.template_messages;
  }
  return c;
}

}  // namespace

void learn_chat_template(const ServingEngine& engine, ModelFacts& facts) {
  const std::string source = engine.chat_template_source();
  facts.tool_template = detect_tool_template(source);
  facts.tool_template.text_arguments =
      facts.tool_template.renders_tools &&
      template_takes_text_arguments([&engine](const std::string& c) { return engine.render_chat_template(c); });
  facts.template_thinks = template_thinks(source);
}

GenerationPlan build_generation_request(const ParsedRequest& parsed, const ServingEngine& engine,
                                        const ModelFacts& facts, uint64_t seed) {
  GenerationPlan plan;
  GenerationRequest& g = plan.request;
  std::string prompt_text;
  try {
    if (parsed.endpoint == Endpoint::Chat) {
      // The template's markers are special tokens; the messages' content is text (chat_prompt.h).
      ChatPrompt p = tokenize_chat(engine, chat_context(parsed, facts), facts.parse_special_in_content);
      g.prompt = std::move(p.tokens);
      prompt_text = std::move(p.text);
    } else if (parsed.prompt_absent) {  // the model's document start (BOS, else EOS), as GPT's <|endoftext|>
      if (engine.info().document_start_token >= 0) g.prompt = {engine.info().document_start_token};
    } else if (parsed.prompt_text) {
      g.prompt = engine.tokenize(*parsed.prompt_text, true, false);
      // "" (a tokenizer that adds no BOS): the document start too, as OpenAI answers an empty prompt.
      if (g.prompt.empty() && engine.info().document_start_token >= 0) g.prompt = {engine.info().document_start_token};
    } else {
      g.prompt = parsed.prompt_tokens;
    }
  } catch (const Error& e) {  // e.g. invalid UTF-8, a template that rejects the conversation
    const char* param = parsed.endpoint == Endpoint::Chat ? "messages" : "prompt";
    throw ApiError(400, std::string("'") + param + "': " + e.what(), param);
  }
  check_prompt(g.prompt, parsed.endpoint, facts);
  const int32_t room = int32_t(facts.context - int64_t(g.prompt.size()));
  // Absent max_tokens: chat runs to the end of the context (OpenAI), completions make 16 (OpenAI's default);
  // a larger max_tokens than fits stops at the context's end with finish_reason "length".
  g.max_tokens = parsed.max_tokens.value_or(parsed.endpoint == Endpoint::Chat ? room : 16);
  g.sampling = parsed.sampling;
  if (!parsed.seed_given) g.sampling.seed = seed;
  g.stop = parsed.stop;
  g.ignore_eos = parsed.ignore_eos;
  g.logprobs = parsed.logprobs;
  g.format = parsed.format;
  g.logit_bias = parsed.logit_bias;
  g.spec = parsed.spec;
  g.spec_k = parsed.spec_k;
  if (parsed.endpoint != Endpoint::Chat) return plan;

  const ToolCallFormat format = facts.tool_template.renders_tools ? facts.tool_template.format : ToolCallFormat::Hermes;
  if (parsed.tools.active()) plan.output.tools = format;
  if (parsed.tools.forced()) {
    if (parsed.format.kind != OutputFormatKind::Text)
      throw ApiError(400, "'tool_choice': a required or named tool call cannot be combined with a response_format",
                     "tool_choice");
    g.format = forced_tool_call_format(format, parsed.tools);
  }
  plan.output.split_reasoning = facts.template_thinks && parsed.split_reasoning.value_or(facts.split_reasoning);
  plan.output.starts_in_reasoning = plan.output.split_reasoning && prompt_opens_reasoning(prompt_text);
  if (plan.output.split_reasoning && g.format.kind != OutputFormatKind::Text && !prompt_closes_reasoning(prompt_text)) {
    // A constrained answer after the reasoning (vLLM's structured output with a reasoning parser): the format
    // applies after "</think>". A prompt that does not open the block itself (Qwen3's) gets it opened, so the
    // reasoning is not left to the model's first token, which the format would otherwise have to allow.
    if (!plan.output.starts_in_reasoning) {
      const std::string open = std::string(kReasoningOpen) + "\n";
      const std::vector<int32_t> ids = engine.tokenize(open, false, true);
      g.prompt.insert(g.prompt.end(), ids.begin(), ids.end());
      check_prompt(g.prompt, parsed.endpoint, facts);
      if (!parsed.max_tokens) g.max_tokens = std::max<int32_t>(0, g.max_tokens - int32_t(ids.size()));
      plan.output.starts_in_reasoning = true;
    }
    g.format.starts_after = std::string(kReasoningClose);
  }
  plan.output.include_reasoning = parsed.include_reasoning;
  plan.output.id_seed = g.sampling.seed ^ 0x7f4a7c159e3779b9ull;
  return plan;
}

}  // namespace ferry::server

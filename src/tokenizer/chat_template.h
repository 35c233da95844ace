// ChatTemplate: renders a model's chat template (the Jinja text in GGUF tokenizer.chat_template or
// tokenizer_config.json chat_template) the way transformers' apply_chat_template does.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses once; syntax errors throw ferry::Error naming the line and column.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // General form: the whole context (messages with tool_calls, tools, documents, extra kwargs such as
  // enable_thinking). bos_token, eos_token, add_generation_prompt (false), tools and documents (null) are
  // added unless present, as transformers does. Use ordered_json to keep the key order tojson prints.
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::ordered_json& context) const;

  // The clock strftime_now() reads (default: local time); tests fix it.
  void set_clock(std::function<std::tm()> now);

  const std::string& source() const { return source_; }

  // Built-in templates for models that carry none, and for tests.
  static std::string chatml_source();
  static std::string llama3_source();
  static std::string mistral_source();

 private:
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::unique_ptr<jinja::Template> template_;
  std::function<std::tm()> clock_;
};

}  // namespace ferry

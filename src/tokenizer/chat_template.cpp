#include "tokenizer/chat_template.h"

#include "core/check.h"
#include "tokenizer/jinja/template.h"

namespace ferry {

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      template_(std::make_unique<jinja::Template>(source_)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

void ChatTemplate::set_clock(std::function<std::tm()> now) { clock_ = std::move(now); }

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = nlohmann::ordered_json::array();
  for (const auto& m : messages) ctx["messages"].push_back({{"role", m.role}, {"content", m.content}});
  ctx["add_generation_prompt"] = add_generation_prompt;
  return render(ctx);
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json::parse(context.dump()));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  FERRY_CHECK(context.is_object(), "chat template context must be a JSON object, got {}", context.type_name());
  nlohmann::ordered_json ctx = context;
  if (!ctx.contains("tools")) ctx["tools"] = nullptr;
  if (!ctx.contains("documents")) ctx["documents"] = nullptr;
  if (!ctx.contains("add_generation_prompt")) ctx["add_generation_prompt"] = false;
  if (!ctx.contains("bos_token")) ctx["bos_token"] = bos_token_;
  if (!ctx.contains("eos_token")) ctx["eos_token"] = eos_token_;
  return template_->render(ctx, jinja::RenderLimits{}, clock_);
}

std::string ChatTemplate::chatml_source() {
  return "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
         "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

std::string ChatTemplate::llama3_source() {
  return "{% set loop_messages = messages %}{% for message in loop_messages %}"
         "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
         "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
         "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
         "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
}

std::string ChatTemplate::mistral_source() {
  return "{{ bos_token }}{% for message in messages %}"
         "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
         "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
         "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
}

}  // namespace ferry

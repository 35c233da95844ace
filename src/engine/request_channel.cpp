#include "engine/request_channel.h"

namespace ferry {

bool RequestChannel::wait(RequestUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (delivered_) return false;
  if (!cv_.wait_for(lock, timeout, [&] { return has_news_; })) return false;
  out = std::move(pending_);
  pending_ = RequestUpdate{};
  pending_.usage = out.usage;
  has_news_ = false;
  if (out.finished) delivered_ = true;
  return true;
}

bool RequestChannel::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

void RequestChannel::cancel() {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
  }
  if (!cancel_.exchange(true, std::memory_order_acq_rel) && wake_) wake_();
}

void RequestChannel::post(std::string_view text, std::vector<GeneratedToken>&& tokens, const RequestUsage& usage) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    pending_.text += text;
    for (GeneratedToken& t : tokens) pending_.tokens.push_back(std::move(t));
    pending_.usage = usage;
    has_news_ = true;
  }
  cv_.notify_all();
}

void RequestChannel::finish(std::string_view text, std::vector<GeneratedToken>&& tokens, const RequestUsage& usage,
                            FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    pending_.text += text;
    for (GeneratedToken& t : tokens) pending_.tokens.push_back(std::move(t));
    pending_.usage = usage;
    pending_.finished = true;
    pending_.finish = reason;
    pending_.error = std::move(error);
    has_news_ = true;
    finished_ = true;
  }
  cv_.notify_all();
}

}  // namespace ferry

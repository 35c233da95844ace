// One request's output channel (the RequestHandle the caller holds): the engine loop posts coalesced
// updates, the caller's thread waits on them; cancel() raises a flag the loop checks every step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "ferry/serving.h"

namespace ferry {

class RequestChannel final : public RequestHandle {
 public:
  // wake: called by cancel() so that an idle engine loop notices (must stay callable: it may outlive the engine,
  // so it should hold only weak references).
  RequestChannel(uint64_t id, std::function<void()> wake) : id_(id), wake_(std::move(wake)) {}

  uint64_t id() const override { return id_; }
  bool wait(RequestUpdate& out, std::chrono::milliseconds timeout) override;
  bool finished() const override;
  void cancel() override;

  // Engine side.
  bool cancel_requested() const { return cancel_.load(std::memory_order_acquire); }
  // Appends text and tokens to the pending update and sets its usage (running totals).
  void post(std::string_view text, std::vector<GeneratedToken>&& tokens, const RequestUsage& usage);
  // Appends the final part and marks the request finished (later posts are ignored).
  void finish(std::string_view text, std::vector<GeneratedToken>&& tokens, const RequestUsage& usage,
              FinishReason reason, std::string error = {});

 private:
  const uint64_t id_;
  std::function<void()> wake_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RequestUpdate pending_;     // guarded by mu_
  bool has_news_ = false;     // pending_ holds something not yet returned by wait()
  bool finished_ = false;     // the final update was posted
  bool delivered_ = false;    // ... and returned by wait()
};

}  // namespace ferry

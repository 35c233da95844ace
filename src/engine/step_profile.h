// Where an engine step's time goes (FERRY_LOG=debug prints the summary when the serving loop ends): schedule,
// model run (inputs, forward, logits back), postprocess (sampling, detokenizing, channels), split by whether the
// step was decode-only or carried prefill chunks. Device-sampled runs also split into the host's enqueue time
// (a graph launch, or every op of an eager step) and its wait for the device: an eager step whose enqueue time
// is close to its run time is paced by the host's launches. Plain counters: the engine loop alone updates them.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace ferry {

class StepProfile {
 public:
  void add(bool has_prefill, int64_t n_tokens, int64_t n_seqs, double schedule_s, double run_s, double post_s,
           double enqueue_s = 0, double wait_s = 0) {
    Kind& k = has_prefill ? mixed_ : decode_;
    ++k.steps;
    k.tokens += n_tokens;
    k.seqs += n_seqs;
    k.schedule_s += schedule_s;
    k.run_s += run_s;
    k.post_s += post_s;
    k.enqueue_s += enqueue_s;
    k.wait_s += wait_s;
  }
  std::string summary() const { return line("decode-only", decode_) + "\n" + line("with prefill", mixed_); }

 private:
  struct Kind {
    int64_t steps = 0, tokens = 0, seqs = 0;
    double schedule_s = 0, run_s = 0, post_s = 0, enqueue_s = 0, wait_s = 0;
  };
  static std::string line(const char* name, const Kind& k) {
    const double n = double(k.steps > 0 ? k.steps : 1);
    return fmt::format("serving steps, {}: {} steps, {:.1f} tokens and {:.1f} sequences per step; per step: schedule "
                       "{:.3f} ms, run {:.3f} ms (host enqueue {:.3f} ms, then waiting for the device {:.3f} ms), "
                       "postprocess {:.3f} ms",
                       name, k.steps, double(k.tokens) / n, double(k.seqs) / n, 1e3 * k.schedule_s / n,
                       1e3 * k.run_s / n, 1e3 * k.enqueue_s / n, 1e3 * k.wait_s / n, 1e3 * k.post_s / n);
  }
  Kind decode_, mixed_;
};

}  // namespace ferry

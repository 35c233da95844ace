// Per-request sampling settings (public API): OpenAI / vLLM semantics, defaults like llama.cpp's CLI.
#pragma once

#include <cstdint>

namespace ferry {

struct SamplingParams {
  float temperature = 0.8f;         // 0 => greedy (argmax; ties -> lowest id); otherwise p ~ exp(logit / T)
  int32_t top_k = 40;               // keep the k most likely tokens; <= 0: off (>= vocab_size: off too)
  float top_p = 0.95f;              // nucleus: smallest most-likely set with mass >= top_p; 1: off
  float min_p = 0.05f;              // keep tokens with p >= min_p * p_max; 0: off
  float repetition_penalty = 1.0f;  // HF/llama.cpp: logit > 0 ? logit / pen : logit * pen, once per token
                                    // that occurs in the window; 1: off
  float presence_penalty = 0.0f;    // OpenAI: logit -= presence if the token occurs in the window
  float frequency_penalty = 0.0f;   // OpenAI: logit -= frequency * (occurrences in the window)
  int32_t penalty_last_n = 64;      // window: the last n tokens of the history (prompt + generated);
                                    // -1: whole history, 0: no window (penalties off)
  uint64_t seed = 0;                // the draw for position p uses Philox4x32-10(key = seed, counter = p)

  // Throws ferry::Error naming the first bad parameter (e.g. "sampling: temperature must be a finite
  // number >= 0, got -1").
  void validate() const;

  bool penalties_active() const {
    return penalty_last_n != 0 &&
           (repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
};

}  // namespace ferry

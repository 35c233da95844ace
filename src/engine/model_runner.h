// Model execution for the serving loop: turns a StepPlan into one Batch (tokens of every chunk flattened,
// per-sequence block tables padded with -1 to the longest), runs LlamaModel::forward, and hands back the
// logits of the chunks that sample.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "model/batch.h"
#include "model/llama_model.h"

namespace ferry {

// Prompt-step padding granule in tokens (StepPadding::pad_prompts): a prompt-carrying step of n tokens runs as
// min(round_up(n, 64), max_step_tokens) tokens. Worked example (Llama-3-8B serving, 64 clients, 512-token budget):
// prompt steps carry 509.5 tokens on average, most of them exactly 512, so they pad by ~2.5 rows (0.5% of the
// GEMM rows) and share one graph key; a 300-token tail step runs as 320 (+6.7%). 64 also keeps the pad within 4
// KV blocks of 16 tokens and makes every padded count a whole number of the attention's 64-row query tiles.
constexpr int32_t kPromptPadGranule = 64;

// Scratch KV blocks the padding needs (reserved after the pool's blocks; no sequence ever owns them): the prompt
// pad's dummy sequence holds up to min(granule, max_step_tokens) - 1 tokens at positions 0.. (the decode dummies
// share the first block). At least 1. Example: granule 64, budget 512, blocks of 16: ceil(63 / 16) = 4 blocks.
int32_t prompt_pad_scratch_blocks(int32_t max_step_tokens, int32_t block_size, int32_t granule = kPromptPadGranule);

// How ModelRunner pads steps so that a backend replaying step graphs sees only a few shapes.
struct StepPadding {
  int32_t scratch_first = -1;  // first scratch KV block (-1: no padding at all)
  int32_t n_scratch = 0;       // scratch blocks [scratch_first, scratch_first + n_scratch)
  bool pad_decodes = true;     // pure decode steps: sequences to a power of two (see below)
  bool pad_prompts = false;    // prompt-carrying steps (EngineOptions::prompt_graphs): tokens, sequences and logit rows
  int32_t granule = kPromptPadGranule;  // tokens of a padded prompt step: a multiple of this, or max_step_tokens
};

// Verify steps (speculative decoding): a verify chunk runs as 1 + n_draft one-row entries (model/batch.h
// verify_entries), so a step of decode and verify chunks is decode-shaped and padded as a decode step, entries
// counted as sequences; its graph key differs from a plain decode step's only by Batch::rows_share_kv. Worked
// example: 3 plain decodes and one sequence verifying 4 proposals make 3 + 5 = 8 entries, the key of an 8-sequence
// decode step with rows_share_kv; at batch 1, k = 1..8 gives entries 2, 4, 4, 8, 8, 8, 8, 16 (at most 5 keys per
// table width). A step that also carries prompt chunks is prompt-padded (each verify entry one sequence).
//
// Decode padding (backends that replay step graphs): a graph is recorded per (tokens, sequences, table width,
// logit rows), so a decode step of n sequences is padded to the next power of two with dummy sequences (token
// 0 at position 0, KV in a scratch block no sequence owns, their logits computed and ignored). 1..128 running
// sequences then need 8 graphs per table-width bucket instead of 128. Worked example: 37 running sequences
// run as 64; the 27 dummies cost 27/64 of a decode step's activations but no weight traffic (the weights are
// read once per step whatever the batch), which is what a memory-bound decode step pays for.
//
// Prompt padding (opt-in, StepPadding::pad_prompts; the model captures such steps when set_prompt_graphs is on):
// a step with prompt chunks of n tokens and s chunks runs as N = min(round_up(n, granule), max_step_tokens)
// tokens and P = the next power of two >= s (+1 when N > n) sequences: one dummy sequence holds the N - n pad
// tokens (token 0 at positions 0.., q_len = kv_len = the pad, KV in the scratch blocks), the other P - s - 1
// dummies hold no token at all (q_len = kv_len = 0, q_start = N: every attention kernel skips such a sequence,
// as it skips the other kind's), so a step that fills the budget still pads its sequence count. Logit rows are
// padded to P (the dummies' point at row N - 1; the sampler skips them: RowMode::Skip). Real rows come first, in
// plan order, so logits(i) / token(i) are unchanged. Worked example: 49 chunks with 509 tokens under a budget of
// 512 run as 512 tokens (a 3-token dummy) and 64 sequences (14 empty dummies), 64 logit rows.
// Step-graph warm-up (serving start, on a backend that replays step graphs): each graph key a loaded server's steps
// take is otherwise captured the first time a step has it, which costs that step an eager run, the capture and
// the instantiation on the serving path. warm_up_graphs runs each key once on dummy rows whose KV lives in the
// scratch blocks (no pool block, no sequence, no cache entry is touched), so the first requests replay graphs:
//  - decode steps of P = 1, 2, 4, .. sequences up to the padded max_seqs (with GraphWarmup::verify_keys, P >= 2
//    also as verify steps: rows_share_kv);
//  - with prompt padding, prompt-carrying steps of the full budget (the shape a loaded server's prompt steps take)
//    with P = 1, 2, 4, .. sequences up to the padded max_seqs + 1;
// each at every table width mb = 1, 2, 4, .. up to the padded max_blocks (a step's key has the power of two at or
// above its longest block table). At most max_graphs keys, narrow tables first. Worked example (Llama-3-8B on one
// H200, --ctx 2048, blocks of 16, --max-running 256, budget 512): decode P 1..256 x mb 1..128 (72 keys) and the
// prompt keys whose P x mb x 16 rows hold 512 tokens: 137 in all, recorded in ~1.9 s. Measured (docs/perf-log.md
// "## 2026-11-30: prompt-step graphs"): before the warm-up the first 64-client run of a fresh server made 4,634 tok/s against 4,843 for
// the next run on the same server; with it, 4,786 then 4,858.
struct GraphWarmup {
  int32_t max_seqs = 1;           // the scheduler's max_running
  int32_t max_blocks = 1;         // blocks of a full-context sequence
  bool device_sampling = false;   // the path the serving steps take (launch_sampled vs run): part of the graph key
  int32_t max_graphs = 64;        // at most this many keys (the model's graph cache)
  bool verify_keys = false;       // also each decode key of 2+ sequences as a verify step's (Batch::rows_share_kv)
};

class ModelRunner {
 public:
  // scratch_block: a KV block reserved for decode padding rows (-1: no padding).
  ModelRunner(LlamaModel& model, int32_t scratch_block)
      : ModelRunner(model, StepPadding{.scratch_first = scratch_block, .n_scratch = scratch_block >= 0 ? 1 : 0}) {}
  ModelRunner(LlamaModel& model, const StepPadding& padding);

  // Runs the plan's chunks. Afterwards logits(i) is the (vocab_size) row of the i-th chunk that samples (in
  // plan order), logits(i, r) the r-th of a verify chunk's 1 + n_draft rows. Does not advance the sequences (the
  // caller commits them).
  void run(const StepPlan& plan);
  // The same with the logits left on the device (model.supports_device_sampling()), in two halves
  // (LlamaModel::launch_sampled / collect_sampled), so that the host can prepare the next step meanwhile
  // (asynchronous scheduling). launch_sampled builds and enqueues the step: rows[i] says what happens to the i-th
  // chunk that samples (Device: drawn there; Host: its logits are copied); decode padding rows are skipped.
  // collect waits for the oldest launched step, after which token(i) / logits(i) are that step's. Between them the
  // plan's sequences may change (the batch was copied at launch).
  void launch_sampled(const StepPlan& plan, std::span<const RowSampling> rows);
  // A launched step with masked rows (RowSampling::masked): its draw, with masks[i] ((ceil(vocab / 64)) u64
  // words, empty: none) for the i-th chunk that samples (LlamaModel::seal_sampled).
  void seal(std::span<const std::span<const uint64_t>> masks);
  bool newest_unsealed() const { return model_.newest_unsealed(); }
  void collect();
  // After run: every row; after collect: the Host rows. r: the r-th logit row of a verify chunk (after run).
  std::span<const float> logits(size_t i, size_t r = 0) const;
  // After collect, a Device row: the drawn id (-1: every logit was NaN/-inf).
  int32_t token(size_t i) const;
  // Runs each step-graph key of GraphWarmup once on dummy rows (see above); returns how many steps it ran. Needs
  // the scratch blocks (StepPadding::scratch_first >= 0); prompt keys only with pad_prompts.
  int32_t warm_up_graphs(const GraphWarmup& w);
  // The last step's Batch as run (padding included): for tests and diagnostics.
  const Batch& batch() const { return batch_; }

 private:
  void build_batch(const StepPlan& plan);  // fills batch_ (with padding rows at the end)
  void pad_decode_step(size_t n_chunks);   // decode padding (see above)
  void pad_prompt_step(size_t n_chunks);   // prompt padding (see above)
  // warm_up_graphs: batch_ = a dummy step of n tokens over n_seqs sequences with tables mb wide (false: no real
  // step has this key), then run like run / launch_sampled + collect with every row skipped.
  bool build_dummy_step(int32_t n, int32_t n_seqs, int32_t mb, bool decode);
  void run_dummy_step(bool device_sampling);

  LlamaModel& model_;
  StepPadding padding_;
  Batch batch_;
  std::vector<float> logits_;  // run: (logit rows, vocab_size) row-major; the real rows first, in plan order
  std::vector<int32_t> first_logit_row_;  // (n_sampling_chunks + 1) the chunk's first logit row (a verify chunk:
                                          // 1 + n_draft rows from there), then the end of the real rows
  std::vector<RowSampling> row_modes_;  // launch_sampled: (logit rows) the rows' settings, padding rows Skip
  std::vector<std::span<const uint64_t>> row_masks_;  // seal: (logit rows) the rows' masks
  SampledStep sampled_;                 // collect: the drawn ids and the Host rows' logits
  struct LaunchedRows {
    std::vector<int32_t> host_index;  // (n_sampling_chunks) the chunk's first row of sampled_.host_logits, -1: none
    std::vector<int32_t> logit_row;   // first_logit_row_ of the step
  };
  std::vector<int32_t> host_index_;     // collect: LaunchedRows::host_index of the step read
  std::vector<int32_t> token_row_;      // collect: LaunchedRows::logit_row of the step read (its drawn ids' rows)
  std::deque<LaunchedRows> launched_;   // launch_sampled: the steps in flight, oldest first
  bool device_step_ = false;            // whether the last step read was device-sampled (collect, not run)
};

}  // namespace ferry

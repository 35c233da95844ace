// The Llama-family forward pass (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3), written once over the
// Backend op set and the paged KV cache. It runs one Batch (any mix of prefill and decode rows of any
// number of sequences) and returns the logits of the requested rows.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/sampling.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/vocab_shard.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "ops/communicator.h"

namespace ferry {

struct KvCacheShape {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  int32_t max_seq_tokens = 0;  // the longest sequence the engine runs (its context); 0: the whole cache
};

// Tensor parallelism (src/parallel): the model runs this rank's shard of the weights (config = the rank's
// config) and calls comm->all_reduce_sum after the embedding and each row-parallel matmul (wo, w_down) and
// comm->all_gather_inplace on the vocab-parallel logits; an MoE layer's output is summed over comm too (each rank
// computed its part of every expert, or its own experts: parallel/sharding.h). Defaults: world 1 (identity
// communicator, the whole vocabulary), the same code path. Fill it with make_parallel_context (parallel/sharding.h).
struct ParallelContext {
  Communicator* comm = nullptr;  // null: world 1; else outlives the model. Broadcasts the steps; sums MoE outputs
  VocabShard vocab;              // full == 0: the whole vocabulary of the config
  // Expert parallelism: the attention, dense FFNs, embedding and lm head are whole on every rank, so their sums and
  // the logits gather run over a group of one (identity), not comm.
  bool dense_replicated = false;
};

// What a step does with one logit row when the logits stay on the device (LlamaModel::forward_sampled).
enum class RowMode {
  Skip,    // nothing (a padding row: its logits are computed and ignored)
  Host,    // copy the row's logits to the host (logprobs, penalties: the host sampler takes it)
  Device,  // sample it on the device; only the token id crosses to the host
};
struct RowSampling {
  RowMode mode = RowMode::Skip;
  SamplingParams params;  // Device: penalties off
  uint64_t position = 0;  // Device: the Philox counter = the history length (prompt + generated) before the draw
  bool masked = false;    // Device: the draw takes a token mask that seal_sampled gives (structured output)
};
// forward_sampled's results. tokens: (m) i32, the drawn id of each Device row (-1: every logit NaN/-inf;
// unspecified for other rows); host_logits: (n_host, vocab) f32, the Host rows' logits in row order.
struct SampledStep {
  std::vector<int32_t> tokens;
  std::vector<float> host_logits;
};
// Logits that crossed to the host, and rows sampled on the device (counters since the model was made).
struct LogitsTraffic {
  int64_t host_bytes = 0;      // f32 logits bytes copied device -> host (every path)
  int64_t device_rows = 0;     // rows sampled on the device
  int64_t host_rows = 0;       // rows copied for the host sampler by forward_sampled
};

// Called with every named intermediate when set (debugging against transformers layer by layer).
using TensorObserver = std::function<void(const std::string& name, int layer, const Tensor& t)>;

class LlamaModel {
 public:
  // max_step_tokens: the most tokens one Batch may hold (sizes the activation buffers).
  LlamaModel(ModelConfig config, ModelWeights weights, Backend& backend, KvCacheShape kv, int32_t max_step_tokens,
             ParallelContext parallel = {});

  // The model as stored (at world > 1: the whole model, not this rank's shard; logits are (rows, vocab_size)).
  const ModelConfig& config() const { return full_config_; }
  const ModelConfig& local_config() const { return config_; }  // this rank's shard
  const VocabShard& vocab() const { return vocab_; }  // logits are (rows, vocab().full)
  int tp_world() const { return comm_->world(); }
  const KvCacheShape& kv_shape() const { return kv_; }
  int32_t max_step_tokens() const { return max_step_tokens_; }
  size_t kv_bytes() const;

  // logits: resized to (batch.logit_rows.size(), full vocab_size), row-major (every rank gets them).
  // Tensor parallel (world > 1): called on rank 0 only; it broadcasts the batch to the followers first.
  void forward(const Batch& batch, std::vector<float>& logits);
  // Tensor-parallel followers (rank > 0) loop on follow(): it waits for rank 0's next step and runs it;
  // false once rank 0 called end_followers(). A failure on any rank aborts the group: every rank's pending
  // or next collective throws ferry::Error naming the failed rank.
  bool follow();
  // Destroys the recorded step graphs (the next steps record new ones). Tensor parallelism calls it before the
  // communicator goes: a graph holding NCCL kernels must not outlive its communicator.
  void drop_graphs() { graphs_.clear(); }
  // Device sampling: whether forward_sampled works (a backend with supports_sampling(), world 1: at world > 1
  // the gathered logits are (world, m, V/world + 1) shards, not (m, V) rows, so device sampling is off).
  bool supports_device_sampling() const { return backend_.supports_sampling() && comm_->world() == 1; }
  // Runs the step like forward, but the logits stay on the device: rows[i] says what happens to logit row i
  // (rows.size() == batch.logit_rows.size()). Copies m token ids and the Host rows' logits to the host.
  void forward_sampled(const Batch& batch, std::span<const RowSampling> rows, SampledStep& out);
  // forward_sampled in two halves, so that the host can prepare the next step while the device runs this one
  // (asynchronous scheduling, engine/serving_engine.cpp): launch_sampled enqueues the step and returns;
  // collect_sampled waits for the OLDEST launched step only (not what was launched after it) and returns its
  // results. At most kMaxInFlight steps are launched and not collected; a step with Host rows must be collected
  // before the next launch (the logits staging buffer is single).
  // A step with masked rows (RowSampling::masked) is launched without its draw: the forward runs while the host
  // computes the masks (which may need the previous step's tokens), then seal_sampled enqueues the draw with them.
  // masks: (m) spans, one per logit row, each (ceil(V / 64)) u64 words for a masked row (empty: no mask). Such a
  // step must be sealed before it is collected and before the next launch.
  static constexpr int kMaxInFlight = 2;
  void launch_sampled(const Batch& batch, std::span<const RowSampling> rows);
  void seal_sampled(std::span<const std::span<const uint64_t>> masks);
  bool newest_unsealed() const { return !in_flight_.empty() && !in_flight_.back().sealed; }
  void collect_sampled(SampledStep& out);
  int steps_in_flight() const { return int(in_flight_.size()); }
  // Token feedback (needs supports_device_sampling()): with it on, a launched step's input ids may hold
  // placeholders -(i + 1) = "the token the previous launched step drew in its logit row i" (a Device row), which
  // the step replaces on the device before its embedding (Backend::resolve_placeholders), so it can be launched
  // before that token is known on the host. Adds one small kernel to every step and moves the input copy out of
  // the step graphs (so that the host can fence its staging buffer); recorded graphs are dropped.
  void set_token_feedback(bool on);
  bool token_feedback() const { return token_feedback_; }
  const LogitsTraffic& logits_traffic() const { return traffic_; }
  void end_followers();  // rank 0: ends the followers' loops (a no-op at world 1)

  void set_observer(TensorObserver observer) { observer_ = std::move(observer); }

  // Step graphs (on backends that support them): a decode step (one token per sequence) is captured once per
  // (n_seqs, block-table bucket, logit rows) and replayed; the bucket is max_blocks_per_seq rounded up to a
  // power of two (tables are padded with -1). A verify step laid out as one-row entries (Batch::rows_share_kv,
  // model/batch.h) is such a step, with a key of its own. On by default; off: every step runs op by op.
  void set_step_graphs(bool on) { graphs_on_ = on; }
  // Prompt-carrying steps too (EngineOptions::prompt_graphs): with step graphs
  // on, every step that is not a pure decode step is captured and replayed like one, keyed on its exact shape. The
  // caller pads such steps to a few shapes (engine/model_runner.h: tokens to a multiple of 64, sequences and logit
  // rows to a power of two); unpadded steps would each record a graph of their own. A captured step reads nothing
  // from the host: the CUDA backend then runs the one-launch mixed attention kernel (no host q_len mirror).
  void set_prompt_graphs(bool on) { prompt_graphs_ = on; }
  struct GraphStats {
    int64_t captures = 0;  // graphs recorded
    int64_t replays = 0;   // steps run as one graph launch
    int64_t eager = 0;     // steps run op by op
  };
  const GraphStats& graph_stats() const { return graph_stats_; }
  static constexpr int32_t max_graphs() { return int32_t(kMaxGraphs); }
  // Host time of the last collected sampled step: enqueuing its work (a graph launch, or every op of an eager step)
  // and the time collect_sampled then blocked for the device. Step by step, enqueue close to enqueue + wait means
  // the host, not the device, sets the pace; with a step launched in between (asynchronous scheduling) the host's
  // work overlaps the device's and only the remainder is waited.
  struct StepHostTime {
    double enqueue_s = 0;
    double wait_s = 0;
  };
  const StepHostTime& last_step_host_time() const { return step_host_time_; }

 private:
  void run_step(const Batch& batch, std::vector<float>& logits);  // this rank's part of one step
  // Runs the step (graph replay when it can) up to the gathered logits (world, m, local vocab rows) in logits_.
  // host_logits: also copies them to the host and returns them there (synchronized); else returns null and
  // the logits are only on the device (work still in flight on the backend's stream).
  const float* execute_step(const Batch& batch, bool host_logits);
  // Where each step input sits in the packed input buffer (byte offsets; 8-byte aligned).
  struct StepLayout {
    int32_t n = 0, n_seqs = 0, mb = 0, m = 0;  // tokens, sequences, table stride, logit rows
    bool decode_only = false;  // every sequence has exactly one query row (padded prompt steps may hold q_len 0)
    bool rows_share_kv = false;  // Batch::rows_share_kv (a verify step's one-row entries)
    size_t slots = 0, tokens = 0, positions = 0, q_start = 0, q_len = 0, kv_len = 0, rows = 0, tables = 0;
    size_t bytes = 0;
  };
  // (n, n_seqs, table stride, logit rows, logits copied to the host in the graph, decode-only, rows share K/V).
  // decode-only is a key of its own: a padded prompt step can have n == n_seqs (empty dummy sequences) with a decode
  // step's other keys; so is rows_share_kv: a verify step (one-row entries, model/batch.h) has a decode step's shape
  // but its graph stores K/V apart from the attention.
  using GraphKey = std::tuple<int32_t, int32_t, int32_t, int32_t, bool, bool, bool>;
  struct GraphEntry {
    std::unique_ptr<StepGraph> graph;
    uint64_t last_use = 0;  // graph_clock_ at its last replay or capture (the least recent one is evicted)
  };

  void observe(const char* name, int layer, const Tensor& t) const {
    if (observer_) observer_(name, layer, t);
  }
  static StepLayout layout_for(const Batch& batch, int32_t mb);
  // Gemma's layer after its attention (post_norms): attn (n, q_dim) · woᵀ normed by post_attn_norm and added to x
  // (n, dim); xb (n, dim) = ffn_norm(x); gate, up (n, hidden) f32 scratch; delta (n, dim) = post_ffn_norm(ffn out),
  // added to x with next's attention norm into xb when next is set (else left for the output norm).
  void gemma_layer_tail(int layer, const LayerWeights& L, const LayerWeights* next, const Tensor& attn, const Tensor& x,
                        const Tensor& xb, const Tensor& delta, const Tensor& gate, const Tensor& up);
  // Writes the step inputs into the host staging buffer (growing staging and device inputs if needed).
  void stage_inputs(const Batch& batch, const StepLayout& L);
  // Enqueues the whole step: inputs staging -> device, every op, and (async_logits) logits -> host staging.
  // Returns the device logits (m, vocab). `host_meta`: the batch whose vectors back AttentionMeta's host_*
  // mirrors (null in graph steps: nothing recorded may depend on host values).
  Tensor enqueue_step(const StepLayout& L, const Batch* host_meta, bool async_logits);
  // The step's packed inputs, staging -> device (enqueue_step does it, except for graph steps with token feedback,
  // whose copy is enqueued before the replay, outside the graph).
  void copy_inputs(const StepLayout& L);
  // Checks a step's input ids: vocabulary ids, or (token feedback) placeholders of the last launched step's Device rows.
  void check_step_tokens(const Batch& batch) const;
  // Grows the device logits to `rows` rows (and, with staging, the page-locked host copy).
  void ensure_logits(size_t rows, bool staging);

  // Recorded graphs at most (the least recently used one goes). Decode keys: power-of-two sequence counts x table
  // buckets (64 clients at contexts <= 1024 with blocks of 16: 7 x 2); padded prompt keys (prompt graphs on):
  // token counts (multiples of 64 up to the budget: 8 at 512) x sequence counts x table buckets: a fresh server's
  // 64-client 512/128 run captured ~20 (2026-11-30: 26 over three runs). The serving warm-up (ModelRunner::
  // warm_up_graphs) records up to 2 x 9 x 8 = 144 keys at --max-running 256 and --ctx 2048 ahead of them. Clearing
  // all of them at the limit (as before) would re-capture the hot keys too.
  static constexpr size_t kMaxGraphs = 256;

  ModelConfig config_;       // this rank's shard (heads, hidden units, vocabulary rows)
  ModelConfig full_config_;  // the whole model
  ModelWeights weights_;
  Backend& backend_;
  KvCacheShape kv_;
  int32_t max_step_tokens_;
  Tensor inv_freq_;  // (rope_dims/2) f32
  Tensor inv_freq_local_;  // (rope_dims/2) f32: Gemma 3's local layers (rope_theta_local), else empty
  // Paged KV cache, per layer: (n_blocks, block_size, n_kv_heads, head_dim) in backend.kv_dtype() (CPU f32, CUDA bf16).
  std::vector<DeviceBuffer> k_cache_, v_cache_;
  // Activations, sized for max_step_tokens rows.
  DeviceBuffer x_, xb_, q_, k_, v_, attn_, out_, gate_, up_, logits_hidden_, logits_, inv_freq_buf_, inv_freq_local_buf_;
  // Fused projections' outputs (only when a layer has wqkv / w_gate_up): (n, (H + 2*KVH)*D) and (n, 2*hidden) f32.
  DeviceBuffer qkv_, gate_up_;
  // Expert layers' FFN input (only when a layer is MoE): (n, dim) f32.
  DeviceBuffer moe_in_;
  DeviceBuffer inputs_;          // packed step inputs (StepLayout), device
  DeviceBuffer inputs_staging_;  // the same bytes on the host (page-locked on a GPU): the copy source
  DeviceBuffer logits_staging_;  // (rows, vocab) f32 host, page-locked: graph steps copy the logits here
  size_t logits_capacity_rows_ = 0;
  IdentityCommunicator identity_;
  Communicator* comm_ = &identity_;  // the parallel group (identity at world 1): steps, MoE sums
  Communicator* dense_comm_ = &identity_;  // sums of split heads / hidden units / vocabulary: comm_, or identity_
                                           // where those are replicated (ParallelContext::dense_replicated)
  VocabShard vocab_;                 // this rank's vocabulary rows (the whole vocabulary at world 1)
  std::vector<float> gathered_host_;
  DeviceBuffer sample_ids_;          // (rows) i32 device: forward_sampled's drawn ids (fixed size with token feedback)
  std::array<DeviceBuffer, kMaxInFlight> sample_ids_staging_;  // (rows) i32 host, page-locked: their copies, one
                                                                // per step in flight
  // A launched, not yet collected sampled step (launch_sampled / collect_sampled).
  struct InFlightStep {
    int64_t m = 0, n_dev = 0, n_host = 0;  // logit rows; Device rows are a prefix [0, n_dev); Host rows
    int staging = 0;                       // its sample_ids_staging_ buffer
    uint64_t mark = 0;                     // Backend::mark() after its last copy
    std::vector<RowMode> modes;            // (m)
    std::vector<SamplingParams> params;    // (n_dev) the draws' settings (a placeholder draw for non-Device rows)
    std::vector<uint64_t> positions;       // (n_dev) their Philox counters
    bool masked = false;                   // some Device row takes a mask (RowSampling::masked)
    bool sealed = false;                   // its draw and copies are enqueued (seal)
    std::chrono::steady_clock::time_point started, enqueued;
  };
  // Enqueues the draw of the Device rows (with masks: (n_dev, words) u64, or empty), the copies of the Host rows'
  // logits and the step's mark.
  void seal(InFlightStep& step, std::span<const uint64_t> masks);
  std::deque<InFlightStep> in_flight_;  // oldest first
  int next_staging_ = 0;
  std::vector<RowMode> last_modes_;     // (m) the last launched sampled step's row modes (placeholders name them)
  bool token_feedback_ = false;
  std::vector<uint64_t> sample_masks_;  // (n_dev, words) u64: seal_sampled's masks in the sampler's layout
  LogitsTraffic traffic_;
  std::vector<uint8_t> step_bytes_;     // the step's Batch as broadcast to the followers (batch_codec.h)
  std::vector<float> follower_logits_;  // a follower rank's logits of the step (m, vocab) f32: assembled like rank 0's, then unused
  TensorObserver observer_;
  bool graphs_on_ = true;
  bool prompt_graphs_ = false;  // set_prompt_graphs
  std::map<GraphKey, GraphEntry> graphs_;
  uint64_t graph_clock_ = 0;  // counts graph steps (GraphEntry::last_use)
  GraphStats graph_stats_;
  StepHostTime step_host_time_;
};

}  // namespace ferry

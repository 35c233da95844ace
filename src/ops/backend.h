// The backend-neutral op set. The model forward is written once against this interface; the CPU backend
// (reference and fast kernels) implements it now, the CUDA backend later. Every op is a call on the
// backend's single stream, so a GPU backend can capture a decode step in a graph.
//
// Conventions: activations are F32 and contiguous, shapes outermost-first; n = tokens in the step.
// Weights keep their storage type (any DType the backend's matmul supports).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "ferry/sampling.h"
#include "core/tensor.h"
#include "ops/attention_meta.h"
#include "ops/moe_routing.h"

namespace ferry {

class Communicator;  // ops/communicator.h: the ranks a row-parallel projection's partial sums are reduced over

// Owning handle of backend memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* ptr, size_t bytes, Device device, std::function<void(void*)> release)
      : ptr_(ptr, std::move(release)), bytes_(bytes), device_(device) {}
  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // A tensor view over the start of this buffer (checked to fit).
  Tensor view(DType dtype, std::initializer_list<int64_t> dims) const {
    Tensor t = Tensor::make(dtype, dims, ptr_.get(), device_);
    FERRY_ASSERT(t.nbytes() <= bytes_);
    return t;
  }

 private:
  std::unique_ptr<void, std::function<void(void*)>> ptr_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
  Device device_ = Device::Cpu;
};

// How RoPE pairs the dimensions of a head.
enum class RopeOrdering {
  Interleaved,  // pairs (2i, 2i+1): GGUF llama (the converter permutes q/k rows for this)
  Neox,         // pairs (i, i + head_dim/2): Hugging Face Llama/Qwen (rotate_half), GGUF qwen2/qwen3
};

// A recorded step: the ops a backend enqueued between begin_capture() and end_capture(), with every buffer
// address and scalar argument fixed at capture time (a CUDA graph). Values that vary from step to step must
// be read by the kernels from backend memory (token ids, positions, slots, kv_len, block tables).
class StepGraph {
 public:
  virtual ~StepGraph() = default;
};

// Arguments of Backend::qkv_epilogue (fill with designated initializers). H = n_heads, KVH = n_kv_heads,
// D = head_dim of this rank's shard.
struct QkvEpilogueArgs {  // every field defaults to empty / 0, so callers name only what they set
  Tensor qkv{};        // (n, H + 2*KVH, D) f32: the fused q|k|v projection of the step (bias included), read only
  Tensor positions{};  // (n) i32
  Tensor slots{};      // (n) i64, slot = block_id * block_size + offset (as store_kv)
  Tensor inv_freq{};   // (rope_dims/2) f32, as rope: the first 2*len dims of each q and k head rotate
  Tensor q_norm{};     // (D) f32 per-head RMSNorm weight of q before RoPE (Qwen3), or empty
  Tensor k_norm{};     // (D) f32 the same for k, or empty (both set or both empty)
  float eps = 0;       // RMSNorm epsilon (used with q_norm/k_norm)
  RopeOrdering ordering = RopeOrdering::Interleaved;
  Tensor q{};          // out: (n, H, D) f32, normed and rotated
  Tensor k_cache{};    // out: (n_blocks, block_size, KVH, D) kv_dtype(): each token's normed, rotated k at its slot
  Tensor v_cache{};    // out: same shape: each token's v at its slot
  Tensor k_out{};      // optional out: (n, KVH, D) f32 copy of the normed, rotated k (debug observer), or empty
  Tensor v_out{};      // optional out: (n, KVH, D) f32 copy of v, or empty
};

// Arguments of Backend::moe_ffn (fill with designated initializers). E = n_experts (the router's rows), El = the
// experts this call computes (El = E, or E / N on a rank of expert parallelism), H = one expert's hidden units (its
// tensor-parallel part under --tp), k = top_k; n = tokens of the step.
struct MoeFfnArgs {
  Tensor out{};                       // (n, dim) f32: per token, sum over its k slots of weight * expert(x), the slots
                                      // routed to experts outside [expert_begin, expert_begin + El) counting zero
  Tensor x{};                         // (n, dim) f32: the normed FFN input
  Tensor router{};                    // (E, dim), any matmul weight type: logits = x · routerᵀ (every expert scored)
  std::span<const Tensor> gate_exps;  // El x (H, dim), matmul weights (prepare_weight'ed one by one): experts
                                      // expert_begin .. expert_begin + El - 1
  std::span<const Tensor> up_exps;    // El x (H, dim)
  std::span<const Tensor> down_exps;  // El x (dim, H)
  int top_k = 0;
  MoeNorm norm = MoeNorm::Renormalize;
  int expert_begin = 0;               // the global index of gate_exps[0] (expert parallelism; 0 when El = E)
};
// The shapes above, checked for every backend's moe_ffn (x and out f32, El experts of one (H, dim) / (dim, H) shape,
// 0 <= expert_begin, expert_begin + El <= E, 1 <= top_k <= E); a ferry::Error naming the mismatch otherwise.
void check_moe_ffn_args(const MoeFfnArgs& a);

// Ops and attention options beyond the Llama set, which a backend may lack (Backend::supports). The model checks
// at load that its backend has every feature its config uses, and refuses it with a one-line error otherwise.
enum class ModelFeature {
  GeluTanhGlu,    // geglu_tanh (Gemma's FFN)
  SoftCap,        // softcap and AttentionMeta::softcap (Gemma 2)
  SlidingWindow,  // AttentionMeta::window (Mistral, Gemma, Phi-3, Qwen2 with use_sliding_window)
  Scale,          // scale (Gemma's embedding scale; longrope's / yarn's attention factor with partial rotary dims)
};
std::string feature_name(ModelFeature f);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // What a user may want to know of how the backend holds and reads the model (key, value), e.g. the device bytes
  // of the prepared weights; `ferry bench` and `ferry inspect` print them. Default: nothing.
  virtual std::vector<std::pair<std::string, std::string>> facts() const { return {}; }

  // ---- memory ----
  virtual DeviceBuffer alloc(size_t bytes) = 0;
  // Element type of the paged KV cache this backend's store_kv writes and attention reads (F32 or BF16);
  // the model allocates the cache with it.
  virtual DType kv_dtype() const { return DType::F32; }
  // Makes a weight usable by matmul/embedding. The CPU backend returns the view itself (weights stay in the
  // mmap); a GPU backend uploads and may repack. `keep` receives the storage the result points into.
  virtual Tensor prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) = 0;
  // Row ranges of different types stacked into one matmul weight (model/fuse_weights.h: a K-quant mix's q|k|v,
  // `runs` = the q|k rows in Q4_K, then the v rows in Q6_K): host tensors of one column count, each of one type, in
  // row order. The result (sum of rows, cols) is DType::Stacked, read only by this backend's matmul ops; empty
  // where the backend does not stack these types (the default: the model then keeps the parts apart).
  virtual Tensor prepare_stacked_weight(std::span<const Tensor> runs, std::vector<DeviceBuffer>& keep) {
    (void)runs, (void)keep;
    return Tensor{};
  }
  // Whether load_weights should concatenate wq|wk|wv into one wqkv and w_gate|w_up into one w_gate_up (fewer,
  // larger matmuls; the model then runs qkv_attention (qkv_epilogue + attention) and matmul_swiglu (matmul +
  // swiglu_fused)). A backend that says true implements qkv_epilogue and swiglu_fused.
  virtual bool wants_fused_projections() const { return false; }
  // Enqueues dst <- src. A GPU backend copies from alloc_host memory asynchronously: src must not change until
  // wait_for_copies() (or synchronize()) has returned.
  virtual void copy_to_device(const Tensor& dst, const void* src, size_t bytes) = 0;
  // Blocks until every copy_to_device enqueued so far has read its source (a no-op where copies are synchronous).
  virtual void wait_for_copies() {}
  virtual void copy_to_host(void* dst, const Tensor& src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // ---- host staging and step graphs (optional; the defaults run everything directly) ----
  // Host memory that copy_to_device may read from and copy_to_host_async may write to inside a captured
  // step (page-locked on a GPU backend). Device::Cpu buffer.
  virtual DeviceBuffer alloc_host(size_t bytes) {
    auto* p = new uint8_t[std::max<size_t>(bytes, 1)];
    return DeviceBuffer(p, bytes, Device::Cpu, [](void* q) { delete[] static_cast<uint8_t*>(q); });
  }
  // Enqueues dst <- src without waiting (dst: alloc_host memory); the bytes are there after synchronize().
  virtual void copy_to_host_async(void* dst, const Tensor& src, size_t bytes) { copy_to_host(dst, src, bytes); }
  // Whether begin_capture/end_capture/replay work. While capturing, ops are recorded, not run, and
  // copy_to_host / synchronize / growing internal scratch are errors.
  virtual bool supports_step_graphs() const { return false; }
  virtual void begin_capture() { fail("backend {} cannot capture step graphs", name()); }
  virtual std::unique_ptr<StepGraph> end_capture() { fail("backend {} cannot capture step graphs", name()); }
  // Ends a capture that failed half-way (an op threw); the recorded ops are dropped. No-op when not capturing.
  virtual void cancel_capture() {}
  // Enqueues the recorded ops (results after synchronize()). Returns false, running nothing, when the graph is
  // stale (scratch memory it recorded was reallocated since): capture again.
  virtual bool replay(const StepGraph& graph) { return false; }

  // The dtype in which the model hands a step of n tokens' normed activations (the input of the q|k|v and
  // gate|up matmuls) from the norm to the matmul: F32 here; BF16 on a backend whose every matmul path for n
  // tokens reads bf16 activations anyway (the norm then writes them rounded, and no conversion pass runs before
  // each matmul). rms_norm / add_rms_norm outputs and matmul's x accept it.
  virtual DType matmul_input_dtype(int64_t n_tokens) const { return DType::F32; }

  // ---- ops ----
  // out: (n, dim) f32; table: (vocab, dim) any dtype; ids: (n) i32
  virtual void embedding(const Tensor& out, const Tensor& table, const Tensor& ids) = 0;
  // out, x: (rows, cols) f32 (out: or matmul_input_dtype(rows)); weight: (cols) f32. out = x / rms(x) * weight.
  // out may alias x.
  virtual void rms_norm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) = 0;
  // residual: (n, dim) f32, updated in place: residual += delta; then out = rms_norm(residual) * weight (out: f32
  // or matmul_input_dtype(n)).
  virtual void add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& weight,
                            float eps) = 0;
  // The end of a sublayer, as one op: a row-parallel projection, the sum of its partial outputs over the
  // tensor-parallel group, the residual add and the next norm. Shapes:
  struct SublayerEnd {
    Tensor out{};       // (n, dim): rms_norm(residual) * norm (f32 or matmul_input_dtype(n)); see next_w
    Tensor residual{};  // (n, dim) f32, updated in place: += delta
    Tensor delta{};     // (n, dim) f32 scratch: x · wᵀ, summed over the group
    Tensor x{};         // (n, n_in): the projection's input
    Tensor w{};         // (dim, n_in): this rank's columns of the row-parallel weight
    Tensor norm{};      // (dim) f32
    Tensor next_w{};    // the weight that projects out next, through rms_norm_matmul(…, out, residual, norm, …,
                      // next_w, …), or empty. Given, the backend may leave out unwritten and compute the norm in that
                      // projection instead (its choice; rms_norm_matmul always gives the right result).
    float eps = 0;
    Communicator* group = nullptr;  // the ranks whose partial sums add up (never null: world 1 adds nothing)
  };
  // The default is matmul, group->all_reduce_sum, add_rms_norm; a backend may fuse them (CUDA: the peer
  // all-reduce's add and norm in one launch, or the projection pushing its rows to the peers).
  virtual void sublayer_end(const SublayerEnd& s);
  // A layer's input norm and projection, as one op: normed = rms_norm(x) * norm_weight; out = normed · wᵀ + bias
  // (x: (n, dim) f32; normed: (n, dim) scratch in matmul_input_dtype(n); out, w, bias as in matmul). Where the op
  // before was a sublayer_end that wrote this norm into normed (same tensors), the norm is not computed again; a
  // backend may compute it inside the projection and leave normed unwritten.
  virtual void rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight,
                               float eps, const Tensor& w, const Tensor& bias);
  // A decode layer's tail after the attention, as one op. Shapes as in the ops it composes.
  struct AttnOutFfn {
    Tensor out{};        // (n, dim): the next layer's attention input, rms_norm(residual) * next_norm (f32 or
                       // matmul_input_dtype(n)); also the FFN's normed input on the way (may alias ffn_in)
    Tensor residual{};   // (n, dim) f32, updated in place: += attn · woᵀ, then += act · w_downᵀ (each summed over group)
    Tensor delta{};      // (n, dim) f32 scratch (a projection's output)
    Tensor attn{};       // (n, q_dim): the o-projection's input
    Tensor wo{};         // (dim, q_dim): this rank's columns
    Tensor ffn_norm{};   // (dim) f32
    Tensor ffn_in{};     // (n, dim) scratch: rms_norm(residual) * ffn_norm, the gate|up input
    Tensor w_gate_up{};  // (2 hidden, dim): this rank's hidden units
    Tensor gate_up{};    // (n, 2 hidden) f32 scratch
    Tensor act{};        // (n, hidden): silu(gate) * up (matmul_swiglu's output dtype)
    Tensor w_down{};     // (dim, hidden): this rank's columns
    Tensor next_norm{};  // (dim) f32: the next layer's attention norm
    Tensor next_w{};     // as SublayerEnd::next_w, for out
    float eps = 0;
    Communicator* group = nullptr;  // as SublayerEnd::group
  };
  // sublayer_end(ffn_in ← attn · wo, ffn_norm); matmul_swiglu(act, gate_up, ffn_in, w_gate_up); sublayer_end(out ←
  // act · w_down, next_norm, next_w). A backend may run the whole in fewer launches (CUDA at one token: three
  // streamed matvecs, decode_fusion.cpp); delta, gate_up, act and ffn_in may then be left unwritten.
  virtual void attn_out_ffn(const AttnOutFfn& a);
  // out: (n, n_out) f32 = x (n, n_in) f32 (or matmul_input_dtype(n)) · w (n_out, n_in)ᵀ [+ bias (n_out) f32, or empty]
  virtual void matmul(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) = 0;
  // x: (n, n_heads, head_dim) f32, rotated in place; positions: (n) i32; inv_freq: (head_dim/2) f32
  // (rope scaling is folded into inv_freq by the model). Rotates the first 2*len(inv_freq) dims of each head.
  virtual void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeOrdering ordering) = 0;
  // Writes the step's keys and values into the paged cache.
  // k, v: (n, n_kv_heads, head_dim) f32; k_cache, v_cache: (n_blocks, block_size, n_kv_heads, head_dim)
  // of kv_dtype() (k/v rounded to it); slots: (n) i64, slot = block_id * block_size + offset.
  virtual void store_kv(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                        const Tensor& slots) = 0;
  // Causal attention of the step's queries over each sequence's cached keys/values (GQA).
  // out, q: (n, n_heads, head_dim) f32 (out may be matmul_input_dtype(n) instead: the o-projection's input, bf16 on
  // a GPU, then written without a conversion pass); caches as in store_kv; meta: per-sequence layout of the step.
  virtual void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionMeta& meta, float scale) = 0;
  // out = silu(gate) * up; all (n, hidden_dim) f32. out may alias gate.
  virtual void swiglu(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  // ---- optional ops (supports(feature) says which a backend has; the defaults fail) ----
  virtual bool supports(ModelFeature feature) const { return false; }
  // out = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))); all (n, hidden_dim)
  // f32. out may alias gate.
  virtual void geglu_tanh(const Tensor& out, const Tensor& gate, const Tensor& up) {
    fail("backend {} has no {}", name(), feature_name(ModelFeature::GeluTanhGlu));
  }
  // x: any shape f32, in place: x = cap * tanh(x / cap) (cap > 0).
  virtual void softcap(const Tensor& x, float cap) { fail("backend {} has no {}", name(), feature_name(ModelFeature::SoftCap)); }
  // x: (..., cols) f32, in place: x[..., :n_leading] *= s for every row of its last dimension (n_leading <= cols;
  // cols: the whole tensor). Gemma's embedding scale; longrope's attention factor on the rotated dims of q and k.
  virtual void scale(const Tensor& x, float s, int64_t n_leading) {
    fail("backend {} has no {}", name(), feature_name(ModelFeature::Scale));
  }
  // The fused projections' epilogues (used when wants_fused_projections()). No default: they cannot be
  // composed from the ops above without a strided copy.
  // Per token and head of a.qkv: q and k heads get the optional per-head RMSNorm then RoPE (the math of
  // rms_norm + rope); q heads go to a.q, k and v heads to the caches at the token's slot (as store_kv, rounded
  // to kv_dtype()), and to a.k_out / a.v_out when set.
  virtual void qkv_epilogue(const QkvEpilogueArgs& a) { fail("backend {} has no qkv_epilogue", name()); }
  // qkv_epilogue(e), then attention(out, e.q, e.k_cache, e.v_cache, meta, scale): the default does exactly that. A
  // backend may fuse the two for a decode step (meta.decode_only) and then leave e.q unwritten (the cache rows and
  // out are what the model reads next); it must not when e.k_out / e.v_out are asked for (a debug observer).
  virtual void qkv_attention(const QkvEpilogueArgs& e, const Tensor& out, const AttentionMeta& meta, float scale) {
    qkv_epilogue(e);
    attention(out, e.q, e.k_cache, e.v_cache, meta, scale);
  }
  // out: (n, hidden) f32 = silu(gate_up[:, :hidden]) * gate_up[:, hidden:]; gate_up: (n, 2*hidden) f32. out may be
  // matmul_input_dtype(n) instead of f32 (bf16 on a GPU: the down projection then reads it without a conversion).
  virtual void swiglu_fused(const Tensor& out, const Tensor& gate_up) { fail("backend {} has no swiglu_fused", name()); }
  // The fused ffn input projection: out (n, hidden) f32 (or matmul_input_dtype(n), as swiglu_fused) =
  // silu(x · w_gate_upᵀ[:, :hidden]) * x · w_gate_upᵀ[:, hidden:];
  // x: (n, dim) f32; w_gate_up: (2*hidden, dim), the rows of w_gate then those of w_up (a TP shard keeps that
  // shape with hidden / world); gate_up: (n, 2*hidden) f32 scratch. The default is matmul into gate_up then
  // swiglu_fused; a backend may compute SwiGLU inside the matmul instead and leave gate_up unwritten.
  virtual void matmul_swiglu(const Tensor& out, const Tensor& gate_up, const Tensor& x, const Tensor& w_gate_up) {
    matmul(gate_up, x, w_gate_up, Tensor{});
    swiglu_fused(out, gate_up);
  }
  // A mixture-of-experts FFN as one op: route each token (route_moe over x · routerᵀ), then out[t] = sum over
  // its k experts e of weight * down_e(silu(gate_e(x[t])) * up_e(x[t])). The default composes matmul, gather_rows
  // and swiglu per routed expert (its tokens gathered, each expert's weights read once), routing and the weighted
  // sum on the host (ops/moe_ffn.cpp): correct on any backend, not capturable in a step graph.
  virtual void moe_ffn(const MoeFfnArgs& a);
  // Whether moe_ffn runs without host synchronisation (so a step graph can hold it). The default composition does not.
  virtual bool captures_moe_ffn() const { return false; }
  // out: (m, cols) = x[rows[i]] for i < m; rows: (m) i32
  virtual void gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows) = 0;

  // ---- sampling on the device (optional; sampling/sampler.cpp is the reference) ----
  // Whether sample() works. The engine samples rows here when it can, so only m token ids cross to the host.
  virtual bool supports_sampling() const { return false; }
  // out: (m) i32 device = one token per row of logits (m, vocab) f32 device, the token sampling/sampler.cpp's
  // Sampler(params[i]).sample would draw at history length positions[i] (the Philox counter); -1 for a row
  // with no finite logit. params, positions: (m) host. Penalties must be off (ferry::Error otherwise).
  // mask (structured output): empty, or (m, ceil(vocab / 64)) u64 host words, bit t % 64 of word t / 64 set when
  // row i may draw token t; the logits of the clear bits become -inf in place before the draw. It is copied
  // before sample() returns. Enqueued on the backend's stream (results after synchronize()); not capturable in a
  // step graph.
  virtual void sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
                      std::span<const uint64_t> positions, std::span<const uint64_t> mask) {
    (void)out, (void)logits, (void)params, (void)positions, (void)mask;
    fail("backend {} cannot sample on the device", name());
  }
  // Token feedback (asynchronous scheduling: a step is enqueued before the previous step's sampled ids reach the
  // host). ids: (n) i32 device, rewritten in place: every id < 0 is a placeholder for row -id - 1 of sampled
  // ((rows) i32 device, the previous step's sample() output) and becomes that row's token (0 where the draw found
  // nothing, -1: that request fails when its row is postprocessed, so the row that follows it is wasted anyway);
  // other ids stay. A placeholder naming a row outside sampled is an error (like a bad token id). Capturable.
  virtual void resolve_placeholders(const Tensor& ids, const Tensor& sampled) {
    (void)ids, (void)sampled;
    fail("backend {} cannot resolve sampled-token placeholders", name());
  }

  // ---- stream markers (asynchronous scheduling) ----
  // mark() remembers the point the backend's stream has reached (everything enqueued so far); wait_mark(t) blocks
  // until the work up to mark t is done (not what was enqueued after it), then reports device errors like
  // synchronize(). Marks are waited in order, at most kMaxMarksInFlight outstanding. The defaults (a backend
  // whose ops finish when called) do nothing.
  static constexpr int kMaxMarksInFlight = 4;
  virtual uint64_t mark() { return 0; }
  virtual void wait_mark(uint64_t mark) { (void)mark; }

 protected:
  // The norm the last sublayer end wrote, for the rms_norm_matmul that follows it (the decode-layer fusion's
  // one piece of state): a backend's sublayer_end / attn_out_ffn notes what it wrote; rms_norm_matmul takes it
  // (and every note is taken or replaced by the next one, so nothing older than the last op is trusted).
  void note_written_norm(const Tensor& out, const Tensor& residual, const Tensor& norm);
  // True when normed holds rms_norm(x) * norm_weight as the last note says; clears the note either way.
  bool take_written_norm(const Tensor& normed, const Tensor& x, const Tensor& norm_weight);
  void forget_written_norm() { written_norm_ = {}; }  // a sublayer end that left its norm to the next projection

 private:
  struct WrittenNorm {
    const void* out = nullptr;
    const void* residual = nullptr;
    const void* norm = nullptr;
    int64_t rows = 0;
    DType dtype = DType::F32;
  };
  WrittenNorm written_norm_;
};

}  // namespace ferry

// The CUDA backend: the op set of ops/backend.h on one GPU, every op on one stream (so a step can be captured in a
// CUDA graph). The kernels live in the folders next to this file, one .cu/.cuh pair per op family
// (docs/architecture.md); this class checks shapes once and launches them.
//
//  - Memory: cudaMalloc-backed DeviceBuffers; out of memory is a ferry::Error naming what was asked and what
//    is free.
//  - Weights: uploaded once by prepare_weight, in the layout of matmul/weight_layout.cuh (GGUF blocks for Q4_K/Q5_K,
//    split quants/scales for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K/Q3_K/Q6_K/F8_E4M3_B128; any other type becomes F32).
//  - matmul: the kernel and its epilogues come from the one matmul plan (matmul/plan.h); bf16 in, fp32 out for
//    the GEMMs. Decode-layer fusion is decided in decode_fusion.cpp, from the same plan.
//  - Errors found by kernels in device-side inputs (bad token id, slot, row, block id) are reported at the
//    next copy_to_host or synchronize, as ferry::Error.
//  - Step graphs: begin_capture/end_capture record the ops of a step into a CUDA graph (stream capture,
//    thread-local mode); replay launches it. Kernels read every per-step value from device memory.
//  - The KV cache is BF16 (kv_dtype(); the model allocates it through alloc; store_kv rounds f32 k/v to it).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/comm/peer_all_reduce.h"
#include "backends/cuda/matmul/plan.h"
#include "core/cuda_tune.h"
#include "ferry/sampling.h"
#include "ops/backend.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers here
struct CUevent_st;   // cudaEvent_t, the same

namespace ferry {

namespace cuda_ops {
struct AttentionParams;
class CublasLtGemm;
class OpProfiler;
struct PhaseStamps;
class Sm90Gemm;
class StampTable;
class WgSkinnyGemm;
struct WeightStream;
struct DeviceErrors;
}  // namespace cuda_ops

struct CudaBackendOptions {
  int device_index = 0;  // which CUDA device
  // Quantized/F16/F32 weights also keep a bf16 copy made once at load (2 bytes per weight more), which the
  // n > 16 matmul reads instead of dequantizing the weight on every call.
  bool prefill_bf16_weights = false;
  // Batch-invariant kernels: a row's result does not depend on the other rows of the step. Every matmul (any
  // token count) runs ferry's Hopper GEMM with one fixed tile on bf16 weights (quantized ones get their bf16
  // copy), and split-KV decode attention cuts contexts into fixed-size chunks instead of sizing splits to the
  // batch. Slower decode (no matvec): its cost is in docs/perf-log.md.
  bool batch_invariant = false;
  // Per-op GPU times (op_profiler.h), printed to stderr when the backend is destroyed; step graphs are off.
  bool profile_ops = false;
  // Phase stamps (diag/phase_stamps.cuh) in the decode attention and the streamed quantized matvec, the last
  // launch of each kernel and shape printed at exit (diag/stamp_table.h). Off: one predicated branch a phase.
  bool phase_stamps = false;
  // Kernel choices for comparisons (FERRY_CUDA_TUNE; the matmul plan reads them): the measured defaults unset.
  CudaTune tune{};
};

class CudaBackend final : public Backend {
 public:
  // Throws ferry::Error "no CUDA device: ..." when there is none (or no usable driver).
  explicit CudaBackend(const CudaBackendOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Number of usable CUDA devices; 0 when there is no device or driver (never throws).
  static int device_count();
  // The stream every op is enqueued on (tensor parallelism enqueues its NCCL collectives on it too).
  CUstream_st* stream() const { return stream_; }

  Device device() const override { return Device::Cuda; }
  std::string name() const override;
  // cuda.weight_bytes (the prepared weights' device bytes, bf16 copies apart), cuda.widened_weights (those
  // dequantized to f32 at load: a type no decoder reads, none of the GGUF weight types), cuda.prefill_weights
  // (which weights the prefill GEMMs read).
  std::vector<std::pair<std::string, std::string>> facts() const override;

  DeviceBuffer alloc(size_t bytes) override;
  DType kv_dtype() const override { return DType::BF16; }  // the attention kernels read bf16 K/V
  Tensor prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) override;
  // Two runs of different types (a K-quant mix's q|k and v) where the matmul plan streams them in one launch
  // (cuda_ops::stack_worth_it); each run prepared as prepare_weight lays it out, without a bf16 copy of its own; with
  // CudaBackendOptions::prefill_bf16_weights one bf16 copy (rows, cols) of the whole stack for the GEMMs.
  Tensor prepare_stacked_weight(std::span<const Tensor> runs, std::vector<DeviceBuffer>& keep) override;
  // wq|wk|wv and w_gate|w_up as one matmul each (decode: fewer, larger matvecs) + qkv_epilogue / swiglu_fused.
  bool wants_fused_projections() const override { return true; }
  DType matmul_input_dtype(int64_t n_tokens) const override;  // bf16 above 16 tokens (every path a GEMM)
  void copy_to_device(const Tensor& dst, const void* src, size_t bytes) override;
  void wait_for_copies() override;
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override;
  void synchronize() override;

  // Step graphs (CUDA graphs on the backend's stream; step_graph.h). alloc_host: page-locked memory.
  DeviceBuffer alloc_host(size_t bytes) override;
  void copy_to_host_async(void* dst, const Tensor& src, size_t bytes) override;
  bool supports_step_graphs() const override { return profiler_ == nullptr; }  // op profiling times launches
  void begin_capture() override;
  std::unique_ptr<StepGraph> end_capture() override;
  void cancel_capture() override;
  bool replay(const StepGraph& graph) override;

  void embedding(const Tensor& out, const Tensor& table, const Tensor& ids) override;
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) override;
  void add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& weight,
                    float eps) override;
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) override;
  // The decode-layer fusion (decode_fusion.cpp), decided there and nowhere else:
  // rms_norm_matmul: at one token where the plan streams w with the norm in its prologue (MatmulPlan::in_norm), one
  // launch, normed left unwritten; where the sublayer end before it wrote normed, the projection alone.
  void rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight, float eps,
                       const Tensor& w, const Tensor& bias) override;
  // sublayer_end: across ranks with the peer all-reduce attached, its fused reduce + add + norm (after a projection
  // that pushes its rows to the peers from its epilogue where the plan allows: MatmulPlan::peer_push).
  void sublayer_end(const SublayerEnd& s) override;
  // attn_out_ffn: one rank, one token, all three weights streamed: wo, then gate|up with the FFN norm in its
  // prologue and SwiGLU in its epilogue, then down with the residual add; the next norm left to the next
  // rms_norm_matmul where its plan takes it in the prologue. Otherwise Backend's composition.
  void attn_out_ffn(const AttnOutFfn& a) override;
  // Tensor parallelism's one-shot all-reduce over peer memory (engine/tp_setup, on every rank alike), for the
  // sublayer ends; without it they reduce through the group's all_reduce_sum.
  void attach_peer_all_reduce(std::shared_ptr<PeerAllReduce> peer) { peer_ = std::move(peer); }
  // MatvecParams::stream for a weight of type t (CudaTune::ring_quant / ring_half; every copy evict-first).
  cuda_ops::WeightStream weight_stream(DType t) const;
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeOrdering ordering) override;
  void store_kv(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slots) override;
  void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const AttentionMeta& meta, float scale) override;
  void swiglu(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows) override;
  void qkv_epilogue(const QkvEpilogueArgs& a) override;  // qkv_epilogue.cuh
  // A decode step (meta.decode_only, no k_out/v_out, head_dim 64/128 on the tensor-core decode kernel, full RoPE):
  // one launch, the epilogue inside the decode kernel (decode_fused_qkv.cuh; e.q is not written). Otherwise the
  // two ops.
  void qkv_attention(const QkvEpilogueArgs& e, const Tensor& out, const AttentionMeta& meta, float scale) override;
  void swiglu_fused(const Tensor& out, const Tensor& gate_up) override;
  // SwiGLU inside the matmul where the plan names a kernel for it (MatmulPlan::swiglu; gate_up left unwritten);
  // elsewhere matmul + swiglu_fused.
  void matmul_swiglu(const Tensor& out, const Tensor& gate_up, const Tensor& x, const Tensor& w_gate_up) override;
  // The mixture-of-experts FFN on the device (cuda_backend_moe.cpp, kernels in moe/): router logits, softmax top-k
  // and the grouping by expert on the GPU, then the routed experts' gate, up (SwiGLU) and down passes (matvec up to
  // kMoeDecodeTokens tokens, grouped GEMM above) and the combine in slot order. No host synchronisation: capturable.
  void moe_ffn(const MoeFfnArgs& a) override;
  bool captures_moe_ffn() const override { return true; }

  // The ops beyond the Llama set (cuda_backend_features.cpp, kernels in elementwise/): every ModelFeature; the
  // attention kernels take AttentionMeta::window and ::softcap themselves.
  bool supports(ModelFeature feature) const override;
  void geglu_tanh(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void softcap(const Tensor& x, float cap) override;
  void scale(const Tensor& x, float s, int64_t n_leading) override;

  // GPU sampling (sampling.cuh; Backend::sample): out (m) i32 on the device = one token per row of logits
  // (m, vocab) f32 on the device, drawn as sampling/sampler.cpp would for params[i] at positions[i] (the Philox
  // counter); -1 for a row with no finite logit. Penalties must be off (apply them to the logits first).
  // Enqueued on the backend's stream; params are copied from host memory (not capturable yet).
  bool supports_sampling() const override { return true; }
  void sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
              std::span<const uint64_t> positions, std::span<const uint64_t> mask) override;
  void resolve_placeholders(const Tensor& ids, const Tensor& sampled) override;  // token_feedback.cuh
  // Stream markers: a ring of kMaxMarksInFlight events recorded on the stream.
  uint64_t mark() override;
  void wait_mark(uint64_t mark) override;

 private:
  // The bf16 GEMM kernels the plan chose: the Hopper GEMM, a skinny GEMM, or cuBLASLt.
  void matmul_gemm(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, cuda_ops::MatmulKernel kernel);
  // The GEMM paths' operands: w (n_out, n_in) as bf16 bits (the weight, its bf16 copy, or dequantized into
  // w_bf16_), and x (n, n_in) f32 rounded into x_bf16_.
  const uint16_t* gemm_weight_bf16(const Tensor& w);
  const uint16_t* gemm_x_bf16(const Tensor& x);
  // Grows `buf` to at least `bytes` (contents are not kept); a reallocation makes captured graphs stale
  // (scratch_epoch_) and is an error while capturing.
  void ensure(DeviceBuffer& buf, size_t bytes);
  // Throws (and clears) the errors kernels reported since the last check; call after a stream sync.
  void check_device_errors();
  // sublayer_end's peer paths (decode_fusion.cpp): false where the shapes or dtypes do not fit them.
  bool peer_sublayer_end(const SublayerEnd& s);
  // matmul with its output rows pushed into the peers' slots (MatvecParams::peer_push; out (1, w.rows()) f32,
  // x (1, w.cols()) f32), where plan(1, w).peer_push.
  void matmul_peer_push(const Tensor& out, const Tensor& x, const Tensor& w, const PeerAllReduce::PushTarget& target);

  CudaBackendOptions options_;
  std::string device_name_;
  int n_sms_ = 0;        // the device's SMs and opt-in shared memory per block (the matmul plan's inputs)
  size_t max_smem_ = 0;
  CUstream_st* stream_ = nullptr;
  std::unique_ptr<cuda_ops::CublasLtGemm> gemm_;
  std::unique_ptr<cuda_ops::Sm90Gemm> sm90_gemm_;  // ferry's Hopper GEMM (options_.hopper_gemm)
  std::unique_ptr<cuda_ops::WgSkinnyGemm> wg_skinny_;  // the 33..255-token wgmma GEMM (options_.hopper_gemm)
  std::shared_ptr<PeerAllReduce> peer_;  // attach_peer_all_reduce; null at one rank
  size_t weight_bytes_ = 0, widened_bytes_ = 0, copy_bytes_ = 0;  // prepare_weight's allocations (facts())
  cuda_ops::DeviceErrors* errors_ = nullptr;  // mapped pinned host memory, written by kernels
  DeviceBuffer gemm_workspace_;  // cuBLASLt workspace
  DeviceBuffer w_bf16_;          // (n_out, n_in) bf16: a weight dequantized for the GEMM path
  DeviceBuffer x_bf16_;          // (n, n_in) bf16: activations rounded for the GEMM path
  // The plan (matmul/plan.h) of a matmul of n tokens through the prepared weight w into out (its alignment picks
  // the Hopper GEMM; an empty out: aligned).
  cuda_ops::MatmulPlan plan(int64_t n, const Tensor& w, const Tensor& out = Tensor{}) const;
  bool capturing_ = false;       // between begin_capture and end_capture/cancel_capture
  CUevent_st* copy_done_ = nullptr;  // recorded after each eager copy_to_device (wait_for_copies)
  bool copy_pending_ = false;
  std::array<CUevent_st*, kMaxMarksInFlight> marks_{};  // mark(): event (ticket - 1) % kMaxMarksInFlight
  uint64_t marks_made_ = 0;                              // tickets handed out (the next one is marks_made_ + 1)
  uint64_t scratch_epoch_ = 0;   // bumped whenever ensure() reallocates a scratch buffer
  // attention()'s checks and parameters (q: (n, n_heads, head_dim), for its shape; the pointer is read unless a
  // fused epilogue replaces it), then its scratch and launch.
  cuda_ops::AttentionParams attention_params(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                             const Tensor& v_cache, const AttentionMeta& meta, float scale);
  void launch_attention(cuda_ops::AttentionParams& ap);
  DeviceBuffer attn_scratch_;    // attention_scratch_bytes(): split-KV decode partials
  DeviceBuffer sample_rows_;     // (m) cuda_ops::SampleRowParams for sample()
  DeviceBuffer sample_parts_;    // (m) cuda_ops::sample_rows_parts_bytes: sample()'s streaming passes' partials
  DeviceBuffer sample_mask_;     // (m, words) u64: sample()'s token masks (structured output), when given
  DeviceBuffer sample_cand_;     // (m) cuda_ops::sample_rows_cand_bytes: the fast paths' scratch (left zeroed)
  int64_t sample_cand_vocab_ = 0;  // the vocabulary sample_cand_'s rows are laid out for
  struct SampleStaging {
    DeviceBuffer host;             // (m) cuda_ops::SampleRowParams, page-locked: the copy's source
    DeviceBuffer mask;             // (m, words) u64 token masks, page-locked (structured output's rows)
    CUevent_st* copied = nullptr;  // recorded after the copies that read them
  };
  std::array<SampleStaging, kMaxMarksInFlight> sample_staging_;  // sample()'s settings, one slot per step in flight
  size_t sample_staging_next_ = 0;
  std::unique_ptr<cuda_ops::OpProfiler> profiler_;  // options_.profile_ops, else null
  std::unique_ptr<cuda_ops::StampTable> stamps_;     // options_.phase_stamps, else null
  // The stamp slots of a streamed quantized matvec launch of `what` on weight w (kind "what type rowsxcols"); {} when
  // off.
  cuda_ops::PhaseStamps matvec_stamps(const char* what, const Tensor& w);
  // moe_ffn's per-layer expert tables: (3, E) MoeExpertWeight (gate, up, down) in device memory, keyed by the first
  // gate expert's data; `host` is what was uploaded (rebuilt when the weights behind a key change).
  struct MoeTable {
    std::vector<uint8_t> host;
    DeviceBuffer device;
  };
  const MoeTable& moe_table(const MoeFfnArgs& a);
  std::unordered_map<const void*, MoeTable> moe_tables_;
  // prepare_stacked_weight's stacks, keyed by the DType::Stacked tensor's data (its head's): the two runs as prepared,
  // head (head rows, cols) then tail (tail rows, cols), and the stack's bf16 copy (rows, cols) or null.
  struct StackedWeight {
    Tensor head, tail;
    const uint16_t* bf16 = nullptr;
  };
  std::unordered_map<const void*, StackedWeight> stacks_;
  const StackedWeight& stacked(const Tensor& w) const;
  // The prepared weight's bytes (a stacked one's: its parts'), for the profiler's bandwidth figures.
  size_t weight_nbytes(const Tensor& w) const;
  // prepare_weight's upload, with or without the bf16 copy after the layout.
  Tensor upload_weight(const Tensor& host, std::vector<DeviceBuffer>& keep, bool bf16_copy);
  // A stacked weight's one-token streamed matvec (stream_quant_stacked): p as for the whole stack (out, bias, the
  // prologue), its w and stream filled here from the head.
  void stacked_matvec(const Tensor& w, cuda_ops::MatvecParams p);
  DeviceBuffer moe_scratch_;  // moe_ffn's logits, routes, grouping lists and the slots' hidden and output rows
};

}  // namespace ferry

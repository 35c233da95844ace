// The CUDA backend: the op set of ops/backend.h on one GPU, every op on one stream (so a decode step can be
// captured in a CUDA graph later). Kernels live in one .cu/.cuh pair per op family next to this file; this
// class checks shapes once and launches them.
//
//  - Memory: cudaMalloc-backed DeviceBuffers; out of memory is a ferry::Error naming what was asked and what
//    is free.
//  - Weights: uploaded once by prepare_weight, in the layout of weight_layout.cuh (GGUF blocks, or split
//    quants/scales for Q8_0/Q4_0/Q4_1; other block types become F32).
//  - matmul (matmul_dispatch.h picks the kernel by token count): up to 4 tokens (16 without bf16 weights at
//    hand) matvec kernels that dequantize in registers; 5..255 tokens cuBLASLt on bf16 weights (the weight
//    itself, its bf16 copy made at load, or a bf16 scratch dequantized per call); 256 and more ferry's Hopper
//    GEMM (gemm_sm90.cuh; cuBLASLt on other GPUs and uncovered shapes); bf16 in, fp32 out.
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

#include "backends/cuda/matmul_dispatch.h"
#include "backends/cuda/peer_all_reduce.h"
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
  // matmul for n > 16 tokens: ferry's TMA + wgmma GEMMs (gemm_sm90.cuh; wgmma_skinny.cuh at 33..255 tokens) on
  // compute capability 9.x where the
  // shape is covered; false (or another GPU, or an uncovered shape): cuBLASLt.
  bool hopper_gemm = true;
  // The Hopper GEMM launched with programmatic dependent launch (its first weight reads overlap the previous
  // kernel's tail; gemm_sm90.cuh). Off until measured end to end.
  bool hopper_gemm_pdl = false;
  // Quantized/F16/F32 weights also keep a bf16 copy made once at load (2 bytes per weight more), which the
  // n > 16 matmul reads instead of dequantizing the weight on every call.
  bool prefill_bf16_weights = false;
  // Batch-invariant kernels: a row's result does not depend on the other rows of the step. Every matmul (any
  // token count) runs ferry's Hopper GEMM with one fixed tile on bf16 weights (quantized ones get their bf16
  // copy), and split-KV decode attention cuts contexts into fixed-size chunks instead of sizing splits to the
  // batch. Slower decode (no matvec): its cost is measured in docs/perf-log.md.
  bool batch_invariant = false;
  // Decode matvec kernel version (matvec.cuh): 2 or 5 everywhere; 7 or 9 wherever it applies, else the rule
  // (matmul_dispatch.h's choose_matvec_version); 0: that rule as is.
  int matvec_version = 0;
  // Per-op GPU times (op_profiler.h), printed to stderr when the backend is destroyed; step graphs are off.
  bool profile_ops = false;
  // qkv_attention fuses a decode step's q/k/v epilogue into the decode kernel where it applies; false: two launches.
  bool fused_qkv_attention = true;
  // Which skinny GEMM takes n = 17..255 (matmul_dispatch.h, FERRY_CUDA_SKINNY): the measured rule, or one kernel
  // wherever it supports the shape (in-situ comparisons).
  cuda_ops::SkinnyOverride skinny_override = cuda_ops::SkinnyOverride::Rule;
  // The decode kernel requests its first K/V tiles before the PDL wait (DecodeSplitPlan::early_kv; same bits);
  // false: after it (FERRY_CUDA_DECODE_EARLY=0, in-situ comparisons).
  bool decode_early_kv = true;
  // matmul_add_rms_norm runs the residual add + RMSNorm in the matvec's epilogue at one token where the streamed
  // matvecs take the shape (MatvecParams::add_norm; same bits); false: matmul then add_rms_norm. H200, Llama-3-8B
  // tg128, in-call A/B: no faster in captured steps (PDL already hides the norm's launch), so off by default.
  bool fused_add_norm = false;
  // matmul_swiglu on Q8_0/Q4_0/Q4_K at one token runs matvec v10's SwiGLU form (one launch; same bits); false:
  // matmul then swiglu_fused.
  bool quant_swiglu = true;
  // attn_out_ffn at one token on Q8_0/Q4_0 runs the layer's tail (wo, add + norm, gate|up + SwiGLU, down, add +
  // norm) as one persistent kernel (decode_ffn.cuh; the single ops' bits with two-level activations: it has no
  // one-level form, one_level_acts does not apply to it); false: the single ops. H200, Llama-3-8B tg128, in-call
  // A/B: 0.89x (Q4_0) and 0.95x (Q8_0) of the single ops in captured steps (session 11); with the ring cap and the
  // evict-first weights 0.95x / 0.98x (session 14), so off by default.
  bool decode_ffn = false;
  // attn_out_ffn at one token where matvec v10 runs all three weights (decode_ffn off): the FFN's RMSNorm is
  // computed in the gate|up matvec's prologue by every block (MatvecParams::in_norm) and the residual add of the wo
  // output deferred to the down matvec's epilogue (MatvecParams::residual_add): one launch fewer a layer, the same
  // bits (H200 tg128 in-call: +2% Q8_0, within the noise on Q4_0); false: Backend's composition
  // (FERRY_CUDA_PROLOGUE_NORM=0, comparisons).
  bool prologue_norm = true;
  // With prologue_norm (and neither decode_ffn nor fused_add_norm): the layer's attention norm too, in the q|k|v
  // matvec's prologue (rms_norm_matmul, norm_in_matmul): the previous layer's down matvec adds its output into the
  // residual row by row (MatvecResidualAdd::add_out) and the add_rms_norm launch between the layers goes; the same
  // bits. FERRY_CUDA_QKV_NORM=0: that launch stays.
  bool qkv_norm = true;
  // Streamed matvecs: at most this many ring stages (~15-18 KB each at the Llama-3-8B shapes) in flight per block;
  // 0: a stage whenever a slot is free. MatvecParams::ring_inflight; FERRY_CUDA_RING_INFLIGHT (quantized weights,
  // version 10) and FERRY_CUDA_RING_INFLIGHT_BF16 (BF16/F16, version 9).
  // Why 3 for quantized weights: with the whole ring (112 KB a block, ~15 MB over the GPU) requested at a kernel's
  // start, the DRAM queue holds ~3.5 us of reads, and every latency-bound load behind it (the next kernel's
  // activations, the attention's K/V) waits in it. Three stages a block (~7 MB over 132 blocks, ~1.6 us at 4.30
  // TB/s) still cover the DRAM latency. tg128 in one call (8B shape): Q4_0 463.1 / 463.2 off vs 479.4 / 478.4 at 3;
  // Q8_0 363.5 / 363.4 vs 371.3 / 373.2. BF16 lost at 3 (243.3 / 244.1 off vs 236.5 / 235.9): its matvecs are
  // pure bandwidth with no latency-bound phase to protect, so no cap there (docs/perf-log.md, session 13).
  int ring_inflight_quant = 3;
  int ring_inflight_bf16 = 0;
  // Streamed matvecs' weight copies carry an L2 evict_first policy (WeightStream::evict_first;
  // FERRY_CUDA_WEIGHTS_EVICT_FIRST): a decode step streams every weight once, so without it the KV cache, the
  // activations and the kernels' code are evicted from the 60 MB L2 by each layer's weights.
  bool weights_evict_first = true;
  // One-token Q8_0/Q4_0 matvecs (version 10) quantize their activations to one int8 level per 32 values, as
  // llama.cpp's q8_1 and the CPU fast path do (MatvecParams::one_level_acts); false: two levels (~2e-5 relative,
  // the matvec tests' 1e-4 bound). FERRY_CUDA_ACT_LEVELS=1|2.
  bool one_level_acts = true;
  // Phase stamps (phase_stamps.cuh) in the decode attention and the matvec v10 kernels, the last launch of each
  // kernel and shape printed at exit (FERRY_CUDA_STAMPS=1; stamp_table.h). Off: one predicated branch a phase.
  bool phase_stamps = false;
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

  DeviceBuffer alloc(size_t bytes) override;
  DType kv_dtype() const override { return DType::BF16; }  // the attention kernels read bf16 K/V
  Tensor prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) override;
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
  void matmul_add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& x,
                           const Tensor& w, const Tensor& norm_weight, float eps) override;
  // Whether matmul_add_rms_norm runs as one launch for n tokens through the prepared weight w (f32 activations).
  bool add_norm_fused(int64_t n, const Tensor& w) const;
  // At one token where matmul runs matvec v10 on w: the norm in the matvec's prologue (MatvecParams::in_norm),
  // normed left unwritten (CudaBackendOptions::qkv_norm). Otherwise Backend's composition.
  void rms_norm_matmul(const Tensor& out, const Tensor& normed, const Tensor& x, const Tensor& norm_weight, float eps,
                       const Tensor& w, const Tensor& bias) override;
  bool norm_in_matmul(int64_t n_tokens, const Tensor& w) const override;
  // Tensor parallelism's row-parallel projections before a peer all-reduce (engine/tp_setup): whether matmul at n
  // tokens on w runs a streamed matvec (versions 9, 10) whose epilogue can push its rows to the peers, and that
  // matmul with the push (MatvecParams::peer_push; out (1, w.rows()) f32, x (1, w.cols()) f32).
  bool matmul_pushes(int64_t n_tokens, const Tensor& w) const;
  void matmul_peer_push(const Tensor& out, const Tensor& x, const Tensor& w, const PeerAllReduce::PushTarget& target);
  // At one token on Q8_0/Q4_0 with the shapes decode_ffn.cuh compiles: one launch (decode_ffn_applies); delta and
  // gate_up are left unwritten. Otherwise Backend's composition.
  void attn_out_ffn(const AttnOutFfn& a) override;
  bool decode_ffn_applies(const AttnOutFfn& a) const;
  bool prologue_norm_applies(const AttnOutFfn& a) const;
  // MatvecParams::stream for a weight of type t (CudaBackendOptions::ring_inflight_quant / _bf16,
  // weights_evict_first).
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
  // SwiGLU inside the matmul where a fused kernel takes the shape (gate_up left unwritten): at one token version 9
  // with SwiGLU (matvec_stream.cuh: BF16/F16, where the matvec rule is the default or 9), from 256 tokens (and in
  // batch-invariant mode) the Hopper GEMM with the SwiGLU epilogue (gemm_sm90.cuh; bf16 weights at hand or
  // dequantized as matmul does); elsewhere matmul + swiglu_fused.
  void matmul_swiglu(const Tensor& out, const Tensor& gate_up, const Tensor& x, const Tensor& w_gate_up) override;

  // GPU sampling (sampling.cuh; Backend::sample): out (m) i32 on the device = one token per row of logits
  // (m, vocab) f32 on the device, drawn as sampling/sampler.cpp would for params[i] at positions[i] (the Philox
  // counter); -1 for a row with no finite logit. Penalties must be off (apply them to the logits first).
  // Enqueued on the backend's stream; params are copied from host memory (not capturable yet).
  bool supports_sampling() const override { return true; }
  void sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
              std::span<const uint64_t> positions) override;
  void resolve_placeholders(const Tensor& ids, const Tensor& sampled) override;  // token_feedback.cuh
  // Stream markers: a ring of kMaxMarksInFlight events recorded on the stream.
  uint64_t mark() override;
  void wait_mark(uint64_t mark) override;

 private:
  // The bf16 GEMM paths matmul() chose (matmul_dispatch.h): HopperGemm (when it takes the shape), Skinny, or
  // cuBLASLt (Cublas, and HopperGemm for a shape it does not take).
  void matmul_gemm(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, cuda_ops::MatmulPath path);
  // The GEMM paths' operands: w (n_out, n_in) as bf16 bits (the weight, its bf16 copy, or dequantized into
  // w_bf16_), and x (n, n_in) f32 rounded into x_bf16_.
  const uint16_t* gemm_weight_bf16(const Tensor& w);
  const uint16_t* gemm_x_bf16(const Tensor& x);
  // Grows `buf` to at least `bytes` (contents are not kept); a reallocation makes captured graphs stale
  // (scratch_epoch_) and is an error while capturing.
  void ensure(DeviceBuffer& buf, size_t bytes);
  // Throws (and clears) the errors kernels reported since the last check; call after a stream sync.
  void check_device_errors();

  CudaBackendOptions options_;
  std::string device_name_;
  CUstream_st* stream_ = nullptr;
  std::unique_ptr<cuda_ops::CublasLtGemm> gemm_;
  std::unique_ptr<cuda_ops::Sm90Gemm> sm90_gemm_;  // ferry's Hopper GEMM (options_.hopper_gemm)
  std::unique_ptr<cuda_ops::WgSkinnyGemm> wg_skinny_;  // the 33..255-token wgmma GEMM (options_.hopper_gemm)
  cuda_ops::DeviceErrors* errors_ = nullptr;  // mapped pinned host memory, written by kernels
  DeviceBuffer gemm_workspace_;  // cuBLASLt workspace
  DeviceBuffer w_bf16_;          // (n_out, n_in) bf16: a weight dequantized for the GEMM path
  DeviceBuffer x_bf16_;          // (n, n_in) bf16: activations rounded for the GEMM path
  DeviceBuffer add_norm_counter_;  // one u32, 0 between calls: the fused matvec epilogue's arrival counter
  DeviceBuffer decode_ffn_barrier_;  // one u64 zeroed once: decode_ffn's grid-barrier count (grid_barrier.cuh)
  // The path matmul() takes for n tokens of x through w into out, and the matvec version when that path is Matvec
  // (else 0).
  struct MatmulChoice {
    cuda_ops::MatmulPath path;
    int matvec_version;
  };
  MatmulChoice choose_matmul(int64_t n, const Tensor& w, const Tensor& out) const;
  // The matvec version matmul_add_rms_norm fuses into for n tokens through w, or 0 where it runs two launches.
  int add_norm_version(int64_t n, const Tensor& w) const;
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
  DeviceBuffer sample_cand_;     // (m) cuda_ops::sample_rows_cand_bytes: the fast paths' scratch (left zeroed)
  int64_t sample_cand_vocab_ = 0;  // the vocabulary sample_cand_'s rows are laid out for
  struct SampleStaging {
    DeviceBuffer host;             // (m) cuda_ops::SampleRowParams, page-locked: the copy's source
    CUevent_st* copied = nullptr;  // recorded after the copy that reads it
  };
  std::array<SampleStaging, kMaxMarksInFlight> sample_staging_;  // sample()'s settings, one slot per step in flight
  size_t sample_staging_next_ = 0;
  std::unique_ptr<cuda_ops::OpProfiler> profiler_;  // options_.profile_ops, else null
  std::unique_ptr<cuda_ops::StampTable> stamps_;     // options_.phase_stamps, else null
  // The stamp slots of a matvec v10 launch of `what` on weight w (kind "what type rowsxcols"); {} when off.
  cuda_ops::PhaseStamps matvec_stamps(const char* what, const Tensor& w);
};

}  // namespace ferry

// Collectives between the ranks of a tensor-parallel group. The model calls all_reduce_sum after every
// row-parallel matmul and all_gather_inplace on the vocab-parallel logits; rank 0 broadcasts each step's
// Batch to the followers. Device collectives (all_reduce_sum, all_gather_inplace) are enqueued on the
// backend's stream like any op (a GPU implementation can be captured in a step graph); the host ones
// (broadcast, barrier) block the calling thread.
//
// Implementations: IdentityCommunicator (world 1: every collective is a no-op, so the model never branches on
// the degree of parallelism), ThreadCommunicator (N ranks as N threads of one process over CPU memory:
// tests and `--device cpu --tp N`), NcclCommunicator (one process per GPU). The interface is an op the model
// calls like any backend op, so it lives in src/ops; the implementations beyond the identity live in src/parallel
// (parallel/thread_communicator.h, parallel/nccl_communicator.h), which depends on ops and model, never the reverse.
//
// Failure: a rank that fails calls abort(why); every other rank's next (or current) collective throws
// ferry::Error naming the failed rank and its message, so a group never hangs on a dead member. Collectives
// that wait on other ranks mid-step time out (timeout in the implementation's options) with a clear error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "ops/backend.h"

namespace ferry {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // x: contiguous f32 tensor in backend memory, any shape; replaced by the element-wise sum over ranks
  // (the same bits on every rank).
  virtual void all_reduce_sum(const Tensor& x) = 0;
  // all_reduce_sum(delta), then backend.add_rms_norm(out, residual, delta, weight, eps) (shapes as there).
  // An implementation may fuse the two into one device launch (NcclCommunicator with the CUDA peer all-reduce
  // does, for decode-sized messages); delta holds the sum afterwards either way.
  virtual void all_reduce_add_rms_norm(Backend& backend, const Tensor& out, const Tensor& residual,
                                       const Tensor& delta, const Tensor& weight, float eps) {
    all_reduce_sum(delta);
    backend.add_rms_norm(out, residual, delta, weight, eps);
  }
  // A row-parallel projection and what follows it: backend.matmul(delta, x, w) (this rank's partial sums), then
  // all_reduce_add_rms_norm(backend, out, residual, delta, weight, eps). The identity communicator (nothing to
  // reduce) hands the whole to backend.matmul_add_rms_norm, which a backend may run as one launch.
  virtual void matmul_all_reduce_add_rms_norm(Backend& backend, const Tensor& out, const Tensor& residual,
                                              const Tensor& delta, const Tensor& x, const Tensor& w,
                                              const Tensor& weight, float eps) {
    backend.matmul(delta, x, w, Tensor{});
    all_reduce_add_rms_norm(backend, out, residual, delta, weight, eps);
  }
  // A decode layer's tail after the attention (Backend::AttnOutFfn): the row-parallel o-projection and its
  // reduction + add + norm, the column-parallel gate|up with SwiGLU, the row-parallel down projection and its
  // reduction + add + the next layer's norm. The identity communicator hands the whole to backend.attn_out_ffn.
  // next_norm may be empty only where norm_in_matmul said so.
  virtual void attn_out_ffn(Backend& backend, const Backend::AttnOutFfn& a) {
    FERRY_CHECK(!a.next_norm.empty(), "attn_out_ffn: a reducing communicator keeps the next norm with its reduction");
    matmul_all_reduce_add_rms_norm(backend, a.ffn_in, a.residual, a.delta, a.attn, a.wo, a.ffn_norm, a.eps);
    backend.matmul_swiglu(a.act, a.gate_up, a.ffn_in, a.w_gate_up);
    matmul_all_reduce_add_rms_norm(backend, a.out, a.residual, a.delta, a.act, a.w_down, a.next_norm, a.eps);
  }
  // Whether a layer's tail may leave the next layer's input norm to that layer's rms_norm_matmul
  // (Backend::norm_in_matmul). Not where a reduction precedes the norm: it stays fused with the reduction.
  virtual bool norm_in_matmul(const Backend& backend, int64_t n_tokens, const Tensor& w) const {
    (void)backend, (void)n_tokens, (void)w;
    return false;
  }
  // buf: contiguous f32 tensor of world * part elements in backend memory; rank r has filled elements
  // [r * part, (r + 1) * part); afterwards every rank holds every part.
  virtual void all_gather_inplace(const Tensor& buf) = 0;
  // Host bytes from rank 0 to every rank: rank 0's `bytes` are sent; the others' are replaced. Blocks until
  // this rank has them (followers may wait here indefinitely between steps: no timeout).
  virtual void broadcast(std::vector<uint8_t>& bytes) = 0;
  // Host barrier over all ranks (timeout applies).
  virtual void barrier() = 0;
  // Marks the group failed with `why` (prefixed with this rank); wakes every rank waiting in a collective.
  // Never throws. Later collectives throw ferry::Error with the first failure's message.
  virtual void abort(const std::string& why) noexcept = 0;
  // The model calls this when this rank's part of a step is done (a GPU implementation times steps out).
  virtual void step_done() {}
};

// World of one: nothing to exchange.
class IdentityCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce_sum(const Tensor&) override {}
  void matmul_all_reduce_add_rms_norm(Backend& backend, const Tensor& out, const Tensor& residual, const Tensor& delta,
                                      const Tensor& x, const Tensor& w, const Tensor& weight, float eps) override {
    backend.matmul_add_rms_norm(out, residual, delta, x, w, weight, eps);
  }
  void attn_out_ffn(Backend& backend, const Backend::AttnOutFfn& a) override { backend.attn_out_ffn(a); }
  bool norm_in_matmul(const Backend& backend, int64_t n_tokens, const Tensor& w) const override {
    return backend.norm_in_matmul(n_tokens, w);
  }
  void all_gather_inplace(const Tensor&) override {}
  void broadcast(std::vector<uint8_t>&) override {}
  void barrier() override {}
  void abort(const std::string&) noexcept override {}
};

}  // namespace ferry

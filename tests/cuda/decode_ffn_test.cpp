// Backend::attn_out_ffn on CUDA at one token: the decode layer's tail after the attention (wo + residual add +
// RMSNorm, gate|up + SwiGLU, down + residual add + the next norm) in each of CudaBackend's fused forms: as one
// persistent kernel (decode_ffn.cuh, CudaBackendOptions::decode_ffn), and as matvec v10 launches with the FFN norm
// in the gate|up matvec's prologue and the wo output's residual add deferred to the down matvec's epilogue
// (CudaBackendOptions::prologue_norm, the default). Checked, for Q8_0 and Q4_0 at the Llama-3-8B shape (dim 4096,
// hidden 14336, and for the prologue norm also dim 2048 / hidden 5632; random weights, inputs and norm weights):
//  - the form applies (decode_ffn_applies / prologue_norm_applies);
//  - against the same backend's single ops (Backend::attn_out_ffn's composition: matvec v10, add_rms_norm, matvec
//    v10's SwiGLU form, ...) on a copy of the residual: the residual and the output the same bits, since every step
//    repeats those kernels' arithmetic in their order;
//  - against the CPU reference backend (dequantize, fp32 dots): residual within 1e-4 and output within 1e-3
//    relative L2 (the int8 activations of three matvecs, ~2e-5 each, through the norms and the SwiGLU), with
//    two-level activations (CudaBackendOptions::one_level_acts off: the persistent kernel has only those); the
//    prologue norm with one level too, against the CPU at 5e-2 / 2e-2 / 5e-2 (three one-level matvecs, ~1e-2 each);
//  - three calls in a row, each on the previous call's residual: the grid barrier's counter carries over launches;
//  - the next layer's attention norm in its q|k|v matvec (NextNormInQkvEqualsSingleOps): the same bits as the
//    add_rms_norm launch and the plain matvec.
// Outputs are NaN-poisoned first.
#ifdef FERRY_HAS_CUDA

#include <cmath>
#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

constexpr float kEps = 1e-5f;

// (rows, cols) random weight quantized to t, as host bytes.
std::vector<uint8_t> random_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_floats(size_t(rows * cols), seed, 1.0f / std::sqrt(float(cols)));
  std::vector<uint8_t> w(size_t(rows) * row_bytes(t, cols));
  const size_t rb = row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.data() + r * cols, w.data() + size_t(r) * rb, cols);
  return w;
}

enum class FusedForm { PersistentKernel, PrologueNorm };

class CudaDecodeFfn : public CudaOpsTest {
 protected:
  // Once per test, before anything is allocated on the backend. decode_ffn is off by default (slower in captured
  // steps), prologue_norm on; the persistent kernel, when on, takes precedence.
  void use_form(FusedForm form, bool one_level = false) {
    CudaBackendOptions options;
    options.decode_ffn = form == FusedForm::PersistentKernel;
    options.prologue_norm = form == FusedForm::PrologueNorm;
    options.one_level_acts = one_level;
    one_level_ = one_level;
    gpu_ = std::make_unique<CudaBackend>(options);
  }
  bool one_level_ = false;  // CudaBackendOptions::one_level_acts of this test's backend

  void check(DType t, uint32_t seed, FusedForm form, int64_t kDim = 4096, int64_t kHidden = 14336) {
    SCOPED_TRACE(std::string(dtype_name(t)) + " dim " + std::to_string(kDim));
    std::vector<uint8_t> wo = random_weight(t, kDim, kDim, seed), wgu = random_weight(t, 2 * kHidden, kDim, seed + 1),
                         wd = random_weight(t, kDim, kHidden, seed + 2);
    const Tensor hwo = Tensor::make(t, {kDim, kDim}, wo.data());
    const Tensor hwgu = Tensor::make(t, {2 * kHidden, kDim}, wgu.data());
    const Tensor hwd = Tensor::make(t, {kDim, kHidden}, wd.data());
    std::vector<float> ffn_norm = random_floats(size_t(kDim), seed + 3);
    std::vector<float> next_norm = random_floats(size_t(kDim), seed + 4);
    for (float& v : ffn_norm) v += 1.0f;  // around 1, as trained norms are
    for (float& v : next_norm) v += 1.0f;
    std::vector<float> res = random_floats(size_t(kDim), seed + 5, 2.0f);

    const Tensor gwo = gpu_->prepare_weight(hwo, keep_), gwgu = gpu_->prepare_weight(hwgu, keep_),
                 gwd = gpu_->prepare_weight(hwd, keep_);
    const Tensor gfn = upload(DType::F32, {kDim}, ffn_norm), gnn = upload(DType::F32, {kDim}, next_norm);
    const Tensor fused_res = upload(DType::F32, {1, kDim}, res), plain_res = upload(DType::F32, {1, kDim}, res);
    // Scratch of the single ops' path (the fused kernel writes act and out only).
    const Tensor delta = poisoned({1, kDim}), ffn_in = poisoned({1, kDim}), gate_up = poisoned({1, 2 * kHidden});

    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      std::vector<float> attn = random_floats(size_t(kDim), seed + 10 + uint32_t(call));
      const Tensor gattn = upload(DType::F32, {1, kDim}, attn);
      const Tensor fused_out = poisoned({1, kDim}), fused_act = poisoned({1, kHidden});
      const Backend::AttnOutFfn fused{.out = fused_out, .residual = fused_res, .delta = delta, .attn = gattn, .wo = gwo,
                                      .ffn_norm = gfn, .ffn_in = fused_out, .w_gate_up = gwgu, .gate_up = gate_up,
                                      .act = fused_act, .w_down = gwd, .next_norm = gnn, .eps = kEps};
      if (form == FusedForm::PersistentKernel) {
        ASSERT_TRUE(gpu_->decode_ffn_applies(fused)) << "the persistent kernel does not take the Llama-3-8B shape";
      } else {
        ASSERT_TRUE(gpu_->prologue_norm_applies(fused)) << "the prologue norm does not take the Llama-3-8B shape";
      }
      gpu_->attn_out_ffn(fused);

      const Tensor plain_out = poisoned({1, kDim}), plain_act = poisoned({1, kHidden});
      Backend::AttnOutFfn plain = fused;
      plain.out = plain_out, plain.residual = plain_res, plain.ffn_in = ffn_in, plain.act = plain_act;
      gpu_->Backend::attn_out_ffn(plain);  // the single ops, one launch each

      const std::vector<float> got_res = download(fused_res), got_out = download(fused_out),
                               want_res = download(plain_res), want_out = download(plain_out);
      EXPECT_EQ(std::memcmp(got_res.data(), want_res.data(), got_res.size() * 4), 0)
          << "residual bits differ from the single ops; rel L2 " << rel_l2(got_res, want_res);
      EXPECT_EQ(std::memcmp(got_out.data(), want_out.data(), got_out.size() * 4), 0)
          << "output bits differ from the single ops; rel L2 " << rel_l2(got_out, want_out);

      if (call == 0) {  // the CPU reference (slow: ~234 M multiply-adds on the scalar reference kernels)
        std::vector<float> ref_res = res, ref_out(static_cast<size_t>(kDim)), ref_in(static_cast<size_t>(kDim));
        std::vector<float> ref_delta(static_cast<size_t>(kDim)), ref_gu(static_cast<size_t>(2 * kHidden));
        std::vector<float> ref_act(static_cast<size_t>(kHidden));
        cpu_.attn_out_ffn({.out = host(DType::F32, {1, kDim}, ref_out),
                           .residual = host(DType::F32, {1, kDim}, ref_res),
                           .delta = host(DType::F32, {1, kDim}, ref_delta), .attn = host(DType::F32, {1, kDim}, attn),
                           .wo = hwo, .ffn_norm = host(DType::F32, {kDim}, ffn_norm),
                           .ffn_in = host(DType::F32, {1, kDim}, ref_in), .w_gate_up = hwgu,
                           .gate_up = host(DType::F32, {1, 2 * kHidden}, ref_gu),
                           .act = host(DType::F32, {1, kHidden}, ref_act), .w_down = hwd,
                           .next_norm = host(DType::F32, {kDim}, next_norm), .eps = kEps});
        const std::vector<float> act = download(fused_act);
        std::printf("  %-5s vs CPU reference: act rel L2 %.2e, residual %.2e, out %.2e\n",
                    std::string(dtype_name(t)).c_str(), rel_l2(act, ref_act), rel_l2(got_res, ref_res),
                    rel_l2(got_out, ref_out));
        EXPECT_LE(rel_l2(act, ref_act), one_level_ ? 5e-2 : 1e-3);
        EXPECT_LE(rel_l2(got_res, ref_res), one_level_ ? 2e-2 : 1e-4);  // one level measured 7.4e-3 (H200)
        EXPECT_LE(rel_l2(got_out, ref_out), one_level_ ? 5e-2 : 1e-3);
      }
    }
  }
};

TEST_F(CudaDecodeFfn, OneKernelEqualsSingleOps) {
  if (IsSkipped()) return;
  use_form(FusedForm::PersistentKernel);
  check(DType::Q4_0, 900, FusedForm::PersistentKernel);
  check(DType::Q8_0, 910, FusedForm::PersistentKernel);
}

TEST_F(CudaDecodeFfn, PrologueNormEqualsSingleOps) {
  if (IsSkipped()) return;
  use_form(FusedForm::PrologueNorm);
  check(DType::Q4_0, 920, FusedForm::PrologueNorm);
  check(DType::Q8_0, 930, FusedForm::PrologueNorm);
  // dim 2048: four 512-column segments, so half the consumer warps hold none (they still join the norm's sum)
  check(DType::Q4_0, 940, FusedForm::PrologueNorm, 2048, 5632);
}

TEST_F(CudaDecodeFfn, PrologueNormOneLevelEqualsSingleOps) {
  if (IsSkipped()) return;
  use_form(FusedForm::PrologueNorm, true);
  check(DType::Q4_0, 950, FusedForm::PrologueNorm);
  check(DType::Q8_0, 960, FusedForm::PrologueNorm);
}

// The layer boundary with the next layer's attention norm in its q|k|v matvec (CudaBackendOptions::qkv_norm):
// attn_out_ffn without next_norm (the down matvec adds its rows into the residual), then rms_norm_matmul on a fused
// q|k|v weight (6144 x 4096, with a bias, as Qwen2's) against attn_out_ffn with next_norm (add_rms_norm's launch)
// then matmul on its output. Same backend (one-level activations, the default), three calls in a row, each on the
// previous call's residual: the residual and the q|k|v output the same bits.
TEST_F(CudaDecodeFfn, NextNormInQkvEqualsSingleOps) {
  if (IsSkipped()) return;
  use_form(FusedForm::PrologueNorm, true);
  for (const DType t : {DType::Q4_0, DType::Q8_0}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t kDim = 4096, kHidden = 14336, kQkv = 6144;
    const uint32_t seed = t == DType::Q4_0 ? 970 : 980;
    std::vector<uint8_t> wo = random_weight(t, kDim, kDim, seed), wgu = random_weight(t, 2 * kHidden, kDim, seed + 1),
                         wd = random_weight(t, kDim, kHidden, seed + 2), wqkv = random_weight(t, kQkv, kDim, seed + 3);
    const Tensor gwo = gpu_->prepare_weight(Tensor::make(t, {kDim, kDim}, wo.data()), keep_);
    const Tensor gwgu = gpu_->prepare_weight(Tensor::make(t, {2 * kHidden, kDim}, wgu.data()), keep_);
    const Tensor gwd = gpu_->prepare_weight(Tensor::make(t, {kDim, kHidden}, wd.data()), keep_);
    const Tensor gwqkv = gpu_->prepare_weight(Tensor::make(t, {kQkv, kDim}, wqkv.data()), keep_);
    ASSERT_TRUE(gpu_->norm_in_matmul(1, gwqkv)) << "the q|k|v norm prologue does not take the Llama-3-8B shape";
    std::vector<float> ffn_norm = random_floats(size_t(kDim), seed + 4), attn_norm = random_floats(size_t(kDim), seed + 5);
    for (float& v : ffn_norm) v += 1.0f;
    for (float& v : attn_norm) v += 1.0f;
    const Tensor gfn = upload(DType::F32, {kDim}, ffn_norm), gan = upload(DType::F32, {kDim}, attn_norm);
    const Tensor bias = upload(DType::F32, {kQkv}, random_floats(size_t(kQkv), seed + 6));
    const std::vector<float> res = random_floats(size_t(kDim), seed + 7, 2.0f);
    const Tensor fused_res = upload(DType::F32, {1, kDim}, res), plain_res = upload(DType::F32, {1, kDim}, res);
    const Tensor delta = poisoned({1, kDim}), gate_up = poisoned({1, 2 * kHidden}), act = poisoned({1, kHidden});
    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const Tensor gattn = upload(DType::F32, {1, kDim}, random_floats(size_t(kDim), seed + 10 + uint32_t(call)));
      const Tensor fused_xb = poisoned({1, kDim}), plain_xb = poisoned({1, kDim});
      const Tensor fused_qkv = poisoned({1, kQkv}), plain_qkv = poisoned({1, kQkv});
      Backend::AttnOutFfn a{.out = fused_xb, .residual = fused_res, .delta = delta, .attn = gattn, .wo = gwo,
                            .ffn_norm = gfn, .ffn_in = fused_xb, .w_gate_up = gwgu, .gate_up = gate_up, .act = act,
                            .w_down = gwd, .next_norm = Tensor{}, .eps = kEps};
      ASSERT_TRUE(gpu_->prologue_norm_applies(a));
      gpu_->attn_out_ffn(a);
      gpu_->rms_norm_matmul(fused_qkv, fused_xb, fused_res, gan, kEps, gwqkv, bias);

      a.out = plain_xb, a.ffn_in = plain_xb, a.residual = plain_res, a.next_norm = gan;
      gpu_->attn_out_ffn(a);  // the add_rms_norm launch writes the norm
      gpu_->matmul(plain_qkv, plain_xb, gwqkv, bias);

      const std::vector<float> got_res = download(fused_res), want_res = download(plain_res);
      const std::vector<float> got = download(fused_qkv), want = download(plain_qkv);
      EXPECT_EQ(std::memcmp(got_res.data(), want_res.data(), got_res.size() * 4), 0)
          << "residual bits differ; rel L2 " << rel_l2(got_res, want_res);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
          << "q|k|v bits differ; rel L2 " << rel_l2(got, want);
    }
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA

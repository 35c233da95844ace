// Backend::matmul_add_rms_norm on CUDA: delta = x . w^T; residual += delta; out = rms_norm(residual) * norm_weight.
// At one token the CUDA backend runs it as one launch (the streamed matvec, version 9 on BF16 and version 10 on
// Q8_0/Q4_0/Q4_K, with the add and the norm in its epilogue: matvec_add_norm.cuh). Checked:
//  - against the CPU reference backend (dequantize, fp32 dot; its add_rms_norm): delta and the normed output
//    within 1e-4 relative L2 (the quantized matvecs' int8 activations, ~2e-5), the residual within 1e-5;
//  - against the unfused CUDA path on a second backend (the option off, as by default: matmul, then
//    add_rms_norm): delta, residual and output the same bits, since the epilogue repeats add_rms_norm's
//    arithmetic in its order;
//  - three calls in a row, each on the previous call's residual (the arrival counter must be back at 0 after
//    each), with f32 and bf16 outputs.
// Shapes: the Llama-3-8B wo (4096 x 4096) and down (4096 x 14336) projections, a 2048 x 3072 one, and its TP=2
// down shard (4096 x 7168). Outputs are NaN-poisoned first.
#ifdef FERRY_HAS_CUDA

#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

struct Case {
  DType type;
  int64_t dim, n_in;
};

class CudaMatvecAddNorm : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    CudaBackendOptions fused;
    fused.fused_add_norm = true;  // off by default (no faster in captured steps); this test is about the kernel
    gpu_ = std::make_unique<CudaBackend>(fused);
  }

  // Returns false (checking nothing) where the backend does not fuse this shape.
  bool check(const Case& c, bool bf16_out, uint32_t seed) {
    const std::string what = std::string(dtype_name(c.type)) + " " + std::to_string(c.dim) + "x" +
                             std::to_string(c.n_in) + (bf16_out ? " bf16 out" : " f32 out");
    SCOPED_TRACE(what);
    const std::vector<float> wf = random_floats(size_t(c.dim * c.n_in), seed, 1.0f / std::sqrt(float(c.n_in)));
    std::vector<uint8_t> wbytes(size_t(c.dim) * row_bytes(c.type, c.n_in));
    for (int64_t r = 0; r < c.dim; ++r)
      quantize_row(c.type, wf.data() + r * c.n_in, wbytes.data() + size_t(r) * row_bytes(c.type, c.n_in), c.n_in);
    const Tensor hw = Tensor::make(c.type, {c.dim, c.n_in}, wbytes.data());
    std::vector<float> res = random_floats(size_t(c.dim), seed + 1, 2.0f), norm_w = random_floats(size_t(c.dim), seed + 2);
    const Tensor gw = gpu_->prepare_weight(hw, keep_);
    if (!gpu_->add_norm_fused(1, gw)) return false;
    const Tensor gnw = upload(DType::F32, {c.dim}, norm_w);
    const Tensor gres = upload(DType::F32, {1, c.dim}, res);
    // The unfused path on a second backend, on its own copies (same device, same prepared layout).
    CudaBackendOptions plain_options;
    plain_options.fused_add_norm = false;
    plain_options.one_level_acts = false;  // as the fixture's backend (cuda_test_util.h)
    CudaBackend plain(plain_options);
    std::vector<DeviceBuffer> plain_keep;
    const Tensor pw = plain.prepare_weight(hw, plain_keep);
    const auto plain_upload = [&](DType dt, std::initializer_list<int64_t> dims, const void* data) {
      Tensor shape = Tensor::make(dt, dims, nullptr);
      plain_keep.push_back(plain.alloc(shape.nbytes()));
      Tensor t = Tensor::make(dt, dims, plain_keep.back().data(), Device::Cuda);
      if (data) plain.copy_to_device(t, data, t.nbytes());
      return t;
    };
    const Tensor pnw = plain_upload(DType::F32, {c.dim}, norm_w.data());
    const Tensor pres = plain_upload(DType::F32, {1, c.dim}, res.data());
    const DType out_dt = bf16_out ? DType::BF16 : DType::F32;

    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const std::vector<float> x = random_floats(size_t(c.n_in), seed + 10 + uint32_t(call));
      // CPU reference: delta = x . w^T, then add_rms_norm on the reference residual.
      std::vector<float> ref_delta(size_t(c.dim)), ref_out(size_t(c.dim)), xv = x;
      cpu_.matmul(host(DType::F32, {1, c.dim}, ref_delta), host(DType::F32, {1, c.n_in}, xv), hw, Tensor{});
      cpu_.add_rms_norm(host(DType::F32, {1, c.dim}, ref_out), host(DType::F32, {1, c.dim}, res),
                        host(DType::F32, {1, c.dim}, ref_delta), host(DType::F32, {c.dim}, norm_w), 1e-5f);

      const Tensor gx = upload(DType::F32, {1, c.n_in}, x), gdelta = poisoned({1, c.dim});
      const std::vector<uint16_t> nan_bf16(size_t(c.dim), 0xFFFFu);
      const Tensor gout = bf16_out ? upload(DType::BF16, {1, c.dim}, nan_bf16) : poisoned({1, c.dim});
      gpu_->matmul_add_rms_norm(gout, gres, gdelta, gx, gw, gnw, 1e-5f);

      const Tensor px = plain_upload(DType::F32, {1, c.n_in}, x.data());
      const Tensor pdelta = plain_upload(DType::F32, {1, c.dim}, nullptr);
      const Tensor pout = plain_upload(out_dt, {1, c.dim}, nullptr);
      plain.matmul_add_rms_norm(pout, pres, pdelta, px, pw, pnw, 1e-5f);

      const std::vector<float> delta = download(gdelta), residual = download(gres);
      std::vector<float> out(size_t(c.dim));
      std::vector<uint16_t> out_bits(size_t(c.dim));
      if (bf16_out) {
        gpu_->copy_to_host(out_bits.data(), gout, out_bits.size() * 2);
        for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(out_bits[i]);
      } else {
        out = download(gout);
      }
      EXPECT_LE(rel_l2(delta, ref_delta), 1e-4);
      // res: the CPU's updated residual; it carries delta's error (BF16 fp32 sums ~1e-6; quantized ~2e-5)
      EXPECT_LE(rel_l2(residual, res), c.type == DType::BF16 ? 1e-5 : 1e-4);
      EXPECT_LE(rel_l2(out, ref_out), bf16_out ? 5e-3 : 1e-4);
      if (call == 0) std::printf("  %-36s delta rel L2 %.2e, out %.2e\n", what.c_str(), rel_l2(delta, ref_delta),
                                 rel_l2(out, ref_out));

      std::vector<float> p_delta(size_t(c.dim)), p_res(size_t(c.dim));
      plain.copy_to_host(p_delta.data(), pdelta, p_delta.size() * 4);
      plain.copy_to_host(p_res.data(), pres, p_res.size() * 4);
      std::vector<uint8_t> p_out(size_t(pout.nbytes()));
      plain.copy_to_host(p_out.data(), pout, p_out.size());
      EXPECT_EQ(std::memcmp(delta.data(), p_delta.data(), delta.size() * 4), 0) << "delta bits differ from the unfused path";
      EXPECT_EQ(std::memcmp(residual.data(), p_res.data(), residual.size() * 4), 0)
          << "residual bits differ from the unfused path";
      const void* fused_out = bf16_out ? static_cast<const void*>(out_bits.data()) : static_cast<const void*>(out.data());
      EXPECT_EQ(std::memcmp(fused_out, p_out.data(), p_out.size()), 0) << "output bits differ from the unfused path";
    }
    return true;
  }
};

TEST_F(CudaMatvecAddNorm, FusedEqualsMatmulThenAddRmsNorm) {
  int checked = 0;
  for (const DType t : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    for (const Case c : {Case{t, 4096, 4096}, Case{t, 4096, 14336}, Case{t, 2048, 3072}, Case{t, 4096, 7168}}) {
      // Only where the backend fuses it (the rule's matvec version for the shape takes the epilogue).
      if (!check(c, false, 500 + uint32_t(checked))) continue;
      check(c, true, 600 + uint32_t(checked));
      ++checked;
    }
  }
  EXPECT_GE(checked, 8) << "the fused path applied to too few shapes";
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA

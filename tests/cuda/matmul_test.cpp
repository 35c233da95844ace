// CUDA matmul against the CPU reference (dot_ref: dequantize, multiply in fp32). For n <= 16 tokens the
// matvec kernels (fp32 weights after dequantization, fp32 accumulation): relative L2 <= 1e-4. For n > 16
// the bf16 cuBLASLt path (weights and activations rounded to bf16, fp32 accumulation): <= 1e-2.
#ifdef FERRY_HAS_CUDA

#include <string>
#include <tuple>

#include "backends/cuda/matmul/plan.h"
#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

struct Case {
  DType type;
  int64_t n, n_out, n_in;
  bool bias;
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.type)) + " n=" + std::to_string(c.n) + " " + std::to_string(c.n_out) + "x" +
         std::to_string(c.n_in) + (c.bias ? " +bias" : "");
}

class CudaMatmul : public CudaOpsTest {
 protected:
  void check(const Case& c) {
    std::vector<uint8_t> w = make_weight(c.type, c.n_out, c.n_in, 100 + uint32_t(c.type) + uint32_t(c.n));
    std::vector<float> x = random_floats(size_t(c.n * c.n_in), 200 + uint32_t(c.n));
    std::vector<float> b = random_floats(size_t(c.n_out), 300);
    const Tensor hw = Tensor::make(c.type, {c.n_out, c.n_in}, w.data());
    std::vector<float> ref(size_t(c.n * c.n_out));
    cpu_.matmul(host(DType::F32, {c.n, c.n_out}, ref), host(DType::F32, {c.n, c.n_in}, x), hw,
                c.bias ? host(DType::F32, {c.n_out}, b) : Tensor{});
    const Tensor gw = gpu_->prepare_weight(hw, keep_);
    const Tensor out = poisoned({c.n, c.n_out});
    gpu_->matmul(out, upload(DType::F32, {c.n, c.n_in}, x), gw,
                 c.bias ? upload(DType::F32, {c.n_out}, b) : Tensor{});
    // Matvec kernels keep f32 activations (1e-4); the GEMM paths round them to bf16 (1e-2). Which one runs is
    // the backend's plan (matmul/plan.h; this backend keeps no bf16 copies of other types): a GEMM from 17 tokens,
    // and from 5 on BF16 weights.
    const bool matvec = c.n <= 4 || (c.n <= 16 && c.type != DType::BF16);
    const double tol = matvec ? 1e-4 : 1e-2;
    const double err = rel_l2(download(out), ref);
    EXPECT_LE(err, tol) << describe(c);
    std::printf("  %-28s rel L2 %.2e\n", describe(c).c_str(), err);
  }
};

TEST_F(CudaMatmul, EveryWeightTypeAndTokenCount) {
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                        DType::Q6_K, DType::Q5_0, DType::Q5_1, DType::Q5_K, DType::Q2_K, DType::Q3_K,
                        DType::F8_E4M3_B128}) {
    for (const int64_t n : {1, 3, 16, 64, 100}) check({t, n, 96, 512, false});
  }
}

TEST_F(CudaMatmul, ShapesThatExerciseTheUnrollTailAndBias) {
  // 2304 = 72 blocks of 32: a lane's last unrolled chunks fall off the row; 4096 x 1000 a Llama-like row.
  for (const DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_1, DType::BF16, DType::Q4_K, DType::F8_E4M3_B128}) {
    check({t, 1, 200, 2304, true});
    check({t, 9, 1000, 4096, false});
    check({t, 17, 130, 2304, true});
  }
  check({DType::F32, 2, 33, 4, true});  // a tiny row: fewer chunks than lanes
}

// Where the backend keeps a step's matmul input in bf16 (matmul_input_dtype), a bf16 x must give exactly the
// output of the f32 x it was rounded from: every GEMM path rounds f32 activations to bf16 first. Token counts
// and shapes reach the mma.sync skinny GEMM (17-32 tokens), the wgmma skinny GEMM (33-64 tokens on a 16384-row
// weight), cuBLASLt (up to 255) and the Hopper GEMM (256 and more), with a bias and for Q8_0 (its bf16 copy).
TEST_F(CudaMatmul, Bf16InputEqualsTheF32InputItWasRoundedFrom) {
  struct Shape {
    DType type;
    int64_t n, n_out, n_in;
    bool bias;
  };
  for (const Shape& c : {Shape{DType::BF16, 17, 512, 1024, true}, Shape{DType::BF16, 48, 16384, 1024, false},
                         Shape{DType::BF16, 100, 300, 512, false}, Shape{DType::BF16, 256, 512, 1024, false},
                         Shape{DType::BF16, 511, 384, 4096, true}, Shape{DType::Q8_0, 300, 256, 1024, false}}) {
    SCOPED_TRACE(std::string(dtype_name(c.type)) + " n=" + std::to_string(c.n) + " " + std::to_string(c.n_out) + "x" +
                 std::to_string(c.n_in));
    ASSERT_EQ(gpu_->matmul_input_dtype(c.n), DType::BF16);
    std::vector<uint8_t> w = make_weight(c.type, c.n_out, c.n_in, 400 + uint32_t(c.n));
    const std::vector<float> x = random_floats(size_t(c.n * c.n_in), 500 + uint32_t(c.n), 2.0f);
    const std::vector<float> b = random_floats(size_t(c.n_out), 600);
    const Tensor gw = gpu_->prepare_weight(Tensor::make(c.type, {c.n_out, c.n_in}, w.data()), keep_);
    const Tensor bias = c.bias ? upload(DType::F32, {c.n_out}, b) : Tensor{};
    const Tensor out32 = poisoned({c.n, c.n_out}), out16 = poisoned({c.n, c.n_out});
    gpu_->matmul(out32, upload(DType::F32, {c.n, c.n_in}, x), gw, bias);
    gpu_->matmul(out16, upload(DType::BF16, {c.n, c.n_in}, to_bf16_bits(x)), gw, bias);
    const std::vector<float> a = download(out32), z = download(out16);
    EXPECT_EQ(a, z);  // bit for bit (poisoned NaNs left unwritten would differ too)
  }
}

// The Hopper GEMM launched with programmatic dependent launch (FERRY_CUDA_TUNE=gemm=pdl) reads its first
// weight boxes before the previous kernel ends and x only after: behind the PDL-launched f32 -> bf16 conversion of
// x (matmul) and the bf16 norm output (matmul_input_dtype), its outputs must equal the plain launch's bit for bit,
// for every tile the heuristic picks here and for the SwiGLU epilogue. Repeated, so a read of x before the
// conversion finished would show up as a mismatch.
TEST_F(CudaMatmul, HopperGemmWithPdlEqualsPlainLaunch) {
  if (hopper_sm_count() == 0) GTEST_SKIP() << "needs a Hopper GPU";
  CudaBackend pdl_backend(CudaBackendOptions{.tune = {.gemm = GemmTune::kFerryPdl}});
  for (const auto& [n, n_out, n_in] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {256, 512, 1024}, {512, 3072, 2048}, {300, 1536, 512}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " " + std::to_string(n_out) + "x" + std::to_string(n_in));
    std::vector<uint8_t> w = make_weight(DType::BF16, n_out, n_in, 700 + uint32_t(n));
    const std::vector<float> x = random_floats(size_t(n * n_in), 800 + uint32_t(n), 2.0f);
    const Tensor hw = Tensor::make(DType::BF16, {n_out, n_in}, w.data());
    std::vector<float> got[2][2];  // [plain, pdl][matmul, matmul_swiglu]
    for (int b = 0; b < 2; ++b) {
      CudaBackend& be = b == 0 ? *gpu_ : pdl_backend;
      std::vector<DeviceBuffer> keep;
      const Tensor gw = be.prepare_weight(hw, keep);
      const auto dev = [&](DType dt, std::initializer_list<int64_t> dims) {
        keep.push_back(be.alloc(Tensor::make(dt, dims, nullptr).nbytes()));
        return Tensor::make(dt, dims, keep.back().data(), Device::Cuda);
      };
      const Tensor gx = dev(DType::F32, {n, n_in}), out = dev(DType::F32, {n, n_out});
      const Tensor act = dev(DType::F32, {n, n_out / 2}), scratch = dev(DType::F32, {n, n_out});
      for (int rep = 0; rep < 3; ++rep) {
        be.copy_to_device(gx, x.data(), gx.nbytes());
        be.matmul(out, gx, gw, Tensor{});
        be.matmul_swiglu(act, scratch, gx, gw);
      }
      got[b][0].resize(size_t(out.numel()));
      got[b][1].resize(size_t(act.numel()));
      be.copy_to_host(got[b][0].data(), out, out.nbytes());
      be.copy_to_host(got[b][1].data(), act, act.nbytes());
    }
    EXPECT_EQ(got[0][0], got[1][0]) << "matmul";
    EXPECT_EQ(got[0][1], got[1][1]) << "matmul_swiglu";
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA

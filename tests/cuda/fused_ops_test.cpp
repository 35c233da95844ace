// The vectorized paths of two memory-bound ops changed with bench/kernels/fused_ops_bench, at sizes the older
// ops tests do not reach: embedding rows wide enough that every thread runs several loads-ahead rounds (dim
// 4096 and 14336 columns), and swiglu on both its float4 path (count % 4 == 0, aligned) and its scalar path
// (odd count, or an offset start). CPU reference backend; tolerances as tests/cuda/ops_test.cpp (embedding
// 1e-6, fp32 ops 1e-5 relative L2).
#ifdef FERRY_HAS_CUDA

#include <vector>

#include "cuda_test_util.h"
#include "formats/quant.h"

namespace ferry::test {
namespace {

class CudaFusedOps : public CudaOpsTest {};

TEST_F(CudaFusedOps, EmbeddingWideRows) {
  for (const int64_t dim : {4096, 14336}) {
    for (const DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
      const int64_t vocab = 40;
      const std::vector<float> f = random_floats(size_t(vocab * dim), 20 + uint32_t(t));
      std::vector<uint8_t> table(size_t(vocab) * row_bytes(t, dim));
      for (int64_t r = 0; r < vocab; ++r) quantize_row(t, f.data() + r * dim, table.data() + size_t(r) * row_bytes(t, dim), dim);
      std::vector<int32_t> ids = {0, 39, 7, 7, 21};
      const int64_t n = int64_t(ids.size());
      const Tensor ht = Tensor::make(t, {vocab, dim}, table.data());
      std::vector<float> ref(size_t(n * dim));
      cpu_.embedding(host(DType::F32, {n, dim}, ref), ht, host(DType::I32, {n}, ids));
      const Tensor gt = gpu_->prepare_weight(ht, keep_);
      const Tensor out = poisoned({n, dim});
      gpu_->embedding(out, gt, upload(DType::I32, {n}, ids));
      EXPECT_LE(rel_l2(download(out), ref), 1e-6) << dtype_name(t) << " dim " << dim;
    }
  }
}

TEST_F(CudaFusedOps, SwigluVectorAndScalarPaths) {
  for (const int64_t count : {int64_t(4 * 14336), int64_t(4 * 14336 + 3), int64_t(5)}) {
    std::vector<float> g = random_floats(size_t(count), 30, 4.0f), u = random_floats(size_t(count), 31);
    std::vector<float> ref(static_cast<size_t>(count));
    cpu_.swiglu(host(DType::F32, {1, count}, ref), host(DType::F32, {1, count}, g), host(DType::F32, {1, count}, u));
    const Tensor gg = upload(DType::F32, {1, count}, g), gu = upload(DType::F32, {1, count}, u);
    const Tensor out = poisoned({1, count});
    gpu_->swiglu(out, gg, gu);
    EXPECT_LE(rel_l2(download(out), ref), 1e-5) << "count " << count;
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA

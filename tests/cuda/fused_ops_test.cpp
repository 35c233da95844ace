// The vectorized paths of the memory-bound ops tuned with bench/kernels/fused_ops_bench, at sizes the older
// ops tests do not reach: embedding rows wide enough that every thread runs several loads-ahead rounds (dim
// 4096 and 14336 columns) and the plain-table kernel (F32/F16/BF16) at odd widths and token counts, swiglu on
// both its float4 path (count % 4 == 0, aligned) and its scalar path (odd count, or an offset start), rope's
// block-per-token kernel and its scalar fallback at model shapes and odd n, and the norms' row results not
// depending on the number of rows. CPU reference backend; tolerances as tests/cuda/ops_test.cpp (embedding
// 1e-6, fp32 ops 1e-5 relative L2); the row-independence checks are bit-exact.
#ifdef FERRY_HAS_CUDA

#include <cmath>
#include <cstring>
#include <random>
#include <string>
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


TEST_F(CudaFusedOps, EmbeddingPlainTablesAtOddWidthsAndCounts) {
  // The plain kernel at widths of 8k columns (16-bit weights need cols % 8 == 0); 4104 columns = 1026 units of
  // 4 values: a second pass over the row (third for F32) for some threads.
  for (const DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (const int64_t dim : {8, 24, 520, 4104}) {
      for (const int64_t n : {1, 7, 513}) {
        const int64_t vocab = 50;
        const std::vector<float> f = random_floats(size_t(vocab * dim), 40 + uint32_t(dim));
        std::vector<uint8_t> table(size_t(vocab) * row_bytes(t, dim));
        for (int64_t r = 0; r < vocab; ++r) quantize_row(t, f.data() + r * dim, table.data() + size_t(r) * row_bytes(t, dim), dim);
        std::vector<int32_t> ids(static_cast<size_t>(n));
        std::mt19937 rng{uint32_t(n)};
        for (int32_t& v : ids) v = int32_t(rng() % vocab);
        const Tensor ht = Tensor::make(t, {vocab, dim}, table.data());
        std::vector<float> ref(size_t(n * dim));
        cpu_.embedding(host(DType::F32, {n, dim}, ref), ht, host(DType::I32, {n}, ids));
        const Tensor gt = gpu_->prepare_weight(ht, keep_);
        const Tensor out = poisoned({n, dim});
        gpu_->embedding(out, gt, upload(DType::I32, {n}, ids));
        EXPECT_LE(rel_l2(download(out), ref), 1e-6) << dtype_name(t) << " dim " << dim << " n " << n;
      }
    }
  }
}

TEST_F(CudaFusedOps, RopeVectorAndScalarPathsAtModelShapes) {
  struct Shape {
    int64_t heads, head_dim, half;
  };
  // (32, 128, 64): q of Llama 3 (one round per thread); (8, 128, 64): its k; (64, 128, 64): two rounds of
  // loads per thread; (5, 64, 16): partial rotation; (3, 16, 6): interleaved vector, NeoX scalar (6 % 4 != 0);
  // (2, 10, 5): scalar in both orderings (head_dim % 4 != 0).
  const Shape shapes[] = {{32, 128, 64}, {8, 128, 64}, {64, 128, 64}, {5, 64, 16}, {3, 16, 6}, {2, 10, 5}};
  for (const RopeOrdering ord : {RopeOrdering::Interleaved, RopeOrdering::Neox}) {
    for (const Shape& sh : shapes) {
      for (const int64_t n : {1, 7, 513}) {
        std::vector<float> x = random_floats(size_t(n * sh.heads * sh.head_dim), 50 + uint32_t(n), 2.0f);
        std::vector<int32_t> pos(static_cast<size_t>(n));
        std::mt19937 rng(uint32_t(n + sh.heads));
        for (int32_t& p : pos) p = int32_t(rng() % 500000);
        std::vector<float> inv(static_cast<size_t>(sh.half));
        for (int64_t i = 0; i < sh.half; ++i) inv[size_t(i)] = float(std::pow(500000.0, -2.0 * double(i) / double(2 * sh.half)));
        const Tensor gx = upload(DType::F32, {n, sh.heads, sh.head_dim}, x);
        gpu_->rope(gx, upload(DType::I32, {n}, pos), upload(DType::F32, {sh.half}, inv), ord);
        cpu_.rope(host(DType::F32, {n, sh.heads, sh.head_dim}, x), host(DType::I32, {n}, pos),
                  host(DType::F32, {sh.half}, inv), ord);
        EXPECT_LE(rel_l2(download(gx), x), 1e-5)
            << (ord == RopeOrdering::Neox ? "neox" : "interleaved") << " heads " << sh.heads << " head_dim "
            << sh.head_dim << " half " << sh.half << " n " << n;
      }
    }
  }
}

// A row's normalized values (f32 and bf16 outputs) and its updated residual must not depend on how many rows
// the call has (the batch-invariant mode relies on it): rows 0..6 of a 513-row call are bit-identical to a
// 7-row call's and row 0 to a 1-row call's, for the block-per-row (4096) and warp-per-row (128) shapes.
TEST_F(CudaFusedOps, NormRowsDoNotDependOnTheRowCount) {
  for (const int64_t cols : {4096, 128}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t big = 513;
    const std::vector<float> x = random_floats(size_t(big * cols), 60, 2.0f), delta = random_floats(x.size(), 61, 0.5f);
    const std::vector<float> w = random_floats(size_t(cols), 62);
    const Tensor gw = upload(DType::F32, {cols}, w);
    const auto first_rows = [&](const std::vector<float>& v, int64_t rows) {
      return std::vector<float>(v.begin(), v.begin() + rows * cols);
    };
    std::vector<std::vector<float>> f32_out, res_out;
    std::vector<std::vector<uint16_t>> bf16_out;
    for (const int64_t rows : {big, int64_t(7), int64_t(1)}) {
      const std::vector<float> xr = first_rows(x, rows), dr = first_rows(delta, rows);
      const Tensor gx = upload(DType::F32, {rows, cols}, xr), gd = upload(DType::F32, {rows, cols}, dr);
      const Tensor out = poisoned({rows, cols});
      const Tensor out16 = upload(DType::BF16, {rows, cols}, nullptr);
      std::vector<uint16_t> got16(size_t(rows * cols));
      gpu_->rms_norm(out, gx, gw, 1e-5f);
      gpu_->rms_norm(out16, gx, gw, 1e-5f);
      gpu_->copy_to_host(got16.data(), out16, got16.size() * 2);
      f32_out.push_back(download(out));
      bf16_out.push_back(got16);
      gpu_->add_rms_norm(out, gx, gd, gw, 1e-5f);  // gx becomes the residual
      f32_out.push_back(download(out));
      res_out.push_back(download(gx));
    }
    for (size_t k = 1; k < 3; ++k) {
      const int64_t rows = k == 1 ? 7 : 1;
      const size_t m = size_t(rows * cols);
      EXPECT_EQ(0, std::memcmp(f32_out[2 * k].data(), f32_out[0].data(), m * 4)) << "rms_norm rows " << rows;
      EXPECT_EQ(0, std::memcmp(bf16_out[k].data(), bf16_out[0].data(), m * 2)) << "rms_norm bf16 rows " << rows;
      EXPECT_EQ(0, std::memcmp(f32_out[2 * k + 1].data(), f32_out[1].data(), m * 4)) << "add_rms_norm rows " << rows;
      EXPECT_EQ(0, std::memcmp(res_out[k].data(), res_out[0].data(), m * 4)) << "residual rows " << rows;
    }
  }
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAS_CUDA

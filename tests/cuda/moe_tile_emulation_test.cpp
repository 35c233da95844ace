// Host-only (runs without a GPU): the index math of the CUDA MoE kernels.
//  - The grouped GEMM's k-tiles (moe/moe_gemm_tile.cuh): for every decoder, every tile of a row, decoded the way
//    the kernel decodes it (chunks k0 / kVals .., values at MoeTile::column), fills each tile column exactly once
//    with dequantize_row's value at k0 + column; in the last, partial tile of a row (cols not a multiple of the
//    tile) the chunks past the row's end are the columns past it.
//  - One block of the tensor-core grouped GEMM (moe/moe_gemm.cu) emulated with the kernel's own index math
//    (moe_gemm_tile.cuh): every thread's loads and shared-memory stores (MoeTile::load_row / load_chunk and
//    kStoreVals units at moe_smem_offset, moe_act_slot / moe_act_quad), ldmatrix.x4 as PTX defines it over the
//    lanes' row addresses (moe_a_lane / moe_b_lane through moe_step_offset), mma.m16n8k16 over the fragments as PTX
//    lays them out, the accumulators stored through moe_acc_row / moe_acc_slot. Every element of a stage is written
//    once with the bf16 of its value (zeros past rows, cols and the tile's slots), every ldmatrix phase reads 8
//    distinct bank groups, and the block's outputs equal the direct dot products of the bf16-rounded operands (in
//    double: a transposed fragment, a wrong swizzle or a missed k16 step fails by far), for every decoder, a
//    partial row tile, a partial last k-step and slot counts 64, 37 and 5.
//  - moe_max_tiles bounds the tiles moe_group lists (sum over experts of ceil(count / tile rows)) for random and
//    extreme routings.
#ifdef FERRY_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "backends/cuda/moe/moe_experts.cuh"
#include "backends/cuda/moe/moe_gemm_tile.cuh"
#include "backends/cuda/moe/moe_routing.cuh"
#include "core/fp16.h"
#include "formats/quant.h"
#include "device_layout.h"

namespace ferry::cuda_ops {
namespace {

// Decodes every k-tile of every row as moe_gemm.cu does; checks coverage and values.
void check_tiles(DType t, int64_t rows, int64_t cols) {
  std::mt19937 rng(uint32_t(t) * 7 + uint32_t(cols));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> f(size_t(rows * cols));
  for (float& x : f) x = dist(rng);
  std::vector<uint8_t> gguf(size_t(rows) * row_bytes(t, cols));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.data() + r * cols, gguf.data() + size_t(r) * row_bytes(t, cols), cols);
  const std::vector<uint8_t> dev = device_layout(t, gguf, rows, cols);
  const WeightView w{dev.data(), rows, cols, is_split_type(t) ? scales_offset(t, rows, cols) : 0};
  const bool ok = visit_decoder(t, [&]<class D>() {
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> ref(static_cast<size_t>(cols));
      dequantize_row(t, gguf.data() + size_t(r) * row_bytes(t, cols), ref.data(), cols);
      for (int64_t k0 = 0; k0 < cols; k0 += kMoeGemmTileK) {
        std::vector<int> seen(kMoeGemmTileK, 0);
        std::vector<float> tile(kMoeGemmTileK, NAN);
        for (int cc = 0; cc < MoeTile<D>::kChunks; ++cc) {
          const int64_t c = MoeTile<D>::chunk(k0, cc);
          float v[D::kVals];
          const bool in_row = c < D::chunks(cols);
          if (in_row) D::decode(D::load(w, r, c), v);
          for (int run = 0; run < D::kRuns; ++run)
            for (int j = 0; j < D::kRunLen; ++j) {
              const int col = MoeTile<D>::column(k0, cc, run, j);
              ASSERT_TRUE(col >= 0 && col < kMoeGemmTileK) << dtype_name(t) << " k0 " << k0 << " chunk " << cc;
              ++seen[size_t(col)];
              // a chunk in the row holds columns in the row, a chunk past it columns past it
              ASSERT_EQ(in_row, k0 + col < cols) << dtype_name(t) << " k0 " << k0 << " column " << col;
              tile[size_t(col)] = in_row ? v[run * D::kRunLen + j] : 0.0f;
            }
        }
        for (int col = 0; col < kMoeGemmTileK; ++col) {
          ASSERT_EQ(seen[size_t(col)], 1) << dtype_name(t) << " k0 " << k0 << " column " << col;
          if (k0 + col < cols) {
            const float want = ref[size_t(k0 + col)];
            ASSERT_NEAR(tile[size_t(col)], want, 1e-6f * (1.0f + std::fabs(want)))
                << dtype_name(t) << " row " << r << " column " << k0 + col;
          }
        }
      }
    }
  });
  EXPECT_TRUE(ok) << dtype_name(t);
}

TEST(CudaMoeEmulation, GemmTilesCoverEveryColumnOnceWithItsValue) {
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    check_tiles(t, 3, 768);  // 768 = 6 whole tiles, 3 super-blocks
  // a partial last tile (cols not a multiple of 128): the types whose blocks allow it
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_1}) {
    check_tiles(t, 2, 64);
    check_tiles(t, 2, 160);
  }
}

// One stage of the block's shared memory as the kernel lays it out: the (kMoeGemmTileN, kTileK) weight tile, then
// the (kMoeGemmTileM, kTileK) slot tile, bf16, swizzled; writes counts every 2-byte element's stores.
struct StageImage {
  static constexpr size_t kWeightBytes = size_t(kMoeGemmTileN) * kMoeRowBytes;
  static constexpr size_t kBytes = kWeightBytes + size_t(kMoeGemmTileM) * kMoeRowBytes;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kBytes, 0xFF);
  std::vector<int> writes = std::vector<int>(kBytes / 2, 0);
  void store(size_t at, const std::vector<float>& vals) {  // one contiguous store of bf16 values
    ASSERT_LE(at + 2 * vals.size(), kBytes);
    for (size_t i = 0; i < vals.size(); ++i) {
      const uint16_t h = f32_to_bf16(vals[i]);
      std::memcpy(bytes.data() + at + 2 * i, &h, 2);
      ++writes[at / 2 + i];
    }
  }
  uint32_t word(uint32_t at) const {
    uint32_t w;
    std::memcpy(&w, bytes.data() + at, 4);
    return w;
  }
  float value(uint32_t at) const {
    uint16_t h;
    std::memcpy(&h, bytes.data() + at, 2);
    return bf16_to_f32(h);
  }
};

// ldmatrix.x4: lanes 8q .. 8q + 7 give the 16-byte rows of matrix q; thread T gets word T % 4 of row T / 4 of each.
void ldmatrix_x4(const StageImage& st, const uint32_t (&lane_addr)[32], uint32_t (&r)[32][4]) {
  for (int q = 0; q < 4; ++q) {
    std::vector<int> groups;
    for (int i = 0; i < 8; ++i) {
      const uint32_t a = lane_addr[8 * q + i];
      ASSERT_EQ(a % 16, 0u) << "ldmatrix row address " << a;
      groups.push_back(int(a / 16 % 8));
    }
    std::sort(groups.begin(), groups.end());
    ASSERT_TRUE(std::adjacent_find(groups.begin(), groups.end()) == groups.end()) << "ldmatrix bank conflict";
    for (int t = 0; t < 32; ++t) r[t][q] = st.word(lane_addr[8 * q + t / 4] + 4 * uint32_t(t % 4));
  }
}

float lo_bf16(uint32_t w) { return bf16_to_f32(uint16_t(w & 0xFFFF)); }
float hi_bf16(uint32_t w) { return bf16_to_f32(uint16_t(w >> 16)); }

// d (16x8) += a (16x16) . b (16x8) over the 32 lanes' fragments, as PTX lays out mma.m16n8k16 (g = lane / 4,
// t = lane % 4): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); b0 (k 2t.., n g), b1 (k 2t+8..,
// n g); d0, d1 (g, n 2t, 2t+1), d2, d3 (g+8, n 2t, 2t+1). Accumulated in double.
void mma_m16n8k16(const uint32_t (&a)[32][4], const uint32_t (&b)[32][4], int b_first, double (&d)[32][4]) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int ar[4] = {g, g + 8, g, g + 8}, ak[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int i = 0; i < 4; ++i) {
      A[ar[i]][ak[i]] = lo_bf16(a[lane][i]);
      A[ar[i]][ak[i] + 1] = hi_bf16(a[lane][i]);
    }
    for (int i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = lo_bf16(b[lane][b_first + i]);
      B[2 * t + 8 * i + 1][g] = hi_bf16(b[lane][b_first + i]);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
      for (int k = 0; k < 16; ++k) d[lane][i] += A[row][k] * B[k][col];
    }
  }
}

// The block (row tile row0, tile slots `slots` of activations a with a_div) of the grouped GEMM on weight w,
// emulated; returns out (slots, rows) with NaN where the block stores nothing.
template <class D>
std::vector<double> emulate_block(const WeightView& w, int64_t row0, const std::vector<float>& a, int a_div,
                                  const std::vector<int32_t>& slots) {
  const int m_count = int(slots.size());
  constexpr int kWarps = kMoeGemmThreads / 32, kNTiles = kMoeGemmTileM / 8;
  std::vector<double> acc(size_t(kWarps) * 32 * kNTiles * 4, 0.0);  // (warp, lane, n8 tile, fragment)
  const auto acc_at = [&](int warp, int lane, int j, int i) -> double& {
    return acc[((size_t(warp) * 32 + size_t(lane)) * kNTiles + size_t(j)) * 4 + size_t(i)];
  };
  for (int64_t k0 = 0; k0 < w.cols; k0 += kMoeGemmTileK) {
    StageImage st;
    for (int tid = 0; tid < kMoeGemmThreads; ++tid) {
      const int row = MoeTile<D>::load_row(tid);
      for (int l = 0; l < MoeTile<D>::kLoads; ++l) {
        const int cc = MoeTile<D>::load_chunk(tid, l);
        std::vector<float> v(D::kVals, 0.0f);
        if (row0 + row < w.rows && MoeTile<D>::chunk(k0, cc) < D::chunks(w.cols))
          D::decode(D::load(w, row0 + row, MoeTile<D>::chunk(k0, cc)), v.data());
        constexpr int kUnit = MoeTile<D>::kStoreVals;
        for (int r = 0; r < D::kRuns; ++r)
          for (int u = 0; u < D::kRunLen / kUnit; ++u) {
            const int col = MoeTile<D>::column(k0, cc, r, u * kUnit);
            EXPECT_EQ(col % kUnit, 0) << "a store unit straddles a chunk";
            st.store(moe_smem_offset(row, col), std::vector<float>(v.begin() + r * D::kRunLen + u * kUnit,
                                                                    v.begin() + r * D::kRunLen + (u + 1) * kUnit));
          }
      }
      const int m = moe_act_slot(tid);
      for (int l = 0; l < kMoeActLoads; ++l) {
        const int64_t col = k0 + 4 * moe_act_quad(tid, l);
        std::vector<float> x(4, 0.0f);
        if (m < m_count && col < w.cols)
          for (int q = 0; q < 4; ++q) x[size_t(q)] = a[size_t(slots[size_t(m)] / a_div) * size_t(w.cols) + size_t(col) + size_t(q)];
        st.store(StageImage::kWeightBytes + moe_smem_offset(m, 4 * moe_act_quad(tid, l)), x);
      }
    }
    for (size_t e = 0; e < st.writes.size(); ++e) EXPECT_EQ(st.writes[e], 1) << "stage element " << e << " k0 " << k0;
    for (int warp = 0; warp < kWarps; ++warp) {
      uint32_t a_off[32][4], b_off[32][4];
      for (int lane = 0; lane < 32; ++lane)
        for (int kk = 0; kk < 4; ++kk) {
          const MoeLaneRow al = moe_a_lane(warp * kMoeGemmWarpRows, kk, lane), bl = moe_b_lane(0, kk, lane);
          a_off[lane][kk] = moe_smem_offset(al.row, al.col);
          b_off[lane][kk] = uint32_t(StageImage::kWeightBytes) + moe_smem_offset(bl.row, bl.col);
        }
      for (int kk = 0; kk < kMoeGemmTileK / 16; ++kk) {
        uint32_t addr[32], af[32][4];
        for (int lane = 0; lane < 32; ++lane) addr[lane] = moe_step_offset(a_off[lane], kk);
        ldmatrix_x4(st, addr, af);
        for (int pair = 0; pair < kNTiles / 2; ++pair) {
          if (16 * pair >= m_count) continue;
          uint32_t bf[32][4];
          for (int lane = 0; lane < 32; ++lane)
            addr[lane] = moe_step_offset(b_off[lane], kk) + uint32_t(16 * pair * kMoeRowBytes);
          ldmatrix_x4(st, addr, bf);
          for (int half = 0; half < 2; ++half) {
            double d[32][4];
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 4; ++i) d[lane][i] = acc_at(warp, lane, 2 * pair + half, i);
            mma_m16n8k16(af, bf, 2 * half, d);
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 4; ++i) acc_at(warp, lane, 2 * pair + half, i) = d[lane][i];
          }
        }
      }
    }
  }
  std::vector<double> out(slots.size() * size_t(w.rows), NAN);
  for (int warp = 0; warp < kWarps; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < kNTiles; ++j)
        for (int i = 0; i < 4; ++i) {
          const int m = 8 * j + moe_acc_slot(lane, i);
          const int64_t row = row0 + warp * kMoeGemmWarpRows + moe_acc_row(lane, i);
          if (m < m_count && row < w.rows) {
            double& o = out[size_t(m) * size_t(w.rows) + size_t(row)];
            EXPECT_TRUE(std::isnan(o)) << "output stored twice";
            o = acc_at(warp, lane, j, i);
          }
        }
  return out;
}

// The emulated block against the direct dots: w decoded chunk by chunk at D::run_start (not through the tile math),
// both operands rounded to bf16, summed in double.
void check_block(DType t, int64_t rows, int64_t cols, int m_count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> f(size_t(rows * cols));
  for (float& x : f) x = dist(rng);
  std::vector<uint8_t> gguf(size_t(rows) * row_bytes(t, cols));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.data() + r * cols, gguf.data() + size_t(r) * row_bytes(t, cols), cols);
  const std::vector<uint8_t> dev = device_layout(t, gguf, rows, cols);
  const WeightView w{dev.data(), rows, cols, is_split_type(t) ? scales_offset(t, rows, cols) : 0};
  constexpr int kADiv = 2;
  const int n_rows = 50;  // activation rows: slot s reads row s / kADiv
  std::vector<float> a(size_t(n_rows) * size_t(cols));
  for (float& x : a) x = dist(rng);
  std::vector<int32_t> slots(size_t(n_rows * kADiv));
  for (size_t s = 0; s < slots.size(); ++s) slots[s] = int32_t(s);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(size_t(m_count));
  const std::string what = std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                           " slots " + std::to_string(m_count);
  const bool ok = visit_decoder(t, [&]<class D>() {
    std::vector<float> wd(size_t(rows * cols), NAN);  // decoded by the decoder's own run_start
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < D::chunks(cols); ++c) {
        float v[D::kVals];
        D::decode(D::load(w, r, c), v);
        for (int run = 0; run < D::kRuns; ++run)
          for (int j = 0; j < D::kRunLen; ++j)
            wd[size_t(r * cols + D::run_start(c, run) + j)] = v[run * D::kRunLen + j];
      }
    for (int64_t row0 = 0; row0 < rows; row0 += kMoeGemmTileN) {
      const std::vector<double> got = emulate_block<D>(w, row0, a, kADiv, slots);
      for (int m = 0; m < m_count; ++m)
        for (int64_t r = 0; r < rows; ++r) {
          const double g = got[size_t(m) * size_t(rows) + size_t(r)];
          if (r < row0 || r >= row0 + kMoeGemmTileN) {
            ASSERT_TRUE(std::isnan(g)) << what << ": row " << r << " stored by row tile " << row0;
            continue;
          }
          double want = 0, mag = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const double p = double(bf16_to_f32(f32_to_bf16(wd[size_t(r * cols + k)]))) *
                             double(bf16_to_f32(f32_to_bf16(a[size_t(slots[size_t(m)] / kADiv) * size_t(cols) + size_t(k)])));
            want += p;
            mag += std::fabs(p);
          }
          ASSERT_NEAR(g, want, 1e-12 * mag + 1e-30) << what << ": slot " << m << " row " << r;
        }
    }
  });
  EXPECT_TRUE(ok) << what;
}

TEST(CudaMoeEmulation, GemmBlockFragmentsAndSwizzleGiveTheDirectDots) {
  // 200 rows: a whole row tile and a partial one (72 rows, the rest zeros and not stored); 256 columns: two k-steps.
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (const int m_count : {kMoeGemmTileM, 37, 5}) check_block(t, 200, 256, m_count, uint32_t(t) * 100 + uint32_t(m_count));
  // a partial last k-step (160 = 128 + 32 columns): the columns past cols are zeros
  for (const DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0}) check_block(t, 130, 160, 21, 7);
}

TEST(CudaMoeEmulation, MaxTilesBoundsEveryRouting) {
  std::mt19937 rng(5);
  for (const int E : {1, 8, 128, 1024})
    for (const int64_t n_slots : {int64_t(1), int64_t(2), int64_t(31), int64_t(32), int64_t(33), int64_t(600),
                                  int64_t(2400), int64_t(32768)}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<int64_t> count(static_cast<size_t>(E), 0);
        std::uniform_int_distribution<int> pick(0, trial % 3 == 0 ? 0 : E - 1);  // every third: all on one expert
        for (int64_t s = 0; s < n_slots; ++s) ++count[size_t(pick(rng))];
        if (trial == 1)  // as spread as possible
          for (int e = 0; e < E; ++e) count[size_t(e)] = n_slots / E + (e < n_slots % E ? 1 : 0);
        int64_t tiles = 0;
        for (const int64_t c : count) tiles += (c + kMoeGemmTileM - 1) / kMoeGemmTileM;
        EXPECT_LE(tiles, moe_max_tiles(n_slots, E, kMoeGemmTileM)) << "E " << E << " slots " << n_slots;
      }
    }
}

}  // namespace
}  // namespace ferry::cuda_ops

#endif  // FERRY_HAS_CUDA

// Inputs shared by the streamed quantized matvec's host emulation tests (stream_quant_emulation_test.cpp for Q8_0/Q4_0,
// stream_quant_kquant_emulation_test.cpp for the K-quants): the shapes and the weights and activations of each.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "fixtures/numeric.h"
#include "formats/quant.h"

namespace ferry::cuda_ops::quant_stream {

struct EmulationCase {
  int64_t rows, cols;
  float x_scale, outlier;
};

// 512..16384 columns (1 to 4 segments a warp, warps without a segment at 512..3584 columns, uneven ones at 7168 and
// 14336), activations far from 1 and with outlier columns 1000x the rest.
inline constexpr EmulationCase kEmulationCases[] = {
    {9, 512, 1.0f, 0.0f},     {13, 2048, 1.0f, 0.0f},   {7, 3072, 1.0f, 0.0f},    {11, 4096, 1.0f, 0.0f},
    {5, 7168, 1.0f, 0.0f},    {3, 14336, 1.0f, 0.0f},   {2, 16384, 1.0f, 0.0f},   {40, 2048, 1e6f, 0.0f},
    {40, 2048, 1e-7f, 0.0f},  {40, 2048, 1.0f, 1000.0f}, {40, 4096, 1.0f, 1000.0f}};

struct EmulationInputs {
  std::vector<uint8_t> gguf;  // (rows, cols) random weights (scale 0.5) quantized to t, GGUF rows back to back
  std::vector<float> x;       // (cols) activations
};

// The activations carry a per-column offset (a non-zero mean per block: Q4_0's offset-8 term, Q4_K's min term),
// times x_scale; every 97th column from 3 is `outlier` times larger when outlier > 0.
inline EmulationInputs emulation_inputs(DType t, const EmulationCase& c) {
  const uint32_t seed = uint32_t(c.rows * 131 + c.cols);
  const std::vector<float> f = test::random_floats(size_t(c.rows * c.cols), seed, 0.5f);
  EmulationInputs in{std::vector<uint8_t>(size_t(c.rows) * row_bytes(t, c.cols)),
                     test::random_floats(size_t(c.cols), seed + 1)};
  for (int64_t r = 0; r < c.rows; ++r)
    quantize_row(t, f.data() + r * c.cols, in.gguf.data() + size_t(r) * row_bytes(t, c.cols), c.cols);
  for (size_t i = 0; i < in.x.size(); ++i) {
    in.x[i] = (in.x[i] + 0.3f * float(i % 7) - 0.9f) * c.x_scale;
    if (c.outlier > 0.0f && i % 97 == 3) in.x[i] *= c.outlier;
  }
  return in;
}

}  // namespace ferry::cuda_ops::quant_stream

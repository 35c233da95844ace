// The vec kernels for the Scalar level: vec_kernels_impl.h over portable 4- and 8-lane arrays.
#define FERRY_VEC_FN inline
#include "backends/cpu/vec_types_scalar.h"
#include "backends/cpu/vec_kernels_impl.h"
#include "backends/cpu/vec_kernels_levels.h"

namespace ferry::vec_kernels {

void fill_scalar(VecKernels& k) {
  using V4 = SV<4>;
  using V8 = SV<8>;
  k.attention_max_rows = 2 * V8::kW;
  k.attention = attention_dispatch<V4, V8, V8, V8>;
  k.exp = exp_n<V8>;
  k.swiglu = swiglu_n<V8>;
  k.rms_norm = rms_norm_n<V8>;
  k.add_rms_norm = add_rms_norm_n<V8>;
}

}  // namespace ferry::vec_kernels

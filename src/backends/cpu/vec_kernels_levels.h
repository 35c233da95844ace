// The per-level tables behind select_vec_kernels (vec_kernels.h). Internal to backends/cpu.
#pragma once

#include "backends/cpu/vec_kernels.h"

namespace ferry::vec_kernels {

void fill_scalar(VecKernels& k);
void fill_avx2(VecKernels& k);    // no-op off x86-64
void fill_avx512(VecKernels& k);  // no-op off x86-64

}  // namespace ferry::vec_kernels

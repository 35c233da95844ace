// CPU SIMD levels the fast kernels are compiled for, detected at run time (the project is built without
// -march=native; the kernels carry __attribute__((target(...))) and are chosen by select_dot_kernels).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// Scalar: portable C++. Avx2: AVX2 + FMA + F16C. Avx512: the Avx2 set plus AVX-512 F/BW/VL/DQ; kernels
// additionally use AVX512-VNNI and AVX512-BF16 when the CPU has them (see SimdFeatures).
enum class SimdLevel { Scalar, Avx2, Avx512 };

struct SimdFeatures {
  bool avx2 = false;         // avx2 + fma + f16c
  bool avx512 = false;       // avx512f + bw + vl + dq
  bool avx512_vnni = false;  // vpdpbusd
  bool avx512_bf16 = false;  // vdpbf16ps
};

SimdFeatures detect_simd_features();
SimdLevel detect_simd();  // the best level this CPU supports

std::string_view simd_level_name(SimdLevel level);  // "scalar", "avx2", "avx512"
// "scalar", "avx2", "avx512" (case-insensitive); throws ferry::Error naming the value otherwise.
SimdLevel parse_simd_level(std::string_view name);
bool cpu_supports(SimdLevel level);
std::vector<SimdLevel> supported_simd_levels();  // every level this CPU runs, scalar first (tests sweep them)

// The level to run at: `forced` (the FERRY_SIMD value from Env) when set, else detect_simd(). Throws
// ferry::Error when the forced level is unknown or this CPU lacks it.
SimdLevel resolve_simd_level(const std::optional<std::string>& forced);

}  // namespace ferry

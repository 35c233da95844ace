#include "backends/cpu/simd.h"

#include <cctype>
#include <string>

#include "core/check.h"

namespace ferry {

SimdFeatures detect_simd_features() {
  SimdFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

SimdLevel detect_simd() {
  const SimdFeatures f = detect_simd_features();
  if (f.avx512) return SimdLevel::Avx512;
  if (f.avx2) return SimdLevel::Avx2;
  return SimdLevel::Scalar;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "unknown";
}

SimdLevel parse_simd_level(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "scalar") return SimdLevel::Scalar;
  if (lower == "avx2") return SimdLevel::Avx2;
  if (lower == "avx512") return SimdLevel::Avx512;
  fail("unknown SIMD level '{}' (expected scalar, avx2 or avx512)", name);
}

bool cpu_supports(SimdLevel level) {
  const SimdFeatures f = detect_simd_features();
  switch (level) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::Avx2: return f.avx2;
    case SimdLevel::Avx512: return f.avx512;
  }
  return false;
}

SimdLevel resolve_simd_level(const std::optional<std::string>& forced) {
  if (!forced || forced->empty()) return detect_simd();
  const SimdLevel level = parse_simd_level(*forced);
  FERRY_CHECK(cpu_supports(level), "FERRY_SIMD={} asks for {}, which this CPU does not support", *forced,
              simd_level_name(level));
  return level;
}

std::vector<SimdLevel> supported_simd_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512})
    if (cpu_supports(l)) levels.push_back(l);
  return levels;
}

}  // namespace ferry

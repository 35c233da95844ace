// Portable float "vectors" of N lanes for vec_kernels_impl.h (the Scalar level): plain arrays with
// per-lane loops, which the compiler may map onto the baseline SSE2. Same interface as vec_types_x86.h.
#pragma once

#include <cstdint>
#include <cstring>

namespace ferry::vec_kernels {
namespace {

template <int N>
struct SV {
  struct T {
    float v[N];
  };
  struct M {
    bool v[N];
  };
  static constexpr int kW = N;
  template <typename F>
  static T map(F f) {
    T r;
    for (int i = 0; i < N; ++i) r.v[i] = f(i);
    return r;
  }
  static T load(const float* p) { return map([&](int i) { return p[i]; }); }
  static void store(float* p, T a) { std::memcpy(p, a.v, sizeof(a.v)); }
  static T set1(float x) { return map([&](int) { return x; }); }
  static T zero() { return set1(0.0f); }
  static T add(T a, T b) { return map([&](int i) { return a.v[i] + b.v[i]; }); }
  static T sub(T a, T b) { return map([&](int i) { return a.v[i] - b.v[i]; }); }
  static T mul(T a, T b) { return map([&](int i) { return a.v[i] * b.v[i]; }); }
  static T div(T a, T b) { return map([&](int i) { return a.v[i] / b.v[i]; }); }
  // min/max return b when a lane is NaN, like minps/maxps.
  static T min(T a, T b) { return map([&](int i) { return a.v[i] < b.v[i] ? a.v[i] : b.v[i]; }); }
  static T max(T a, T b) { return map([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; }); }
  static T fma(T a, T b, T c) { return map([&](int i) { return a.v[i] * b.v[i] + c.v[i]; }); }
  // Round to nearest even by the 1.5 * 2^23 trick: exact for |a| < 2^22 (the callers' range).
  static T round(T a) {
    return map([&](int i) { return (a.v[i] + 12582912.0f) - 12582912.0f; });  // no -ffast-math here
  }
  static M lt(T a, T b) {
    M m;
    for (int i = 0; i < N; ++i) m.v[i] = a.v[i] < b.v[i];
    return m;
  }
  static T select(M m, T a, T b) { return map([&](int i) { return m.v[i] ? a.v[i] : b.v[i]; }); }
  static T ldexp(T y, T n) {
    return map([&](int i) {
      const int32_t ni = int32_t(n.v[i]), a = ni >> 1, b = ni - a;
      const uint32_t ba = uint32_t(a + 127) << 23, bb = uint32_t(b + 127) << 23;
      float pa, pb;
      std::memcpy(&pa, &ba, 4);
      std::memcpy(&pb, &bb, 4);
      return y.v[i] * pa * pb;
    });
  }
  static float hsum(T a) {
    float s = 0;
    for (int i = 0; i < N; ++i) s += a.v[i];
    return s;
  }
};

}  // namespace
}  // namespace ferry::vec_kernels

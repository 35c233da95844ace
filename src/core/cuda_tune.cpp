#include "core/cuda_tune.h"

#include <charconv>
#include <fmt/format.h>

#include "core/check.h"

namespace ferry {
namespace {

template <class E, size_t N>
E pick(std::string_view key, std::string_view value, const std::pair<std::string_view, E> (&names)[N]) {
  std::string allowed;
  for (const auto& [name, e] : names) {
    if (value == name) return e;
    allowed += allowed.empty() ? "" : "|";
    allowed += name;
  }
  fail("FERRY_CUDA_TUNE: {}={} is not one of {}", key, value, allowed);
}

template <class E, size_t N>
std::string_view name_of(E e, const std::pair<std::string_view, E> (&names)[N]) {
  for (const auto& [name, v] : names)
    if (v == e) return name;
  return "?";
}

int stages(std::string_view key, std::string_view value) {
  int v = -1;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  FERRY_CHECK(ec == std::errc() && end == value.data() + value.size() && v >= 0 && v <= 16,
              "FERRY_CUDA_TUNE: {}={} must be a number of stages 0..16", key, value);
  return v;
}

constexpr std::pair<std::string_view, GemmTune> kGemm[] = {
    {"ferry", GemmTune::kFerry}, {"cublas", GemmTune::kCublas}, {"pdl", GemmTune::kFerryPdl}};
constexpr std::pair<std::string_view, SkinnyTune> kSkinny[] = {
    {"rule", SkinnyTune::kRule}, {"wgmma", SkinnyTune::kWgmma}, {"mma", SkinnyTune::kMma}};
constexpr std::pair<std::string_view, MatvecTune> kMatvec[] = {
    {"rule", MatvecTune::kRule}, {"rows", MatvecTune::kRows}, {"tiled", MatvecTune::kTiled}};
constexpr std::pair<std::string_view, PeerTune> kPeer[] = {{"lamport", PeerTune::kLamport}, {"flags", PeerTune::kFlags}};
constexpr std::pair<std::string_view, int> kLevels[] = {{"1", 1}, {"2", 2}};

}  // namespace

CudaTune CudaTune::parse(std::string_view spec) {
  CudaTune t;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    FERRY_CHECK(eq != std::string_view::npos, "FERRY_CUDA_TUNE: '{}' is not key=value", item);
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "gemm") {
      t.gemm = pick(key, value, kGemm);
    } else if (key == "skinny") {
      t.skinny = pick(key, value, kSkinny);
    } else if (key == "matvec") {
      t.matvec = pick(key, value, kMatvec);
    } else if (key == "ring") {
      t.ring_quant = stages(key, value);
    } else if (key == "ring_half") {
      t.ring_half = stages(key, value);
    } else if (key == "act_levels") {
      t.act_levels = pick(key, value, kLevels);
    } else if (key == "peer") {
      t.peer = pick(key, value, kPeer);
    } else {
      fail("FERRY_CUDA_TUNE: unknown key '{}' (gemm, skinny, matvec, ring, ring_half, act_levels, peer)", key);
    }
  }
  return t;
}

std::string CudaTune::str() const {
  return fmt::format("gemm={},skinny={},matvec={},ring={},ring_half={},act_levels={},peer={}", name_of(gemm, kGemm),
                     name_of(skinny, kSkinny), name_of(matvec, kMatvec), ring_quant, ring_half, act_levels,
                     name_of(peer, kPeer));
}

}  // namespace ferry

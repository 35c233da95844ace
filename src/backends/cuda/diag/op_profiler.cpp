#include "backends/cuda/diag/op_profiler.h"

#include <fmt/format.h>

#include <algorithm>

namespace ferry::cuda_ops {

namespace {
constexpr double kCopyRooflineGBs = 4300.0;  // ../shared/GPU.md: H200 device-to-device copy, bytes read + written
constexpr size_t kMaxPending = 1 << 14;      // pairs kept before a forced synchronization
}  // namespace

OpProfiler::~OpProfiler() {
  (void)cudaStreamSynchronize(stream_);
  for (const Pending& p : pending_) {
    (void)cudaEventDestroy(p.start);
    (void)cudaEventDestroy(p.stop);
  }
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  if (last_stop_) (void)cudaEventDestroy(last_stop_);
}

cudaEvent_t OpProfiler::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) return nullptr;
  return e;
}

OpProfiler::Scope::Scope(OpProfiler* p, std::string key, double bytes) : p_(p), key_(std::move(key)), bytes_(bytes) {
  if (!p_) return;
  if (p_->pending_.size() >= kMaxPending) {
    (void)cudaStreamSynchronize(p_->stream_);
    p_->collect();
  }
  start_ = p_->take_event();
  if (start_) (void)cudaEventRecord(start_, p_->stream_);
  host_start_ = std::chrono::steady_clock::now();
}

OpProfiler::Scope::~Scope() {
  if (!p_ || !start_) return;
  cudaEvent_t stop = p_->take_event();
  if (!stop) {
    p_->free_events_.push_back(start_);
    return;
  }
  (void)cudaEventRecord(stop, p_->stream_);
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_).count();
  p_->pending_.push_back(Pending{std::move(key_), bytes_, start_, stop, host_ms});
}

void OpProfiler::collect() {
  // In stream order: the first op still running ends the pass (every later one is queued behind it).
  size_t i = 0;
  for (; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    float ms = 0, gap = 0;
    const cudaError_t state = cudaEventQuery(p.stop);
    if (state == cudaErrorNotReady) break;
    const bool done = state == cudaSuccess && cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess;
    const bool has_gap = done && last_stop_ && cudaEventElapsedTime(&gap, last_stop_, p.start) == cudaSuccess;
    (void)cudaGetLastError();
    if (done) {
      Totals& t = totals_[p.key];
      ++t.calls;
      t.ms += ms;
      t.bytes += p.bytes;
      t.host_ms += p.host_ms;
      if (has_gap) {
        ++t.gaps;
        t.gap_ms += std::max(0.0f, gap);
      }
    }
    if (last_stop_) free_events_.push_back(last_stop_);
    last_stop_ = p.stop;
    free_events_.push_back(p.start);
  }
  pending_.erase(pending_.begin(), pending_.begin() + ptrdiff_t(i));
}

std::string OpProfiler::report() {
  (void)cudaStreamSynchronize(stream_);
  collect();
  if (totals_.empty()) return {};
  double total_ms = 0, gap_ms = 0;
  for (const auto& [k, t] : totals_) total_ms += t.ms, gap_ms += t.gap_ms;
  std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string s = fmt::format("CUDA op profile (FERRY_CUDA_PROFILE; graphs off): {:.3f} ms of GPU time in ops, {:.3f} ms "
                              "between them\n", total_ms, gap_ms);
  s += fmt::format("{:<52} {:>8} {:>10} {:>9} {:>6} {:>8} {:>6} {:>8} {:>8}\n", "op", "calls", "total ms", "mean us",
                   "share", "GB/s", "%BW", "host us", "gap us");
  for (const auto& [key, t] : rows) {
    const double mean_us = t.ms * 1e3 / double(t.calls);
    std::string bw = "", pct = "";
    if (t.bytes > 0 && t.ms > 0) {
      const double gbs = t.bytes / (t.ms * 1e-3) / 1e9;
      bw = fmt::format("{:.0f}", gbs);
      pct = fmt::format("{:.0f}%", 100.0 * gbs / kCopyRooflineGBs);
    }
    const std::string gap = t.gaps > 0 ? fmt::format("{:.2f}", t.gap_ms * 1e3 / double(t.gaps)) : std::string("-");
    s += fmt::format("{:<52} {:>8} {:>10.3f} {:>9.2f} {:>5.1f}% {:>8} {:>6} {:>8.2f} {:>8}\n", key, t.calls, t.ms, mean_us,
                     100.0 * t.ms / total_ms, bw, pct, t.host_ms * 1e3 / double(t.calls), gap);
  }
  return s;
}

}  // namespace ferry::cuda_ops

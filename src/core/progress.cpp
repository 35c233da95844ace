#include "core/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace ferry {
namespace {

constexpr double kBarRedrawSeconds = 0.1;   // a terminal line at most 10 times a second
constexpr double kLineMinSeconds = 1.0;     // a log line at most once a second
constexpr int kBarWidth = 24;

std::string amount(const ProgressOptions& o, double v) {
  if (o.unit == ProgressUnit::kBytes) return format_bytes(uint64_t(std::max(0.0, v)));
  return fmt::format("{}", uint64_t(std::max(0.0, v)));
}

}  // namespace

ProgressMode progress_mode(bool quiet, int fd) {
  if (quiet) return ProgressMode::kQuiet;
  return ::isatty(fd) == 1 ? ProgressMode::kBar : ProgressMode::kLines;
}

ProgressOptions progress_options(ProgressMode mode, ProgressUnit unit, std::string item_name) {
  ProgressOptions o;
  o.mode = mode;
  o.unit = unit;
  o.item_name = std::move(item_name);
  return o;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.{}f} {}", v, v < 10 ? 2 : v < 100 ? 1 : 0, units[u]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = uint64_t(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
}

std::string progress_line(std::string_view label, const ProgressOptions& o, uint64_t done, uint64_t total,
                          double seconds, int bar_width) {
  std::string line(label);
  const bool known = total > 0;
  const double frac = known ? std::min(1.0, double(done) / double(total)) : 0.0;
  if (bar_width > 0 && known) {
    const int full = int(frac * bar_width);
    line += " [";
    line.append(size_t(full), '#');
    line.append(size_t(bar_width - full), '.');
    line += ']';
  }
  if (known) line += fmt::format(" {:3d}%", int(frac * 100));
  line += "  ";
  line += amount(o, double(done));
  if (known) {
    line += '/';
    line += amount(o, double(total));
  }
  if (o.unit == ProgressUnit::kItems) {
    line += ' ';
    line += o.item_name;
  }
  if (seconds > 0 && done > 0) {
    const double rate = double(done) / seconds;
    line += o.unit == ProgressUnit::kBytes ? fmt::format("  {}/s", format_bytes(uint64_t(rate)))
                                           : fmt::format("  {:.1f} {}/s", rate, o.item_name);
    if (known && done < total) line += fmt::format("  ETA {}", format_duration(double(total - done) / rate));
  }
  return line;
}

Progress::Progress(std::string label, uint64_t total, ProgressOptions options)
    : label_(std::move(label)), o_(std::move(options)), total_(total) {
  start_ = now();
  if (o_.mode == ProgressMode::kLines) {
    std::lock_guard lock(mutex_);
    show(false);  // the job has started
  }
}

Progress::~Progress() { finish(); }

double Progress::now() const {
  if (o_.clock) return o_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Progress::set(uint64_t done) {
  std::lock_guard lock(mutex_);
  if (finished_ || done <= done_) return;
  done_ = done;
  show(false);
}

void Progress::add(uint64_t n) {
  std::lock_guard lock(mutex_);
  if (finished_ || n == 0) return;
  done_ += n;
  show(false);
}

void Progress::set_total(uint64_t total) {
  std::lock_guard lock(mutex_);
  total_ = total;
}

uint64_t Progress::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Progress::finish() {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  show(true);
  finished_ = true;
}

void Progress::show(bool last) {
  if (o_.mode == ProgressMode::kQuiet || o_.out == nullptr) return;
  const double t = now(), elapsed = t - start_;
  if (o_.mode == ProgressMode::kBar) {
    if (!last && t - last_draw_ < kBarRedrawSeconds) return;
    last_draw_ = t;
    const std::string line = progress_line(label_, o_, done_, total_, elapsed, kBarWidth);
    std::fprintf(o_.out, "\r%s\x1b[K%s", line.c_str(), last ? "\n" : "");
    std::fflush(o_.out);
    return;
  }
  if (last) {
    std::fprintf(o_.out, "%s: done, %s in %s\n", label_.c_str(), progress_line("", o_, done_, 0, elapsed, 0).substr(2).c_str(),
                 format_duration(elapsed).c_str());
    std::fflush(o_.out);
    return;
  }
  const int tenth = total_ > 0 ? int(std::min<uint64_t>(10, done_ * 10 / total_)) : last_tenth_;
  if (last_tenth_ >= 0 && (tenth <= last_tenth_ || t - last_draw_ < kLineMinSeconds)) return;
  last_tenth_ = std::max(tenth, 0);
  last_draw_ = t;
  std::fprintf(o_.out, "%s\n", progress_line(label_, o_, done_, total_, elapsed, 0).c_str());
  std::fflush(o_.out);
}

}  // namespace ferry

// Progress of one long job (loading a model, quantizing, writing a random model, downloading, a batch): on a
// terminal one line redrawn in place (a bar, done/total, rate, ETA); when stderr is not a terminal, plain log
// lines (at each further tenth of the job, at most one per second, and a last one); nothing under --quiet.
// One Progress per job, owned by whoever runs it: no global state. Thread-safe (tensor-parallel ranks load at once).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace ferry {

enum class ProgressMode {
  kBar,    // a terminal: one line redrawn with '\r'
  kLines,  // a file or a pipe: plain lines
  kQuiet,  // --quiet: nothing
};

// kQuiet when quiet, else kBar when `fd` is a terminal, else kLines.
ProgressMode progress_mode(bool quiet, int fd = 2);

enum class ProgressUnit {
  kBytes,  // shown as B, KiB, MiB, GiB; rate per second in the same units
  kItems,  // shown as counts of `item_name` (tensors, requests)
};

struct ProgressOptions {
  ProgressMode mode = ProgressMode::kLines;
  ProgressUnit unit = ProgressUnit::kBytes;
  std::string item_name = "items";         // kItems: what is counted
  std::FILE* out = stderr;
  std::function<double()> clock;            // seconds, monotonic; empty: std::chrono::steady_clock
};

// Options for stderr with the system clock.
ProgressOptions progress_options(ProgressMode mode, ProgressUnit unit = ProgressUnit::kBytes, std::string item_name = "items");

// "1.50 MiB" (binary units; bytes below 1 KiB as "512 B").
std::string format_bytes(uint64_t bytes);
// "1m05s", "42s", "2h03m"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);

// The text of one progress line (no '\r', no newline), for a job `done` of `total` (0: unknown) after `seconds`:
// "label [#######.......]  45%  12.0 MiB/26.6 MiB  3.0 MiB/s  ETA 5s" (bar_width 0: no bar).
std::string progress_line(std::string_view label, const ProgressOptions& o, uint64_t done, uint64_t total,
                          double seconds, int bar_width);

class Progress {
 public:
  Progress(std::string label, uint64_t total, ProgressOptions options);
  ~Progress();  // finish() unless done already (a job that threw still ends its line)
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set(uint64_t done);  // the job's position (monotonic: a smaller value is ignored)
  void add(uint64_t n);     // set(done + n)
  void set_total(uint64_t total);
  void finish();            // the last line ("label: done ... in 3s"); idempotent
  uint64_t done() const;

 private:
  double now() const;
  void show(bool last);  // holds mutex_

  std::string label_;
  ProgressOptions o_;
  mutable std::mutex mutex_;
  uint64_t total_ = 0, done_ = 0;
  double start_ = 0, last_draw_ = -1e9;
  int last_tenth_ = -1;
  bool finished_ = false;
};

}  // namespace ferry

// Kernel results as JSON for `ferry bench --plot FILE.svg --kernels FILE.json` (the roofline chart):
//   {"kernels": [{"name": "...", "flops": 1.2e8, "bytes": 1.2e8, "seconds": 2.9e-5}, ...]}
// flops and bytes are per call (the harness's own count: what its GB/s and TFLOP/s columns divide by),
// seconds the time of one call. Read back by ferry::read_kernel_results (src/measure/roofline_svg.h).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace ferry::bench {

class KernelJson {
 public:
  void add(std::string name, double flops, double bytes, double seconds) {
    rows_.push_back({std::move(name), flops, bytes, seconds});
  }
  // Writes the file when path is not empty; returns false (and says so on stderr) when it cannot.
  bool write(const std::string& path) const {
    if (path.empty()) return true;
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "--json %s: cannot open the file for writing\n", path.c_str());
      return false;
    }
    std::fprintf(f, "{\"kernels\": [");
    for (size_t i = 0; i < rows_.size(); ++i) {
      std::string name;
      for (const char c : rows_[i].name) {
        if (c == '"' || c == '\\') name += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) name += c;
      }
      std::fprintf(f, "%s\n  {\"name\": \"%s\", \"flops\": %.6e, \"bytes\": %.6e, \"seconds\": %.6e}", i ? "," : "",
                   name.c_str(), rows_[i].flops, rows_[i].bytes, rows_[i].seconds);
    }
    std::fprintf(f, "\n]}\n");
    const bool ok = std::fclose(f) == 0;
    if (ok) std::fprintf(stderr, "wrote %zu kernel results to %s\n", rows_.size(), path.c_str());
    return ok;
  }

 private:
  struct Row {
    std::string name;
    double flops, bytes, seconds;
  };
  std::vector<Row> rows_;
};

}  // namespace ferry::bench

// A roofline chart as one self-contained SVG (no scripts, fonts or links): log-log axes, arithmetic intensity
// (FLOP/byte) against achieved FLOP/s, the two ceilings drawn as the roof, one point per measured run.
// End-to-end tests are red and always labelled; kernel results are blue, labelled when there are at most
// kMaxKernelLabels of them (every point carries an SVG <title>, shown on hover, with its full description).
#pragma once

#include <string>
#include <vector>

#include "measure/roofline.h"

namespace ferry {

struct PlotPoint {
  std::string name;         // short label ("pp512", "matvec BF16 14336x4096 M1")
  double intensity = 0;     // FLOP per byte, > 0
  double flops_per_s = 0;   // achieved, > 0
  double fraction = 0;      // of the roof at this intensity
  bool end_to_end = false;  // a whole-model test (true) or a kernel
};

struct RooflinePlot {
  std::string title;     // e.g. the model, backend and device
  Ceilings ceilings;     // the roof; its source is printed under the chart
  std::vector<PlotPoint> points;
};

inline constexpr int kMaxKernelLabels = 30;

// The SVG text. Points whose intensity or rate is not a positive finite number are left out.
std::string roofline_svg(const RooflinePlot& plot);

// Kernel results written by the harnesses (bench/kernels, --json FILE):
//   {"kernels": [{"name": "...", "flops": 1.2e8, "bytes": 1.2e8, "seconds": 2.9e-5}, ...]}
// or the bare array. Throws ferry::Error naming the file and entry when a field is missing or not positive.
struct KernelResult {
  std::string name;
  double flops = 0, bytes = 0, seconds = 0;
};
std::vector<KernelResult> read_kernel_results(const std::string& path);

}  // namespace ferry

// The roofline chart (roofline_svg.h): hand-written SVG and the kernel-results reader.
#include "measure/roofline_svg.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "fmt/format.h"

namespace ferry {
namespace {

// Chart geometry in SVG user units.
constexpr double kWidth = 960, kHeight = 700;
constexpr double kLeft = 100, kRight = 930, kTop = 70, kBottom = 560;

std::string xml_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out += c;  // no control characters in XML 1.0
    }
  }
  return out;
}

// 3.2e12 -> "3.2 T" (SI prefix, 2-3 significant digits).
std::string si(double v) {
  static constexpr const char* kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  while (std::fabs(v) >= 1000 && p < 6) v /= 1000, ++p;
  return fmt::format("{:.3g} {}", v, kPrefix[p]);
}

// A share of the roof as a percentage with 2-3 significant digits: "58", "4.2", "0.031".
std::string percent(double fraction) {
  const double p = 100 * fraction;
  return p >= 10 ? fmt::format("{:.0f}", p) : p >= 1 ? fmt::format("{:.1f}", p) : fmt::format("{:.2g}", p);
}

std::string decade_label(int e) {
  if (e >= 0 && e <= 4) return fmt::format("{}", int64_t(std::llround(std::pow(10.0, e))));
  if (e < 0 && e >= -3) return fmt::format("{:.{}f}", std::pow(10.0, e), -e);
  return fmt::format("1e{}", e);
}

struct Axes {
  int x0, x1, y0, y1;  // decades (log10) at the ends of each axis
  double x(double intensity) const {
    return kLeft + (std::log10(intensity) - x0) / double(x1 - x0) * (kRight - kLeft);
  }
  double y(double flops) const { return kBottom - (std::log10(flops) - y0) / double(y1 - y0) * (kBottom - kTop); }
};

bool plottable(const PlotPoint& p) {
  return std::isfinite(p.intensity) && p.intensity > 0 && std::isfinite(p.flops_per_s) && p.flops_per_s > 0;
}

}  // namespace

std::string roofline_svg(const RooflinePlot& plot) {
  const Ceilings& c = plot.ceilings;
  FERRY_CHECK(c.bytes_per_s > 0 && c.flops_per_s > 0, "roofline chart: ceilings must be positive");
  const double ridge = ridge_intensity(c);
  // Axis ranges: every point, the ridge with a decade either side, the peak; at least 2 decades each way.
  double xmin = ridge / 10, xmax = ridge * 10, ymin = c.flops_per_s / 1e3, ymax = c.flops_per_s * 1.5;
  for (const auto& p : plot.points) {
    if (!plottable(p)) continue;
    xmin = std::min(xmin, p.intensity), xmax = std::max(xmax, p.intensity);
    ymin = std::min(ymin, p.flops_per_s), ymax = std::max(ymax, p.flops_per_s * 1.5);
  }
  // A point within a factor 1.5 of a decade line moves the axis end out a decade (no point on the frame).
  Axes a{int(std::floor(std::log10(xmin / 1.5))), int(std::ceil(std::log10(xmax * 1.5))),
         int(std::floor(std::log10(ymin / 1.5))), int(std::ceil(std::log10(ymax)))};
  a.x1 = std::max(a.x1, a.x0 + 2), a.y1 = std::max(a.y1, a.y0 + 2);

  std::ostringstream s;
  s << fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )"
                   R"(font-family="sans-serif" font-size="12">)" "\n",
                   kWidth, kHeight);
  s << fmt::format(R"(<rect width="{}" height="{}" fill="white"/>)" "\n", kWidth, kHeight);
  s << fmt::format(R"(<text x="{}" y="28" font-size="16" font-weight="bold">{}</text>)" "\n", kLeft,
                   xml_escape(plot.title.empty() ? "roofline" : plot.title));
  s << fmt::format(R"(<text x="{}" y="48" fill="#444">bandwidth {}B/s, peak {}FLOP/s, ridge at {:.3g} FLOP/byte</text>)"
                   "\n",
                   kLeft, si(c.bytes_per_s), si(c.flops_per_s), ridge);
  s << fmt::format(R"(<defs><clipPath id="plot"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath></defs>)" "\n",
                   kLeft, kTop, kRight - kLeft, kBottom - kTop);

  // Grid and decade labels.
  s << R"(<g stroke="#ddd" stroke-width="1">)" "\n";
  for (int e = a.x0; e <= a.x1; ++e)
    s << fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}"/>)" "\n", a.x(std::pow(10.0, e)), kTop, kBottom);
  for (int e = a.y0; e <= a.y1; ++e)
    s << fmt::format(R"(<line x1="{1}" y1="{0:.1f}" x2="{2}" y2="{0:.1f}"/>)" "\n", a.y(std::pow(10.0, e)), kLeft, kRight);
  s << "</g>\n";
  s << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333"/>)" "\n", kLeft, kTop,
                   kRight - kLeft, kBottom - kTop);
  for (int e = a.x0; e <= a.x1; ++e)
    s << fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)" "\n", a.x(std::pow(10.0, e)),
                     kBottom + 18, decade_label(e));
  for (int e = a.y0; e <= a.y1; ++e)
    s << fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end">{}</text>)" "\n", kLeft - 6,
                     a.y(std::pow(10.0, e)) + 4, si(std::pow(10.0, e)));
  s << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">arithmetic intensity (FLOP/byte)</text>)" "\n",
                   (kLeft + kRight) / 2, kBottom + 40);
  s << fmt::format(R"~(<text transform="translate(24 {}) rotate(-90)" text-anchor="middle">achieved FLOP/s</text>)~"
                   "\n",
                   (kTop + kBottom) / 2);

  // The roof: bandwidth × intensity up to the ridge, then the peak.
  const double rx0 = std::pow(10.0, a.x0), rx1 = std::pow(10.0, a.x1);
  s << fmt::format(R"~(<polyline class="roof" clip-path="url(#plot)" fill="none" stroke="#222" stroke-width="2.5" )~"
                   R"(points="{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}"/>)" "\n",
                   a.x(rx0), a.y(rx0 * c.bytes_per_s), a.x(ridge), a.y(c.flops_per_s), a.x(rx1), a.y(c.flops_per_s));
  s << fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2}" stroke="#999" stroke-dasharray="4 4"/>)"
                   "\n",
                   a.x(ridge), a.y(c.flops_per_s), kBottom);
  s << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="#222">peak {}FLOP/s</text>)" "\n",
                   kRight - 6, a.y(c.flops_per_s) - 6, si(c.flops_per_s));
  {  // the bandwidth label sits on the slope, a decade left of the ridge (or at the left edge)
    const double lx = std::max(ridge / 30, rx0 * 1.5);
    const double angle = std::atan2(a.y(lx * 10 * c.bytes_per_s) - a.y(lx * c.bytes_per_s), a.x(lx * 10) - a.x(lx));
    s << fmt::format(R"~(<text transform="translate({:.1f} {:.1f}) rotate({:.1f})" fill="#222">{}B/s</text>)~" "\n",
                     a.x(lx), a.y(lx * c.bytes_per_s) - 6, angle * 180 / M_PI, si(c.bytes_per_s));
  }

  // Points: kernels first (under the end-to-end points), then end-to-end tests.
  int n_kernels = 0;
  for (const auto& p : plot.points) n_kernels += (!p.end_to_end && plottable(p)) ? 1 : 0;
  for (const bool e2e : {false, true}) {
    for (const auto& p : plot.points) {
      if (p.end_to_end != e2e || !plottable(p)) continue;
      const double px = a.x(p.intensity), py = a.y(p.flops_per_s);
      const std::string name = xml_escape(p.name);
      const std::string detail = fmt::format("{}: {:.3g} FLOP/byte, {}FLOP/s, {}% of the roof", name, p.intensity,
                                             si(p.flops_per_s), percent(p.fraction));
      s << fmt::format(R"(<circle class="{}" data-name="{}" cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}" )"
                       R"(stroke="white" stroke-width="1"><title>{}</title></circle>)" "\n",
                       e2e ? "point e2e" : "point kernel", name, px, py, e2e ? 6 : 4, e2e ? "#d62728" : "#1f77b4",
                       detail);
      if (e2e || n_kernels <= kMaxKernelLabels) {
        // Right of the point unless near the right edge; below it when the roof is just above (no overlap).
        const bool right = px < kRight - 220;
        const bool below = py - a.y(roofline_flops(p.intensity, c)) < 22;
        s << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="{}" fill="{}" font-size="{}">{}</text>)" "\n",
                         right ? px + 9 : px - 9, below ? py + 17 : py - 7, right ? "start" : "end",
                         e2e ? "#a01010" : "#1f4f7f", e2e ? 13 : 10,
                         e2e ? fmt::format("{} ({}% of roof)", name, percent(p.fraction)) : name);
      }
    }
  }

  // Legend and the ceilings' source.
  s << fmt::format(R"(<circle cx="{}" cy="{}" r="6" fill="#d62728"/><text x="{}" y="{}">end-to-end test</text>)" "\n",
                   kLeft + 12, kBottom + 64, kLeft + 24, kBottom + 68);
  if (n_kernels > 0)
    s << fmt::format(R"(<circle cx="{}" cy="{}" r="4" fill="#1f77b4"/><text x="{}" y="{}">kernel ({})</text>)" "\n",
                     kLeft + 162, kBottom + 64, kLeft + 174, kBottom + 68, n_kernels);
  // The ceilings' source, wrapped at spaces into lines of at most ~150 characters.
  std::vector<std::string> lines{"ceilings: "};
  for (size_t pos = 0; pos < c.source.size();) {
    const size_t space = c.source.find(' ', pos);
    const std::string word = c.source.substr(pos, space == std::string::npos ? std::string::npos : space - pos + 1);
    if (lines.back().size() + word.size() > 150) lines.emplace_back();
    lines.back() += word;
    pos += word.size();
  }
  if (lines.size() > 4) lines.resize(4), lines.back() += " ...";
  for (size_t l = 0; l < lines.size(); ++l)
    s << fmt::format(R"(<text x="{}" y="{}" font-size="10" fill="#555">{}</text>)" "\n", kLeft,
                     kBottom + 90 + 13 * double(l), xml_escape(lines[l]));
  s << "</svg>\n";
  return s.str();
}

std::vector<KernelResult> read_kernel_results(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  FERRY_CHECK(!ec, "--kernels {}: cannot read the file ({})", path, ec.message());
  FERRY_CHECK(size <= (size_t(64) << 20), "--kernels {}: {} bytes is too large for a kernel results file", path, size);
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.good(), "--kernels {}: cannot open the file", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("--kernels {}: not valid JSON ({})", path, e.what());
  }
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    FERRY_CHECK(j.contains("kernels"), "--kernels {}: expected an object with a \"kernels\" array", path);
    list = &j["kernels"];
  }
  FERRY_CHECK(list->is_array(), "--kernels {}: expected an array of {{name, flops, bytes, seconds}}", path);
  std::vector<KernelResult> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& e = (*list)[i];
    FERRY_CHECK(e.is_object() && e.contains("name") && e["name"].is_string(),
                "--kernels {}: entry {} needs a string \"name\"", path, i);
    KernelResult r;
    r.name = e["name"].get<std::string>();
    const std::initializer_list<std::pair<const char*, double*>> fields = {
        {"flops", &r.flops}, {"bytes", &r.bytes}, {"seconds", &r.seconds}};
    for (const auto& [key, dst] : fields) {
      FERRY_CHECK(e.contains(key) && e[key].is_number(), "--kernels {}: entry {} ('{}') needs a number \"{}\"", path,
                  i, r.name, key);
      *dst = e[key].get<double>();
      FERRY_CHECK(std::isfinite(*dst) && *dst > 0, "--kernels {}: entry {} ('{}'): \"{}\" must be positive, got {}",
                  path, i, r.name, key, *dst);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ferry

// The roofline model (src/measure/roofline.h) on hand-worked examples, the ceilings parser, the CPU ceiling
// measurement's sanity, the SVG chart's geometry and the kernel-results reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/check.h"
#include "fixtures/sanitizer.h"
#include "fixtures/test_paths.h"
#include "measure/cpu_ceilings.h"
#include "measure/roofline.h"
#include "measure/roofline_svg.h"

namespace ferry {
namespace {

constexpr double kRel = 1e-9;  // the arithmetic is exact in doubles up to rounding

void expect_rel(double got, double want, double rel = kRel) {
  EXPECT_NEAR(got, want, std::fabs(want) * rel) << "got " << got << ", want " << want;
}

// The Llama-3-8B shape as ModelInfo reports it for a `ferry gen --shape llama3-8b --type bf16` file: bf16
// matrices, f32 norms, untied output head, f32 KV cache of 8192 tokens.
ModelInfo llama3_8b_bf16() {
  ModelInfo i;
  i.n_layers = 32, i.dim = 4096, i.n_heads = 32, i.n_kv_heads = 8, i.head_dim = 128, i.hidden_dim = 14336;
  i.vocab_size = 128256;
  i.context = 8192;
  // Per layer: q 4096², k, v 1024×4096, o 4096², gate, up 14336×4096, down 4096×14336, in bf16; 2 f32 norms.
  const size_t layer = (2 * 4096ull * 4096 + 2 * 1024ull * 4096 + 3 * 14336ull * 4096) * 2 + 2 * 4096 * 4;
  i.tensors.push_back({"token_embd.weight", "bf16", "(128256, 4096)", 128256ull * 4096 * 2});
  i.tensors.push_back({"output.weight", "bf16", "(128256, 4096)", 128256ull * 4096 * 2});
  i.tensors.push_back({"output_norm.weight", "f32", "(4096)", 4096 * 4});
  for (int l = 0; l < 32; ++l) i.tensors.push_back({"blk." + std::to_string(l), "bf16", "", layer});
  for (const auto& t : i.tensors) i.weight_bytes += t.bytes;
  i.kv_bytes = size_t(2) * 32 * 8 * 128 * 4 * 8192;  // K and V, all layers, 8192 tokens, f32
  return i;
}

TEST(Roofline, WholeFileDecodeBoundOnTheH200) {
  // The project's quoted ceiling (GPU.md): 16.06 GB of bf16 weights read per token at 4.30 TB/s.
  // 4.30e12 / 16.06e9 = 267.746 tok/s; 2 × 8.03e9 FLOP / 16.06e9 B = 1 FLOP/B, far below the ridge (181).
  const TestCost cost{2 * 8.03e9, 16.06e9, 1};
  const RooflinePoint p = place_on_roofline(cost, 1 / 132.8, h200_ceilings());  // the measured 132.8 tok/s
  expect_rel(p.roof_tokens_per_s, 267.7459526774595);
  EXPECT_EQ(p.bound, Bound::Memory);
  expect_rel(p.fraction, 132.8 / 267.7459526774595);
  expect_rel(p.bytes_per_s, 16.06e9 * 132.8);
  expect_rel(p.roof_flops_per_s, 4.30e12 * 1.0);
}

TEST(Roofline, Llama3DecodeCountsWhatDecodeReads) {
  const ModelInfo info = llama3_8b_bf16();
  EXPECT_EQ(info.weight_bytes, 16061054976ull);  // 16.06 GB, as GPU.md says
  const RooflineModel m = roofline_model(info, 8192);
  // Worked in roofline.h: layers 13,959,708,672 B (matrices + 65 f32 norms), head 1,050,673,152 B.
  expect_rel(m.layer_weight_bytes, 13959708672.0);
  expect_rel(m.head_weight_bytes, 1050673152.0);
  expect_rel(m.embedding_row_bytes, 8192.0);
  expect_rel(m.kv_bytes_per_token, 262144.0);
  expect_rel(m.layer_matmul_params(), 6979321856.0);
  expect_rel(m.head_params(), 525336576.0);
  const TestCost tg = test_cost(m, {TestKind::Generate, 128, 0});
  expect_rel(tg.bytes / 128, 15028335616.0);
  expect_rel(tg.flops / 128, 15043657728.0);
  const RooflinePoint p = place_on_roofline(tg, 1.0, h200_ceilings());
  EXPECT_EQ(p.bound, Bound::Memory);
  expect_rel(p.roof_tokens_per_s, 4.30e12 / 15028335616.0);  // 286.1 tok/s
  EXPECT_NEAR(p.roof_tokens_per_s, 286.1, 0.1);
}

TEST(Roofline, Llama3PrefillIsComputeBound) {
  const RooflineModel m = roofline_model(llama3_8b_bf16(), 8192);
  const TestCost pp = test_cost(m, {TestKind::Prompt, 512, 512});
  expect_rel(pp.bytes, 15283524608.0);
  expect_rel(pp.flops, 7216729948160.0);
  EXPECT_NEAR(pp.intensity(), 472.19, 0.01);
  const RooflinePoint p = place_on_roofline(pp, 512 / 28030.0, h200_ceilings());  // the measured 28,030 tok/s
  EXPECT_EQ(p.bound, Bound::Compute);
  expect_rel(p.roof_tokens_per_s, 512 / (7216729948160.0 / 779e12));  // 55,267 tok/s
  expect_rel(p.fraction, 28030 / p.roof_tokens_per_s);
  expect_rel(p.roof_flops_per_s, 779e12);
}

// A toy model with round numbers, worked by hand.
RooflineModel toy() {
  RooflineModel m;
  m.n_layers = 2, m.dim = 8, m.n_heads = 2, m.n_kv_heads = 1, m.head_dim = 4, m.hidden_dim = 16, m.vocab_size = 10;
  m.layer_weight_bytes = 1000, m.head_weight_bytes = 100, m.embedding_row_bytes = 1, m.kv_bytes_per_token = 10;
  m.logits_row_bytes = 40;
  return m;
}

TEST(Roofline, ChunkedPromptByHand) {
  const RooflineModel m = toy();
  // P_layers = 2 × (8·4·(4 + 2) + 3·8·16) = 2 × (192 + 384) = 1152; P_head = 80; A = 4·2·2·4 = 64.
  expect_rel(m.layer_matmul_params(), 1152);
  expect_rel(m.head_params(), 80);
  expect_rel(m.attention_flops_per_pair(), 64);
  // pp10 in chunks of 4: steps end at 4, 8, 10 -> 3 weight passes, 22 tokens of KV read.
  // bytes = 3·1000 + 100 + 10·1 + 10·10 + 22·10 + 40 = 3470; FLOPs = 2·10·1152 + 2·80 + 64·55 = 26720.
  const TestCost c = test_cost(m, {TestKind::Prompt, 10, 4});
  expect_rel(c.bytes, 3470);
  expect_rel(c.flops, 26720);
  EXPECT_EQ(c.tokens, 10);
  // One chunk: 1000 + 100 + 10 + 100 + 100 + 40 = 1350 bytes, same FLOPs.
  const TestCost one = test_cost(m, {TestKind::Prompt, 10, 16});
  expect_rel(one.bytes, 1350);
  expect_rel(one.flops, 26720);
}

TEST(Roofline, DecodeByHand) {
  // tg3: steps see 2, 3, 4 keys (9 pairs). bytes = 3·(1000 + 100 + 1 + 10 + 40) + 9·10 = 3543;
  // FLOPs = 2·3·(1152 + 80) + 64·9 = 7968.
  const TestCost c = test_cost(toy(), {TestKind::Generate, 3, 0});
  expect_rel(c.bytes, 3543);
  expect_rel(c.flops, 7968);
  EXPECT_THROW(test_cost(toy(), {TestKind::Generate, 0, 0}), Error);
  EXPECT_THROW(test_cost(toy(), {TestKind::Prompt, 5, 0}), Error);
}

TEST(Roofline, DepthAddsTheCachedKeysToEveryStep) {
  const RooflineModel m = toy();
  // tg3 @ d5: steps see 7, 8, 9 keys (24 pairs = 3·5 + 9). bytes = 3·1151 + 24·10 = 3693; FLOPs = 7392 + 64·24 = 8928.
  const TestCost tg = test_cost(m, {TestKind::Generate, 3, 0, 5});
  expect_rel(tg.bytes, 3693);
  expect_rel(tg.flops, 8928);
  EXPECT_EQ(tg.tokens, 3);
  // pp10 @ d5 in chunks of 4: the chunks read 5 + 4, 5 + 8, 5 + 10 keys (37 tokens of KV): 3470 + 15·10 = 3620 bytes;
  // pairs 10·5 + 55 = 105: 2·10·1152 + 2·80 + 64·105 = 29920 FLOPs.
  const TestCost pp = test_cost(m, {TestKind::Prompt, 10, 4, 5});
  expect_rel(pp.bytes, 3620);
  expect_rel(pp.flops, 29920);
  EXPECT_THROW(test_cost(m, {TestKind::Generate, 3, 0, -1}), Error);
  EXPECT_EQ((BenchTest{TestKind::Generate, 128, 0, 8192}.label()), "tg128 @ d8192");
  EXPECT_EQ((BenchTest{TestKind::Prompt, 512, 512, 0}.label()), "pp512");
}

TEST(Roofline, Llama3DecodeAtDepthWithTheBf16Cache) {
  // Worked in roofline.h: the CUDA backend's bf16 KV cache holds 131,072 B a token; tg128 @ d8192 reads
  // 16,093,361,152 B a token (267 tok/s on the H200), @ d32768 19,314,586,624 B (223 tok/s).
  ModelInfo info = llama3_8b_bf16();
  info.kv_bytes /= 2;
  const RooflineModel m = roofline_model(info, 8192);
  expect_rel(m.kv_bytes_per_token, 131072.0);
  const TestCost d8k = test_cost(m, {TestKind::Generate, 128, 0, 8192});
  expect_rel(d8k.bytes / 128, 16093361152.0);
  expect_rel(d8k.flops / 128, 15009316864.0 + 524288.0 * (8192 + 65.5));
  EXPECT_NEAR(place_on_roofline(d8k, 1.0, h200_ceilings()).roof_tokens_per_s, 267.2, 0.1);
  const TestCost d32k = test_cost(m, {TestKind::Generate, 128, 0, 32768});
  expect_rel(d32k.bytes / 128, 19314586624.0);
  EXPECT_NEAR(place_on_roofline(d32k, 1.0, h200_ceilings()).roof_tokens_per_s, 222.6, 0.1);
}

TEST(Roofline, TiedEmbeddingsStreamTheTableAsTheHead) {
  ModelInfo i;
  i.n_layers = 1, i.dim = 4, i.n_heads = 1, i.n_kv_heads = 1, i.head_dim = 4, i.hidden_dim = 8, i.vocab_size = 50;
  i.tensors.push_back({"model.embed_tokens.weight", "f32", "", 800});
  i.tensors.push_back({"model.layers.0.mlp.up_proj.weight", "f32", "", 128});
  i.weight_bytes = 928;
  i.kv_bytes = 3200;
  const RooflineModel m = roofline_model(i, 100);
  expect_rel(m.head_weight_bytes, 800);
  expect_rel(m.layer_weight_bytes, 128);
  expect_rel(m.embedding_row_bytes, 16);
  expect_rel(m.kv_bytes_per_token, 32);
  expect_rel(m.logits_row_bytes, 200);
}

TEST(Roofline, CeilingsAndTheRidge) {
  const Ceilings c = parse_ceilings("4300,779");
  expect_rel(c.bytes_per_s, 4.3e12);
  expect_rel(c.flops_per_s, 7.79e14);
  expect_rel(ridge_intensity(c), 779.0 / 4.3);
  expect_rel(roofline_flops(100, c), 4.3e14);
  expect_rel(roofline_flops(1000, c), 7.79e14);
  EXPECT_EQ(binding_ceiling(100, c), Bound::Memory);
  EXPECT_EQ(binding_ceiling(1000, c), Bound::Compute);
  const Ceilings cpu = parse_ceilings("41.5,0.25");
  expect_rel(cpu.bytes_per_s, 41.5e9);
  expect_rel(cpu.flops_per_s, 2.5e11);
  for (const char* bad : {"4300", "", "a,b", "-1,5", "0,1", "1,2,3", "inf,1", "1,nan", "1e400,1", "4300 ,779"})
    EXPECT_THROW(parse_ceilings(bad), Error) << bad;
}

TEST(Roofline, MeasuredCpuCeilingsArePlausible) {
  const CpuCeilingsReport r = measure_cpu_ceilings(2, detect_simd());
  EXPECT_EQ(r.threads, 2);
  // Any machine that runs the suite reads more than 0.5 GB/s and less than 10 TB/s, and does between
  // 1 GFLOP/s and 100 TFLOP/s of f32 FMA on 2 threads. The sanitizer run is a Debug (-O0) build under
  // AddressSanitizer: every load of the read loop is checked (0.38 GB/s on a 2-core machine), and the FMA
  // loop's accumulators live on the stack, each step a checked load and store (0.94 GFLOP/s in CI while
  // other tests ran). There the lower bounds are 10x looser: they still catch a unit error (1e3 or 1e9 off).
  const double floor_scale = test::kAddressSanitizer ? 0.1 : 1.0;
  EXPECT_GT(r.ceilings.bytes_per_s, floor_scale * 5e8);
  EXPECT_LT(r.ceilings.bytes_per_s, 1e13);
  EXPECT_GT(r.ceilings.flops_per_s, floor_scale * 1e9);
  EXPECT_LT(r.ceilings.flops_per_s, 1e14);
  EXPECT_GE(r.buffer_bytes, 64.0 * (1 << 20));
  if (r.llc_bytes > 0 && r.llc_bytes < 128.0 * (1 << 20)) {
    EXPECT_GT(r.buffer_bytes, r.llc_bytes);
  }
  EXPECT_LT(r.seconds, 3.0 / floor_scale);  // < 0.5 s on an idle release build; the suite runs tests in parallel
  EXPECT_NE(r.ceilings.source.find("measured on this CPU"), std::string::npos);
}

struct Circle {
  std::string name, cls;
  double cx, cy;
};

std::vector<Circle> circles(const std::string& svg) {
  std::vector<Circle> out;
  const std::regex re(R"re(<circle class="([^"]*)" data-name="([^"]*)" cx="([-0-9.]+)" cy="([-0-9.]+)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back({(*it)[2], (*it)[1], std::stod((*it)[3]), std::stod((*it)[4])});
  return out;
}

TEST(RooflineSvg, PointsSitWhereTheRoofSays) {
  RooflinePlot plot;
  plot.title = "test <chart> & co";
  plot.ceilings = parse_ceilings("100,1");  // ridge at 10 FLOP/B
  // On the roof (memory side), half the roof (compute side), a kernel, and a point that cannot be drawn.
  plot.points = {{"tg<8>", 2.0, 2.0 * 100e9, 1.0, true},
                 {"pp64", 100.0, 0.5e12, 0.5, true},
                 {"matvec \"q8\"", 1.0, 10e9, 0.1, false},
                 {"zero", 0.0, 1e9, 0, false}};
  const std::string svg = roofline_svg(plot);
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find("test &lt;chart&gt; &amp; co"), std::string::npos);
  const std::vector<Circle> c = circles(svg);
  ASSERT_EQ(c.size(), 3u) << svg;  // "zero" (intensity 0) is left out
  EXPECT_EQ(c[0].name, "matvec &quot;q8&quot;");  // kernels are drawn first
  EXPECT_EQ(c[0].cls, "point kernel");
  EXPECT_EQ(c[1].name, "tg&lt;8&gt;");
  EXPECT_EQ(c[1].cls, "point e2e");
  EXPECT_EQ(c[2].name, "pp64");
  for (const Circle& p : c) {
    EXPECT_GE(p.cx, 100) << p.name;
    EXPECT_LE(p.cx, 930) << p.name;
    EXPECT_GE(p.cy, 70) << p.name;
    EXPECT_LE(p.cy, 560) << p.name;
  }
  // Log axes: the kernel (1 FLOP/B, 10 GFLOP/s) and tg (2 FLOP/B, 200 GFLOP/s) differ by log10(2) in x and
  // log10(20) in y; the same pixel scale per decade on each axis means the ratios of the offsets are fixed.
  const double dx = c[1].cx - c[0].cx, dy = c[0].cy - c[1].cy;
  const double dx2 = c[2].cx - c[1].cx, dy2 = c[1].cy - c[2].cy;  // pp: log10(50) right, log10(2.5) up
  ASSERT_GT(dx, 0);
  ASSERT_GT(dy, 0);
  EXPECT_NEAR(dx2 / dx, std::log10(50.0) / std::log10(2.0), 0.02);
  EXPECT_NEAR(dy2 / dy, std::log10(2.5) / std::log10(20.0), 0.02);
  // The tg point is on the roof: on the polyline's first segment.
  std::smatch m;
  const std::string roof = R"re(<polyline class="roof"[^>]* points="([-0-9.]+),([-0-9.]+) ([-0-9.]+),([-0-9.]+) )re";
  ASSERT_TRUE(std::regex_search(svg, m, std::regex(roof)));
  const double x0 = std::stod(m[1]), y0 = std::stod(m[2]), x1 = std::stod(m[3]), y1 = std::stod(m[4]);
  EXPECT_NEAR(c[1].cy, y0 + (y1 - y0) * (c[1].cx - x0) / (x1 - x0), 0.3);
  // The pp point (half the compute roof) lies log10(2) decades below the flat roof at y1.
  EXPECT_NEAR((c[2].cy - y1) / dy * std::log10(20.0), std::log10(2.0), 0.01);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = test::temp_path(std::to_string(getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(RooflineSvg, KernelResultsFile) {
  const std::string good = write_temp(
      "k_good.json", R"({"kernels": [{"name": "a", "flops": 2e9, "bytes": 1e9, "seconds": 0.5},
                                     {"name": "b", "flops": 1, "bytes": 3, "seconds": 1e-6}]})");
  const std::vector<KernelResult> k = read_kernel_results(good);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].name, "a");
  EXPECT_EQ(k[0].flops, 2e9);
  EXPECT_EQ(k[0].bytes, 1e9);
  EXPECT_EQ(k[0].seconds, 0.5);
  EXPECT_EQ(k[1].seconds, 1e-6);
  const std::string bare = write_temp("k_bare.json", R"([{"name": "c", "flops": 4, "bytes": 2, "seconds": 1}])");
  EXPECT_EQ(read_kernel_results(bare).size(), 1u);
  const auto expect_error = [](const std::string& text, const std::string& needle) {
    const std::string p = write_temp("k_bad.json", text);
    try {
      read_kernel_results(p);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
    std::filesystem::remove(p);
  };
  expect_error("{not json", "not valid JSON");
  expect_error(R"({"other": []})", "\"kernels\" array");
  expect_error(R"({"kernels": 3})", "expected an array");
  expect_error(R"([{"flops": 1, "bytes": 1, "seconds": 1}])", "entry 0 needs a string \"name\"");
  expect_error(R"([{"name": "x", "bytes": 1, "seconds": 1}])", "needs a number \"flops\"");
  expect_error(R"([{"name": "x", "flops": 1, "bytes": 1, "seconds": -2}])", "\"seconds\" must be positive");
  expect_error(R"([{"name": "x", "flops": 1, "bytes": "1", "seconds": 1}])", "needs a number \"bytes\"");
  EXPECT_THROW(read_kernel_results("/nonexistent/k.json"), Error);
  std::filesystem::remove(good);
  std::filesystem::remove(bare);
}

}  // namespace
}  // namespace ferry

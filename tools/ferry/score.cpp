// ferry score: teacher-forced logits of every position of a few prompts, for comparing against a reference
// (transformers) outside ferry. Input: a JSON file {"prompts": [[id, ...], ...]}. Output: float32 little-endian,
// prompt-major, position-major, vocab contiguous — (sum of prompt lengths, vocab_size) rows, the layout of
// tests/golden/logits/*.bin. Each prompt is scored from an empty cache (Engine::score).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common_options.h"
#include "core/check.h"
#include "core/mapped_file.h"

namespace ferry::cli {
namespace {

constexpr size_t kMaxTokensFileBytes = size_t(64) << 20;  // a token list, not a corpus
constexpr size_t kMaxPrompts = 4096;
constexpr size_t kMaxPromptTokens = size_t(1) << 20;

// prompts[p] = token ids of prompt p, in order.
std::vector<std::vector<int32_t>> read_prompts(const std::string& path) {
  check_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.good(), "--tokens: cannot open '{}'", path);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  FERRY_CHECK(size >= 0 && size_t(size) <= kMaxTokensFileBytes, "--tokens: '{}' is {} bytes; at most {} are accepted",
              path, int64_t(size), kMaxTokensFileBytes);
  in.seekg(0);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("--tokens: '{}' is not valid JSON: {}", path, e.what());
  }
  FERRY_CHECK(j.is_object() && j.contains("prompts") && j["prompts"].is_array(),
              "--tokens: '{}' must be an object {{\"prompts\": [[id, ...], ...]}}", path);
  const nlohmann::json& ps = j["prompts"];
  FERRY_CHECK(!ps.empty(), "--tokens: '{}' has no prompts", path);
  FERRY_CHECK(ps.size() <= kMaxPrompts, "--tokens: '{}' has {} prompts; at most {} are accepted", path, ps.size(),
              kMaxPrompts);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t p = 0; p < ps.size(); ++p) {
    FERRY_CHECK(ps[p].is_array(), "--tokens: prompt {} is not an array of token ids", p);
    FERRY_CHECK(!ps[p].empty(), "--tokens: prompt {} is empty", p);
    FERRY_CHECK(ps[p].size() <= kMaxPromptTokens, "--tokens: prompt {} has {} tokens; at most {} are accepted", p,
                ps[p].size(), kMaxPromptTokens);
    std::vector<int32_t> ids;
    ids.reserve(ps[p].size());
    for (size_t i = 0; i < ps[p].size(); ++i) {
      const nlohmann::json& v = ps[p][i];
      FERRY_CHECK(v.is_number_integer(), "--tokens: prompt {} position {}: '{}' is not an integer token id", p, i,
                  v.dump());
      const int64_t id = v.get<int64_t>();
      FERRY_CHECK(id >= 0 && id <= std::numeric_limits<int32_t>::max(),
                  "--tokens: prompt {} position {}: token id {} out of range", p, i, id);
      ids.push_back(int32_t(id));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

}  // namespace

Runner add_score(CLI::App& app) {
  struct Opts {
    ModelOptions model;
    std::string tokens, out;
    int step_tokens = 256;
  };
  auto o = std::make_shared<Opts>();
  o->model.add(app);
  app.add_option("--tokens", o->tokens, "JSON file {\"prompts\": [[id, ...], ...]}")->required();
  app.add_option("-o,--output", o->out, "output: float32 LE logits, (positions of all prompts, vocab)")->required();
  app.add_option("--step-tokens", o->step_tokens, "prompt tokens per forward step")->check(CLI::Range(1, 65536));
  return [o](const Env& env) {
    static_assert(std::endian::native == std::endian::little, "the output is written as native float32");
    const auto prompts = read_prompts(o->tokens);
    size_t longest = 0, total = 0;
    for (const auto& p : prompts) {
      longest = std::max(longest, p.size());
      total += p.size();
    }
    EngineOptions eo = o->model.engine_options(resolve_model(o->model.model, env), env);
    if (eo.context == 0) eo.context = int(longest);  // prompts are scored one at a time from an empty cache
    FERRY_CHECK(size_t(eo.context) >= longest, "--ctx {} is shorter than the longest prompt ({} tokens)", eo.context,
                longest);
    eo.max_step_tokens = o->step_tokens;
    const auto t0 = std::chrono::steady_clock::now();
    Engine engine(eo);
    const auto t1 = std::chrono::steady_clock::now();
    const size_t vocab = size_t(engine.info().vocab_size);

    std::ofstream out(o->out, std::ios::binary | std::ios::trunc);
    FERRY_CHECK(out.good(), "-o: cannot write '{}'", o->out);
    for (size_t p = 0; p < prompts.size(); ++p) {
      std::vector<float> logits;
      try {
        logits = engine.score(prompts[p]);  // (prompts[p].size(), vocab)
      } catch (const Error& e) {
        fail("prompt {}: {}", p, e.what());
      }
      FERRY_CHECK(logits.size() == prompts[p].size() * vocab, "prompt {}: engine returned {} logits, expected {}", p,
                  logits.size(), prompts[p].size() * vocab);
      out.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
    }
    out.close();
    FERRY_CHECK(out.good(), "-o: writing '{}' failed (disk full?)", o->out);
    const auto t2 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "scored %zu prompts, %zu positions, vocab %zu (%s): load %.2f s, score %.2f s -> %s\n",
                 prompts.size(), total, vocab, engine.info().backend.c_str(),
                 std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
                 o->out.c_str());
    return 0;
  };
}

}  // namespace ferry::cli

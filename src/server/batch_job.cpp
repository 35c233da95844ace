#include "server/batch_job.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "server/api_error.h"
#include "server/batch_line.h"
#include "server/chat_output.h"
#include "server/generation.h"
#include "server/openai_response.h"

namespace ferry::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.good(), "cannot read '{}': {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class OutputFile {
 public:
  explicit OutputFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "ab"), std::fclose) {
    FERRY_CHECK(f_ != nullptr, "cannot write '{}': {}", path, std::strerror(errno));
  }
  // One result: the line and its newline in one write, flushed before the next request's.
  void write(const json& line) {
    const std::string text = dump_json(line) + "\n";
    FERRY_CHECK(std::fwrite(text.data(), 1, text.size(), f_.get()) == text.size() && std::fflush(f_.get()) == 0,
                "cannot write '{}': {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> f_;
};

struct InFlight {
  std::string custom_id;
  std::shared_ptr<RequestHandle> handle;
  ResponseMeta meta;
  bool logprobs = false;
  std::string text;
  std::vector<GeneratedToken> tokens;
  std::optional<ChatOutputOptions> chat;  // chat lines: how the output is read (reasoning, tool calls)
};

// A request's seed when its body gave none: fixed by its custom_id, so a rerun draws the same text.
uint64_t seed_for(const std::string& custom_id) { return std::hash<std::string>{}(custom_id) ^ 0x9e3779b97f4a7c15ull; }

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

BatchSummary run_batch(ServingEngine& engine, const BatchJobOptions& o,
                       const std::function<void(int64_t, int64_t)>& on_line) {
  const Clock::time_point start = Clock::now();
  BatchSummary sum;
  // What a previous run finished; a torn last line is cut off before appending.
  std::set<std::string> done;
  std::error_code ec;
  if (std::filesystem::exists(o.output_path, ec)) {
    const std::string previous = read_file(o.output_path);
    FinishedLines f = finished_batch_lines(previous);
    done = std::move(f.custom_ids);
    if (f.valid_bytes < previous.size())
      FERRY_CHECK(::truncate(o.output_path.c_str(), off_t(f.valid_bytes)) == 0, "cannot truncate '{}': {}",
                  o.output_path, std::strerror(errno));
  }
  const std::string input = read_file(o.input_path);
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < input.size();) {
    size_t nl = input.find('\n', pos);
    if (nl == std::string::npos) nl = input.size();
    std::string_view line(input.data() + pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.push_back(line);
    pos = nl + 1;
  }
  sum.lines = int64_t(lines.size());
  // Lines to run this time (a custom_id seen in the output is skipped; a repeat within the file is an error).
  std::deque<std::variant<BatchLine, BatchLineError>> todo;
  std::set<std::string> seen;
  for (std::string_view line : lines) {
    auto parsed = parse_batch_line(line);
    if (auto* e = std::get_if<BatchLineError>(&parsed); e && e->custom_id && done.count(*e->custom_id)) {
      ++sum.skipped;  // its error is in the output already
      continue;
    }
    if (auto* b = std::get_if<BatchLine>(&parsed)) {
      if (done.count(b->custom_id)) {
        ++sum.skipped;
        continue;
      }
      if (!seen.insert(b->custom_id).second) {
        parsed = BatchLineError{b->custom_id, "duplicate_custom_id", "'custom_id' " + b->custom_id + " repeats an earlier line"};
      }
    }
    todo.push_back(std::move(parsed));
  }
  const int64_t total = int64_t(todo.size());
  int64_t written = 0;
  OutputFile out(o.output_path);
  const auto emit = [&](const json& line, bool ok) {
    out.write(line);
    ++written;
    ++(ok ? sum.succeeded : sum.failed);
    if (on_line) on_line(written, total);
  };
  const auto emit_api_error = [&](const std::string& custom_id, const ApiError& e) {
    emit(batch_response_line(custom_id, "", e.status(), error_json(e)), false);
  };

  const size_t window = size_t(std::max(1, engine.options().max_running + engine.options().max_waiting));
  std::vector<InFlight> flying;
  while (!todo.empty() || !flying.empty()) {
    // Submit while the engine takes more.
    while (!todo.empty() && flying.size() < window) {
      auto& next = todo.front();
      if (auto* err = std::get_if<BatchLineError>(&next)) {
        emit(batch_error_line(*err), false);
        todo.pop_front();
        continue;
      }
      const BatchLine& b = std::get<BatchLine>(next);
      InFlight f;
      f.custom_id = b.custom_id;
      try {
        ParsedRequest p = parse_request(b.endpoint, b.body, o.limits);
        if (p.stream) throw ApiError(400, "'stream' is not supported in a batch", "stream");
        if (p.n != 1) throw ApiError(400, "'n' above 1 is not supported in a batch (one line per choice)", "n");
        check_model(p.model, o.facts);
        GenerationPlan plan = build_generation_request(p, engine, o.facts, seed_for(b.custom_id));
        if (b.endpoint == Endpoint::Chat) f.chat = plan.output;
        try {
          f.handle = engine.submit(std::move(plan.request));
        } catch (const QueueFull& e) {
          if (flying.empty()) throw ApiError(429, std::string("the engine queue is full: ") + e.what(), "", "queue_full");
          break;  // full: wait for some to finish, then submit this line again
        } catch (const Error& e) {
          throw ApiError(400, e.what());
        }
        f.logprobs = p.logprobs >= 0;
        f.meta = {response_id(b.endpoint, f.handle->id(), seed_for(b.custom_id)), unix_seconds(),
                  p.model.empty() ? o.facts.names.front() : p.model, b.endpoint};
        flying.push_back(std::move(f));
      } catch (const ApiError& e) {
        emit_api_error(b.custom_id, e);
      }
      todo.pop_front();
    }
    // Collect: every request's news; block briefly on the oldest when nothing moved.
    bool moved = false;
    for (size_t i = 0; i < flying.size();) {
      InFlight& f = flying[i];
      RequestUpdate u;
      const bool news = f.handle->wait(u, std::chrono::milliseconds(moved || i > 0 ? 0 : 20));
      if (!news) {
        ++i;
        continue;
      }
      moved = true;
      f.text += u.text;
      if (f.logprobs) f.tokens.insert(f.tokens.end(), u.tokens.begin(), u.tokens.end());
      if (!u.finished) {
        ++i;
        continue;
      }
      sum.prompt_tokens += u.usage.prompt_tokens;
      sum.completion_tokens += u.usage.completion_tokens;
      const std::string request_id = f.meta.id;
      if (u.finish == FinishReason::Error) {
        emit_api_error(f.custom_id, ApiError(500, "generation failed: " + u.error));
      } else if (u.finish == FinishReason::Cancelled) {
        emit_api_error(f.custom_id, ApiError(503, "the request was cancelled"));
      } else {
        ChoiceResult r;
        r.finish_reason = finish_reason_name(u.finish);
        if (f.chat) {
          ChatOutputParser parser(*f.chat);
          parser.feed(f.text);
          parser.finish();
          r.message = parser.message();
          if (u.finish == FinishReason::Stop && parser.called_tools()) r.finish_reason = "tool_calls";
        } else {
          r.text = f.text;
        }
        if (f.logprobs) r.logprobs = logprobs_json(f.meta.endpoint, f.tokens);
        emit(batch_response_line(f.custom_id, request_id, 200, full_response(f.meta, {r}, u.usage)), true);
      }
      flying.erase(flying.begin() + std::ptrdiff_t(i));
    }
  }
  sum.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return sum;
}

}  // namespace ferry::server

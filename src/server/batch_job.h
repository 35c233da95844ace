// `ferry batch`: an OpenAI Batch API file through the serving engine. Every runnable line is submitted up front
// (as many as the engine's running + waiting limits hold, more as they finish), so continuous batching runs them
// together; each result is appended to the output the moment its request finishes and flushed (a crash loses at
// most the requests still running, never a written line). Output order is completion order, as in OpenAI's
// batch output: match lines by custom_id. A rerun on the same output skips the custom_ids already there and
// first cuts off a torn last line. The requests are parsed, validated and answered by the server's own code
// (openai_request, generation, openai_response): a line's result is what POST to the url would have returned.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ferry/serving.h"
#include "server/generation.h"
#include "server/openai_request.h"

namespace ferry::server {

struct BatchJobOptions {
  std::string input_path;   // JSONL requests
  std::string output_path;  // JSONL results (appended to; created when absent)
  ModelFacts facts;         // names a line's "model" may use, context, vocabulary
  RequestLimits limits;
};

struct BatchSummary {
  int64_t lines = 0;           // non-empty input lines
  int64_t skipped = 0;         // custom_ids already in the output
  int64_t succeeded = 0;       // status 200
  int64_t failed = 0;          // an error status or a line that could not run
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double seconds = 0;
};

// on_line(done, total): after each written line (total: the lines to run in this call). Throws ferry::Error for
// an input or output file that cannot be read or written; never for a bad line.
BatchSummary run_batch(ServingEngine& engine, const BatchJobOptions& options,
                       const std::function<void(int64_t done, int64_t total)>& on_line);

}  // namespace ferry::server

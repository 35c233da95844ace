// One request against an OpenAI-compatible /v1/completions endpoint, timed on the client: time to first
// token, the gaps between streamed chunks (inter-token latency), end-to-end latency, and the usage counts.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

#include "workload.h"

namespace ferry::bench {

struct RequestResult {
  bool ok = false;
  std::string error;          // why not ok (HTTP status and body, connection error, ...)
  double ttft = 0;            // seconds to the first chunk carrying text (stream) or to the response (not)
  double latency = 0;         // seconds to the last byte
  std::vector<double> itl;    // seconds between consecutive text-carrying chunks (stream only)
  int prompt_tokens = 0, completion_tokens = 0;
};

struct ClientOptions {
  std::string model;
  bool stream = true;
  float temperature = 0.0f;
  std::string extra_fields;  // a JSON object whose fields every request's body gets (e.g. response_format); empty: none
};

RequestResult send_request(httplib::Client& client, const WorkItem& item, const ClientOptions& o);

}  // namespace ferry::bench

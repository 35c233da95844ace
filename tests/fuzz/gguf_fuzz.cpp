// Fuzz target: the GGUF reader over arbitrary bytes. Any input must parse or throw ferry::Error.
#include <cstdint>

#include "core/check.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ferry::GgufFile g = ferry::GgufFile::parse(data, size);
    // Touch every tensor's bytes and every metadata value, as a loader would.
    volatile uint8_t sink = 0;
    for (const auto& t : g.tensors())
      if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
    for (const auto& kv : g.metadata()) {
      if (kv.second.is_number()) (void)kv.second.as_float();
    }
  } catch (const ferry::Error&) {
  }
  return 0;
}

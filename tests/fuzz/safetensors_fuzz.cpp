// Fuzz target: the safetensors reader over arbitrary bytes. Any input must parse or throw ferry::Error.
#include <cstdint>

#include "core/check.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ferry::SafetensorsFile f = ferry::SafetensorsFile::parse(data, size);
    // Touch every tensor's first and last byte and build its view, as a loader would.
    volatile uint8_t sink = 0;
    for (const auto& t : f.tensors()) {
      if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
      try {
        const ferry::SafetensorsTensor* found = f.find(t.name);
        if (found != &t) __builtin_trap();
        const ferry::Tensor v = t.view();
        if (v.numel() > 0 && v.nbytes() != t.nbytes) __builtin_trap();
      } catch (const ferry::Error&) {
      }
    }
    for (const auto& [k, v] : f.metadata()) sink = sink ^ uint8_t(k.size() + v.size());
  } catch (const ferry::Error&) {
  }
  return 0;
}

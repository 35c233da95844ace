// Fuzz target: the GGUF reader over arbitrary bytes, and the split GGUF checks (formats/gguf_split.h) over what it
// parsed. Any input must parse or throw ferry::Error.
// Input: one GGUF file, or two concatenated (the second starting at the last "GGUF" magic past offset 0), which
// are then assembled as shards 1 and 2 of a split GGUF.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "formats/gguf_split_name.h"

namespace {

// Every tensor's bytes and every metadata value, as a loader would touch them.
void touch(const ferry::GgufFile& g) {
  volatile uint8_t sink = 0;
  for (const auto& t : g.tensors())
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  for (const auto& kv : g.metadata()) {
    if (kv.second.is_number()) (void)kv.second.as_float();
  }
}

// The split checks of one parsed file alone, and of the file twice (a tensor in two shards, a wrong split.no).
void split_checks(const ferry::GgufFile& g) {
  try {
    (void)ferry::gguf_split_info(g);
    (void)ferry::GgufSplitSet::assemble({g});
  } catch (const ferry::Error&) {
  }
  try {
    (void)ferry::GgufSplitSet::assemble({g, g});
  } catch (const ferry::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ferry::GgufFile g = ferry::GgufFile::parse(data, size);
    touch(g);
    split_checks(g);
  } catch (const ferry::Error&) {
  }
  // Two shards: the bytes before and from the last magic past offset 0.
  size_t second = 0;
  for (size_t at = size >= 4 ? size - 4 : 0; at > 0; --at)
    if (std::memcmp(data + at, "GGUF", 4) == 0) {
      second = at;
      break;
    }
  if (second > 0) {
    try {
      std::vector<ferry::GgufFile> shards;
      shards.push_back(ferry::GgufFile::parse(data, second, "shard-00001-of-00002.gguf"));
      shards.push_back(ferry::GgufFile::parse(data + second, size - second, "shard-00002-of-00002.gguf"));
      for (const auto& s : shards) touch(s);
      const ferry::GgufSplitSet set = ferry::GgufSplitSet::assemble(std::move(shards));
      for (const ferry::GgufTensorInfo* t : set.tensors()) (void)set.find_tensor(t->name);
    } catch (const ferry::Error&) {
    }
  }
  (void)ferry::parse_gguf_split_name(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

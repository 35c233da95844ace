// The GBNF of a JsonSchema OutputFormat whose values sit inside literal markup (a forced tool call in a chat
// template's format: prefix / suffix / separator / max_repeats, or one tagged schema per function, and open /
// close around the whole), through grammar/wrapped_schema.
#pragma once

#include <string>

#include "ferry/serving.h"

namespace ferry {

// The format is a schema wrapped in markup (else its text alone is the constraint).
bool is_wrapped(const OutputFormat& format);

// Throws ferry::Error for a bad schema or repeat count.
std::string wrapped_schema_gbnf(const OutputFormat& format);

}  // namespace ferry

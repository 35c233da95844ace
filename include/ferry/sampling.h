// Sampling parameters (public). Defined in src/engine/sampling_params.h for now; see docs/architecture.md.
#pragma once
#include "engine/sampling_params.h"

// EngineOptions::on_load_progress drawn as one progress line per loading stage (core/progress.h).
#pragma once

#include "core/progress.h"
#include "ferry/engine.h"

namespace ferry::cli {

LoadProgressFn load_progress_bar(ProgressMode mode);

}  // namespace ferry::cli

#include "load_progress_bar.h"

#include <memory>
#include <mutex>
#include <string>

namespace ferry::cli {

LoadProgressFn load_progress_bar(ProgressMode mode) {
  if (mode == ProgressMode::kQuiet) return {};
  struct State {
    std::mutex mutex;
    std::string stage;
    std::unique_ptr<Progress> bar;
  };
  auto st = std::make_shared<State>();
  return [st, mode](const LoadProgress& p) {
    std::lock_guard lock(st->mutex);
    if (p.stage != st->stage) {
      if (st->bar) st->bar->finish();
      st->bar.reset();
      st->stage = std::string(p.stage);
    }
    if (!st->bar) {
      if (p.total == 0) return;  // a stage starting: nothing to count yet
      st->bar = std::make_unique<Progress>("loading model: " + st->stage, p.total,
                                           progress_options(mode));
    }
    st->bar->set(p.done);
    if (p.done >= p.total) st->bar->finish();
  };
}

}  // namespace ferry::cli

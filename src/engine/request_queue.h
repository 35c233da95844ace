// The serving engine's inbox: the only state shared between submit()/cancel()/shutdown() callers and the
// engine loop. Callers push new sequences and raise flags; the loop drains it at the start of every step and
// sleeps on it when there is nothing to run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "engine/sequence.h"

namespace ferry {

struct RequestQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Sequence>> incoming;  // submitted, not yet seen by the loop
  int32_t loop_waiting = 0;   // the scheduler's waiting queue length after the loop's last step
  bool closed = false;        // shutdown() was called: submit() refuses
  bool finish_in_flight = true;
  bool poked = false;         // a cancel() happened: the loop must look even when idle

  void poke() {
    {
      std::lock_guard lock(mu);
      poked = true;
    }
    cv.notify_all();
  }
};

}  // namespace ferry

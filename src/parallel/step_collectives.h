// Times the collectives of one batch-1 decode step on their own, with this rank's real communicator (NCCL or
// the peer all-reduce, as configured): 2 * n_layers + 1 all-reduces of one token's hidden state (after the
// embedding, wo and w_down) and the vocab-parallel logits all-gather, captured in one CUDA graph (as the decode
// step is) and replayed. Collective over the group: every rank calls it at the same point with the same shape.
//
// What it measures: the collectives back to back, so each waits only for the other ranks' same collective. In a
// real step they sit between kernels, and a rank that arrives late makes the others wait: this is the
// collectives' own cost, a lower bound of what they add to a step.
#pragma once

#include <cstdint>

#include "ops/communicator.h"

struct CUstream_st;

namespace ferry {

struct StepCollectives {
  int all_reduces = 0;
  int64_t all_reduce_bytes = 0;  // f32 bytes of each all-reduce
  int64_t gather_bytes = 0;      // f32 bytes of the logits all-gather (every rank's part)
  double us_per_step = 0;        // mean over the replays (this rank's stream; events)
};

// dim: hidden size; gather_rows: world * the rank's vocabulary rows (VocabShard::local_rows).
StepCollectives time_step_collectives(Communicator& comm, CUstream_st* stream, int n_layers, int64_t dim,
                                      int64_t gather_rows, int replays = 50);

}  // namespace ferry

#pragma once
// Pipeline schedules as data. A schedule is, per pipeline stage (rank of the
// pipeline group), the ordered list of actions that stage executes in one
// training step. The simulator costs exactly these lists and the runtime's
// pipeline executor runs them, so prediction and execution share one truth.
//
// Printing: "2F0" = stage 2 forward of micro-batch 0; "2F0.1" = chunk
// (virtual stage) 1 in the interleaved schedule; "1SF3" = stage 1 sends the
// forward activation of micro-batch 3; "0RB2" receives a gradient.
#include <cstdint>
#include <string>
#include <vector>

#include "strategies/strategy.hpp"

namespace planner {

enum class Op : uint8_t {
  F,        // forward of one micro-batch through this stage's (chunk of) layers
  B,        // backward of one micro-batch
  SendF,    // send the forward activation to the next stage
  RecvF,    // receive the forward activation from the previous stage
  SendB,    // send the input gradient to the previous stage
  RecvB,    // receive the output gradient from the next stage
  AllReduce,// data-parallel gradient reduction (or ZeRO reduce-scatter) of this stage
  OptStep,  // optimizer step
};
const char* to_string(Op op);

struct Action {
  int stage = 0;
  Op op = Op::F;
  int microbatch = 0;  // -1 for AllReduce and OptStep
  int chunk = 0;       // virtual stage index on this rank (interleaved), else 0
  std::string to_string() const;
  bool operator==(const Action&) const = default;
};

using StageActions = std::vector<Action>;
using PipelineSchedule = std::vector<StageActions>;  // one list per stage

// GPipe (Huang et al. 2019): all forwards, then all backwards.
PipelineSchedule gpipe(int pp, int microbatches);
// 1F1B, PipeDream-Flush (Narayanan et al. 2021): stage s warms up with
// min(pp - s - 1, m) forwards, then alternates one forward one backward, then drains.
PipelineSchedule one_f_one_b(int pp, int microbatches);
// Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2): each rank holds `vpp`
// chunks; model chunk c of rank s is virtual stage c * pp + s. Needs
// microbatches % pp == 0.
PipelineSchedule interleaved_one_f_one_b(int pp, int microbatches, int vpp);
// The schedule a strategy asks for, with gas micro-batches; ends each stage
// with AllReduce and OptStep.
PipelineSchedule make_schedule(const Strategy& s);

// The largest number of (micro-batch, chunk) forwards whose backward has not
// run yet, over the action list of one stage: the activations the stage holds
// at its peak, in units of one chunk of one micro-batch.
int max_inflight(const StageActions& actions);

std::string to_string(const PipelineSchedule& s);  // one line per stage

}  // namespace planner

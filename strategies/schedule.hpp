#pragma once
// Pipeline schedules: the first pass of the step program
// (strategies/step_program.hpp). A schedule is, per pipeline stage (rank of
// the pipeline group), the compute-only list of StepActions that stage runs
// in one training step: one Forward and one Backward per micro-batch and
// chunk (unit -1: the whole chunk). add_pipeline_transfers then puts the
// sends and receives around each pass; the step program's later passes expand
// the chunks into units and add what data parallelism, ZeRO and offload need.
// Printed as the step program prints its actions: "2F0" = stage 2 forward of
// micro-batch 0; "2F0.c1" = chunk (virtual stage) 1 in the interleaved
// schedule; "1SF3" = stage 1 sends the forward activation of micro-batch 3;
// "0RB2" receives a gradient.
#include <cstdint>
#include <string>
#include <vector>

#include "strategies/step_program.hpp"
#include "strategies/strategy.hpp"

namespace planner {

using PipelineSchedule = std::vector<StepList>;  // one list per stage

// GPipe (Huang et al. 2019): all forwards, then all backwards.
PipelineSchedule gpipe(int pp, int microbatches);
// 1F1B, PipeDream-Flush (Narayanan et al. 2021): stage s warms up with
// min(pp - s - 1, m) forwards, then alternates one forward one backward, then drains.
PipelineSchedule one_f_one_b(int pp, int microbatches);
// Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2): each rank holds `vpp`
// chunks; model chunk c of rank s is virtual stage c * pp + s. Needs
// microbatches % pp == 0.
PipelineSchedule interleaved_one_f_one_b(int pp, int microbatches, int vpp);
// The compute-only schedule a strategy asks for, with gas micro-batches.
PipelineSchedule compute_schedule(const Strategy& s);

// The pass that adds the pipeline transfers of virtual stage v = chunk * pp +
// stage: RecvF before a forward (v > 0), SendF after it (v < pp*vpp - 1),
// RecvB before a backward (v < pp*vpp - 1), SendB after it (v > 0).
PipelineSchedule add_pipeline_transfers(const PipelineSchedule& compute, int vpp);
// compute_schedule with its transfers.
PipelineSchedule make_schedule(const Strategy& s);

std::string to_string(const PipelineSchedule& s);  // one line per stage, compute actions only

}  // namespace planner

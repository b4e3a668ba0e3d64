#pragma once
// ZeRO's unit buffers read off one stage's list of the step program
// (step_program.hpp), as the memory model needs them (costmodel/memory_model.cpp
// zero_buffer_bytes); the activations of the micro-batches in flight are
// max_inflight's (step_program.hpp).
#include "strategies/partition.hpp"
#include "strategies/step_program.hpp"

namespace planner {

// The most layer units (neither the embedding nor the head, which have
// buffers of their own) that hold a unit buffer at once over one stage's list:
//   gathered_layers  ZeRO-3's gathered parameters, from the unit's Gather to
//                    its Release (a Release cancelled by the next Gather keeps
//                    the unit gathered: add_param_gathers);
//   gradient_layers  ZeRO-2/3's unit gradients, from the unit's Backward to
//                    the Reduce that scatters it into the rank's shard.
struct UnitBufferPeaks {
  int gathered_layers = 0;
  int gradient_layers = 0;
};
UnitBufferPeaks unit_buffer_peaks(const StepList& actions, const LayerPartition& part);

}  // namespace planner

#pragma once
// The whole training step as one action list per pipeline stage: the program
// that the runtime's executor walks (runtime/executor.cpp) and the simulator
// costs. Built from the pipeline schedule (schedule.hpp: F/B per micro-batch and
// chunk, send/receive) by expanding each chunk into its units (partition.hpp)
// and adding what data parallelism, ZeRO and offload need around them:
//
//   Gather u        ZeRO-3: all-gather unit u's parameters over the dp group
//                   (offload=all: its shard comes from host memory first).
//                   Asynchronous; emitted one unit ahead of its use (prefetch).
//   F mb u / B mb u forward / backward of unit u for micro-batch mb; B also
//                   recomputes under activation checkpointing.
//   Release u       ZeRO-3: free unit u's gathered parameters.
//   Reduce u        unit u's gradients over the dp group: all-reduce (ZeRO-0/1)
//                   after the unit's last backward of the step, or
//                   reduce-scatter into the rank's gradient shard (ZeRO-2/3)
//                   after every backward. Asynchronous, overlapping the
//                   backward of the units below.
//   ToHost u        offload: unit u's reduced gradient shard to pinned host
//                   memory (asynchronous, copy stream).
//   Sync            wait for every outstanding collective and copy.
//   Norm            the global gradient norm (one all-reduce of a scalar).
//   Opt             optimizer step on the rank's shard (GPU fused AdamW, or the
//                   CPU AdamW under offload).
//   ToDevice u      offload: unit u's updated parameter shard host -> device.
//   AllGather u     ZeRO-1/2 (dp > 1): all-gather unit u's updated parameters.
//   SF/RF/SB/RB     pipeline sends and receives, as in the schedule.
//
// Printed as "0F3.5" (stage 0, forward, micro-batch 3, unit 5), "0R5", "0G5"...
// Example, dp=2, zero=3, one stage, 2 layers (units 0..3), one micro-batch:
//   G0 G1 F0.0 R0 G2 F0.1 R1 G3 F0.2 F0.3 B0.3 Red3 R3 G2 B0.2 Red2 R2 G1 B0.1 Red1 R1
//   G0 B0.0 Red0 R0 Sync Norm Opt
// (Release and Gather of the same unit back to back cancel: the head stays
// gathered from its forward into its backward.)
#include <cstdint>
#include <string>
#include <vector>

#include "strategies/partition.hpp"
#include "strategies/schedule.hpp"
#include "strategies/strategy.hpp"

namespace planner {

enum class StepOp : uint8_t {
  Forward, Backward,
  SendF, RecvF, SendB, RecvB,
  Gather, Release,
  Reduce, ToHost,
  Sync, Norm, Opt,
  ToDevice, AllGather,
};
const char* to_string(StepOp op);

struct StepAction {
  StepOp op = StepOp::Forward;
  int stage = 0;
  int microbatch = -1;  // F, B, sends and receives
  int unit = -1;        // F, B, Gather, Release, Reduce, ToHost, ToDevice, AllGather
  int chunk = 0;        // the virtual-stage chunk (F, B, sends and receives)
  bool scatter = false; // Reduce: reduce-scatter into the shard (ZeRO-2/3) instead of all-reduce
  std::string to_string() const;
  bool operator==(const StepAction&) const = default;
};

using StepList = std::vector<StepAction>;

struct StepProgram {
  LayerPartition partition;
  std::vector<StepList> stages;  // one list per pipeline stage (all dp and tp ranks of a stage run the same list)
  int microbatches = 1;
};

struct StepOptions {
  // The head uses the embedding's word matrix (tied embeddings): under ZeRO-3
  // unit 0 stays gathered from its forward to its backward, because the head
  // needs it in between.
  bool tied_embeddings = false;
};

// The simulator walks every micro-batch of every (virtual) stage, so its time
// and memory grow with pp*vpp*gas (about 6 us and 2 KB each). Up to this many
// micro-batch chunks a step is simulated whole; beyond, its steady state is
// extrapolated from a few simulations of at most this many chunks in all
// (costmodel/long_run.hpp), or, where that cannot be done, the plan is
// refused by check_compat and skipped by the search (issue 11).
constexpr int64_t kMaxSimulatedChunks = int64_t(1) << 18;
// --trace is limited further: each chunk becomes a few trace events of ~1 KB
// while the JSON is built, so 2^14 chunks keep a trace under ~100 MB.
constexpr int64_t kMaxTraceChunks = int64_t(1) << 14;
inline int64_t simulated_chunks(const Strategy& s) { return int64_t(s.pp) * s.vpp * s.gas; }

// The step of strategy `s` for a model of `layers` transformer layers.
StepProgram build_step_program(const Strategy& s, int64_t layers, const StepOptions& opt = {});

// Compact one-line-per-stage form (tests, `--explain`).
std::string to_string(const StepProgram& p);

}  // namespace planner

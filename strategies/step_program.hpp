#pragma once
// The training step as one action list per pipeline stage: the one
// intermediate representation of a step. The runtime's Engine walks it
// (runtime/engine.cpp, one handler per StepOp), the simulator prices it
// (costmodel/simulator_walk.cpp, one handler per StepOp), and the memory model and
// the long-run extrapolation read their counts off it.
//
// Built in passes, the way PyTorch's pipelining builds its _Action lists
// (torch/distributed/pipelining/schedules.py): the schedule generators
// (schedule.hpp: GPipe, 1F1B, interleaved 1F1B) emit the compute-only list,
// one F and one B per micro-batch and chunk; then
//   add_pipeline_transfers  SF/RF/SB/RB around each pass (schedule.hpp),
//   expand_units            each chunk pass into its units (partition.hpp),
//   add_grad_reductions     Reduce after the backward that completes a gradient,
//                           ToHost after a unit's last backward (offload),
//   add_param_gathers       ZeRO-3 Gather (one unit ahead) and Release,
//   add_step_tail           Sync, the tied, replicated and loss reductions,
//                           Norm with its reductions and Clip, Opt, ToDevice,
//                           AllGather: every collective of the step is an
//                           action of the list.
//
// The actions:
//   G u        Gather: ZeRO-3 all-gather of unit u's parameters over the dp group
//              (offload=all: its shard comes from host memory first).
//              Asynchronous; emitted one unit ahead of its use (prefetch).
//   F mb.u     Forward / B: backward of unit u for micro-batch mb; B also
//              recomputes under activation checkpointing.
//   R u        Release: ZeRO-3 frees unit u's gathered parameters.
//   AR u/RS u  Reduce: unit u's gradients over the dp group: all-reduce
//              (ZeRO-0/1) after the unit's last backward of the step, or
//              reduce-scatter into the rank's gradient shard (ZeRO-2/3) after
//              every backward. Asynchronous, overlapping the backward of the
//              units below.
//   H u        ToHost: offload, unit u's reduced gradient shard to pinned host
//              memory (asynchronous, copy stream).
//   Sync       wait for every outstanding collective and copy; the loss
//              summed over the micro-batches, divided by their number.
//   TE         TiedReduce: tied embeddings with pp > 1, on the first and the
//              last stage: the word matrix's two gradient copies summed
//              (all-reduce over those two stages).
//   Rep        ReplicaReduce: sequence parallelism (tp > 1): the gradients of
//              the replicated parameters (norms, row-parallel biases, position
//              tables), computed on sequence shards, summed over the tp group.
//   LRpp/LRdp  LossReduce: the step's loss summed over the pipeline (only the
//              last stage has it), then averaged over the dp group.
//   Norm       the local sum of squares of the rank's gradients (the tied
//              copy and tp-replicated ranges counted once).
//   NRtp/NRdp/NRpp  NormReduce: that sum over the tp group, the dp group
//              (ZeRO-2/3: each rank holds a shard) and the pipeline.
//   Clip       the norm's square root, fp16's overflow check (one host
//              sync; a skipped step) and the clipping divisor.
//   Opt        optimizer step on the rank's shard (GPU fused AdamW, or the
//              CPU AdamW under offload).
//   D u        ToDevice: offload, unit u's updated parameter shard host -> device.
//   AG u       AllGather: ZeRO-1/2 (dp > 1) all-gather of unit u's updated parameters.
//   SF/RF/SB/RB mb  pipeline sends and receives (activation forward, gradient back).
//   KVF mb.u / KVB mb.u  context parallelism (cp > 1): the ring exchange of
//              layer unit u's attention for micro-batch mb, just before its F
//              (K/V passed around the cp ranks, cp - 1 steps) or its B (K/V
//              again, and dK/dV back to their owners). The exchange runs
//              inside the attention of the pass that follows
//              (runtime/model/context_parallel.hpp), overlapped with its
//              blocks; the action carries the part the blocks do not hide
//              (costmodel/cp_costs.hpp), on the compute stream.
//
// Printed (to_string, and parse_step_action reads it back) as the stage, the
// op's name and its operands: "0F3.5" (stage 0, forward, micro-batch 3, unit
// 5), "0F3.5.c1" (chunk 1 of the interleaved schedule), "0SF3", "0RB3.c1",
// "0G5", "0R5", "0AR5", "0RS5", "0H5", "0Sync", "0TE", "0Rep", "0LRpp",
// "0Norm", "0NRtp", "0Clip", "0Opt", "0D5", "0AG5".
// Schedule-level F/B (no unit yet) print without it: "0F3", "0B3.c1".
// Example, dp=2, zero=3, one stage, 2 layers (units 0..3), one micro-batch,
// tied embeddings (tests/unit/test_step_program.cpp checks this line):
//   0G0 0G1 0F0.0 0G2 0F0.1 0R1 0G3 0F0.2 0R2 0F0.3 0G2 0B0.3 0RS3 0R3 0G1 0B0.2
//   0RS2 0R2 0B0.1 0RS1 0R1 0B0.0 0RS0 0R0 0Sync 0LRdp 0Norm 0NRdp 0Clip 0Opt
// (Release and Gather of the same unit back to back cancel: with tied
// embeddings unit 0 stays gathered from its forward to its backward, and the
// head from its forward into its backward.)
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strategies/partition.hpp"
#include "strategies/strategy.hpp"

namespace planner {

enum class StepOp : uint8_t {
  Forward, Backward,
  SendF, RecvF, SendB, RecvB,
  Gather, Release,
  Reduce, ToHost,
  Sync, Norm, Opt,
  ToDevice, AllGather,
  TiedReduce, ReplicaReduce, LossReduce, NormReduce, Clip,
  CpRingF, CpRingB,
  MoeATAF, MoeATAB,
};
constexpr int kStepOps = int(StepOp::MoeATAB) + 1;
// The op's name: "F", "B", "SF", "RF", "SB", "RB", "G", "R", "Red", "H",
// "Sync", "Norm", "Opt", "D", "AG", "TE", "Rep", "LR", "NR", "Clip", "KVF", "KVB", "ATAF", "ATAB" (the keys
// of per-op times).
const char* to_string(StepOp op);
// The inverse of to_string(StepOp); false for any other text.
bool parse_step_op(std::string_view name, StepOp& op);

// The group a LossReduce or NormReduce runs over. Dp is the dp-cp group: the
// data-parallel ranks and, under context parallelism, the cp ranks beside
// them (every rank that holds the same parameters; Megatron's dp-cp group).
enum class CommGroup : uint8_t { None, Tp, Dp, Pp };

struct StepAction {
  StepOp op = StepOp::Forward;
  int stage = 0;
  int microbatch = -1;  // F, B, sends and receives
  int unit = -1;        // F, B (-1 in a schedule before expand_units), Gather, Release, Reduce, ToHost, ToDevice,
                        // AllGather
  int chunk = 0;        // the virtual-stage chunk (F, B, sends and receives)
  bool scatter = false; // Reduce: reduce-scatter into the shard (ZeRO-2/3) instead of all-reduce
  CommGroup group = CommGroup::None;  // LossReduce, NormReduce
  std::string to_string() const;
  bool operator==(const StepAction&) const = default;
};
inline bool is_compute(StepOp op) { return op == StepOp::Forward || op == StepOp::Backward; }
inline bool is_cp_ring(StepOp op) { return op == StepOp::CpRingF || op == StepOp::CpRingB; }
inline bool is_moe_a2a(StepOp op) { return op == StepOp::MoeATAF || op == StepOp::MoeATAB; }
// Actions of one micro-batch's pass through one unit besides F and B itself (KVF/KVB, ATAF/ATAB).
inline bool is_pass_exchange(StepOp op) { return is_cp_ring(op) || is_moe_a2a(op); }

using StepList = std::vector<StepAction>;

// Reads one action as to_string prints it; throws InputError naming the text.
StepAction parse_step_action(std::string_view text);
// Lists as to_string(StepProgram) prints them: one line per stage, actions
// separated by spaces.
std::vector<StepList> parse_step_lists(std::string_view text);

struct StepOptions {
  // The head uses the embedding's word matrix (tied embeddings): under ZeRO-3
  // unit 0 stays gathered from its forward to its backward, because the head
  // needs it in between.
  bool tied_embeddings = false;
  // Overlap choices, honoured by the simulator (costmodel/simulator.cpp) and
  // the runtime's Engine alike; the defaults are what both did before they
  // were options (a hardware profile may set them: HardwareProfile's fields
  // of the same names).
  // Reduce (and its ToHost) run as soon as their backward ends, beside the
  // backward of the units below (PyTorch DDP's overlap, Li et al. 2020);
  // false: they are issued at the stage's Sync, where the step waits for them.
  bool overlap_grad_reduce = true;
  // ZeRO-1/2: the step ends without waiting for the AllGather of the updated
  // parameters; the next step's first use of each unit waits for its own
  // (hidden under the next forward). false: the step ends when every
  // AllGather has finished.
  bool overlap_param_gather = false;
};

struct StepProgram {
  LayerPartition partition;
  std::vector<StepList> stages;  // one list per pipeline stage (all dp and tp ranks of a stage run the same list)
  int microbatches = 1;
  StepOptions options;
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

// The step of strategy `s` for a model of `layers` transformer layers: the
// schedule (schedule.hpp) through the passes above.
StepProgram build_step_program(const Strategy& s, int64_t layers, const StepOptions& opt = {});

// The passes (each takes one stage's list and returns the longer list).
StepList expand_units(const StepList& compute, const LayerPartition& part);
StepList add_grad_reductions(const StepList& in, const Strategy& s);
// The exchanges of a layer unit's pass, each right before the F or B it
// serves (not around the embedding or the head, which hold no attention and
// no experts). cp > 1: a KVF before every layer unit's F and a KVB before its
// B (the context-parallel ring of its attention). ep > 1 (mixture of
// experts): an ATAF (the dispatch and combine all-to-alls of the forward)
// before every layer unit's F and an ATAB (the backward's) before its B;
// every layer unit, as the cost model prices the mean layer
// (costmodel/moe_costs.hpp); the runtime exchanges inside the pass that
// follows (runtime/model/moe.hpp), in its MoE layers. With both, the ring
// comes first: KVF ATAF F ... KVB ATAB B.
StepList add_layer_exchanges(const StepList& in, const Strategy& s, const LayerPartition& part);
StepList add_param_gathers(const StepList& in, const Strategy& s, const LayerPartition& part, bool tied_here);
StepList add_step_tail(StepList in, const Strategy& s, const LayerPartition& part, int stage,
                       const StepOptions& opt = {});

// The largest number of (micro-batch, chunk) forwards whose backward has not
// run yet over one stage's list (schedule-level or unit-level): the
// activations the stage holds at its peak, in units of one chunk of one
// micro-batch.
int max_inflight(const StepList& actions);
// The same for one chunk's passes only (`chunk` = the virtual stage on this
// rank): the micro-batches whose pass through that chunk waits for its
// backward, e.g. the LM head's logits on the last stage's last chunk.
int max_inflight(const StepList& actions, int chunk);
// The largest sum of chunk_weight[chunk] over the (micro-batch, chunk)
// forwards whose backward has not run yet, e.g. the layers a stage holds the
// activations of at its peak when its chunks' layer counts differ (the
// interleaved schedule holds more of its first chunks in the warm-up).
double max_inflight_weighted(const StepList& actions, const std::vector<double>& chunk_weight);

// Compact one-line-per-stage form (tests, `--explain`).
std::string to_string(const StepProgram& p);

}  // namespace planner

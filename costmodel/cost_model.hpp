#pragma once
// The cost model as the simulator sees it: the duration of every action of the
// step program (strategies/step_program.hpp) on one representative rank of its
// pipeline stage. Per unit (embedding, a layer, the head with the loss; see
// strategies/partition.hpp): one micro-batch's forward and backward, the ZeRO-3
// gather, the gradient reduction, the offload copies and the post-step
// all-gather. Per virtual stage: the pipeline sends. Per stage: the optimizer
// and the step's end: the tied-embedding, replicated-range, loss and
// gradient-norm reductions.
// An interface, so tests can hand the simulator numbers they computed by hand
// (TableCostModel filled directly), and the analytic model (CostContext::build)
// fills the same table from a plan and a hardware profile.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "costmodel/hardware_profile.hpp"
#include "costmodel/layer_costs.hpp"
#include "specs/plan.hpp"
#include "strategies/partition.hpp"
#include "strategies/step_program.hpp"

namespace planner {

// One unit on its stage's representative rank. The simulator picks what the
// program's action asks for (Reduce: all-reduce or reduce-scatter by its flag).
struct UnitCost {
  double forward_seconds = 0;         // F: compute stream, one micro-batch, TP collectives included
  double backward_seconds = 0;        // B: recomputation included
  double forward_comm_seconds = 0;    // the TP-collective part of forward_seconds
  double backward_comm_seconds = 0;   // the TP-collective part of backward_seconds (recompute's included)
  double recompute_seconds = 0;       // the recomputation part of backward_seconds
  double gather_seconds = 0;          // Gather: ZeRO-3 all-gather of the unit's parameters over dp
  double fetch_seconds = 0;           // Gather, offload=all: the unit's shard host -> device, before the all-gather
  double all_reduce_seconds = 0;      // Reduce (ZeRO-0/1): all-reduce of the unit's gradients over dp
  double reduce_scatter_seconds = 0;  // Reduce (ZeRO-2/3): reduce-scatter of them into the rank's shard
  double to_host_seconds = 0;         // ToHost: the reduced gradient shard device -> host
  double cpu_adam_seconds = 0;        // Opt under offload: the CPU AdamW of the unit's shard (the CPU updates
                                      // unit after unit, each unit's ToDevice waits for its own update)
  double to_device_seconds = 0;       // ToDevice: the updated parameter shard host -> device
  double all_gather_seconds = 0;      // AllGather: ZeRO-1/2 all-gather of the updated parameters
  double cp_ring_forward_seconds = 0;   // KVF (cp > 1): the forward K/V ring's time not hidden by the attention blocks
  double cp_ring_backward_seconds = 0;  // KVB: the backward's (K/V and dK/dV; recomputation's forward ring included)
  double moe_a2a_forward_seconds = 0;   // ATAF (ep > 1): the forward's dispatch and combine all-to-alls
  double moe_a2a_backward_seconds = 0;  // ATAB: the backward's (recomputation's forward ones included)
  // Of forward_seconds and backward_seconds: the MoE layer's wait for the host
  // beyond its kernels and all-to-all (moe_costs.hpp moe_host_seconds).
  double moe_host_forward_seconds = 0, moe_host_backward_seconds = 0;
};

// Pipeline sends of one virtual stage (one micro-batch).
struct SendCost {
  double forward_seconds = 0;   // SF: activation to the next virtual stage (unused on the last)
  double backward_seconds = 0;  // SB: input gradient to the previous virtual stage (unused on the first)
};

struct StageCost {
  double optimizer_seconds = 0;      // Opt: fused AdamW on the GPU (compute stream)
  bool cpu_optimizer = false;        // offload: Opt runs on the CPU, unit by unit (UnitCost::cpu_adam_seconds)
  double tied_grad_seconds = 0;      // TiedReduce (tied embedding, pp > 1): the word-gradient all-reduce between
                                     // the first and the last stage
  double replica_reduce_seconds = 0; // ReplicaReduce (sp, tp > 1): the replicated parameters' gradients over tp
  // LossReduce and NormReduce: an all-reduce of one float over the group
  // (indexed by CommGroup; latency-bound, a tree of the group's hops).
  std::array<double, 4> scalar_reduce_seconds{};
  // The stage's step-end reductions (TiedReduce, ReplicaReduce, LossReduce,
  // NormReduce) in the order the program has them (add_step_tail), which
  // makespan_lower_bound reads. CostContext::build fills it; a table filled
  // by hand may leave it empty (the bound then counts none of them).
  StepList step_end_reductions;
  // The duration of one of those reductions on this stage.
  double reduction_seconds(const StepAction& a) const {
    return a.op == StepOp::TiedReduce      ? tied_grad_seconds
           : a.op == StepOp::ReplicaReduce ? replica_reduce_seconds
                                           : scalar_reduce_seconds[size_t(a.group)];
  }
  // A forward or backward pass runs this factor longer for the part of it that
  // overlaps the stage's DP/ZeRO collectives (HardwareProfile::compute_slowdown_beside_comm).
  double compute_slowdown_beside_comm = 1.0;
  // Meanwhile those collectives progress at 1/this of their own rate
  // (HardwareProfile::comm_slowdown_beside_compute).
  double comm_slowdown_beside_compute = 1.0;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // The layout the costs are for; the simulator checks that the program has the same.
  virtual const LayerPartition& partition() const = 0;
  int pp() const { return partition().pp(); }
  int vpp() const { return partition().vpp(); }
  virtual const UnitCost& unit(int u) const = 0;
  virtual const SendCost& send(int stage, int chunk) const = 0;
  virtual const StageCost& stage(int stage) const = 0;
};

// Costs held in a table. Units that cost the same may share one entry (the
// analytic model keeps one per stage and unit kind, so that building the table
// does not grow with the layers); asking for a unit's entry to write unshares it.
class TableCostModel : public CostModel {
 public:
  TableCostModel() : part_(1, 1, 1) { resize(part_); }
  explicit TableCostModel(const LayerPartition& part) : part_(part) { resize(part); }
  // Every cost zero, one entry per unit.
  void resize(const LayerPartition& part);
  const LayerPartition& partition() const override { return part_; }
  const UnitCost& unit(int u) const override { return units_[index_[size_t(u)]]; }
  const SendCost& send(int s, int c) const override { return sends_[size_t(c) * pp() + s]; }
  const StageCost& stage(int s) const override { return stages_[size_t(s)]; }
  UnitCost& unit(int u);
  SendCost& send(int s, int c) { return sends_[size_t(c) * pp() + s]; }
  StageCost& stage(int s) { return stages_[size_t(s)]; }
  // Hand-filled tests: every field of `total` (one micro-batch through chunk c
  // of stage s) divided evenly over the chunk's units.
  void set_chunk(int stage, int chunk, const UnitCost& total);
  // Shared entries: every cost zero, unit u costs entry(index[u]) of `entries`.
  void reset_shared(const LayerPartition& part, size_t entries, const std::vector<uint32_t>& index);
  UnitCost& entry(size_t i) { return units_[i]; }

 private:
  LayerPartition part_;
  std::vector<UnitCost> units_;   // distinct entries
  std::vector<uint32_t> index_;   // per unit, its entry
  std::vector<SendCost> sends_;   // virtual stage order: chunk * pp + stage
  std::vector<StageCost> stages_;
};

// Builds the analytic cost model of strategies for one model, cluster, seq and
// profile, caching what strategies share (per-layer times, topology links,
// layouts), so the search can build thousands cheaply.
class CostContext {
 public:
  CostContext(const ModelSpec& m, const ClusterSpec& c, int64_t seq, const HardwareProfile& p);
  ~CostContext();
  const HardwareProfile& profile() const;
  const Topology& topology() const;
  // Fills `out` for strategy `s` (strategy rules are assumed checked).
  void build(const Strategy& s, TableCostModel& out);
  // Per-layer pass times for the strategy's shape (cached).
  const PassTimes& layer_times(const Strategy& s);
  // One micro-batch's forward, backward and recompute of every unit of
  // pipeline stage `stage`, by op class, summed (a rank of that stage).
  OpTimes stage_op_times(const Strategy& s, int stage);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

TableCostModel build_cost_model(const Plan& plan, const HardwareProfile& p);

// A step's forward, backward and recompute kernels on a rank of pipeline stage
// `stage`, by op class (GEMM, attention, memory-bound, TP collectives): every
// unit of the stage times the micro-batches each rank runs. What `planner exec
// --kernels` measures beside it.
OpTimes step_op_times(const Plan& plan, const HardwareProfile& p, int stage);

}  // namespace planner

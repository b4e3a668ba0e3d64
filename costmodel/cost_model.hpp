#pragma once
// The cost model as the simulator sees it: per pipeline stage and model chunk,
// the duration of one micro-batch's forward and backward and of the
// communication around them; per stage, the optimizer step and what follows
// it. An interface, so tests can hand the simulator numbers they computed by
// hand (TableCostModel filled directly), and the analytic model
// (build_cost_model) fills the same table from a plan and a hardware profile.
#include <memory>
#include <vector>

#include "costmodel/hardware_profile.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/plan.hpp"

namespace planner {

struct ChunkCost {
  double forward_seconds = 0;         // compute stream, one micro-batch, TP collectives included
  double backward_seconds = 0;        // recomputation included
  double forward_comm_seconds = 0;    // the TP-collective part of forward_seconds
  double backward_comm_seconds = 0;   // the TP-collective part of backward_seconds (recompute's included)
  double recompute_seconds = 0;       // the recomputation part of backward_seconds
  double send_forward_seconds = 0;    // activation to the next virtual stage (unused on the last)
  double send_backward_seconds = 0;   // input gradient to the previous virtual stage (unused on the first)
  double grad_reduce_seconds = 0;     // DP reduction (all-reduce or reduce-scatter) of the chunk's gradients
  int grad_buckets = 1;               // in equal buckets, ready evenly through the backward
  bool reduce_every_microbatch = false;  // ZeRO-2/3 reduce after every micro-batch, else after the last
  bool overlap_grad_reduce = true;    // false: buckets start only after the chunk's last backward
  double param_gather_seconds = 0;    // ZeRO-3 all-gather of the chunk before each forward and backward
  double param_fetch_seconds = 0;     // offload=all: host->device copy of the shard before each forward and backward
  int layers = 1;                     // prefetch granularity for the two above
};

struct StageCost {
  double optimizer_seconds = 0;        // fused Adam on the GPU (compute stream)
  double cpu_optimizer_seconds = 0;    // CPU Adam (offload), replaces the GPU step
  double grad_offload_seconds = 0;     // device->host copy of the gradient shard, per bucket as reduced
  double param_upload_seconds = 0;     // host->device copy of the updated shard
  double param_allgather_seconds = 0;  // ZeRO-1/2 (and offload) all-gather of updated parameters
  double tied_grad_seconds = 0;        // tied embedding: gradient all-reduce between the first and last stage
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual int pp() const = 0;
  virtual int vpp() const = 0;
  virtual const ChunkCost& chunk(int stage, int chunk) const = 0;
  virtual const StageCost& stage(int stage) const = 0;
  // The global gradient-norm all-reduce that makes every stage wait for the slowest.
  virtual double grad_norm_sync_seconds() const = 0;
};

class TableCostModel : public CostModel {
 public:
  TableCostModel() = default;
  TableCostModel(int pp, int vpp) { resize(pp, vpp); }
  void resize(int pp, int vpp);
  int pp() const override { return pp_; }
  int vpp() const override { return vpp_; }
  const ChunkCost& chunk(int s, int c) const override { return chunks_[size_t(c) * pp_ + s]; }
  const StageCost& stage(int s) const override { return stages_[s]; }
  double grad_norm_sync_seconds() const override { return sync_; }
  ChunkCost& chunk(int s, int c) { return chunks_[size_t(c) * pp_ + s]; }
  StageCost& stage(int s) { return stages_[s]; }
  void set_grad_norm_sync_seconds(double v) { sync_ = v; }

 private:
  int pp_ = 1, vpp_ = 1;
  std::vector<ChunkCost> chunks_;  // virtual stage order: chunk * pp + stage
  std::vector<StageCost> stages_;
  double sync_ = 0;
};

// Builds the analytic cost model of strategies for one model, cluster, seq and
// profile, caching what strategies share (per-layer times, topology links), so
// the search can build thousands cheaply.
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

TableCostModel build_cost_model(const Plan& plan, const HardwareProfile& p);

}  // namespace planner

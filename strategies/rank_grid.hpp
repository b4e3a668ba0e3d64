#pragma once
// The rank grid: pure math from (dp, pp, tp) to every rank's coordinates and
// every process group's members. Shared by the simulator (placement on the
// topology) and the runtime (NCCL communicators are built from these groups).
//
// Order: tp varies fastest, then pp, then dp (Megatron-LM's default), so a
// tensor-parallel group is consecutive ranks and stays inside a node whenever
// tp divides the GPUs per node:
//   rank = (dp_index * pp + pp_index) * tp + tp_index
//
// Worked example, dp=2, pp=2, tp=2 (8 ranks):
//   rank: 0 1 2 3 4 5 6 7
//   dp:   0 0 0 0 1 1 1 1
//   pp:   0 0 1 1 0 0 1 1
//   tp:   0 1 0 1 0 1 0 1
//   tp groups {0,1} {2,3} {4,5} {6,7}; pp groups {0,2} {1,3} {4,6} {5,7};
//   dp groups {0,4} {1,5} {2,6} {3,7}.
//
// Expert parallelism (ep, dividing dp) splits each data-parallel group as
// Megatron-core does (parallel_state.py with the expert tensor-parallel size
// equal to tp): the expert-model-parallel group is ep consecutive dp indices,
// the expert-data-parallel group (which reduces the experts' gradients) the dp
// indices equal modulo ep. Worked example, dp=4, pp=1, tp=2, ep=2 (8 ranks):
//   rank: 0 1 2 3 4 5 6 7
//   dp:   0 0 1 1 2 2 3 3
//   ep groups {0,2} {1,3} {4,6} {5,7}; expert-dp groups {0,4} {1,5} {2,6} {3,7}.
// Not modelled: an expert tensor-parallel size other than tp, and ep across
// the tp or pp dimensions.
#include <vector>

namespace planner {

struct RankCoord {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const RankCoord&) const = default;
};

class RankGrid {
 public:
  RankGrid(int dp, int pp, int tp);  // throws InputError for a degree < 1

  int world() const { return dp_ * pp_ * tp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int tp() const { return tp_; }

  RankCoord coord(int rank) const;
  int rank(const RankCoord& c) const;

  // Members of the group that `rank` belongs to, in increasing rank order.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;  // ordered by stage
  std::vector<int> dp_group(int rank) const;

  // Every group of a kind, for building communicators once.
  std::vector<std::vector<int>> all_tp_groups() const;
  std::vector<std::vector<int>> all_pp_groups() const;
  std::vector<std::vector<int>> all_dp_groups() const;

  // Expert parallelism of degree `ep` (throws InputError unless ep divides dp):
  // the expert-model-parallel group (the all-to-all's members) and the
  // expert-data-parallel group (the experts' gradient reduction) of `rank`.
  std::vector<int> ep_group(int rank, int ep) const;
  std::vector<int> expert_dp_group(int rank, int ep) const;
  std::vector<std::vector<int>> all_ep_groups(int ep) const;
  std::vector<std::vector<int>> all_expert_dp_groups(int ep) const;

 private:
  int dp_, pp_, tp_;
};

}  // namespace planner

#pragma once
// `planner compare`: search each cluster, keep its best plan, rank the clusters
// by cost (when prices are given), else by time to train --tokens, else by
// throughput (for a fixed token count the two rank alike). The question it
// answers: which hardware to rent.
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/plan_rank.hpp"

namespace planner {

struct CompareRow {
  ClusterSpec cluster;
  SearchStats stats;
  std::optional<RankedPlan> best;     // empty: nothing fits on this cluster
  std::optional<TrainCost> train;     // with --tokens
  int64_t headroom_bytes() const {    // GPU capacity minus the predicted peak
    return best ? best->prediction.memory.gpu_capacity_bytes - best->prediction.memory.per_gpu_peak_bytes : 0;
  }
};

struct CompareResult {
  Objective objective = Objective::Throughput;  // Cost with prices, Time with --tokens, else Throughput
  int64_t global_batch = 0, seq = 0;
  std::vector<CompareRow> rows;  // best first; clusters where nothing fits last, in the order given
};

// Searches `req` (model, seq, profile, engine) on each cluster with `global_batch`
// sequences per step. InputError for a bad request or a cluster without a price
// when a prices file is given.
CompareResult compare_clusters(SearchRequest req, const std::vector<ClusterSpec>& clusters, int64_t global_batch,
                               const TrainCostOptions& cost);

// The default --global-batch: the least common multiple of the GPU counts
// (every cluster can run pure data parallelism), at most 65536.
int64_t default_compare_batch(const std::vector<ClusterSpec>& clusters);

std::string compare_table(const CompareResult& r);
// {"objective", "global_batch", "seq", "clusters": [{"rank", "cluster", "gpu",
//  "gpus", "fits", "strategy", "step_seconds", "tokens_per_second", "mfu",
//  "per_gpu_peak_bytes", "gpu_capacity_bytes", "memory_headroom_bytes",
//  "train"?, "plan"}]}
nlohmann::json compare_json(const CompareResult& r);

}  // namespace planner

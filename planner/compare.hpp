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
  int64_t global_batch = 0;           // sequences per step on this cluster
  int64_t headroom_bytes() const {    // GPU capacity minus the predicted peak
    return best ? best->prediction.memory.gpu_capacity_bytes - best->prediction.memory.per_gpu_peak_bytes : 0;
  }
};

struct CompareResult {
  Objective objective = Objective::Throughput;  // Cost with prices, Time with --tokens, else Throughput
  int64_t global_batch = 0, seq = 0;  // global_batch 0: each cluster has its own (CompareRow::global_batch)
  std::vector<std::string> assumed;   // defaults that shaped the answer (the `assumed:` line)
  std::vector<CompareRow> rows;  // best first; clusters where nothing fits last, in the order given
  BandKind band = BandKind::Dense;  // which held-out record its step times are judged by (step_time_band)
};

// Searches `req` (model, seq, profile, engine) on each cluster with `global_batch`
// sequences per step. InputError for a bad request or a cluster without a price
// when a prices file is given.
CompareResult compare_clusters(SearchRequest req, const std::vector<ClusterSpec>& clusters, int64_t global_batch,
                               const TrainCostOptions& cost);
// The same with one global batch per cluster (batches[i] for clusters[i]).
CompareResult compare_clusters(SearchRequest req, const std::vector<ClusterSpec>& clusters,
                               const std::vector<int64_t>& batches, const TrainCostOptions& cost);

// The least common multiple of the GPU counts (every cluster can run pure data
// parallelism with it), or 0 when it is above 65536.
int64_t default_compare_batch(const std::vector<ClusterSpec>& clusters);

// The default --global-batch of compare (a pretraining question): about
// kPretrainTokensPerStep tokens per step, the same multiple of the lcm of the
// GPU counts on every cluster while that lcm times seq is at most twice that;
// otherwise (1,000 H100s beside 1,024 A100s: lcm 128,000) each cluster its
// own multiple of its GPU count nearest it. `rule` says which, for `assumed:`.
std::vector<int64_t> default_compare_batches(const std::vector<ClusterSpec>& clusters, int64_t seq, std::string* rule);

std::string compare_table(const CompareResult& r);
// {"objective", "global_batch", "seq", "clusters": [{"rank", "cluster", "gpu",
//  "gpus", "fits", "strategy", "step_seconds", "tokens_per_second", "mfu",
//  "per_gpu_peak_bytes", "gpu_capacity_bytes", "memory_headroom_bytes",
//  "train"?, "plan"}]}
nlohmann::json compare_json(const CompareResult& r);

}  // namespace planner

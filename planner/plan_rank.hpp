#pragma once
// `planner plan --objective throughput|time|cost` over one or more clusters
// (`--gpus 8xA100-80GB,8xH100`): the plans of every search in one list, best
// first, with the time and money to train --tokens.
//
// For a fixed token count, time = tokens / throughput, so `time` ranks as
// `throughput` always. Within one cluster the cost is GPU-hours x one price,
// GPU-hours = time x GPUs, so `cost` ranks as `throughput` too; it differs
// only between clusters (other GPU counts, other prices per GPU-hour).
#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/search.hpp"
#include "planner/train_cost.hpp"

namespace planner {

enum class Objective { Throughput, Time, Cost };
const char* to_string(Objective o);
Objective parse_objective(std::string_view text);  // InputError naming the choices

// InputError when `o` needs what was not given: time needs --tokens, cost
// needs --tokens and a price for every cluster's GPU.
void check_objective(Objective o, const TrainCostOptions& cost, const std::vector<ClusterSpec>& clusters);

struct ClusterSearch {
  ClusterSpec cluster;
  SearchResult result;
};

struct RankedEntry {
  const RankedPlan* plan = nullptr;  // into one ClusterSearch::result.plans
  size_t search = 0;                 // which ClusterSearch
  std::optional<TrainCost> train;    // with --tokens
};

// Every plan of every search, best first by `o`; ties keep the search order.
std::vector<RankedEntry> rank_by_objective(const std::vector<ClusterSearch>& searches, Objective o,
                                           const TrainCostOptions& cost);

// Ties (issue 30): two plans predicted closer than the model's own measured
// error are not ordered by the prediction. `threshold_pct` is the GPU's
// held-out step-time MAPE (docs/UNCERTAINTY.md, StepTimeBand::mape_pct); a GPU
// without held-out runs has half its datasheet band's width instead. `reason`
// says which, for the tables.
struct TieRule {
  double threshold_pct = 0;
  std::string reason;
};
TieRule tie_rule(const GpuSpec& gpu, BandKind kind = BandKind::Dense);  // kind: its record (step_time_band)

// The tie group (1-based) of each of the first `n` plans of `ranked`: a group
// starts at the best plan not yet in one (its leader) and holds the plans after
// it that are at most the larger of the two GPUs' thresholds worse than the
// leader by `o` (slower for throughput and time: leader tokens/s over theirs,
// less one; dearer for cost). A plan alone is a group of one. The order of
// `ranked` is never changed.
std::vector<int> tie_groups(const std::vector<RankedEntry>& ranked, Objective o, size_t n);
// The same over plain values where smaller is better (step seconds): `values`
// in rank order, one threshold per value.
std::vector<int> tie_groups(const std::vector<double>& values, const std::vector<double>& threshold_pct);

// Human output. One cluster: the search's table, then (with --tokens) the days,
// GPU-hours and cost of each plan. Several: one summary line per cluster and
// one table of the first `top` plans over all of them.
std::string ranked_table(const std::vector<ClusterSearch>& searches, const std::vector<RankedEntry>& ranked,
                         Objective o, size_t top, bool explain);

// One cluster: search_result_json plus "objective", "ties" ({"threshold_pct",
// "reason"} per GPU type) and, per plan, "train", "tie_group" and "tied_with"
// (the ranks of the other plans of its group).
// Several: {"objective", "clusters": [{"cluster", search stats...}], "plans":
// [{"rank", "cluster", ..., "train"?}]} over the first `top` plans.
nlohmann::json ranked_json(const std::vector<ClusterSearch>& searches, const std::vector<RankedEntry>& ranked,
                           Objective o, size_t top);

}  // namespace planner

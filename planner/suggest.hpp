#pragma once
// A way out (issue 28): the cheapest single changes that make a plan that does
// not fit fit (memory), and the smallest cluster that fits a model (plan).
#include <optional>
#include <string>
#include <vector>

#include "costmodel/engines.hpp"
#include "costmodel/hardware_profile.hpp"
#include "specs/plan.hpp"
#include "planner/search.hpp"

namespace planner {

struct FitChange {
  std::string change;        // "ckpt=full", "zero=3", "mbs=2 (gas=16)", "16 GPUs (2x8xH100)"
  Plan plan;                 // the plan with the change
  int64_t peak_bytes = 0;    // its predicted GPU peak
  double step_seconds = 0;   // its predicted step time
};

// The plan with more checkpointing, a higher ZeRO stage, optimizer offload
// and a smaller micro-batch (each alone and together), on this cluster or on
// two or four times the GPUs, keeping the global batch, sequence and model;
// those that pass check_compat and fit, least GPU time per step (step time x
// GPUs) first, at most `n`.
std::vector<FitChange> cheapest_fixes(const Plan& plan, const HardwareProfile& profile, Engine engine, size_t n = 3);
// The lines memory prints under a DOES NOT FIT verdict ("" when it fits).
std::string fixes_text(const Plan& plan, const std::vector<FitChange>& fixes, double step_seconds);

// When nothing fits on req.cluster: the same question on twice the GPUs, then
// four times, ... (a full node first, then more nodes), up to 64 times or
// 2^20 GPUs; the first cluster where some plan fits and that plan. Without a
// given batch (`batch_per_gpu` > 0) the global batch scales with the GPUs.
struct LargerCluster {
  ClusterSpec cluster;
  int64_t global_batch = 0;
  RankedPlan best;
};
std::optional<LargerCluster> smallest_cluster_that_fits(SearchRequest req, int64_t batch_per_gpu);
// The line plan prints with it, or the one saying that even 64 times the GPUs do not fit.
std::string larger_cluster_text(const SearchRequest& req, const std::optional<LargerCluster>& found);

}  // namespace planner

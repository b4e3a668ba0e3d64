#pragma once
// The largest model of a family that fits on a cluster with any strategy.
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/memory_model.hpp"
#include "specs/plan.hpp"

namespace planner {

struct MaxModelRequest {
  std::string gpus;                  // cluster spec string or JSON file
  std::string family = "gpt";
  Offload max_offload = Offload::None;  // the most offload a strategy may use
  int64_t seq = 2048;
  int mbs = 1;
  std::optional<int64_t> host_memory_bytes;
  std::string profile_path;          // hardware profile (empty: the catalog's for the GPU)
  bool profile_any = false;          // --profile-any: a profile of another GPU is applied (check_profile_gpu)
  std::string headroom;              // --headroom (empty: the profile's)
  Finetune finetune{};               // --finetune: LoRA/QLoRA on a frozen base instead of full training
};

struct FitCandidate {
  Plan plan;
  MemoryReport memory;
};

struct MaxModelResult {
  std::optional<FitCandidate> best;        // the largest model that fits, with its chosen strategy
  std::optional<FitCandidate> next_up;     // the next size up with the strategy that comes closest
  int strategies_per_model = 0;            // strategies tried for each size
  int models_tried = 0;
  std::string refused;                     // the first rule check_compat refused a candidate with ("" if none)
  ClusterSpec cluster;
  std::string family;
};

// Every strategy of the search space for max-model on `world` GPUs at micro-batch
// `mbs`: every dp*tp*pp factorization the model allows, ZeRO 0-3, offload up to
// `max_offload`, every checkpointing mode, sequence parallel with tp > 1; 1F1B
// with gas = pp so every stage has work. Illegal combinations are left out.
std::vector<Strategy> fit_strategies(const ModelSpec& m, const ClusterSpec& c, Offload max_offload, int mbs);

// Among the strategies that fit, the one preferred for training: least
// recomputation, least offload, least sharding, least model parallelism (in that
// order) -- the cheapest in time for the same model when memory allows.
// Returns the plan that comes closest (smallest peak over the usable memory) when none fits.
// `profile` (null: the GPU's default) gives the capacity, headroom and what the memory model assumes.
FitCandidate choose_fit(const ModelSpec& m, const ClusterSpec& c, const std::vector<Strategy>& strategies,
                        int64_t seq, bool* fits, const HardwareProfile* profile = nullptr);

MaxModelResult find_max_model(const MaxModelRequest& req);
nlohmann::json max_model_json(const MaxModelResult& r);
std::string max_model_table(const MaxModelResult& r);

}  // namespace planner

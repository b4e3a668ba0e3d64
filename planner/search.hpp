#pragma once
// `planner plan` as a library function: enumerate every strategy for a model
// on a cluster, drop what does not fit or is not legal, rank by simulated
// throughput, explain why the best of each family lost. The CLI (cmd_plan.cpp)
// parses options into a SearchRequest and prints search_result_table / _json.
//
// Speed: every candidate gets a lower bound on its step time from the cached
// per-layer costs (makespan_lower_bound, never above the simulated time);
// candidates are visited in increasing bound and simulated only while the bound
// beats the K-th best time found (and, with explain, the best of a family it
// belongs to). Pruning by a valid lower bound cannot drop the best plan.
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "costmodel/hardware_profile.hpp"
#include "costmodel/predict.hpp"

namespace planner {

// Context parallelism (cp) is searched where seq is at least this many tokens
// (docs/SIMULATOR.md, "The search").
constexpr int64_t kCpSearchMinSeq = 8192;

// `--allow LIST` of plan and compare: extra choices the search leaves out by
// default; today only "fp8". Sets them on `req`; throws InputError on others.
struct SearchRequest;
void apply_allow_option(const std::string& allow, SearchRequest& req);

struct SearchRequest {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t seq = 0;
  int64_t global_batch = 0;
  std::string profile_path;                 // empty: the catalog default for the GPU
  std::optional<HardwareProfile> profile;   // when set, used instead of profile_path
  bool profile_any = false;                 // --profile-any: a profile_path of another GPU is applied (with a note)
  std::string headroom;                     // --headroom applied to the profile (empty: the profile's)
  int top_k = 5;
  bool explain = false;
  bool search_fp32 = true;                  // also try fp32 training
  // Also try precision=fp8 where the GPU has FP8 (`--allow fp8`): opt-in, so
  // that `plan` answers stay comparable with earlier validation.
  bool search_fp8 = false;
  int max_vpp = 8;                          // interleaved: virtual stages per rank to try
  bool prune = true;                        // false: simulate everything that fits (tests compare the two)
  Engine engine = Engine::Ours;             // keep what this engine can run; its memory decides what fits
  EngineEnv engine_env;                     // what is installed beside it (--with-te)
  Finetune finetune{};                      // --finetune: every candidate trains adapters on a frozen base
  bool runnable = false;                    // --runnable (Engine::Ours): only what `planner exec` runs (specs/runtime_gap.hpp)
  // Called now and then with the fraction done and the phase ("bounding", "simulating").
  std::function<void(double fraction, std::string_view phase)> progress;
};

struct RankedPlan {
  Plan plan;
  StepPrediction prediction;
  // With Engine::Ours: why `planner exec` does not run it (specs/runtime_gap.hpp), empty when it does.
  std::string exec_gap;
};

struct FamilyExplanation {
  std::string family;       // "pure DP", "ZeRO-3", "TP", "PP", "offload"
  std::string definition;   // which strategies belong to it
  int64_t candidates = 0;   // strategies of the family in the space
  bool fits = false;        // some member fits
  bool is_winner = false;   // the overall best plan belongs to the family
  std::optional<RankedPlan> best;       // best fitting member
  std::optional<RankedPlan> smallest;   // least-memory member, when none fits
  std::string reason;       // one line: why it lost or did not fit
};

struct SearchStats {
  int64_t enumerated = 0;      // strategies in the space (all legal by construction)
  int64_t memory_checked = 0;  // memory model run
  int64_t not_fitting = 0;     // of those, too big for the GPU or host memory
  int64_t simulated = 0;       // step simulated
  int64_t pruned = 0;          // dropped by the lower bound without simulation
  int64_t rejected = 0;        // refused by check_compat (0 unless the space and the rules disagree)
  int64_t engine_refused = 0;  // strategies the requested engine cannot run (engine_gap)
  int64_t too_long = 0;        // above kMaxSimulatedChunks (strategies/step_program.hpp): not simulated
  double wall_seconds = 0;
  double candidates_per_second() const { return wall_seconds > 0 ? enumerated / wall_seconds : 0; }
};

struct SearchResult {
  SearchStats stats;
  std::vector<RankedPlan> plans;               // best first, at most top_k
  std::vector<FamilyExplanation> families;     // filled with explain
  std::vector<std::string> notes;
};

// Throws InputError for an impossible request (no GPUs, global batch < 1, ...).
SearchResult search_plans(const SearchRequest& req);

// {"candidates_evaluated", "candidates_simulated", "pruned_by_bound", "not_fitting",
//  "wall_seconds", "plans": [{"rank", "strategy", <prediction_json keys>}...],
//  "explain": [{"family", "fits", "reason", "best"?}...]}
nlohmann::json search_result_json(const SearchResult& r);
// Human table: the top plans with memory and time breakdowns; with explain, a
// line per family.
std::string search_result_table(const SearchResult& r, bool explain);
// One plan of the list as search_result_json writes it ("rank", "strategy",
// "cluster", "global_batch", "seq" and the prediction_json keys).
nlohmann::json ranked_plan_json(const RankedPlan& p, int rank);
// The compact strategy text of the tables (keys that differ from defaults).
std::string short_strategy(const Strategy& s);

}  // namespace planner

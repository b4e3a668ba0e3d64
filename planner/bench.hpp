#pragma once
// `planner bench`: how fast the strategy search is. Runs the full search
// (default: llama-2-70b on 128x8xH100, seq 4096, global batch 1024, the
// project's target of under 1 s on one core) a few times and reports the wall
// time and candidates per second.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "planner/search.hpp"

namespace planner {

struct BenchRequest {
  std::string model = "llama-2-70b";
  std::string gpus = "128x8xH100";
  int64_t seq = 4096;
  int64_t global_batch = 1024;
  int repeats = 3;
  bool explain = false;
  bool prune = true;  // false: simulate every fitting strategy (what the lower bound saves)
};

struct BenchResult {
  BenchRequest request;
  SearchStats stats;                 // of the fastest run
  double best_wall_seconds = 0, mean_wall_seconds = 0;
  double candidates_per_second = 0;  // enumerated / best wall time
  std::string best_strategy;
  std::string best_strategy_short;   // short_strategy(): the keys that differ from the defaults
  double best_step_seconds = 0;
};

BenchResult run_bench(const BenchRequest& req);
std::string bench_text(const BenchResult& r);
nlohmann::json bench_json(const BenchResult& r);

}  // namespace planner

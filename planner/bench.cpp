#include "planner/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "strategies/errors.hpp"

namespace planner {

BenchResult run_bench(const BenchRequest& req) {
  if (req.repeats < 1) throw InputError("bench: repeats must be at least 1");
  SearchRequest s;
  s.model = resolve_model(req.model);
  s.cluster = resolve_cluster(req.gpus);
  s.seq = req.seq;
  s.global_batch = req.global_batch;
  s.explain = req.explain;
  s.prune = req.prune;
  BenchResult out;
  out.request = req;
  double total = 0;
  out.best_wall_seconds = 1e300;
  for (int i = 0; i < req.repeats; ++i) {
    const SearchResult r = search_plans(s);
    total += r.stats.wall_seconds;
    if (r.stats.wall_seconds < out.best_wall_seconds) {
      out.best_wall_seconds = r.stats.wall_seconds;
      out.stats = r.stats;
      if (!r.plans.empty()) {
        out.best_strategy = r.plans.front().plan.strategy.to_string();
        out.best_strategy_short = short_strategy(r.plans.front().plan.strategy);
        out.best_step_seconds = r.plans.front().prediction.step_seconds;
      }
    }
  }
  out.mean_wall_seconds = total / req.repeats;
  out.candidates_per_second = out.stats.enumerated / out.best_wall_seconds;
  return out;
}

std::string bench_text(const BenchResult& r) {
  const auto& q = r.request;
  return fmt::format(
      "planner plan --model {} --gpus {} --seq {} --global-batch {}{}{}\n"
      "  wall time        {:.3f} s (best of {}), mean {:.3f} s, one thread\n"
      "  candidates       {} evaluated, {:.0f} per second\n"
      "                   {} memory-checked, {} did not fit, {} simulated, {} pruned by the lower bound\n"
      "  best plan        {} ({:.3f} s per step)\n",
      q.model, q.gpus, q.seq, q.global_batch, q.explain ? " --explain" : "",
      q.prune ? "" : " (lower-bound pruning off: every fitting strategy simulated)", r.best_wall_seconds, q.repeats,
      r.mean_wall_seconds, r.stats.enumerated, r.candidates_per_second, r.stats.memory_checked, r.stats.not_fitting,
      r.stats.simulated, r.stats.pruned, r.best_strategy, r.best_step_seconds);
}

nlohmann::json bench_json(const BenchResult& r) {
  return {{"model", r.request.model},
          {"gpus", r.request.gpus},
          {"seq", r.request.seq},
          {"global_batch", r.request.global_batch},
          {"repeats", r.request.repeats},
          {"explain", r.request.explain},
          {"prune", r.request.prune},
          {"wall_seconds", r.best_wall_seconds},
          {"mean_wall_seconds", r.mean_wall_seconds},
          {"candidates_evaluated", r.stats.enumerated},
          {"candidates_per_second", r.candidates_per_second},
          {"candidates_memory_checked", r.stats.memory_checked},
          {"candidates_not_fitting", r.stats.not_fitting},
          {"candidates_simulated", r.stats.simulated},
          {"pruned_by_bound", r.stats.pruned},
          {"best_strategy", r.best_strategy},
          {"best_strategy_short", r.best_strategy_short},
          {"best_step_seconds", r.best_step_seconds}};
}

}  // namespace planner

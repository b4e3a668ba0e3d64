// One run's configuration (runtime/run_config.hpp): the checks that need no
// plan, and the two ways to build it.
#include "runtime/run_config.hpp"

#include "strategies/errors.hpp"

namespace planner::rt {

const char* to_string(MoeRouting r) { return r == MoeRouting::Balanced ? "balanced" : "learned"; }

MoeRouting parse_moe_routing(const std::string& text, const std::string& what) {
  if (text == "learned") return MoeRouting::Learned;
  if (text == "balanced") return MoeRouting::Balanced;
  throw InputError(what + " '" + text.substr(0, 40) +
                   "' is not one of learned (the router's own top-k) or balanced (every expert the same rows, a "
                   "benchmark mode)");
}

void check_run_options(const RunOptions& o) {
  if (o.steps < 1) throw InputError("--steps must be at least 1, got " + std::to_string(o.steps));
  if (o.warmup < 0) throw InputError("--warmup must not be negative, got " + std::to_string(o.warmup));
  if (o.device != "auto" && o.device != "cuda" && o.device != "gpu" && o.device != "cpu")
    throw InputError("--device '" + o.device + "' is not one of auto|cuda|cpu");
}

RunConfig make_run_config(Plan plan, RunOptions options) {
  check_run_options(options);
  if (plan.seq <= 0) throw InputError("plan: seq must be positive");
  return RunConfig{std::move(plan), std::move(options)};
}

RunConfig make_run_config(const ModelSpec& model, const Strategy& strategy, int64_t seq) {
  Plan p;
  p.model = model;
  p.strategy = strategy;
  p.seq = seq;
  p.global_batch = strategy.global_batch();
  RunConfig c;
  c.plan = std::move(p);
  return c;
}

}  // namespace planner::rt

// JSON and table output of the strategy search.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "planner/search.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

std::string pct(double part, double whole) { return fmt::format("{:.0f}%", whole > 0 ? 100 * part / whole : 0.0); }

}  // namespace

nlohmann::json ranked_plan_json(const RankedPlan& p, int rank) {
  nlohmann::json j = prediction_json(p.prediction);
  j["rank"] = rank;
  j["strategy"] = p.plan.strategy.to_string();
  j["cluster"] = p.plan.cluster.name;
  j["global_batch"] = p.plan.global_batch;
  j["seq"] = p.plan.seq;
  j["gpu_calibrated"] = !p.plan.cluster.gpu.calibrated.empty();
  const StepTimeBand band = step_time_band(p.plan.cluster.gpu, band_kind(p.plan));
  j["step_seconds_band"] = {p.prediction.step_seconds * band.low, p.prediction.step_seconds * band.high};
  j["tokens_per_second_band"] = {p.prediction.tokens_per_second / band.high, p.prediction.tokens_per_second / band.low};
  if (!p.exec_gap.empty()) j["exec_gap"] = p.exec_gap;  // `planner exec` does not run it (Engine::Ours)
  return j;
}

std::string short_strategy(const Strategy& s) {
  std::string out = fmt::format("dp={},tp={},pp={}", s.dp, s.tp, s.pp);
  if (s.cp > 1) out += fmt::format(",cp={}", s.cp);
  if (s.zero) out += fmt::format(",zero={}", s.zero);
  if (s.offload != Offload::None) out += fmt::format(",offload={}", to_string(s.offload));
  if (s.ckpt != Ckpt::None) out += fmt::format(",ckpt={}", to_string(s.ckpt));
  out += fmt::format(",mbs={},gas={}", s.mbs, s.gas);
  if (s.pp > 1) out += fmt::format(",schedule={}", to_string(s.schedule));
  if (s.vpp > 1) out += fmt::format(",vpp={}", s.vpp);
  if (s.sp) out += ",sp=1";
  if (s.ep > 1) out += fmt::format(",ep={}", s.ep);
  if (s.precision != Precision::BF16) out += fmt::format(",precision={}", to_string(s.precision));
  return out;
}

nlohmann::json search_result_json(const SearchResult& r) {
  nlohmann::json j;
  j["candidates_evaluated"] = r.stats.enumerated;
  j["candidates_memory_checked"] = r.stats.memory_checked;
  j["candidates_not_fitting"] = r.stats.not_fitting;
  j["candidates_simulated"] = r.stats.simulated;
  j["pruned_by_bound"] = r.stats.pruned;
  j["rejected"] = r.stats.rejected;
  j["candidates_engine_cannot_run"] = r.stats.engine_refused;
  j["wall_seconds"] = r.stats.wall_seconds;
  j["candidates_per_second"] = r.stats.candidates_per_second();
  j["plans"] = nlohmann::json::array();
  for (size_t i = 0; i < r.plans.size(); ++i) j["plans"].push_back(ranked_plan_json(r.plans[i], int(i) + 1));
  if (!r.families.empty()) {
    j["explain"] = nlohmann::json::array();
    for (const auto& f : r.families) {
      nlohmann::json e{{"family", f.family}, {"definition", f.definition}, {"candidates", f.candidates},
                       {"fits", f.fits},     {"is_winner", f.is_winner},   {"reason", f.reason}};
      if (f.best) e["best"] = ranked_plan_json(*f.best, 0);
      if (f.smallest) e["smallest"] = ranked_plan_json(*f.smallest, 0);
      j["explain"].push_back(e);
    }
  }
  j["notes"] = r.notes;
  return j;
}

std::string search_result_table(const SearchResult& r, bool explain) {
  std::string out = fmt::format(
      "{} strategies evaluated in {:.3f} s ({:.0f}/s): {} memory-checked, {} did not fit, {} simulated, {} pruned by "
      "a lower bound\n\n",
      r.stats.enumerated, r.stats.wall_seconds, r.stats.candidates_per_second(), r.stats.memory_checked,
      r.stats.not_fitting, r.stats.simulated, r.stats.pruned);
  if (!r.plans.empty()) {
    const Plan& p0 = r.plans.front().plan;
    out += fmt::format("{} on {} ({} GPUs), seq {}, global batch {}\n\n", p0.model.name, p0.cluster.name,
                       p0.cluster.world(), p0.seq, p0.global_batch);
    out += fmt::format("{:>3}  {:<72} {:>9} {:>11} {:>8} {:>6} {:>17}  {}\n", "#", "strategy", "step s", "tokens/s",
                       "TFLOP/s", "MFU", "GPU memory", "time: compute/comm/bubble/opt/offload");
    for (size_t i = 0; i < r.plans.size(); ++i) {
      const auto& p = r.plans[i];
      const auto& q = p.prediction;
      out += fmt::format("{:>3}  {:<72} {:>9.3f} {:>11.0f} {:>8.1f} {:>5.1f}% {:>8}/{:<8}  {}/{}/{}/{}/{}\n", i + 1,
                         short_strategy(p.plan.strategy), q.step_seconds, q.tokens_per_second, q.tflops_per_gpu,
                         100 * q.mfu, format_bytes(double(q.memory.per_gpu_peak_bytes)),
                         format_bytes(double(q.memory.gpu_capacity_bytes)), pct(q.compute_seconds, q.step_seconds),
                         pct(q.exposed_comm_seconds, q.step_seconds), pct(q.bubble_seconds, q.step_seconds),
                         pct(q.optimizer_seconds, q.step_seconds), pct(q.offload_seconds, q.step_seconds));
    }
    const auto& best = r.plans.front().prediction.memory;
    out += "\nbest plan, memory per GPU on its fullest stage:";
    for (int c = 0; c < kMemCategories; ++c)
      out += fmt::format(" {} {}", to_string(MemCategory(c)), format_bytes(double(best.peak_breakdown()[c])));
    out += "\n";
  }
  if (explain && !r.families.empty()) {
    out += "\nwhy not another family:\n";
    for (const auto& f : r.families) {
      out += fmt::format("  {:<8} {}\n", f.family + ":", f.reason);
      if (f.best && !f.is_winner) out += fmt::format("  {:<8} best: {}\n", "", short_strategy(f.best->plan.strategy));
    }
  }
  for (const auto& n : r.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace planner

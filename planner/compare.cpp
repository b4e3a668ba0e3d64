#include "planner/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

int64_t default_compare_batch(const std::vector<ClusterSpec>& clusters) {
  int64_t l = 1;
  for (const auto& c : clusters) {
    l = std::lcm(l, int64_t(c.world()));
    if (l > 65536) {
      l = 0;
      for (const auto& d : clusters) l = std::max<int64_t>(l, d.world());
      return l;
    }
  }
  return l;
}

CompareResult compare_clusters(SearchRequest req, const std::vector<ClusterSpec>& clusters, int64_t global_batch,
                               const TrainCostOptions& cost) {
  if (clusters.empty()) throw InputError("--gpus: no cluster given");
  CompareResult r;
  r.objective = cost.tokens && cost.has_price() ? Objective::Cost : cost.tokens ? Objective::Time : Objective::Throughput;
  check_objective(r.objective, cost, clusters);
  r.global_batch = global_batch;
  r.seq = req.seq;
  req.global_batch = global_batch;
  req.top_k = 1;
  req.explain = false;
  std::vector<ClusterSearch> searches;
  for (const auto& c : clusters) {
    req.cluster = c;
    searches.push_back({c, search_plans(req)});
  }
  const std::vector<RankedEntry> ranked = rank_by_objective(searches, r.objective, cost);
  for (const auto& e : ranked) {
    const auto& s = searches[e.search];
    r.rows.push_back({s.cluster, s.result.stats, *e.plan, e.train});
  }
  for (const auto& s : searches)
    if (s.result.plans.empty()) r.rows.push_back({s.cluster, s.result.stats, std::nullopt, std::nullopt});
  return r;
}

namespace {

std::string days_text(double days) {
  return days >= 10 ? fmt::format("{:.0f} d", days) : days >= 1 ? fmt::format("{:.1f} d", days)
                                                                 : fmt::format("{:.1f} h", days * 24);
}

}  // namespace

std::string compare_table(const CompareResult& r) {
  const bool has_tokens = std::any_of(r.rows.begin(), r.rows.end(), [](const CompareRow& w) { return w.train.has_value(); });
  std::string out = fmt::format("Best plan per cluster, global batch {}, seq {}; ranked by {}", r.global_batch, r.seq,
                                to_string(r.objective));
  if (has_tokens)
    for (const auto& w : r.rows)
      if (w.train) {
        out += fmt::format(" to train {} tokens", format_tokens(w.train->tokens));
        break;
      }
  out += ":\n";
  size_t cw = 18, sw = 8;  // column widths: the longest cluster name and strategy
  for (const auto& w : r.rows) {
    cw = std::max(cw, w.cluster.name.size());
    if (w.best) sw = std::max(sw, short_strategy(w.best->plan.strategy).size());
  }
  out += fmt::format("{:>2}  {:<{}} {:>5}  {:<{}} {:>8} {:>10} {:>6} {:>9} {:>11} {:>9}\n", "#", "cluster", cw, "GPUs",
                     "strategy", sw, "step s", "tokens/s", "MFU", "time", "cost", "headroom");
  int rank = 0;
  for (const auto& w : r.rows) {
    if (!w.best) {
      out += fmt::format("{:>2}  {:<{}} {:>5}  {}\n", "-", w.cluster.name, cw, w.cluster.world(),
                         "no strategy fits (see planner plan --explain)");
      continue;
    }
    const auto& q = w.best->prediction;
    const std::string strategy = short_strategy(w.best->plan.strategy);
    out += fmt::format("{:>2}  {:<{}} {:>5}  {:<{}} {:>8.3f} {:>10.0f} {:>5.1f}% {:>9} {:>11} {:>9}\n", ++rank,
                       w.cluster.name, cw, w.cluster.world(), strategy, sw, q.step_seconds, q.tokens_per_second, 100 * q.mfu,
                       w.train ? days_text(w.train->days) : "-",
                       w.train && w.train->cost ? fmt::format("{:.0f}", *w.train->cost) : "-",
                       format_bytes(double(w.headroom_bytes())));
  }
  std::vector<std::string> notes;
  for (const auto& w : r.rows) add_calibration_note(notes, w.cluster.gpu);
  for (const auto& note : notes) out += "note: " + note + "\n";
  out += "time: days (d) or hours (h) to train the tokens; cost: GPU-hours x price per GPU-hour;\n"
         "headroom: GPU memory minus the predicted peak per GPU. Full plans: planner plan --gpus CLUSTER.\n";
  return out;
}

nlohmann::json compare_json(const CompareResult& r) {
  nlohmann::json j;
  j["objective"] = to_string(r.objective);
  j["global_batch"] = r.global_batch;
  j["seq"] = r.seq;
  j["clusters"] = nlohmann::json::array();
  int rank = 0;
  for (const auto& w : r.rows) {
    nlohmann::json c;
    c["cluster"] = w.cluster.name;
    c["gpu"] = w.cluster.gpu.name;
    c["gpus"] = w.cluster.world();
    c["fits"] = w.best.has_value();
    c["gpu_calibrated"] = !w.cluster.gpu.calibrated.empty();
    if (const std::string note = calibration_note(w.cluster.gpu); !note.empty()) c["calibration_note"] = note;
    c["candidates_evaluated"] = w.stats.enumerated;
    if (w.best) {
      const auto& q = w.best->prediction;
      c["rank"] = ++rank;
      c["strategy"] = short_strategy(w.best->plan.strategy);
      c["step_seconds"] = q.step_seconds;
      c["tokens_per_second"] = q.tokens_per_second;
      c["mfu"] = q.mfu;
      c["per_gpu_peak_bytes"] = q.memory.per_gpu_peak_bytes;
      c["gpu_capacity_bytes"] = q.memory.gpu_capacity_bytes;
      c["memory_headroom_bytes"] = w.headroom_bytes();
      if (w.train) c["train"] = train_cost_json(*w.train);
      c["plan"] = ranked_plan_json(*w.best, 1);
    }
    j["clusters"].push_back(c);
  }
  return j;
}

}  // namespace planner

#include "planner/plan_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

const char* to_string(Objective o) {
  switch (o) {
    case Objective::Throughput: return "throughput";
    case Objective::Time: return "time";
    case Objective::Cost: return "cost";
  }
  return "?";
}

Objective parse_objective(std::string_view text) {
  const std::string t = to_lower(trim(text));
  if (t == "throughput") return Objective::Throughput;
  if (t == "time") return Objective::Time;
  if (t == "cost") return Objective::Cost;
  throw InputError(fmt::format("--objective: unknown objective '{}' (choose throughput, time or cost)", text));
}

void check_objective(Objective o, const TrainCostOptions& cost, const std::vector<ClusterSpec>& clusters) {
  if (o == Objective::Time && !cost.tokens) throw InputError("--objective time needs --tokens");
  if (o == Objective::Cost && (!cost.tokens || !cost.has_price()))
    throw InputError("--objective cost needs --tokens and --price or --prices");
  for (const auto& c : clusters) cost.price_for(c);  // a prices file must price every GPU type asked for
}

namespace {

// Smaller is better.
double objective_key(const RankedEntry& e, Objective o) {
  switch (o) {
    case Objective::Throughput: return -e.plan->prediction.tokens_per_second;
    case Objective::Time: return e.train ? e.train->seconds : -e.plan->prediction.tokens_per_second;
    case Objective::Cost: return e.train && e.train->cost ? *e.train->cost : -e.plan->prediction.tokens_per_second;
  }
  return 0;
}

std::string money(const std::optional<TrainCost>& t) { return t && t->cost ? fmt::format("{:.0f}", *t->cost) : "-"; }

}  // namespace

TieRule tie_rule(const GpuSpec& gpu, BandKind kind) {
  const StepTimeBand b = step_time_band(gpu, kind);
  if (b.mape_pct > 0)
    return {b.mape_pct, fmt::format("the held-out step-time MAPE of {}{} ({}, docs/UNCERTAINTY.md)", gpu.name,
                                    kind == BandKind::Moe ? "'s mixture-of-experts plans" : kind == BandKind::Finetune ? "'s fine-tuning plans" : "", b.over)};
  const double half = 100 * (b.high - b.low) / 2;
  return {half, fmt::format("half the width of {}'s step-time band ({:+.0f}% to {:+.0f}%): {} has no held-out runs of its own",
                            gpu.name, 100 * (b.low - 1), 100 * (b.high - 1), gpu.name)};
}

std::vector<int> tie_groups(const std::vector<double>& values, const std::vector<double>& threshold_pct) {
  std::vector<int> group(values.size(), 0);
  int id = 0;
  for (size_t lead = 0; lead < values.size(); ++lead) {
    if (group[lead]) continue;
    group[lead] = ++id;
    for (size_t i = lead + 1; i < values.size(); ++i) {
      const double t = std::max(threshold_pct[lead], threshold_pct[i]);
      if (group[i] || !(values[lead] > 0) || (values[i] / values[lead] - 1) * 100 > t) break;
      group[i] = id;
    }
  }
  return group;
}

std::vector<int> tie_groups(const std::vector<RankedEntry>& ranked, Objective o, size_t n) {
  std::vector<double> values, thresholds;
  for (size_t i = 0; i < std::min(n, ranked.size()); ++i) {
    // Smaller is better: seconds per token for throughput (and time without
    // --tokens), days or money with them.
    const double key = objective_key(ranked[i], o);
    values.push_back(key < 0 ? -1.0 / key : key);
    thresholds.push_back(tie_rule(ranked[i].plan->plan.cluster.gpu, band_kind(ranked[i].plan->plan)).threshold_pct);
  }
  return tie_groups(values, thresholds);
}

namespace {

// "tied: #1, #2 and #3 are predicted within 5.1% of #1 (...): ..." for every group of two or more.
std::string tie_lines(const std::vector<RankedEntry>& ranked, const std::vector<int>& group) {
  std::string out;
  for (size_t lead = 0; lead < group.size(); ++lead) {
    if (lead > 0 && group[lead] == group[lead - 1]) continue;
    size_t last = lead;
    while (last + 1 < group.size() && group[last + 1] == group[lead]) ++last;
    if (last == lead) continue;
    // The band's widest rule (over several clusters a pair takes the larger threshold of its GPUs).
    TieRule r = tie_rule(ranked[lead].plan->plan.cluster.gpu, band_kind(ranked[lead].plan->plan));
    for (size_t i = lead + 1; i <= last; ++i)
      if (TieRule m = tie_rule(ranked[i].plan->plan.cluster.gpu, band_kind(ranked[i].plan->plan)); m.threshold_pct > r.threshold_pct) r = std::move(m);
    out += fmt::format("tied: #{} to #{} are predicted within {:.1f}% of #{}, {}: the prediction does not order them\n",
                       lead + 1, last + 1, r.threshold_pct, lead + 1, r.reason);
  }
  return out;
}

}  // namespace

std::vector<RankedEntry> rank_by_objective(const std::vector<ClusterSearch>& searches, Objective o,
                                           const TrainCostOptions& cost) {
  std::vector<RankedEntry> out;
  for (size_t s = 0; s < searches.size(); ++s)
    for (const auto& p : searches[s].result.plans)
      out.push_back({&p, s, train_cost(cost, searches[s].cluster, p.prediction.tokens_per_second)});
  std::stable_sort(out.begin(), out.end(), [o](const RankedEntry& a, const RankedEntry& b) {
    return objective_key(a, o) < objective_key(b, o);
  });
  return out;
}

std::string ranked_table(const std::vector<ClusterSearch>& searches, const std::vector<RankedEntry>& ranked,
                         Objective o, size_t top, bool explain) {
  const size_t n = std::min(top, ranked.size());
  std::string out;
  const std::string ties = tie_lines(ranked, tie_groups(ranked, o, n));
  if (searches.size() == 1) {
    out = search_result_table(searches.front().result, explain);
    // The tie bands right under the plans' table, before its memory lines.
    if (const size_t at = out.find("\nbest plan, memory per GPU"); !ties.empty() && at != std::string::npos)
      out.insert(at, ties);
    if (n > 0 && ranked.front().train) {
      out += fmt::format("\nTo train {} tokens:\n{:>3}  {:>10} {:>12} {:>12} {:>10}\n",
                         format_tokens(ranked.front().train->tokens), "#", "days", "GPU-hours", "cost", "per GPU-h");
      for (size_t i = 0; i < n; ++i) {
        const auto& t = *ranked[i].train;
        out += fmt::format("{:>3}  {:>10.2f} {:>12.0f} {:>12} {:>10}\n", i + 1, t.days, t.gpu_hours, money(t),
                           t.price_per_gpu_hour ? fmt::format("{:.2f}", *t.price_per_gpu_hour) : "-");
      }
      if (o != Objective::Throughput)
        out += fmt::format("note: within one cluster --objective {} ranks as throughput; give several clusters "
                           "(--gpus 8xA100-80GB,8xH100) to compare them\n", to_string(o));
    }
    return out;
  }
  for (const auto& s : searches) {
    const auto& st = s.result.stats;
    const auto& plans = s.result.plans;
    const std::string best =
        plans.empty() ? std::string("-") : fmt::format("{:.0f}", plans.front().prediction.tokens_per_second);
    out += fmt::format("{:<24} {} GPUs: {} strategies in {:.3f} s, {} fit and simulated, best {} tokens/s\n",
                       s.cluster.name, s.cluster.world(), st.enumerated, st.wall_seconds, st.simulated, best);
    for (const auto& note : s.result.notes) out += "  note: " + note + "\n";
  }
  out += fmt::format("\nBest first by {}:\n", to_string(o));
  out += fmt::format("{:>3}  {:<18} {:<62} {:>9} {:>11} {:>6} {:>9} {:>10} {:>11} {:>10}\n", "#", "cluster", "strategy",
                     "step s", "tokens/s", "MFU", "GPU mem", "days", "GPU-hours", "cost");
  for (size_t i = 0; i < n; ++i) {
    const auto& e = ranked[i];
    const auto& q = e.plan->prediction;
    out += fmt::format("{:>3}  {:<18} {:<62} {:>9.3f} {:>11.0f} {:>5.1f}% {:>9} {:>10} {:>11} {:>10}\n", i + 1,
                       searches[e.search].cluster.name, short_strategy(e.plan->plan.strategy), q.step_seconds,
                       q.tokens_per_second, 100 * q.mfu, format_bytes(double(q.memory.per_gpu_peak_bytes)),
                       e.train ? fmt::format("{:.2f}", e.train->days) : "-",
                       e.train ? fmt::format("{:.0f}", e.train->gpu_hours) : "-", money(e.train));
  }
  if (ranked.empty()) out += "nothing fits on any of the clusters\n";
  // The per-cluster notes number each cluster's own list; this one the list above.
  std::string not_run;
  for (size_t i = 0; i < n; ++i)
    if (!ranked[i].plan->exec_gap.empty()) not_run += fmt::format("{}#{}", not_run.empty() ? "" : ", ", i + 1);
  if (!not_run.empty())
    out += "note: planner exec does not run " + not_run + " of this list (each cluster's note above says why)\n";
  return out + ties;
}

nlohmann::json ranked_json(const std::vector<ClusterSearch>& searches, const std::vector<RankedEntry>& ranked,
                           Objective o, size_t top) {
  const size_t n = std::min(top, ranked.size());
  const std::vector<int> group = tie_groups(ranked, o, n);
  nlohmann::json plans = nlohmann::json::array();
  nlohmann::json ties = nlohmann::json::object();
  for (size_t i = 0; i < n; ++i) {
    nlohmann::json p = ranked_plan_json(*ranked[i].plan, int(i) + 1);
    if (ranked[i].train) p["train"] = train_cost_json(*ranked[i].train);
    p["tie_group"] = group[i];
    p["tied_with"] = nlohmann::json::array();
    for (size_t k = 0; k < n; ++k)
      if (k != i && group[k] == group[i]) p["tied_with"].push_back(k + 1);
    const GpuSpec& gpu = ranked[i].plan->plan.cluster.gpu;
    if (!ties.contains(gpu.name)) {
      const TieRule r = tie_rule(gpu, band_kind(ranked[i].plan->plan));
      ties[gpu.name] = {{"threshold_pct", r.threshold_pct}, {"reason", r.reason}};
    }
    plans.push_back(p);
  }
  nlohmann::json j;
  if (searches.size() == 1) {
    j = search_result_json(searches.front().result);
  } else {
    j["clusters"] = nlohmann::json::array();
    for (const auto& s : searches) {
      nlohmann::json c = search_result_json(s.result);
      c.erase("plans");
      c["cluster"] = s.cluster.name;
      c["gpus"] = s.cluster.world();
      j["clusters"].push_back(c);
    }
  }
  j["objective"] = to_string(o);
  j["ties"] = ties;
  j["plans"] = plans;
  return j;
}

}  // namespace planner

#include "planner/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "costmodel/compat.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

int64_t default_compare_batch(const std::vector<ClusterSpec>& clusters) {
  int64_t l = 1;
  for (const auto& c : clusters) {
    l = std::lcm(l, int64_t(c.world()));
    if (l > 65536) return 0;
  }
  return l;
}

std::vector<int64_t> default_compare_batches(const std::vector<ClusterSpec>& clusters, int64_t seq, std::string* rule) {
  const int64_t l = default_compare_batch(clusters);
  std::vector<int64_t> out;
  if (l > 0 && double(l) * double(seq) <= 2.0 * double(kPretrainTokensPerStep)) {
    out.assign(clusters.size(), pretrain_batch(seq, l));
    if (rule) *rule = fmt::format("about {} tokens per step for pretraining, a multiple of every cluster's GPU count",
                                  format_count(double(kPretrainTokensPerStep)));
    return out;
  }
  for (const auto& c : clusters) out.push_back(pretrain_batch(seq, c.world()));
  if (rule)
    *rule = fmt::format("about {} tokens per step for pretraining, a multiple of each cluster's own GPU count (the "
                        "counts have no common multiple near that)", format_count(double(kPretrainTokensPerStep)));
  return out;
}

CompareResult compare_clusters(SearchRequest req, const std::vector<ClusterSpec>& clusters, int64_t global_batch,
                               const TrainCostOptions& cost) {
  return compare_clusters(std::move(req), clusters, std::vector<int64_t>(clusters.size(), global_batch), cost);
}

CompareResult compare_clusters(SearchRequest req, const std::vector<ClusterSpec>& clusters,
                               const std::vector<int64_t>& batches, const TrainCostOptions& cost) {
  if (clusters.empty()) throw InputError("--gpus: no cluster given");
  if (batches.size() != clusters.size()) throw InputError("compare: one global batch per cluster");
  CompareResult r;
  r.band = band_kind(req.model, req.finetune);
  r.objective = cost.tokens && cost.has_price() ? Objective::Cost : cost.tokens ? Objective::Time : Objective::Throughput;
  check_objective(r.objective, cost, clusters);
  const bool common = std::all_of(batches.begin(), batches.end(), [&](int64_t b) { return b == batches.front(); });
  r.global_batch = common ? batches.front() : 0;
  r.seq = req.seq;
  req.top_k = 1;
  req.explain = false;
  std::vector<ClusterSearch> searches;
  for (size_t i = 0; i < clusters.size(); ++i) {
    req.cluster = clusters[i];
    req.global_batch = batches[i];
    searches.push_back({clusters[i], search_plans(req)});
  }
  const std::vector<RankedEntry> ranked = rank_by_objective(searches, r.objective, cost);
  for (const auto& e : ranked) {
    const auto& s = searches[e.search];
    r.rows.push_back({s.cluster, s.result.stats, *e.plan, e.train, batches[e.search]});
  }
  for (size_t i = 0; i < searches.size(); ++i)
    if (searches[i].result.plans.empty())
      r.rows.push_back({searches[i].cluster, searches[i].result.stats, std::nullopt, std::nullopt, batches[i]});
  return r;
}

namespace {

std::string days_text(double days) {
  return days >= 10 ? fmt::format("{:.0f} d", days) : days >= 1 ? fmt::format("{:.1f} d", days)
                                                                 : fmt::format("{:.1f} h", days * 24);
}

// A row's objective per token, low and high (seconds per token, times the
// price per GPU-second with a cost), from its GPU's step-time band.
std::pair<double, double> per_token_band(const CompareRow& w) {
  const StepTimeBand b = step_time_band(w.cluster.gpu, w.best ? band_kind(w.best->plan) : BandKind::Dense);
  double per_token = 1.0 / w.best->prediction.tokens_per_second;
  if (w.train && w.train->cost && w.train->tokens > 0) per_token = *w.train->cost / w.train->tokens;
  return {per_token * b.low, per_token * b.high};
}

const char* band_metric(Objective o) { return o == Objective::Cost ? "cost" : o == Objective::Time ? "time" : "s/Mtoken"; }

std::string band_value(const CompareRow& w, double per_token, Objective o) {
  if (o == Objective::Cost && w.train) return fmt::format("{:.0f}", per_token * w.train->tokens);
  if (o == Objective::Time && w.train) return days_text(per_token * w.train->tokens / 86400.0);
  return fmt::format("{:.3f}", per_token * 1e6);
}

}  // namespace

std::string compare_table(const CompareResult& r) {
  const bool has_tokens = std::any_of(r.rows.begin(), r.rows.end(), [](const CompareRow& w) { return w.train.has_value(); });
  std::string batch = fmt::format("global batch {}", r.global_batch);
  if (r.global_batch == 0) {
    batch = "global batch";
    for (size_t i = 0; i < r.rows.size(); ++i)
      batch += fmt::format("{} {} on {}", i ? "," : "", r.rows[i].global_batch, r.rows[i].cluster.name);
  }
  std::string out = assumed_line(r.assumed) +
                    fmt::format("Best plan per cluster, {}, seq {}; ranked by {}", batch, r.seq, to_string(r.objective));
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
  out += fmt::format("{:>2}  {:<{}} {:>5}  {:<{}} {:>8} {:>10} {:>6} {:>9} {:>11} {:>9}  {}\n", "#", "cluster", cw, "GPUs",
                     "strategy", sw, "step s", "tokens/s", "MFU", "time", "cost", "headroom",
                     fmt::format("band ({})", band_metric(r.objective)));
  int rank = 0;
  for (const auto& w : r.rows) {
    if (!w.best) {
      out += fmt::format("{:>2}  {:<{}} {:>5}  {}\n", "-", w.cluster.name, cw, w.cluster.world(),
                         "no strategy fits (see planner plan --explain)");
      continue;
    }
    const auto& q = w.best->prediction;
    const std::string strategy = short_strategy(w.best->plan.strategy);
    const auto [lo, hi] = per_token_band(w);
    out += fmt::format("{:>2}  {:<{}} {:>5}  {:<{}} {:>8.3f} {:>10.0f} {:>5.1f}% {:>9} {:>11} {:>9}  {} - {}{}\n", ++rank,
                       w.cluster.name, cw, w.cluster.world(), strategy, sw, q.step_seconds, q.tokens_per_second, 100 * q.mfu,
                       w.train ? days_text(w.train->days) : "-",
                       w.train && w.train->cost ? fmt::format("{:.0f}", *w.train->cost) : "-",
                       format_bytes(double(w.headroom_bytes())), band_value(w, lo, r.objective),
                       band_value(w, hi, r.objective),
                       step_time_band(w.cluster.gpu, r.band).calibrated ? " (calibrated)" : " (not calibrated)");
  }
  // Bands (docs/UNCERTAINTY.md): which GPUs were calibrated, and where two
  // clusters' step-time bands overlap so that their order is not certain.
  std::vector<std::string> notes;
  for (const auto& w : r.rows) {
    const std::string t = step_time_band(w.cluster.gpu, r.band).text;
    if (std::find(notes.begin(), notes.end(), t) == notes.end()) notes.push_back(t);
  }
  // A best plan whose collective group is above the profile's measured ones
  // (collective_extrapolation_note, carried in its prediction's notes).
  for (const auto& w : r.rows)
    if (w.best)
      for (const auto& n : w.best->prediction.memory.notes)
        if (n.rfind("collectives extrapolated", 0) == 0 && std::find(notes.begin(), notes.end(), n) == notes.end())
          notes.push_back(n);
  for (const auto& note : notes) out += "note: " + note + "\n";
  for (size_t i = 0; i < r.rows.size(); ++i)
    for (size_t k = i + 1; k < r.rows.size(); ++k) {
      const auto &a = r.rows[i], &b = r.rows[k];
      if (!a.best || !b.best) continue;
      // The objective scales with the time per token (cost also with the price): compare seconds per token.
      const auto [alo, ahi] = per_token_band(a);
      const auto [blo, bhi] = per_token_band(b);
      if (alo <= bhi && blo <= ahi)
        out += fmt::format("note: {} and {} overlap within their bands ({} {} - {} vs {} - {}): their order is not "
                           "certain\n", a.cluster.name, b.cluster.name, band_metric(r.objective),
                           band_value(a, alo, r.objective), band_value(a, ahi, r.objective),
                           band_value(b, blo, r.objective), band_value(b, bhi, r.objective));
    }
  out += "time: days (d) or hours (h) to train the tokens; cost: GPU-hours x price per GPU-hour;\n"
         "headroom: GPU memory minus the predicted peak per GPU. Full plans: planner plan --gpus CLUSTER.\n";
  return out;
}

nlohmann::json compare_json(const CompareResult& r) {
  nlohmann::json j;
  j["objective"] = to_string(r.objective);
  j["global_batch"] = r.global_batch == 0 ? nlohmann::json() : nlohmann::json(r.global_batch);
  j["seq"] = r.seq;
  j["assumed"] = r.assumed;
  j["clusters"] = nlohmann::json::array();
  int rank = 0;
  for (const auto& w : r.rows) {
    nlohmann::json c;
    c["cluster"] = w.cluster.name;
    c["gpu"] = w.cluster.gpu.name;
    c["gpus"] = w.cluster.world();
    c["global_batch"] = w.global_batch;
    c["fits"] = w.best.has_value();
    c["gpu_calibrated"] = !w.cluster.gpu.calibrated.empty();
    const StepTimeBand band = step_time_band(w.cluster.gpu, r.band);
    c["band_note"] = band.text;
    if (const std::string note = calibration_note(w.cluster.gpu); !note.empty()) c["calibration_note"] = note;
    c["candidates_evaluated"] = w.stats.enumerated;
    if (w.best) {
      const auto& q = w.best->prediction;
      c["rank"] = ++rank;
      c["strategy"] = short_strategy(w.best->plan.strategy);
      c["step_seconds"] = q.step_seconds;
      c["tokens_per_second"] = q.tokens_per_second;
      c["step_seconds_band"] = {q.step_seconds * band.low, q.step_seconds * band.high};
      c["tokens_per_second_band"] = {q.tokens_per_second / band.high, q.tokens_per_second / band.low};
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

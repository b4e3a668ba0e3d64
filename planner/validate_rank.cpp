#include "planner/validate_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "costmodel/compat.hpp"
#include "planner/cli.hpp"
#include "planner/plan_rank.hpp"
#include "planner/search.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

using nlohmann::json;

RankQuestion parse_rank_question(const std::string& text) {
  RankQuestion q;
  std::vector<std::string> words;
  for (const auto& w : split(text, ' '))
    if (!trim(w).empty()) words.push_back(trim(w));
  const std::vector<std::string> known = {"--model", "--gpus", "--seq", "--global-batch", "--host-memory"};
  for (size_t i = 0; i < words.size(); ++i) {
    std::string key = words[i], value;
    if (const size_t eq = key.find('='); eq != std::string::npos && key.rfind("--", 0) == 0) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (i + 1 < words.size()) {
      value = words[++i];
    } else {
      throw InputError(fmt::format("--rank-question: '{}' has no value", clip(key)));
    }
    if (key == "-m") key = "--model";
    if (key == "-g") key = "--gpus";
    std::string* slot = key == "--model"          ? &q.model
                        : key == "--gpus"         ? &q.gpus
                        : key == "--seq"          ? &q.seq
                        : key == "--global-batch" ? &q.global_batch
                        : key == "--host-memory"  ? &q.host_memory
                                                  : nullptr;
    if (!slot)
      throw InputError(fmt::format("--rank-question: '{}' is not an option of the question ({}); did you mean '{}'?",
                                   clip(key), "--model, --gpus, --seq, --global-batch, --host-memory",
                                   nearest(key, known)));
    if (!slot->empty()) throw InputError(fmt::format("--rank-question: {} is given twice", key));
    *slot = value;
  }
  if (q.model.empty() || q.gpus.empty()) throw InputError("--rank-question needs --model and --gpus, as `planner plan` does");
  return q;
}

RankSweep ranking_sweep(const std::string& question, int top, const std::string& sweep_path,
                        const std::function<HardwareProfile(const GpuSpec&)>& profile_of) {
  const RankQuestion q = parse_rank_question(question);
  SearchRequest req;
  req.model = resolve_model(q.model);
  const std::vector<ClusterSpec> clusters = resolve_clusters(q.gpus, q.host_memory);
  if (clusters.size() != 1) throw InputError("--rank-question: give one --gpus cluster (the ranking check is within one)");
  req.cluster = clusters.front();
  req.seq = q.seq.empty() ? default_seq(req.model) : parse_seq(q.seq);
  // `planner plan`'s default batch without --tokens: one sequence per GPU.
  req.global_batch = q.global_batch.empty() ? req.cluster.world() : parse_global_batch(q.global_batch);
  req.top_k = top;
  req.profile = profile_of(req.cluster.gpu);
  // Each plan of the list runs under planner exec: rank only what it runs
  // (`plan --runnable`; specs/runtime_gap.hpp), as `plan` would answer with it.
  req.runnable = true;
  SearchResult r = search_plans(req);
  if (r.plans.empty()) throw InputError(fmt::format("--rank-question '{}': no strategy fits, nothing to rank", clip(question)));
  RankSweep out;
  out.question = question;
  out.notes = r.notes;
  const TieRule tie = tie_rule(req.cluster.gpu, band_kind(req.model, req.finetune));
  out.tie_threshold_pct = tie.threshold_pct;
  out.tie_reason = tie.reason;
  out.sweep.path = sweep_path;
  out.sweep.name = fmt::format("ranking check: top {} of planner plan {}", r.plans.size(), question);
  for (size_t i = 0; i < r.plans.size(); ++i) {
    check_compat(r.plans[i].plan);
    out.sweep.entries.push_back({fmt::format("rank{}", i + 1), "B", r.plans[i].plan});
  }
  return out;
}

std::optional<double> kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) return std::nullopt;
  auto sign = [](double d) { return d > 0 ? 1 : d < 0 ? -1 : 0; };
  double concordant = 0, discordant = 0, tied_x = 0, tied_y = 0;
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = i + 1; j < x.size(); ++j) {
      const int sx = sign(x[i] - x[j]), sy = sign(y[i] - y[j]);
      tied_x += sx == 0;
      tied_y += sy == 0;
      if (sx * sy > 0) ++concordant;
      if (sx * sy < 0) ++discordant;
    }
  const double n0 = double(x.size()) * double(x.size() - 1) / 2;
  const double denom = std::sqrt((n0 - tied_x) * (n0 - tied_y));
  if (!(denom > 0)) return std::nullopt;
  return (concordant - discordant) / denom;
}

namespace {

double step_of(const json& p, const char* side) {
  const json& s = p[side];
  return s.is_object() && s["step_seconds"].is_number() ? s["step_seconds"].get<double>() : NAN;
}

}  // namespace

json ranking_summary(const json& plans, double tie_threshold_pct, const std::string& tie_reason) {
  std::vector<size_t> ran;  // indices of plans measured
  for (size_t i = 0; i < plans.size(); ++i)
    if (std::isfinite(step_of(plans[i], "measured")) && std::isfinite(step_of(plans[i], "predicted"))) ran.push_back(i);
  std::vector<size_t> by_measured = ran;
  std::stable_sort(by_measured.begin(), by_measured.end(),
                   [&](size_t a, size_t b) { return step_of(plans[a], "measured") < step_of(plans[b], "measured"); });
  const double best = by_measured.empty() ? NAN : step_of(plans[by_measured.front()], "measured");
  json rows = json::array();
  for (size_t i = 0; i < plans.size(); ++i) {
    const double m = step_of(plans[i], "measured");
    const auto at = std::find(by_measured.begin(), by_measured.end(), i);
    rows.push_back({{"name", plans[i]["name"]},
                    {"predicted_rank", i + 1},
                    {"strategy", plans[i]["strategy"]},
                    {"status", plans[i]["status"]},
                    {"predicted_step_seconds", plans[i]["predicted"].is_object() ? plans[i]["predicted"]["step_seconds"] : json(nullptr)},
                    {"measured_step_seconds", std::isfinite(m) ? json(m) : json(nullptr)},
                    {"measured_rank", at == by_measured.end() ? json(nullptr) : json(at - by_measured.begin() + 1)},
                    {"gap_to_best_pct", std::isfinite(m) ? json((m - best) / best * 100) : json(nullptr)}});
  }
  std::vector<double> x, y;
  for (size_t i : ran) x.push_back(step_of(plans[i], "predicted")), y.push_back(step_of(plans[i], "measured"));
  const std::optional<double> tau = kendall_tau_b(x, y);
  const bool pick_ran = !ran.empty() && ran.front() == 0;
  json out = {{"plans", plans.size()},
              {"ran", ran.size()},
              {"pick", plans.empty() ? json(nullptr) : plans[0]["name"]},
              {"pick_ran", pick_ran},
              {"measured_best", by_measured.empty() ? json(nullptr) : plans[by_measured.front()]["name"]},
              {"pick_is_measured_best", pick_ran ? json(by_measured.front() == 0 || step_of(plans[0], "measured") == best) : json(nullptr)},
              {"pick_gap_pct", pick_ran ? rows[0]["gap_to_best_pct"] : json(nullptr)},
              {"kendall_tau_b", tau ? json(*tau) : json(nullptr)},
              {"rows", rows}};
  if (tie_threshold_pct > 0) {
    std::vector<double> predicted;
    for (const auto& p : plans) predicted.push_back(step_of(p, "predicted"));
    const std::vector<int> group = tie_groups(predicted, std::vector<double>(plans.size(), tie_threshold_pct));
    json tied = json::array();
    for (size_t i = 0; i < plans.size(); ++i) {
      out["rows"][i]["tie_group"] = group[i];
      if (i > 0 && group[i] == group[0]) tied.push_back(plans[i]["name"]);
    }
    out["tie_threshold_pct"] = tie_threshold_pct;
    out["tie_reason"] = tie_reason;
    out["pick_tied_with"] = tied;
    out["best_tied_with_pick"] =
        by_measured.empty() ? json(nullptr) : json(group[by_measured.front()] == group[0]);
  }
  return out;
}

std::string ranking_table(const json& g) {
  auto cell = [](const json& v, const char* f) { return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-"); };
  std::string o = fmt::format("ranking check: predicted order (plan's) against measured, {} of {} ran\n",
                              g["ran"].get<size_t>(), g["plans"].get<size_t>());
  o += fmt::format("{:>4} {:>4}  {:<8} {:<58} {:>9} {:>9} {:>8}  {}\n", "pred", "meas", "plan", "strategy", "step pred",
                   "meas", "vs best", "outcome");
  for (const auto& r : g["rows"])
    o += fmt::format("{:>4} {:>4}  {:<8} {:<58} {:>9} {:>9} {:>8}  {}\n", r["predicted_rank"].get<int>(),
                     r["measured_rank"].is_null() ? std::string("-") : std::to_string(r["measured_rank"].get<int>()),
                     r["name"].get<std::string>(), short_strategy_text(r["strategy"].get<std::string>()).substr(0, 58),
                     cell(r["predicted_step_seconds"], "{:.4f}"), cell(r["measured_step_seconds"], "{:.4f}"),
                     cell(r["gap_to_best_pct"], "{:+.1f}%"), r["status"].get<std::string>());
  if (!g["pick_ran"].get<bool>()) {
    o += "the pick did not run: no verdict on it\n";
  } else {
    o += fmt::format("pick {}: {}; measured {} from the best ({})\n", g["pick"].get<std::string>(),
                     g["pick_is_measured_best"].get<bool>() ? "the measured best" : "not the measured best",
                     cell(g["pick_gap_pct"], "{:+.1f}%"), g["measured_best"].get<std::string>());
  }
  if (g.contains("pick_tied_with") && !g["pick_tied_with"].empty()) {
    std::string names;
    for (const auto& n : g["pick_tied_with"]) names += (names.empty() ? "" : ", ") + n.get<std::string>();
    o += fmt::format("plan showed the pick tied with {} (within {:.1f}%, {}); the measured best {} that band\n", names,
                     g["tie_threshold_pct"].get<double>(), g["tie_reason"].get<std::string>(),
                     g["best_tied_with_pick"].is_boolean() && g["best_tied_with_pick"].get<bool>() ? "is in" : "is outside");
  }
  o += "Kendall's tau-b, predicted against measured step time: " +
       (g["kendall_tau_b"].is_number() ? fmt::format("{:+.2f}", g["kendall_tau_b"].get<double>())
                                       : std::string("undefined (fewer than two plans ran, or all tied)")) +
       "\n";
  return o;
}

}  // namespace planner

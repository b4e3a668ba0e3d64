#include "planner/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "costmodel/compat.hpp"
#include "planner/exec_report.hpp"
#include "costmodel/memory_model.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::vector<std::string> kTopKeys = {"format", "version", "name", "description", "steps",
                                           "warmup", "held_out", "defaults", "plans"};
const std::vector<std::string> kPlanKeys = {"name", "half", "model", "gpus", "strategy", "seq",
                                            "global_batch", "host_memory", "plan", "note"};

void only_keys(const json& j, const std::vector<std::string>& known, const std::string& where) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      throw InputError(fmt::format("{}: unknown key '{}'; did you mean '{}'?", where, it.key(), nearest(it.key(), known)));
}

// A path in the sweep file is relative to the sweep file's folder.
std::string beside(const fs::path& dir, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  const fs::path q = dir / p;
  std::error_code ec;
  return fs::exists(q, ec) ? q.string() : p;
}

// A string field of the sweep, or InputError naming it and what it must be.
std::string text_field(const json& j, const char* key, const std::string& fallback, const std::string& where,
                       const char* allowed) {
  if (!j.contains(key)) return fallback;
  if (!j.at(key).is_string())
    throw InputError(fmt::format("{}: \"{}\" must be {}, got {}", where, key, allowed, json_excerpt(j.at(key))));
  return j.at(key).get<std::string>();
}

int64_t whole(const json& v, const std::string& what) {
  if (!v.is_number_integer() || v.get<int64_t>() < 1) throw InputError(fmt::format("{} must be a positive whole number", what));
  return v.get<int64_t>();
}

Plan entry_plan(const json& e, const fs::path& dir, const std::string& where, const std::string& gpus) {
  if (e.contains("plan")) {
    for (const char* k : {"model", "gpus", "strategy", "seq", "global_batch"})
      if (e.contains(k)) throw InputError(fmt::format("{}: 'plan' replaces '{}'; give one or the other", where, k));
    const json& p = e["plan"];
    Plan plan = p.is_string() ? load_plan(beside(dir, p.get<std::string>())) : plan_from_json(p);
    if (!gpus.empty()) plan.cluster = resolve_cluster(gpus);
    check_compat(plan);
    return plan;
  }
  if (!e.contains("model") || !e["model"].is_string()) throw InputError(where + ": 'model' (a preset or config.json) or 'plan' is missing");
  if (gpus.empty() && (!e.contains("gpus") || !e["gpus"].is_string())) throw InputError(where + ": 'gpus' is missing");
  PlanRequest r;
  r.model = beside(dir, e["model"].get<std::string>());
  r.gpus = gpus.empty() ? beside(dir, e["gpus"].get<std::string>()) : gpus;
  if (e.contains("strategy")) {
    if (!e["strategy"].is_string()) throw InputError(where + ": 'strategy' must be the text form (dp=2,zero=1,...)");
    r.strategy = e["strategy"].get<std::string>();
  }
  if (e.contains("seq")) r.seq = whole(e["seq"], where + ": seq");
  if (e.contains("global_batch")) r.global_batch = whole(e["global_batch"], where + ": global_batch");
  if (e.contains("host_memory"))
    r.host_memory_bytes = parse_bytes(text_field(e, "host_memory", "", where, "a size such as \"512GiB\""), where + ": host_memory");
  return build_plan(r, nullptr);
}

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

json pct(double predicted, double measured) {
  if (!(measured > 0) || !std::isfinite(predicted)) return nullptr;
  return (predicted - measured) / measured * 100.0;
}

std::string gib(double b) { return format_bytes(b); }


}  // namespace

// The strategy without the fields at their defaults.
std::string short_strategy_text(const std::string& text) {
  std::string out;
  for (const auto& kv : split(text, ',')) {
    if (kv == "tp=1" || kv == "pp=1" || kv == "zero=0" || kv == "offload=none" || kv == "ckpt=none" || kv == "vpp=1" ||
        kv == "sp=0" || kv == "schedule=1f1b")
      continue;
    out += (out.empty() ? "" : ",") + kv;
  }
  return out;
}

Sweep load_sweep(const std::string& path, const std::string& gpus) {
  const json j = read_json_file(path, "sweep");
  const std::string where = fmt::format("sweep '{}'", path);
  if (!j.is_object()) throw InputError(where + ": expected a JSON object");
  only_keys(j, kTopKeys, where);
  if (text_field(j, "format", "", where, "\"planner-sweep\"") != "planner-sweep")
    throw InputError(where + ": \"format\" must be \"planner-sweep\"");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    throw InputError(where + ": \"version\" must be 1");
  Sweep s;
  s.path = path;
  s.name = clip(text_field(j, "name", fs::path(path).stem().string(), where, "a string"));
  if (j.contains("steps")) {
    s.steps = int(std::min<int64_t>(whole(j["steps"], where + ": steps"), kMaxSteps + 1));
    if (s.steps > kMaxSteps) throw InputError(fmt::format("{}: steps must be 1 to {} (docs/INPUT_LIMITS.md)", where, kMaxSteps));
  }
  if (j.contains("warmup")) {
    if (!j["warmup"].is_number_integer() || j["warmup"].get<int64_t>() < 0 || j["warmup"].get<int64_t>() > kMaxSteps)
      throw InputError(fmt::format("{}: warmup must be 0 to {} (docs/INPUT_LIMITS.md)", where, kMaxSteps));
    s.warmup = int(j["warmup"].get<int64_t>());
  }
  s.held_out = text_field(j, "held_out", "B", where, "\"A\" or \"B\"");
  if (s.held_out != "A" && s.held_out != "B") throw InputError(where + ": held_out must be \"A\" or \"B\"");
  const json defaults = j.value("defaults", json::object());
  if (!defaults.is_object()) throw InputError(where + ": defaults must be an object");
  only_keys(defaults, kPlanKeys, where + ": defaults");
  if (!j.contains("plans") || !j["plans"].is_array() || j["plans"].empty())
    throw InputError(where + ": \"plans\" must be a non-empty list");
  const fs::path dir = fs::path(path).parent_path();
  std::set<std::string> names;
  for (size_t i = 0; i < j["plans"].size(); ++i) {
    json e = j["plans"][i];
    if (!e.is_object()) throw InputError(fmt::format("{}: plans[{}] must be an object", where, i));
    only_keys(e, kPlanKeys, fmt::format("{}: plans[{}]", where, i));
    for (auto it = defaults.begin(); it != defaults.end(); ++it)
      if (!e.contains(it.key()) && !(e.contains("plan") && it.key() != "half")) e[it.key()] = it.value();
    const std::string name = text_field(e, "name", "", fmt::format("{}: plans[{}]", where, i), "a string");
    if (name.size() > kMaxPlanName)
      throw InputError(fmt::format("{}: plans[{}]: \"name\" has {} characters, at most {} (it names files)", where, i,
                                   name.size(), kMaxPlanName));
    if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                            std::string::npos)
      throw InputError(fmt::format("{}: plans[{}]: \"name\" must be letters, digits, '.', '_' or '-' (it names files)", where, i));
    if (!names.insert(name).second) throw InputError(fmt::format("{}: plan name '{}' is used twice", where, name));
    const std::string pw = fmt::format("{}: plan '{}'", where, name);
    const std::string half = text_field(e, "half", "", pw, "\"A\" or \"B\" (the held-out split)");
    if (half != "A" && half != "B") throw InputError(pw + ": \"half\" must be \"A\" or \"B\" (the held-out split)");
    try {
      s.entries.push_back({name, half, entry_plan(e, dir, pw, gpus)});
    } catch (const InputError& err) {
      const std::string msg = err.what();
      throw InputError(msg.rfind(pw, 0) == 0 ? msg : pw + ": " + msg);
    } catch (const json::exception& err) {
      throw InputError(pw + ": " + err.what());
    }
  }
  return s;
}

namespace {

// Where a plan's error comes from, from what the run itself measured: the
// forward and backward kernels (rank 0's F and B actions, recomputation inside
// B) against the predicted compute, and the rest of the step (optimizer,
// offload, exposed communication, bubble) against the predicted rest; for
// offload the CPU AdamW rate of the run against the profile's; for memory the
// category with the largest difference.
json miss_causes(const StepPrediction& pred, const json& m, const json& rec, double profile_cpu_adam, int procs) {
  json out = {{"step", nullptr}, {"memory", nullptr}};
  const json acts = m.value("action_seconds", json::object());
  const double step = rec["measured"]["step_seconds"].get<double>();
  if (acts.contains("F") && acts.contains("B") && step > 0) {
    // Rank 0's passes: its pipeline stage's kernels and, under tp, the
    // collectives waited for inside them (StepPrediction::rank0_fb_seconds).
    const double fb = num(acts, "F") + num(acts, "B");
    const double fb_p = pred.rank0_fb_seconds > 0 ? pred.rank0_fb_seconds : pred.compute_seconds;
    const double rest_p = pred.step_seconds - fb_p, rest_m = step - fb;
    const double dc = fb_p - fb, dr = rest_p - rest_m;
    std::string text = fmt::format(
        "{}: forward+backward {:.4f} s predicted, {:.4f} s measured; rest of the step (optimizer, offload, exposed "
        "communication, bubble) {:.4f} s predicted, {:.4f} s measured",
        std::abs(dc) >= std::abs(dr) ? "mostly the forward and backward kernels" : "mostly the rest of the step",
        fb_p, fb, rest_p, rest_m);
    const double rate = num(m, "cpu_adam_params_per_second");
    if (rate > 0) {
      text += fmt::format("; the run's CPU AdamW {:.3g} parameters/s", rate);
      if (profile_cpu_adam > 0) {
        // The profile's rate is the node's; each process gets its share (as the
        // time model divides it, costmodel/cost_model.cpp).
        const double share = profile_cpu_adam / procs;
        text += procs > 1 ? fmt::format(" (profile {:.3g}/s per node, {:.3g}/s per process: {:+.0f}%)", profile_cpu_adam,
                                        share, (share - rate) / rate * 100)
                          : fmt::format(" (profile {:.3g}/s, {:+.0f}%)", share, (share - rate) / rate * 100);
      }
      if (num(m, "host_copy_gbps") > 0) text += fmt::format(", host memcpy {:.0f} GB/s", num(m, "host_copy_gbps"));
      if (m.contains("cpu_steal_fraction") && m["cpu_steal_fraction"].is_number())
        text += fmt::format(", CPU time stolen by the hypervisor {:.1f}%", 100 * num(m, "cpu_steal_fraction"));
    }
    out["step"] = {{"compute_predicted", fb_p},
                   {"compute_measured", fb},
                   {"rest_predicted", rest_p},
                   {"rest_measured", rest_m},
                   {"larger", std::abs(dc) >= std::abs(dr) ? "compute" : "rest"},
                   {"kernel_classes", nullptr},
                   {"text", text}};
    const json classes = kernel_class_comparison(pred, m);  // exec --kernels, else null
    if (classes.is_object()) {
      auto p_of = [&](const char* n) { return classes[n]["predicted"].get<double>(); };
      auto m_of = [&](const char* n) { return classes[n]["measured"].get<double>(); };
      std::string worst;
      double wd = 0;
      for (const char* n : {"gemm", "attention", "memory_bound"}) {
        const double d = p_of(n) - m_of(n);
        if (std::abs(d) > std::abs(wd)) wd = d, worst = n;
      }
      text += fmt::format("; kernels of one step, predicted/measured: GEMM {:.4f}/{:.4f} s, attention {:.4f}/{:.4f} s, "
                          "memory-bound {:.4f}/{:.4f} s, idle -/{:.4f} s; largest difference {} ({:+.4f} s)",
                          p_of("gemm"), m_of("gemm"), p_of("attention"), m_of("attention"), p_of("memory_bound"),
                          m_of("memory_bound"), m_of("idle"), worst, wd);
      out["step"]["kernel_classes"] = classes;
      out["step"]["text"] = text;
    }
    // The DP/ZeRO collectives' slowdown of the passes: the simulator's, and
    // what --kernels measured beside the NCCL kernels (runtime/kernel_profile.hpp).
    const json bc = m.contains("kernels") && m["kernels"].is_object()
                        ? m["kernels"].value("beside_collectives", json())
                        : json();
    if (pred.contention_seconds > 0 || (bc.is_object() && num(bc, "compute_beside_seconds") > 0)) {
      text += fmt::format("; beside the DP/ZeRO collectives: {:.4f} s of slowdown predicted", pred.contention_seconds);
      if (bc.is_object()) {
        text += fmt::format(", {:.4f} s of compute kernels measured beside NCCL kernels", num(bc, "compute_beside_seconds"));
        if (bc.contains("slowdown") && bc["slowdown"].is_number())
          text += fmt::format(" ({:.2f}x the same kernels alone, by name)", bc["slowdown"].get<double>());
      }
      out["step"]["beside_collectives"] = {{"contention_predicted", pred.contention_seconds},
                                           {"measured", bc.is_object() ? bc : json()}};
      out["step"]["text"] = text;
    }
  }
  const json& pc = rec["predicted"]["categories"];
  const json& mc = rec["measured"]["categories"];
  std::string worst;
  double diff = 0;
  for (auto it = mc.begin(); it != mc.end(); ++it) {
    if (!pc.contains(it.key()) || !it->is_number()) continue;
    const double d = pc[it.key()].get<double>() - it->get<double>();
    if (std::abs(d) > std::abs(diff)) diff = d, worst = it.key();
  }
  if (!worst.empty())
    out["memory"] = {{"category", worst},
                     {"difference_bytes", diff},
                     {"text", fmt::format("largest difference: {} {} predicted, {} measured (rank {})", worst,
                                          gib(pc[worst].get<double>()), gib(mc[worst].get<double>()),
                                          rec["measured"].value("categories_rank", 0))}};
  return out;
}

}  // namespace

json pipeline_bubble(const json& trace) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return nullptr;
  const json other = trace.value("otherData", json::object());
  if (!other.is_object() || !other.contains("makespan_seconds") || !other["makespan_seconds"].is_number() ||
      !other.contains("measured_step_seconds") || !other["measured_step_seconds"].is_number())
    return nullptr;
  const double predicted_step = other["makespan_seconds"].get<double>();
  const double measured_step = other["measured_step_seconds"].get<double>();
  if (!(predicted_step > 0) || !(measured_step > 0)) return nullptr;
  const std::map<int, int> stage_of = trace_process_stages(trace);
  // Passes and optimizer per process, on the compute stream (thread 0).
  std::map<int, double> busy;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("pid") || !e["pid"].is_number_integer() ||
        e.value("tid", 0) != 0 || !e.contains("dur") || !e["dur"].is_number())
      continue;
    const int pid = e["pid"].get<int>();
    if (!stage_of.count(pid)) continue;
    const int kind = trace_event_kind(e).first;
    if (kind <= 2 || kind == 4) busy[pid] += e["dur"].get<double>() / 1e6;
  }
  json stages = json::array();
  for (const auto& [pid, stage] : stage_of) {
    if (pid >= 1000) continue;
    const double b = std::max(0.0, predicted_step - busy[pid]);
    json measured = json::array();
    for (const auto& [mpid, mstage] : stage_of) {
      if (mpid < 1000 || mstage != stage) continue;
      const double mb = std::max(0.0, measured_step - busy[mpid]);
      measured.push_back({{"rank", mpid - 1000}, {"seconds", mb}, {"fraction", mb / measured_step}});
    }
    stages.push_back({{"stage", stage},
                      {"predicted_seconds", b},
                      {"predicted_fraction", b / predicted_step},
                      {"measured", measured}});
  }
  if (stages.empty()) return nullptr;
  return {{"stages", stages}};
}

json plan_record(const SweepEntry& e, const std::optional<StepPrediction>& pred, const std::string& prediction_error,
                 const RunOutcome& run, double profile_cpu_adam) {
  const Plan& p = e.plan;
  json r = {{"name", e.name},
            {"half", e.half},
            {"model", p.model.name},
            {"gpus", p.cluster.name},
            {"gpu", p.cluster.gpu.name},
            {"world", p.strategy.world()},
            {"strategy", p.strategy.to_string()},
            {"seq", p.seq},
            {"global_batch", p.global_batch},
            {"status", run.status},
            {"exit_code", run.exit_code},
            {"error", run.error.empty() ? json(nullptr) : json(run.error)},
            {"result_file", run.result_file.empty() ? json(nullptr) : json(run.result_file)},
            {"log_file", run.log_file.empty() ? json(nullptr) : json(run.log_file)},
            {"prediction_error", prediction_error.empty() ? json(nullptr) : json(prediction_error)}};
  json pc = json::object();
  if (pred) {
    for (int i = 0; i < kMemCategories; ++i)
      pc[to_string(MemCategory(i))] = pred->memory.stages.empty() ? 0 : pred->memory.peak_breakdown()[i];
    r["predicted"] = {{"step_seconds", pred->step_seconds},
                      {"per_gpu_peak_bytes", pred->memory.per_gpu_peak_bytes},
                      {"fits", pred->memory.fits()},
                      {"gpu_usable_bytes", pred->memory.gpu_usable_bytes()},
                      {"tokens_per_second", pred->tokens_per_second},
                      {"mfu", pred->mfu},
                      {"categories", pc}};
  } else {
    r["predicted"] = nullptr;
  }
  json errors = {{"step_seconds_pct", nullptr}, {"per_gpu_peak_pct", nullptr}, {"categories_pct", json::object()}};
  if (run.result && run.result->contains("measurement")) {
    const json& m = (*run.result)["measurement"];
    // The fullest rank's peak and categories (planner/exec_report.hpp), as the
    // predicted ones are the fullest stage's.
    const MeasuredPeak mp = fullest_rank_memory(m);
    const double peak = mp.peak_bytes;
    const json& mc = mp.categories;
    const int cat_rank = mp.rank;
    const double step = num(m.value("step_seconds", json::object()), "median");
    r["measured"] = {{"step_seconds", step},
                     {"per_gpu_peak_bytes", int64_t(peak)},
                     {"tokens_per_second", num(m, "tokens_per_second")},
                     {"mfu", m.value("mfu", json(nullptr))},
                     {"device", m.value("device", "")},
                     {"categories", mc},
                     {"categories_rank", cat_rank}};
    if (pred) {
      errors["step_seconds_pct"] = pct(pred->step_seconds, step);
      errors["per_gpu_peak_pct"] = pct(double(pred->memory.per_gpu_peak_bytes), peak);
      for (auto it = mc.begin(); it != mc.end(); ++it)
        if (pc.contains(it.key()) && it->is_number())
          errors["categories_pct"][it.key()] = pct(pc[it.key()].get<double>(), it->get<double>());
    }
  } else {
    r["measured"] = nullptr;
  }
  r["errors"] = errors;
  r["causes"] = (pred && !r["measured"].is_null()) ? miss_causes(*pred, (*run.result)["measurement"], r, profile_cpu_adam,
                                                                  std::max(1, p.cluster.gpus_per_node))
                                                    : json(nullptr);
  return r;
}

json summarize(const json& plans, const std::string& held_out) {
  json out = json::object();
  for (const std::string half : {"all", "A", "B"}) {
    std::vector<std::pair<double, std::string>> step, mem;
    int n = 0, ran = 0, fit_ran = 0, fit_oom = 0, fit_failed = 0, unfit_ran = 0, unfit_oom = 0, unfit_failed = 0;
    for (const auto& p : plans) {
      if (half != "all" && p["half"] != half) continue;
      ++n;
      const std::string st = p["status"].get<std::string>();
      ran += st == "ran";
      if (!p["predicted"].is_null() && st != "refused" && st != "not_run") {
        const bool fits = p["predicted"]["fits"].get<bool>();
        const bool oom = st == "out_of_memory";
        if (fits) fit_ran += st == "ran", fit_oom += oom, fit_failed += !oom && st != "ran";
        else unfit_ran += st == "ran", unfit_oom += oom, unfit_failed += !oom && st != "ran";
      }
      const json& e = p["errors"];
      const std::string name = p["name"].get<std::string>();
      if (e["step_seconds_pct"].is_number()) step.push_back({e["step_seconds_pct"].get<double>(), name});
      if (e["per_gpu_peak_pct"].is_number()) mem.push_back({e["per_gpu_peak_pct"].get<double>(), name});
    }
    auto stats = [](const std::vector<std::pair<double, std::string>>& v) -> json {
      if (v.empty()) return {{"plans", 0}, {"mape_pct", nullptr}, {"worst_pct", nullptr}, {"worst_plan", nullptr}};
      double sum = 0;
      const auto* worst = &v.front();
      for (const auto& x : v) {
        sum += std::abs(x.first);
        if (std::abs(x.first) > std::abs(worst->first)) worst = &x;
      }
      return {{"plans", v.size()}, {"mape_pct", sum / double(v.size())}, {"worst_pct", worst->first},
              {"worst_plan", worst->second}};
    };
    out[half] = {{"plans", n},
                 {"ran", ran},
                 {"held_out", half == held_out},
                 {"step_seconds", stats(step)},
                 {"per_gpu_peak", stats(mem)},
                 {"fit_checks",
                  {{"predicted_fit_ran", fit_ran},
                   {"predicted_fit_out_of_memory", fit_oom},
                   {"predicted_fit_failed_otherwise", fit_failed},
                   {"predicted_unfit_ran", unfit_ran},
                   {"predicted_unfit_out_of_memory", unfit_oom},
                   {"predicted_unfit_failed_otherwise", unfit_failed}}}};
  }
  return out;
}

std::string report_table(const json& report) {
  std::string o = fmt::format("planner validate: {} ({} plans; {} warm-up + {} timed steps each)\n",
                              report.value("sweep_name", ""), report["plans"].size(), report.value("warmup", 0),
                              report.value("steps", 0));
  if (report.value("moe_routing", json(nullptr)) == "balanced")
    o += "mixture of experts: balanced routing (benchmark mode, --moe-routing balanced), not the models' own\n";
  o += fmt::format("{:<30} {:>1} {:>2}  {:<42} {:>9} {:>9} {:>7}  {:>10} {:>10} {:>7}  {:<14}\n", "plan", "", "G",
                   "strategy", "step pred", "meas", "err", "peak pred", "meas", "err", "fit / outcome");
  auto cell = [](const json& v, const char* f) { return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-"); };
  for (const auto& p : report["plans"]) {
    const json& pr = p["predicted"];
    const json& me = p["measured"];
    const json& e = p["errors"];
    const std::string fit = pr.is_null() ? "?" : pr["fits"].get<bool>() ? "fits" : "no fit";
    o += fmt::format("{:<30} {:>1} {:>2}  {:<42} {:>9} {:>9} {:>7}  {:>10} {:>10} {:>7}  {:<14}\n",
                     p["name"].get<std::string>().substr(0, 30), p["half"].get<std::string>(), p["world"].get<int>(),
                     short_strategy_text(p["strategy"].get<std::string>()).substr(0, 42),
                     pr.is_null() ? "-" : cell(pr["step_seconds"], "{:.4f}"),
                     me.is_null() ? "-" : cell(me["step_seconds"], "{:.4f}"), cell(e["step_seconds_pct"], "{:+.1f}%"),
                     pr.is_null() ? "-" : gib(pr["per_gpu_peak_bytes"].get<double>()),
                     me.is_null() ? "-" : gib(me["per_gpu_peak_bytes"].get<double>()), cell(e["per_gpu_peak_pct"], "{:+.1f}%"),
                     fit + " / " + p["status"].get<std::string>());
  }
  o += "(err = (predicted - measured) / measured; step time in seconds; peak memory per GPU, the fullest rank)\n";
  for (const char* half : {"A", "B", "all"}) {
    const json& s = report["summary"][half];
    if (s["plans"].get<int>() == 0) continue;
    auto line = [](const json& st) {
      if (st["mape_pct"].is_null()) return std::string("no plan to compare");
      return fmt::format("MAPE {:.1f}%, worst {:+.1f}% ({}), {} plans", st["mape_pct"].get<double>(),
                         st["worst_pct"].get<double>(), st["worst_plan"].get<std::string>(), st["plans"].get<int>());
    };
    const std::string label = std::string(half) == "all" ? "all" : fmt::format("half {}{}", half, s["held_out"].get<bool>() ? " (held out)" : "");
    o += fmt::format("{}: {} of {} ran; step time {}; peak memory {}\n", label, s["ran"].get<int>(),
                     s["plans"].get<int>(), line(s["step_seconds"]), line(s["per_gpu_peak"]));
  }
  const json& f = report["summary"]["all"]["fit_checks"];
  o += fmt::format("fit verdicts: predicted to fit: {} ran, {} out of memory, {} failed otherwise; predicted not to "
                   "fit: {} ran, {} out of memory, {} failed otherwise\n",
                   f["predicted_fit_ran"].get<int>(), f["predicted_fit_out_of_memory"].get<int>(),
                   f["predicted_fit_failed_otherwise"].get<int>(), f["predicted_unfit_ran"].get<int>(),
                   f["predicted_unfit_out_of_memory"].get<int>(), f["predicted_unfit_failed_otherwise"].get<int>());
  // Per plan, where the misses beyond the targets (step 4%, memory 2%) come from.
  bool head = false;
  for (const auto& p : report["plans"]) {
    if (!p.contains("causes") || p["causes"].is_null()) continue;
    const json& e = p["errors"];
    const bool step_miss = e["step_seconds_pct"].is_number() && std::abs(e["step_seconds_pct"].get<double>()) > 4.0;
    const bool mem_miss = e["per_gpu_peak_pct"].is_number() && std::abs(e["per_gpu_peak_pct"].get<double>()) > 2.0;
    if (!step_miss && !mem_miss) continue;
    if (!head) o += "where the misses beyond 4% (step) and 2% (memory) come from:\n", head = true;
    if (step_miss && p["causes"]["step"].is_object())
      o += fmt::format("  {} step {:+.1f}%: {}\n", p["name"].get<std::string>(), e["step_seconds_pct"].get<double>(),
                       p["causes"]["step"]["text"].get<std::string>());
    if (mem_miss && p["causes"]["memory"].is_object())
      o += fmt::format("  {} memory {:+.1f}%: {}\n", p["name"].get<std::string>(), e["per_gpu_peak_pct"].get<double>(),
                       p["causes"]["memory"]["text"].get<std::string>());
  }
  // Pipeline plans (exec --trace): each stage's bubble, predicted against measured.
  bool bhead = false;
  for (const auto& p : report["plans"]) {
    if (!p.contains("bubble") || !p["bubble"].is_object()) continue;
    if (!bhead) o += "pipeline bubble per stage (the step less its forward, backward and optimizer passes), predicted / measured:\n", bhead = true;
    std::string line = "  " + p["name"].get<std::string>() + ":";
    for (const auto& st : p["bubble"]["stages"]) {
      line += fmt::format(" stage {} {:.4f} s ({:.1f}%) /", st["stage"].get<int>(), st["predicted_seconds"].get<double>(),
                          100 * st["predicted_fraction"].get<double>());
      for (const auto& m : st["measured"])
        line += fmt::format(" {:.4f} s ({:.1f}%)", m["seconds"].get<double>(), 100 * m["fraction"].get<double>());
      line += ";";
    }
    line.back() = '\n';
    o += line;
  }
  for (const auto& p : report["plans"])
    if (!p["error"].is_null()) o += fmt::format("{}: {}: {}\n", p["name"].get<std::string>(), p["status"].get<std::string>(), p["error"].get<std::string>());
  return o;
}

std::string report_csv(const json& report) {
  auto q = [](const std::string& s) {
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
  };
  auto v = [](const json& x) {
    if (x.is_number_integer()) return std::to_string(x.get<int64_t>());
    if (x.is_number()) return fmt::format("{:.6g}", x.get<double>());
    if (x.is_boolean()) return std::string(x.get<bool>() ? "true" : "false");
    return std::string();
  };
  std::string o = "name,half,world,strategy,status,predicted_fit,predicted_step_seconds,measured_step_seconds,step_error_pct,"
                  "predicted_peak_bytes,measured_peak_bytes,peak_error_pct";
  for (int i = 0; i < kMemCategories; ++i) {
    const std::string c = to_string(MemCategory(i));
    o += ",predicted_" + c + ",measured_" + c;
  }
  o += "\n";
  const json null;
  for (const auto& p : report["plans"]) {
    const json& pr = p["predicted"];
    const json& me = p["measured"];
    auto field = [&](const json& obj, const char* k) -> const json& { return obj.is_object() && obj.contains(k) ? obj[k] : null; };
    o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}", q(p["name"].get<std::string>()), p["half"].get<std::string>(), p["world"].get<int>(),
                     q(p["strategy"].get<std::string>()), p["status"].get<std::string>(), v(field(pr, "fits")), v(field(pr, "step_seconds")),
                     v(field(me, "step_seconds")), v(p["errors"]["step_seconds_pct"]), v(field(pr, "per_gpu_peak_bytes")),
                     v(field(me, "per_gpu_peak_bytes")), v(p["errors"]["per_gpu_peak_pct"]));
    for (int i = 0; i < kMemCategories; ++i) {
      const char* c = to_string(MemCategory(i));
      o += "," + v(field(field(pr, "categories"), c)) + "," + v(field(field(me, "categories"), c));
    }
    o += "\n";
  }
  return o;
}

}  // namespace planner

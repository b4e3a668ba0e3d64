#include "planner/exec_report.hpp"

#include <fmt/format.h>

#include "costmodel/trace.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/step_program.hpp"

#include <cmath>
#include <set>
#include <sstream>
#include <vector>

namespace planner {

namespace {

using nlohmann::json;

json num_or_null(double v, bool ok = true) { return ok && std::isfinite(v) ? json(v) : json(nullptr); }

double num(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

struct Row {
  std::string name;
  double predicted, measured;
  bool have_pred = true, have_meas = true;
  bool compare = true;  // false: both shown, no error (a CPU run against a GPU prediction)
};

// The error column: none where a side is missing or the two are not comparable,
// a dash where both are zero (nothing predicted, nothing measured).
std::string error_text(const Row& r) {
  if (!r.have_pred || !r.have_meas || !r.compare) return "";
  if (r.predicted == 0 && r.measured == 0) return "\u2014";
  if (r.measured > 0) return fmt::format("{:+.1f}%", (r.predicted - r.measured) / r.measured * 100);
  return "";
}

}  // namespace

nlohmann::json kernel_class_comparison(const StepPrediction& p, const nlohmann::json& m) {
  if (!m.contains("kernels") || !m["kernels"].is_object()) return nullptr;
  const json& k = m["kernels"];
  if (!k.contains("by_class") || !k["by_class"].is_object()) return nullptr;
  const json& c = k["by_class"];
  // The kernels are rank 0's: its pipeline stage's, with under tp the
  // collectives it waits for inside the passes (in the measured span).
  const OpTimes& q = p.compute_by_class_rank0;
  auto pair = [](json pred, double meas) { return json{{"predicted", pred}, {"measured", meas}}; };
  return {{"forward_backward", pair(q.total_seconds(), num(k, "span_seconds"))},
          {"gemm", pair(q.gemm_seconds, num(c, "gemm_seconds"))},
          {"attention", pair(q.attention_seconds, num(c, "attention_seconds"))},
          {"memory_bound", pair(q.memory_seconds, num(c, "memory_bound_seconds"))},
          {"host_copy", pair(nullptr, num(c, "host_copy_seconds"))},
          {"communication", pair(nullptr, num(c, "communication_seconds"))},
          {"idle", pair(nullptr, num(k, "idle_seconds"))}};
}

MeasuredPeak fullest_rank_memory(const json& m) {
  MeasuredPeak r;
  const json mem = m.value("memory", json::object());
  r.peak_bytes = num(mem, "total_bytes");
  r.categories = mem.value("categories", json::object());
  for (const auto& x : m.value("ranks", json::array())) {
    if (num(x, "peak_bytes") > r.peak_bytes && x.contains("categories") && x["categories"].is_object()) {
      r.categories = x["categories"];
      r.rank = x.value("rank", 0);
    }
    r.peak_bytes = std::max(r.peak_bytes, num(x, "peak_bytes"));
  }
  return r;
}

namespace {

std::vector<Row> comparison_rows(const Strategy& s, const StepPrediction& p, const json& m, bool times_comparable) {
  std::vector<Row> rows;
  const double mfu = num(m, "mfu", -1);
  rows.push_back({"step_seconds", p.step_seconds, num(m["step_seconds"], "median")});
  rows.push_back({"samples_per_second", p.samples_per_second, num(m, "samples_per_second")});
  rows.push_back({"tokens_per_second", p.tokens_per_second, num(m, "tokens_per_second")});
  rows.push_back({"model_tflops", p.tflops_per_gpu, num(m, "model_tflops")});
  rows.push_back({"mfu", p.mfu, mfu, true, mfu >= 0});
  // Exposed communication: the compute stream's wait at the step program's Sync
  // and in its blocking step-end reductions (CUDA events around each action)
  // against the simulator's exposed communication and copies.
  if (m.contains("action_seconds") && m["action_seconds"].contains("Sync")) {
    double waited = 0;
    for (StepOp op : {StepOp::Sync, StepOp::TiedReduce, StepOp::ReplicaReduce, StepOp::LossReduce, StepOp::NormReduce})
      if (m["action_seconds"].contains(to_string(op))) waited += m["action_seconds"][to_string(op)].get<double>();
    rows.push_back({"exposed_comm_seconds", p.exposed_comm_seconds + p.offload_seconds, waited});
  }
  // The predicted fullest stage's categories against the fullest rank's (one
  // rule with validate's: fullest_rank_memory).
  const auto& bd = p.memory.stages.empty() ? MemBreakdown{} : p.memory.peak_breakdown();
  const MeasuredPeak mp = fullest_rank_memory(m);
  for (int i = 0; i < kMemCategories; ++i) {
    const char* name = to_string(MemCategory(i));
    rows.push_back({std::string("memory.") + name, double(bd[i]), num(mp.categories, name), !p.memory.stages.empty(), true});
  }
  rows.push_back({"memory.peak_total", double(p.memory.per_gpu_peak_bytes), mp.peak_bytes, !p.memory.stages.empty(), true});
  if (s.pp > 1 && p.memory.stages.size() == size_t(s.pp)) {
    // Pipeline stages hold different layers: each stage's predicted peak against
    // the fullest rank of that stage.
    const RankGrid grid(s.dp, s.pp, s.tp, s.cp);
    std::vector<double> meas(size_t(s.pp), 0.0);
    for (const auto& x : m.value("ranks", json::array())) {
      const int r = x.value("rank", 0);
      if (r >= 0 && r < grid.world()) meas[size_t(grid.coord(r).pp)] = std::max(meas[size_t(grid.coord(r).pp)], num(x, "peak_bytes"));
    }
    for (int st = 0; st < s.pp; ++st)
      rows.push_back({fmt::format("memory.stage{}_peak", st), double(p.memory.stages[size_t(st)].gpu_peak_bytes),
                      meas[size_t(st)], true, meas[size_t(st)] > 0});
  }
  // --kernels: one step's forward and backward kernels by the time model's op
  // classes (rank 0, stage 0 under pipeline parallelism: the prediction's
  // critical stage may differ).
  const json kc = kernel_class_comparison(p, m);
  if (kc.is_object())
    for (const char* n : {"forward_backward", "gemm", "attention", "memory_bound", "host_copy", "communication", "idle"}) {
      const json& pr = kc[n]["predicted"];
      rows.push_back({std::string("kernels.") + n, pr.is_number() ? pr.get<double>() : 0.0,
                      kc[n]["measured"].get<double>(), pr.is_number(), true});
    }
  if (num(m, "host_state_bytes") > 0) {
    // Host memory of the node: every rank's peak resident set.
    double host = 0;
    for (const auto& x : m.value("ranks", json::array())) host += num(x, "host_peak_bytes");
    rows.push_back({"memory.host_node", double(p.memory.host_peak_bytes), host, !p.memory.stages.empty(), host > 0});
  }
  // A CPU run against a GPU prediction: times, rates, kernels, the CUDA
  // context (overhead) and so the peaks do not compare; the model's own tensors do.
  if (!times_comparable)
    for (Row& r : rows) {
      static const std::set<std::string> same_anywhere = {"memory.parameters", "memory.gradients",
                                                          "memory.optimizer_states", "memory.activations",
                                                          "memory.logits_loss", "memory.comm_buffers"};
      r.compare = same_anywhere.count(r.name) > 0;
    }
  return rows;
}

json comparison_json(const std::vector<Row>& rows) {
  json c = json::object();
  for (const auto& r : rows) {
    json e = {{"predicted", num_or_null(r.predicted, r.have_pred)}, {"measured", num_or_null(r.measured, r.have_meas)}};
    // No relative error for a zero prediction (it would read -100% against any measured crumb).
    const bool both = r.compare && r.have_pred && r.have_meas && r.measured > 0 && r.predicted != 0 &&
                      std::isfinite(r.predicted);
    e["error_pct"] = both ? json((r.predicted - r.measured) / r.measured * 100.0) : json(nullptr);
    c[r.name] = e;
  }
  return c;
}

std::string render_value(const std::string& name, double v) {
  if (name.rfind("memory.", 0) == 0) {
    if (v >= double(1 << 30)) return fmt::format("{:.2f} GiB", v / double(1 << 30));
    if (v >= double(1 << 20)) return fmt::format("{:.1f} MiB", v / double(1 << 20));
    return fmt::format("{:.1f} KiB", v / 1024.0);
  }
  if (name == "step_seconds" || name == "exposed_comm_seconds" || name.rfind("kernels.", 0) == 0)
    return fmt::format("{:.4f} s", v);
  if (name == "mfu") return fmt::format("{:.1f} %", v * 100);
  return fmt::format("{:.1f}", v);
}

std::string render_table(const Plan& plan, const json& run, const std::vector<Row>& rows) {
  const json& m = run["measurement"];
  const json& mc = run["machine"];
  std::ostringstream o;
  const auto& s = plan.strategy;
  o << fmt::format("planner exec: {} ({} parameters), seq {}, {}, dp={} tp={} pp={} zero={} offload={} mbs={} gas={} ckpt={}{}\n",
                   plan.model.name, m.value("params", int64_t(0)), plan.seq, to_string(s.precision), s.dp, s.tp, s.pp,
                   s.zero, to_string(s.offload), s.mbs, s.gas, to_string(s.ckpt),
                   s.pp > 1 ? fmt::format(" schedule={}{}", to_string(s.schedule),
                                          s.schedule == Schedule::Interleaved ? fmt::format(" vpp={}", s.vpp) : "")
                            : std::string());
  if (m.value("world", 1) > 1) {
    o << "ranks: " << m["world"].get<int>() << " (step time = the slowest rank's); per rank median step / peak memory:";
    for (const auto& x : m["ranks"])
      o << fmt::format(" [{}] {:.4f} s / {:.2f} GiB", x.value("rank", 0), num(x, "median_step_seconds"),
                       num(x, "peak_bytes") / double(1 << 30));
    o << "\n";
  }
  if (num(m, "cpu_adam_seconds") > 0)
    o << fmt::format("CPU AdamW: {:.3f} s per step, {:.3g} parameters/s; host memcpy {:.1f} GB/s (read + write)\n",
                     num(m, "cpu_adam_seconds"), num(m, "cpu_adam_params_per_second"), num(m, "host_copy_gbps"));
  if (m.contains("cpu_steal_fraction") && m["cpu_steal_fraction"].is_number())
    o << fmt::format("host CPU time stolen by the hypervisor over the timed steps: {:.1f}%\n",
                     100 * num(m, "cpu_steal_fraction"));
  o << "device: " << mc.value("device", "");
  if (!mc.value("gpu_name", "").empty())
    o << " " << mc.value("gpu_name", "") << " (driver " << mc.value("driver", "") << ", CUDA "
      << mc.value("cuda_runtime", "") << ")";
  else
    o << " " << mc.value("cpu", "") << " (" << mc.value("cpu_threads", 0) << " threads)";
  o << ", LibTorch " << mc.value("libtorch", "") << "\n";
  const json& st = m["step_seconds"];
  o << fmt::format("steps: {} warm-up + {} timed; step time median {:.4f} s (min {:.4f}, max {:.4f}, p10 {:.4f}, p90 {:.4f})\n",
                   m.value("warmup", 0), m.value("steps", 0), num(st, "median"), num(st, "min"), num(st, "max"),
                   num(st, "p10"), num(st, "p90"));
  const json losses = m.value("losses", json::array());
  if (!losses.empty())
    o << fmt::format("loss: {:.4f} (step 1) -> {:.4f} (step {})\n", losses.front().get<double>(),
                     losses.back().get<double>(), losses.size());
  o << "\n" << fmt::format("{:<26} {:>16} {:>16} {:>9}\n", "", "predicted", "measured", "error");
  for (const auto& r : rows) {
    const bool kern = r.name.rfind("kernels.", 0) == 0;
    const std::string label = r.name.rfind("memory.", 0) == 0 ? "  " + r.name.substr(7)
                              : kern                           ? "  " + r.name.substr(8)
                                                               : r.name;
    if (r.name == "memory.parameters") o << "memory\n";
    if (r.name == "kernels.forward_backward") o << "kernels of one step's forward + backward (rank 0)\n";
    const std::string pv = r.have_pred ? render_value(r.name, r.predicted) : "n/a";
    const std::string mv = r.have_meas ? render_value(r.name, r.measured) : "n/a";
    // Both shown as zero (a few bytes or nanoseconds measured against none
    // predicted): a dash, not -100%.
    const bool both_zero = r.have_pred && r.have_meas && r.compare && pv == render_value(r.name, 0.0) && mv == pv;
    const std::string ev = both_zero ? "\u2014" : error_text(r);
    o << fmt::format("{:<26} {:>16} {:>16} {:>9}\n", label, pv, mv, ev);
  }
  o << "(error = (predicted - measured) / measured)\n";
  for (const auto& n : m.value("notes", json::array())) o << "note: " << n.get<std::string>() << "\n";
  return o.str();
}

}  // namespace

ExecReport make_exec_report(const Plan& plan, const StepPrediction& prediction, const nlohmann::json& run,
                            bool times_comparable) {
  const auto rows = comparison_rows(plan.strategy, prediction, run.at("measurement"), times_comparable);
  ExecReport r;
  r.result = {{"format", "planner-exec-result"},
              {"version", 1},
              {"created", run.value("created", "")},
              {"plan", plan_to_json(plan)},
              {"options", run.value("options", json::object())},
              {"prediction", prediction_json(prediction)},
              // The memory model's verdict before the run (capacity less headroom): a
              // plan predicted not to fit still runs, after a warning on stderr.
              {"predicted_fit", prediction.memory.fits()},
              {"measurement", run.at("measurement")},
              {"comparison", comparison_json(rows)},
              {"machine", run.value("machine", json::object())}};
  r.table = render_table(plan, run, rows);
  return r;
}

nlohmann::json exec_trace_json(const Plan& plan, const SimResult& predicted, const nlohmann::json& run) {
  json t = chrome_trace_json(predicted, fmt::format("{} on {}: {} (predicted: stages 0..; measured: ranks)",
                                                    plan.model.name, plan.cluster.name, plan.strategy.to_string()));
  json& events = t["traceEvents"];
  const json& tl = run.at("measurement").at("timeline");
  const json& rank_stage = tl.at("rank_stage");
  int r = 0;
  for (const json& flat : tl.at("ranks")) {
    const int pid = 1000 + r;
    const int stage = r < int(rank_stage.size()) ? rank_stage[size_t(r)].get<int>() : 0;
    const json& actions = tl.at("stage_actions").at(size_t(stage));
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", fmt::format("measured rank {}, stage {} (compute stream)", r, stage)},
                                {"stage", stage}}}});  // read back as a number, never out of the name
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"sort_index", pid}}}});
    for (size_t i = 0; i + 1 < flat.size() && i / 2 < actions.size(); i += 2) {
      const double a = flat[i].get<double>(), b = flat[i + 1].get<double>();
      if (!(b > a)) continue;
      // The stage's list as the step program prints it: parse_step_action
      // reads each back into the action whose op and operands the span's args carry.
      const std::string text = actions[i / 2].get<std::string>();
      const StepAction act = parse_step_action(text);
      events.push_back({{"name", text},
                        {"cat", "measured"},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", 0},
                        {"ts", a * 1e6},
                        {"dur", (b - a) * 1e6},
                        {"args",
                         {{"action", i / 2},
                          {"op", to_string(act.op)},
                          {"microbatch", act.microbatch},
                          {"chunk", act.chunk},
                          {"unit", act.unit}}}});
    }
    ++r;
  }
  t["otherData"]["measured_step_seconds"] = run["measurement"]["step_seconds"]["median"];
  return t;
}

}  // namespace planner

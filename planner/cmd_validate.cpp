// `planner validate sweep.json [-o DIR]` (or `--rank-question Q --top K`: the
// top K plans of a `plan` question, planner/validate_rank.hpp): runs every plan of a sweep with the
// runtime (`planner exec`, which starts mpirun itself for several ranks),
// puts each prediction beside what was measured and writes DIR/report.json,
// DIR/report.csv and the pictures (planner/validate.hpp). The runs are child
// processes of this one, so the planning half never loads LibTorch.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "costmodel/predict_detail.hpp"
#include "planner/cli.hpp"
#include "planner/validate.hpp"
#include "planner/validate_rank.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs argv with stdout and stderr into `log` (and cwd `dir` when not empty);
// ends the process group after `timeout_s`. Returns the exit code (128 + signal
// when killed), *timed_out when the time ran out.
int run_child(const std::vector<std::string>& argv, const std::string& log, const std::string& dir, int timeout_s,
              bool* timed_out) {
  *timed_out = false;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("validate: fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a timeout ends mpirun and its ranks together
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
    if (!dir.empty() && chdir(dir.c_str()) != 0) _exit(127);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (timeout_s > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s) && !*timed_out) {
      *timed_out = true;
      kill(-pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(5));
      kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The one-line error `planner exec` printed ("planner: ..."), else the log's last line.
std::string error_line(const std::string& log) {
  std::ifstream in(log);
  std::string line, last, planner_line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("planner: ", 0) == 0) planner_line = line;
  }
  const std::string e = planner_line.empty() ? last : planner_line;
  return e.substr(0, 400);
}

bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  for (const auto& d : split(path ? path : "", ':')) {
    std::error_code ec;
    if (!d.empty() && fs::is_regular_file(fs::path(d) / prog, ec) && access((fs::path(d) / prog).c_str(), X_OK) == 0)
      return true;
  }
  return false;
}


std::string self_exe(const char* argv0) {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}


struct ValidateOpts {
  std::string sweep, output, steps, warmup, device = "auto", only, half, timeout = "1200", gpus, rank_question, top;
  std::string moe_routing;  // empty: exec's default (learned)
  ProfileCli profile;
  bool json = false, quiet = false, oversubscribe = false, predict_only = false, no_plots = false, kernels = false;
};

// Everything a run needs, checked before anything is written.
struct ValidateJob {
  Sweep sw;
  std::optional<RankSweep> ranking;  // --rank-question
  int steps = 5, warmup = 2, timeout = 1200;
  std::set<std::string> only;
  std::vector<HardwareProfile> profiles;  // one per plan
  std::string dir, exe;
};

void check_options(const ValidateOpts& o) {
  if (o.sweep.empty() == o.rank_question.empty())
    throw InputError("validate: give a sweep file or --rank-question (a `plan` question), one of the two");
  if (!o.top.empty() && o.rank_question.empty()) throw InputError("--top goes with --rank-question");
  if (!o.rank_question.empty() && !o.gpus.empty())
    throw InputError("--gpus replaces a sweep's GPUs; with --rank-question give the GPUs in the question");
  if (o.device != "auto" && o.device != "cuda" && o.device != "cpu")
    throw InputError(fmt::format("--device '{}' is not one of auto|cuda|cpu", o.device));
  if (!o.half.empty() && o.half != "A" && o.half != "B") throw InputError("--half must be A or B");
  if (o.kernels && o.device == "cpu") throw InputError("--kernels records GPU kernels; it cannot go with --device cpu");
  if (!o.moe_routing.empty() && o.moe_routing != "learned" && o.moe_routing != "balanced")
    throw InputError(fmt::format("--moe-routing '{}' is not one of learned (the router's own top-k) or balanced (every "
                                 "expert the same rows, a benchmark mode)", clip(o.moe_routing)));
  check_headroom(o.profile.headroom);
}

// --moe-routing balanced runs only mixture-of-experts plans: a dense one among
// those chosen is refused before anything runs (planner exec would refuse it).
void check_moe_routing(const ValidateOpts& o, const ValidateJob& j) {
  if (o.moe_routing != "balanced") return;
  for (const auto& e : j.sw.entries)
    if ((j.only.empty() || j.only.count(e.name)) && (o.half.empty() || e.half == o.half) && !e.plan.model.moe.enabled())
      throw InputError(fmt::format("--moe-routing balanced needs mixture-of-experts models; plan '{}' ({}) is dense "
                                   "(leave it out with --only)", e.name, clip(e.plan.model.name)));
}

void check_output_dir(const std::string& dir) {
  const fs::path d(dir);
  const fs::path parent = d.has_parent_path() ? d.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) throw InputError(fmt::format("-o: folder '{}' does not exist", clip(parent.string())));
  if (fs::exists(d, ec) && !fs::is_directory(d, ec)) throw InputError(fmt::format("-o: '{}' is not a folder", clip(dir)));
  // The folder (or its parent, which will hold it) must take new files.
  check_writable(fs::is_directory(d, ec) ? (d / "report.json").string() : dir);
}

ValidateJob prepare(const ValidateOpts& o) {
  check_options(o);
  ValidateJob j;
  if (o.rank_question.empty()) {
    j.sw = load_sweep(o.sweep, o.gpus);
  } else {
    const int top = o.top.empty() ? 5 : int(parse_capped(o.top, "--top", 100));
    j.ranking = ranking_sweep(o.rank_question, top, "",
                              [&](const GpuSpec& g) { return resolve_profile(o.profile, g, o.device); });
    j.sw = j.ranking->sweep;
  }
  j.steps = o.steps.empty() ? j.sw.steps : int(parse_capped(o.steps, "--steps", kMaxSteps));
  j.warmup = o.warmup.empty() ? j.sw.warmup : int(parse_capped(o.warmup, "--warmup", kMaxSteps, true));
  j.timeout = int(parse_capped(o.timeout, "--timeout", 7 * 86400));
  const std::string source = o.sweep.empty() ? "the ranking question's plans (rank1, rank2, ...)" : o.sweep;
  for (const auto& n : split(o.only, ',')) {
    if (trim(n).empty()) continue;
    bool found = false;
    for (const auto& e : j.sw.entries) found = found || e.name == trim(n);
    if (!found) throw InputError(fmt::format("--only: no plan '{}' in {}", trim(n), source));
    j.only.insert(trim(n));
  }
  check_moe_routing(o, j);
  for (const auto& e : j.sw.entries) j.profiles.push_back(resolve_profile(o.profile, e.plan.cluster.gpu, o.device));
  j.dir = !o.output.empty() ? o.output : o.sweep.empty() ? "validate-ranking" : "validate-" + fs::path(o.sweep).stem().string();
  check_output_dir(j.dir);
  return j;
}

// `planner exec` of one plan into DIR/runs/NAME.json (and its trace for a pipeline plan).
RunOutcome run_plan(const ValidateOpts& o, const ValidateJob& j, const SweepEntry& e, const std::string& plan_file,
                    json& machine) {
  RunOutcome run;
  run.result_file = "runs/" + e.name + ".json";
  run.log_file = "runs/" + e.name + ".log";
  const std::string result_path = (fs::path(j.dir) / run.result_file).string();
  std::error_code ec;
  fs::remove(result_path, ec);  // a stale result of an earlier run must not pass for this one
  std::vector<std::string> args = {j.exe, "exec", plan_file, "--steps", std::to_string(j.steps), "--warmup",
                                   std::to_string(j.warmup), "--device", o.device, "-q", "-o", result_path};
  if (!o.profile.profile.empty()) args.insert(args.end(), {"--profile", o.profile.profile});
  if (!o.profile.headroom.empty()) args.insert(args.end(), {"--headroom", o.profile.headroom});
  if (o.oversubscribe) args.push_back("--oversubscribe");
  if (o.kernels) args.push_back("--kernels");
  if (!o.moe_routing.empty()) args.insert(args.end(), {"--moe-routing", o.moe_routing});
  // A pipeline plan's predicted and measured timelines (timeline_NAME.png).
  const std::string trace_rel = "runs/" + e.name + ".trace.json";
  if (e.plan.strategy.pp > 1) {
    fs::remove(fs::path(j.dir) / trace_rel, ec);
    args.insert(args.end(), {"--trace", (fs::path(j.dir) / trace_rel).string()});
  }
  bool timed_out = false;
  run.exit_code = run_child(args, (fs::path(j.dir) / run.log_file).string(), "", j.timeout, &timed_out);
  if (run.exit_code == 0 && fs::is_regular_file(result_path, ec)) {
    run.status = "ran";
    run.result = read_json_file(result_path, "result");
    if (machine.is_null()) machine = run.result->value("machine", json(nullptr));
  } else {
    run.error = error_line((fs::path(j.dir) / run.log_file).string());
    run.result_file.clear();
    const bool oom = to_lower(run.error).find("out of memory") != std::string::npos;
    run.status = timed_out ? "timeout" : oom ? "out_of_memory" : run.exit_code == 2 ? "refused" : "failed";
  }
  return run;
}

// One plan: predicted, run (unless --predict-only), its report record.
json validate_entry(const ValidateOpts& o, const ValidateJob& j, size_t k, size_t i, size_t chosen, json& machine) {
  const SweepEntry& e = j.sw.entries[k];
  const std::string plan_file = (fs::path(j.dir) / "plans" / (e.name + ".json")).string();
  save_plan(e.plan, plan_file);
  std::optional<StepPrediction> pred;
  std::string pred_error;
  try {
    pred = predict(e.plan, j.profiles[k]);
  } catch (const InputError& err) {
    pred_error = err.what();
  }
  if (!o.quiet)
    std::cerr << fmt::format("validate: [{}/{}] {} (half {}, {} GPU{}): predicted {}", i, chosen, e.name, e.half,
                             e.plan.strategy.world(), e.plan.strategy.world() > 1 ? "s" : "",
                             pred ? fmt::format("{:.4f} s, {:.2f} GiB ({})", pred->step_seconds,
                                                double(pred->memory.per_gpu_peak_bytes) / double(1 << 30),
                                                pred->memory.fits() ? "fits" : "does not fit")
                                  : "nothing (" + pred_error + ")")
              << std::flush;
  const RunOutcome run = o.predict_only ? RunOutcome{} : run_plan(o, j, e, plan_file, machine);
  json rec = plan_record(e, pred, pred_error, run, j.profiles[k].cpu_adam_params_per_second);
  const std::string trace_rel = "runs/" + e.name + ".trace.json";
  std::error_code tec;
  if (run.status == "ran" && e.plan.strategy.pp > 1 && fs::is_regular_file(fs::path(j.dir) / trace_rel, tec)) {
    rec["trace_file"] = trace_rel;
    try {
      const json b = pipeline_bubble(read_json_file((fs::path(j.dir) / trace_rel).string(), "trace"));
      if (!b.is_null()) rec["bubble"] = b;
    } catch (const std::exception&) {
      // An unreadable trace: no bubble figures for this plan.
    }
  }
  if (!o.quiet) {
    auto num_or0 = [](const json& v) { return v.is_number() ? v.get<double>() : 0.0; };
    if (run.status == "ran")
      std::cerr << fmt::format("; measured {:.4f} s ({:+.1f}%), {:.2f} GiB ({:+.1f}%)\n",
                               rec["measured"]["step_seconds"].get<double>(), num_or0(rec["errors"]["step_seconds_pct"]),
                               rec["measured"]["per_gpu_peak_bytes"].get<double>() / double(1 << 30),
                               num_or0(rec["errors"]["per_gpu_peak_pct"]));
    else
      std::cerr << "; " << run.status << (run.error.empty() ? "" : ": " + run.error) << "\n";
  }
  return rec;
}

// The pictures (gnuplot, when on the PATH): adds the drawn files to `files`;
// returns a note when they could not be drawn.
std::string draw_plots(const json& report, const std::string& dir, json& files) {
  std::map<std::string, json> traces;
  for (const auto& p : report["plans"])
    if (p.contains("trace_file")) {
      try {
        traces[p["name"].get<std::string>()] =
            read_json_file((fs::path(dir) / p["trace_file"].get<std::string>()).string(), "trace");
      } catch (const std::exception&) {
        // An unreadable trace leaves that plan without its timeline picture.
      }
    }
  const PlotFiles pf = plot_files(report, traces);
  for (const auto& [name, text] : pf.data) write_file_atomically((fs::path(dir) / name).string(), text);
  write_file_atomically((fs::path(dir) / "plots.gp").string(), pf.script);
  if (!on_path("gnuplot")) return "gnuplot is not on the PATH: wrote plots.gp and its data; draw with `gnuplot plots.gp` in " + dir;
  bool timed_out = false;
  const int rc = run_child({"gnuplot", "plots.gp"}, (fs::path(dir) / "plots.log").string(), dir, 120, &timed_out);
  for (const std::string& png : pf.pngs)
    if (fs::exists(fs::path(dir) / png)) files.push_back(png);
  return rc != 0 ? fmt::format("gnuplot failed (exit {}); see {}/plots.log", rc, dir) : "";
}

void run_validate(const ValidateOpts& o, int& exit_code) {
  ValidateJob j = prepare(o);  // everything that can be refused is refused before anything is written
  fs::create_directories(fs::path(j.dir) / "plans");
  fs::create_directories(fs::path(j.dir) / "runs");
  j.exe = self_exe("planner");
  json plans = json::array();
  json machine = nullptr;
  // report.json and report.csv as they stand: rewritten after every plan, so
  // a sweep cut short (a device's time limit) still leaves its report.
  auto make_report = [&] {
    json report = {{"format", "planner-validation"},
                   {"version", 1},
                   {"created", utc_timestamp()},
                   {"sweep", o.sweep.empty() ? json(nullptr) : json(o.sweep)},
                   {"sweep_name", o.gpus.empty() ? j.sw.name : j.sw.name + ", run on " + o.gpus + " (--gpus)"},
                   {"held_out", j.sw.held_out},
                   {"steps", j.steps},
                   {"warmup", j.warmup},
                   {"device", o.device},
                   {"predict_only", o.predict_only},
                   {"profile", o.profile.profile.empty() ? json(nullptr) : json(o.profile.profile)},
                   {"headroom", o.profile.headroom.empty() ? json(nullptr) : json(o.profile.headroom)},
                   {"moe_routing", o.moe_routing.empty() ? json(nullptr) : json(o.moe_routing)},
                   {"machine", machine},
                   {"complete", false},
                   {"plans", plans}};
    report["summary"] = summarize(plans, j.sw.held_out);
    if (j.ranking) {
      report["question"] = j.ranking->question;
      report["search_notes"] = j.ranking->notes;
      report["ranking"] = ranking_summary(plans, j.ranking->tie_threshold_pct, j.ranking->tie_reason);
    }
    return report;
  };
  auto save = [&](const json& r) {
    write_file_atomically((fs::path(j.dir) / "report.json").string(), r.dump(2) + "\n");
    write_file_atomically((fs::path(j.dir) / "report.csv").string(), report_csv(r));
  };
  auto chosen_entry = [&](const SweepEntry& e) {
    return (j.only.empty() || j.only.count(e.name)) && (o.half.empty() || e.half == o.half);
  };
  size_t i = 0, chosen = 0;
  for (const auto& e : j.sw.entries) chosen += chosen_entry(e);
  for (size_t k = 0; k < j.sw.entries.size(); ++k) {
    if (!chosen_entry(j.sw.entries[k])) continue;
    plans.push_back(validate_entry(o, j, k, ++i, chosen, machine));
    if (!o.predict_only) save(make_report());
  }
  json report = make_report();
  report["complete"] = true;
  json files = {"report.json", "report.csv"};
  const std::string plot_note = o.no_plots ? "" : draw_plots(report, j.dir, files);
  report["files"] = files;
  if (!plot_note.empty()) report["notes"] = json::array({plot_note});
  save(report);
  std::string text = o.json ? report.dump(2) + "\n" : report_table(report);
  if (!o.json) {
    if (j.ranking) text += ranking_table(report["ranking"]);
    if (!plot_note.empty()) text += "note: " + plot_note + "\n";
    text += fmt::format("Wrote {}/report.json, report.csv", j.dir);
    for (size_t f = 2; f < files.size(); ++f) text += ", " + files[f].get<std::string>();
    text += "\n";
  }
  emit("", text);
  exit_code = 0;
}

}  // namespace

CLI::App* add_validate_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("validate", "Run every plan of a sweep and put measured beside predicted");
  cmd->footer(
      "Examples:\n"
      "  planner validate validation/sets/sweep_1gpu.json -o validation/h100/sweep --profile h100.json\n"
      "  planner validate validation/sets/sweep_h200x2.json -o out --only neo-dp2-z3,neo-dp2-z1 --steps 5\n"
      "  planner validate tests/data/sweep_tiny_cpu.json -o out --device cpu --oversubscribe\n"
      "  planner validate validation/sets/sweep_1gpu.json -o preds --predict-only   # commit predictions before running\n"
      "  planner validate validation/sets/sweep_1gpu.json -o h200 --gpus 1xH200 --profile h200.json\n"
      "  planner validate validation/sets/sweep_x2_moe29.json -o balanced --moe-routing balanced   # MoE benchmark mode\n"
      "  planner validate --rank-question \"--model llama-2-7b --gpus 4xH100 --global-batch 32\" --top 5 -o rank\n"
      "Each plan runs as `planner exec` (mpirun started by it for several ranks). Writes DIR/report.json,\n"
      "DIR/report.csv, DIR/plans/NAME.json, DIR/runs/NAME.json (result) and NAME.log, and with gnuplot on the\n"
      "PATH DIR/step_time.png, DIR/peak_memory.png, DIR/memory_breakdown.png and, per pipeline plan, its predicted\n"
      "and measured timelines DIR/timeline_NAME.png from DIR/runs/NAME.trace.json (script: DIR/plots.gp).\n"
      "--rank-question runs the top --top plans (default 5) of that `planner plan` question, searched with the\n"
      "same profile, as plans rank1..rankK, and reports the ranking check: whether plan's pick was the measured\n"
      "best, its measured gap to the best, Kendall's tau-b of predicted against measured step time (report.json\n"
      "\"ranking\"; DIR/ranking.png).\n"
      "Sweep file format: docs/VALIDATION.md, \"planner validate\". Exit 0 when the report was written,\n"
      "whatever the plans did; 2 for a bad sweep or option (nothing written).");
  auto o = std::make_shared<ValidateOpts>();  // owned by the callback, which the app owns
  cmd->add_option("sweep", o->sweep, "sweep.json (or --rank-question)");
  cmd->add_option("--rank-question", o->rank_question,
                  "a `planner plan` question (\"--model M --gpus G [--seq S] [--global-batch B]\"): run its top plans");
  cmd->add_option("--top", o->top, "with --rank-question: how many of its plans to run (default 5)");
  cmd->add_option("-o,--output", o->output, "folder for the report (default: validate-<sweep name>, validate-ranking)");
  add_profile_options(cmd, o->profile);
  cmd->add_option("--steps", o->steps, "timed steps per plan (default: the sweep's, else 5)");
  cmd->add_option("--warmup", o->warmup, "warm-up steps per plan (default: the sweep's, else 2)");
  cmd->add_option("--device", o->device, "auto, cuda or cpu, passed to planner exec (default auto)");
  cmd->add_option("--gpus", o->gpus, "run every plan on these GPUs instead of the sweep's (e.g. 1xH200)");
  cmd->add_option("--only", o->only, "run only these plans (names, comma-separated)");
  cmd->add_option("--half", o->half, "run only half A or half B");
  cmd->add_option("--timeout", o->timeout, "seconds one plan may take before it is ended (default 1200)");
  cmd->add_flag("--oversubscribe", o->oversubscribe, "CPU: more ranks than cores (passed to planner exec)");
  cmd->add_flag("--predict-only", o->predict_only, "predict every plan and write the report without running any");
  cmd->add_flag("--no-plots", o->no_plots, "do not draw the pictures");
  cmd->add_flag("--kernels", o->kernels,
                "GPU: every plan also records one step's kernels (planner exec --kernels); the causes of a miss then "
                "name the op class");
  cmd->add_option("--moe-routing", o->moe_routing,
                  "mixture of experts: learned (the router's top-k, exec's default) or balanced (every expert the same "
                  "rows, a benchmark mode; planner exec --moe-routing); passed to every plan's exec");
  cmd->add_flag("--json", o->json, "print report.json instead of the table");
  cmd->add_flag("--quiet,-q", o->quiet, "no progress on stderr");
  cmd->callback([o, &exit_code] { run_validate(*o, exit_code); });
  return cmd;
}

}  // namespace planner

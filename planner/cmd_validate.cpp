// `planner validate sweep.json [-o DIR]`: runs every plan of a sweep with the
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
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "costmodel/predict_detail.hpp"
#include "planner/cli.hpp"
#include "planner/validate.hpp"
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
      "Each plan runs as `planner exec` (mpirun started by it for several ranks). Writes DIR/report.json,\n"
      "DIR/report.csv, DIR/plans/NAME.json, DIR/runs/NAME.json (result) and NAME.log, and with gnuplot on the\n"
      "PATH DIR/step_time.png, DIR/peak_memory.png, DIR/memory_breakdown.png and, per pipeline plan, its predicted\n"
      "and measured timelines DIR/timeline_NAME.png from DIR/runs/NAME.trace.json (script: DIR/plots.gp).\n"
      "Sweep file format: docs/VALIDATION.md, \"planner validate\". Exit 0 when the report was written,\n"
      "whatever the plans did; 2 for a bad sweep or option (nothing written).");
  struct Opts {
    std::string sweep, output, steps, warmup, device = "auto", only, half, timeout = "1200", gpus;
    ProfileCli profile;
    bool json = false, quiet = false, oversubscribe = false, predict_only = false, no_plots = false, kernels = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("sweep", o->sweep, "sweep.json")->required();
  cmd->add_option("-o,--output", o->output, "folder for the report (default: validate-<sweep name>)");
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
  cmd->add_flag("--json", o->json, "print report.json instead of the table");
  cmd->add_flag("--quiet,-q", o->quiet, "no progress on stderr");
  cmd->callback([o, &exit_code] {
    // Everything that can be refused is refused before anything is written.
    Sweep sw = load_sweep(o->sweep, o->gpus);
    const int steps = o->steps.empty() ? sw.steps : int(parse_capped(o->steps, "--steps", kMaxSteps));
    const int warmup = o->warmup.empty() ? sw.warmup : int(parse_capped(o->warmup, "--warmup", kMaxSteps, true));
    const int timeout = int(parse_capped(o->timeout, "--timeout", 7 * 86400));
    if (o->device != "auto" && o->device != "cuda" && o->device != "cpu")
      throw InputError(fmt::format("--device '{}' is not one of auto|cuda|cpu", o->device));
    if (!o->half.empty() && o->half != "A" && o->half != "B") throw InputError("--half must be A or B");
    if (o->kernels && o->device == "cpu") throw InputError("--kernels records GPU kernels; it cannot go with --device cpu");
    check_headroom(o->profile.headroom);
    std::set<std::string> only;
    for (const auto& n : split(o->only, ',')) {
      if (trim(n).empty()) continue;
      bool found = false;
      for (const auto& e : sw.entries) found = found || e.name == trim(n);
      if (!found) throw InputError(fmt::format("--only: no plan '{}' in {}", trim(n), o->sweep));
      only.insert(trim(n));
    }
    std::vector<HardwareProfile> profiles;  // one per plan, also checks --profile now
    for (const auto& e : sw.entries) profiles.push_back(resolve_profile(o->profile, e.plan.cluster.gpu, o->device));
    const std::string dir = o->output.empty() ? "validate-" + fs::path(o->sweep).stem().string() : o->output;
    {
      const fs::path d(dir);
      const fs::path parent = d.has_parent_path() ? d.parent_path() : fs::path(".");
      std::error_code ec;
      if (!fs::is_directory(parent, ec)) throw InputError(fmt::format("-o: folder '{}' does not exist", clip(parent.string())));
      if (fs::exists(d, ec) && !fs::is_directory(d, ec)) throw InputError(fmt::format("-o: '{}' is not a folder", clip(dir)));
      // The folder (or its parent, which will hold it) must take new files.
      check_writable(fs::is_directory(d, ec) ? (d / "report.json").string() : dir);
    }
    fs::create_directories(fs::path(dir) / "plans");
    fs::create_directories(fs::path(dir) / "runs");
    const std::string exe = self_exe("planner");
    const bool progress = !o->quiet;

    json plans = json::array();
    json machine = nullptr;
    // report.json and report.csv as they stand: rewritten after every plan, so
    // a sweep cut short (a device's time limit) still leaves its report.
    auto make_report = [&] {
      json report = {{"format", "planner-validation"},
                     {"version", 1},
                     {"created", utc_timestamp()},
                     {"sweep", o->sweep},
                     {"sweep_name", o->gpus.empty() ? sw.name : sw.name + ", run on " + o->gpus + " (--gpus)"},
                     {"held_out", sw.held_out},
                     {"steps", steps},
                     {"warmup", warmup},
                     {"device", o->device},
                     {"predict_only", o->predict_only},
                     {"profile", o->profile.profile.empty() ? json(nullptr) : json(o->profile.profile)},
                     {"headroom", o->profile.headroom.empty() ? json(nullptr) : json(o->profile.headroom)},
                     {"machine", machine},
                     {"complete", false},
                     {"plans", plans}};
      report["summary"] = summarize(plans, sw.held_out);
      return report;
    };
    auto save = [&](const json& r) {
      write_file_atomically((fs::path(dir) / "report.json").string(), r.dump(2) + "\n");
      write_file_atomically((fs::path(dir) / "report.csv").string(), report_csv(r));
    };
    size_t i = 0, chosen = 0;
    for (const auto& e : sw.entries) chosen += (only.empty() || only.count(e.name)) && (o->half.empty() || e.half == o->half);
    for (size_t k = 0; k < sw.entries.size(); ++k) {
      const SweepEntry& e = sw.entries[k];
      if (!(only.empty() || only.count(e.name)) || !(o->half.empty() || e.half == o->half)) continue;
      ++i;
      const std::string plan_file = (fs::path(dir) / "plans" / (e.name + ".json")).string();
      save_plan(e.plan, plan_file);
      std::optional<StepPrediction> pred;
      std::string pred_error;
      try {
        pred = predict(e.plan, profiles[k]);
      } catch (const InputError& err) {
        pred_error = err.what();
      }
      if (progress)
        std::cerr << fmt::format("validate: [{}/{}] {} (half {}, {} GPU{}): predicted {}", i, chosen, e.name, e.half,
                                 e.plan.strategy.world(), e.plan.strategy.world() > 1 ? "s" : "",
                                 pred ? fmt::format("{:.4f} s, {:.2f} GiB ({})", pred->step_seconds,
                                                    double(pred->memory.per_gpu_peak_bytes) / double(1 << 30),
                                                    pred->memory.fits() ? "fits" : "does not fit")
                                      : "nothing (" + pred_error + ")")
                  << std::flush;
      RunOutcome run;
      if (!o->predict_only) {
        run.result_file = "runs/" + e.name + ".json";
        run.log_file = "runs/" + e.name + ".log";
        const std::string result_path = (fs::path(dir) / run.result_file).string();
        std::error_code ec;
        fs::remove(result_path, ec);  // a stale result of an earlier run must not pass for this one
        std::vector<std::string> args = {exe, "exec", plan_file, "--steps", std::to_string(steps), "--warmup",
                                         std::to_string(warmup), "--device", o->device, "-q", "-o", result_path};
        if (!o->profile.profile.empty()) args.insert(args.end(), {"--profile", o->profile.profile});
        if (!o->profile.headroom.empty()) args.insert(args.end(), {"--headroom", o->profile.headroom});
        if (o->oversubscribe) args.push_back("--oversubscribe");
        if (o->kernels) args.push_back("--kernels");
        // A pipeline plan's predicted and measured timelines (timeline_NAME.png).
        const std::string trace_rel = "runs/" + e.name + ".trace.json";
        if (e.plan.strategy.pp > 1) {
          fs::remove(fs::path(dir) / trace_rel, ec);
          args.insert(args.end(), {"--trace", (fs::path(dir) / trace_rel).string()});
        }
        bool timed_out = false;
        run.exit_code = run_child(args, (fs::path(dir) / run.log_file).string(), "", timeout, &timed_out);
        if (run.exit_code == 0 && fs::is_regular_file(result_path, ec)) {
          run.status = "ran";
          run.result = read_json_file(result_path, "result");
          if (machine.is_null()) machine = run.result->value("machine", json(nullptr));
        } else {
          run.error = error_line((fs::path(dir) / run.log_file).string());
          run.result_file.clear();
          const bool oom = to_lower(run.error).find("out of memory") != std::string::npos;
          run.status = timed_out ? "timeout" : oom ? "out_of_memory" : run.exit_code == 2 ? "refused" : "failed";
        }
      }
      json rec = plan_record(e, pred, pred_error, run, profiles[k].cpu_adam_params_per_second);
      if (run.status == "ran" && e.plan.strategy.pp > 1) {
        std::error_code tec;
        const std::string trace_rel = "runs/" + e.name + ".trace.json";
        if (fs::is_regular_file(fs::path(dir) / trace_rel, tec)) {
          rec["trace_file"] = trace_rel;
          try {
            const json b = pipeline_bubble(read_json_file((fs::path(dir) / trace_rel).string(), "trace"));
            if (!b.is_null()) rec["bubble"] = b;
          } catch (const std::exception&) {
            // An unreadable trace: no bubble figures for this plan.
          }
        }
      }
      if (progress) {
        if (run.status == "ran")
          std::cerr << fmt::format("; measured {:.4f} s ({:+.1f}%), {:.2f} GiB ({:+.1f}%)\n",
                                   rec["measured"]["step_seconds"].get<double>(),
                                   rec["errors"]["step_seconds_pct"].is_number() ? rec["errors"]["step_seconds_pct"].get<double>() : 0.0,
                                   rec["measured"]["per_gpu_peak_bytes"].get<double>() / double(1 << 30),
                                   rec["errors"]["per_gpu_peak_pct"].is_number() ? rec["errors"]["per_gpu_peak_pct"].get<double>() : 0.0);
        else
          std::cerr << "; " << run.status << (run.error.empty() ? "" : ": " + run.error) << "\n";
      }
      plans.push_back(rec);
      if (!o->predict_only) save(make_report());
    }

    json report = make_report();
    report["complete"] = true;
    json files = {"report.json", "report.csv"};
    std::string plot_note;
    if (!o->no_plots) {
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
      if (!on_path("gnuplot")) {
        plot_note = "gnuplot is not on the PATH: wrote plots.gp and its data; draw with `gnuplot plots.gp` in " + dir;
      } else {
        bool timed_out = false;
        const int rc = run_child({"gnuplot", "plots.gp"}, (fs::path(dir) / "plots.log").string(), dir, 120, &timed_out);
        if (rc != 0) plot_note = fmt::format("gnuplot failed (exit {}); see {}/plots.log", rc, dir);
        for (const std::string& png : pf.pngs)
          if (fs::exists(fs::path(dir) / png)) files.push_back(png);
      }
    }
    report["files"] = files;
    if (!plot_note.empty()) report["notes"] = json::array({plot_note});
    save(report);
    std::string text = o->json ? report.dump(2) + "\n" : report_table(report);
    if (!o->json) {
      if (!plot_note.empty()) text += "note: " + plot_note + "\n";
      text += fmt::format("Wrote {}/report.json, report.csv", dir);
      for (size_t f = 2; f < files.size(); ++f) text += ", " + files[f].get<std::string>();
      text += "\n";
    }
    emit("", text);
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

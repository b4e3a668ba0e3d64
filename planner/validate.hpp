#pragma once
// `planner validate sweep.json`: the sweep file, the report's arithmetic and
// its renderings (table, CSV, gnuplot pictures). Running the plans is
// planner/cmd_validate.cpp's (it starts `planner exec` once per plan). No
// LibTorch here.
//
// Sweep file (validation/sets/sweep_1gpu.json):
//   {"format": "planner-sweep", "version": 1, "name": "...",
//    "steps": 5, "warmup": 2,             // per plan, unless the command line says otherwise
//    "held_out": "B",                     // the half reported as held out (default "B")
//    "defaults": {"gpus": "1xH100", "seq": 2048},   // merged into every plan that lacks the key
//    "plans": [{"name": "gpt2-dp1", "half": "A", "model": "gpt2-xl", "gpus": "1xH100",
//               "strategy": "mbs=4,gas=2,precision=bf16", "seq": 1024, "global_batch": 8},
//              {"name": "...", "half": "B", "plan": "plans/x.json"}, ...]}
// "model" is a preset or a Hugging Face config.json (a path relative to the
// sweep file); "plan" a plan file (relative path) or an inline plan object.
// Names are unique, [A-Za-z0-9._-]; "half" is "A" or "B".
//
// Report (DIR/report.json, schema in docs/VALIDATION.md, "planner validate"):
//   plans[]: name, half, model, gpus, world, strategy (text), seq, global_batch,
//            status (ran | out_of_memory | failed | refused | timeout | not_run),
//            predicted {step_seconds, per_gpu_peak_bytes, fits, tokens_per_second,
//                       categories}, measured {same, or null},
//            errors {step_seconds_pct, per_gpu_peak_pct, categories_pct}, ...
//   summary: {"all", "A", "B"}: plans, ran, step and peak-memory MAPE and worst
//            (signed, with the plan), and the fit checks.
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "specs/plan.hpp"
#include "costmodel/predict.hpp"

namespace planner {

// Timed and warm-up steps of `planner exec` and of a sweep's runs
// (docs/INPUT_LIMITS.md): above it, refused, never lowered.
constexpr int64_t kMaxSteps = 1000000;
// A sweep plan's name names files (NAME.json, NAME.log, NAME.trace.json):
// well under the 255 bytes of a file name.
constexpr size_t kMaxPlanName = 100;

struct SweepEntry {
  std::string name, half;
  Plan plan;
};

struct Sweep {
  std::string path, name, held_out = "B";
  int steps = 5, warmup = 2;
  std::vector<SweepEntry> entries;
};

// Reads and checks the whole sweep (every plan built and checked with
// check_compat) before anything runs: InputError naming the plan otherwise.
// `gpus` (not empty) replaces every plan's GPUs (a cluster spec, e.g. 1xH200):
// the same sweep on another GPU kind.
Sweep load_sweep(const std::string& path, const std::string& gpus = "");

// How one plan's run ended.
struct RunOutcome {
  std::string status = "not_run";    // ran | out_of_memory | failed | refused | timeout | not_run
  int exit_code = -1;
  std::string error;                 // the run's last error line, when it did not run
  std::optional<nlohmann::json> result;  // result.json of planner exec (docs/RESULT.md)
  std::string result_file, log_file;     // relative to the report's folder
};

// One entry of report.json's plans[]: the prediction beside what was measured,
// and (predicted - measured) / measured in percent where both exist.
// `causes`: where the error comes from (forward/backward kernels or the rest of
// the step, the run's CPU AdamW rate against `profile_cpu_adam` when it
// offloads, the memory category with the largest difference).
nlohmann::json plan_record(const SweepEntry& e, const std::optional<StepPrediction>& predicted,
                           const std::string& prediction_error, const RunOutcome& run, double profile_cpu_adam = 0);

// MAPE and worst error of step time and peak memory, per half and over all,
// and how the fit verdicts came out (predicted to fit and ran, predicted not to
// fit and ran out of memory, ...).
nlohmann::json summarize(const nlohmann::json& plans, const std::string& held_out);

std::string report_table(const nlohmann::json& report);
// A strategy's text form without the fields at their defaults (tp=1, zero=0, ...).
std::string short_strategy_text(const std::string& text);
std::string report_csv(const nlohmann::json& report);

// The gnuplot script that draws DIR/step_time.png, DIR/peak_memory.png and
// DIR/memory_breakdown.png from the data files it names, and those files
// (name -> text), all relative to DIR; `pngs` every picture it draws.
// `traces` (plan name -> the Chrome trace of `planner exec --trace`, which
// validate asks of every pipeline plan) adds DIR/timeline_NAME.png per plan:
// each pipeline stage's predicted compute stream above its measured ranks'.
struct PlotFiles {
  std::string script;
  std::vector<std::pair<std::string, std::string>> data;
  std::vector<std::string> pngs;
};
PlotFiles plot_files(const nlohmann::json& report,
                     const std::map<std::string, nlohmann::json>& traces = {});

// An event of an exec trace (planner/exec_report.hpp exec_trace_json): its
// kind, 0 forward, 1 backward, 2 recompute (no action is one yet: B includes
// its recompute), 3 a wait for a neighbour stage (send/receive), 4 the
// optimizer, 5 anything else; and its micro-batch (-1 when none). Read from
// the event's args "op" (to_string(StepOp)) and "microbatch", which the
// simulator's events and the measured ranks' spans both carry; never from
// its name.
std::pair<int, int> trace_event_kind(const nlohmann::json& event);
// The pipeline stage of each process of an exec trace: pid -> stage, the
// simulator's (pid = stage) and the measured ranks' (pid 1000 + rank, named
// "measured rank R, stage S ..."); {} for a trace that is not exec's.
std::map<int, int> trace_process_stages(const nlohmann::json& trace);

// The pipeline bubble of every stage in an exec trace: the step less the
// stage's forward, backward and recompute passes and its optimizer, on the
// compute stream, predicted (the simulator's stage) and measured (each of
// the stage's ranks, the last timed step): {"stages": [{"stage",
// "predicted_seconds", "predicted_fraction", "measured": [{"rank",
// "seconds", "fraction"}]}]}, or null for a trace that is not exec's.
nlohmann::json pipeline_bubble(const nlohmann::json& trace);

}  // namespace planner

#pragma once
// `planner exec`, the planner's half: the prediction for the plan that ran
// (costmodel predict()) beside what the runtime measured (runtime/exec.hpp's
// run document), category by category, as the result document of
// docs/RESULT.md and the table the CLI prints. No LibTorch: planner_core.
#include <nlohmann/json.hpp>
#include <string>

#include "specs/plan.hpp"
#include "costmodel/predict.hpp"
#include "costmodel/simulator.hpp"

namespace planner {

struct ExecReport {
  nlohmann::json result;  // docs/RESULT.md
  std::string table;      // human output
};

// exec --kernels: each op class of one step's forward and backward kernels,
// {"gemm", "attention", "memory_bound", "forward_backward" (the compute
// kernels' span against the three classes' predicted sum), "host_copy",
// "communication", "idle"}, each {"predicted" (null where the time model has
// no such figure), "measured"}; null when `measurement` has no kernels. Used
// by exec's comparison rows and by validate's causes.
nlohmann::json kernel_class_comparison(const StepPrediction& prediction, const nlohmann::json& measurement);

// The measured side of the memory comparison: the device peak of the fullest
// rank and that rank's memory categories (pipeline stages hold different
// layers; the prediction's categories are its fullest stage's), rank 0's
// categories when the ranks' own are not recorded (results written before
// they were). Used by exec's comparison rows and by validate.
struct MeasuredPeak {
  double peak_bytes = 0;
  nlohmann::json categories = nlohmann::json::object();
  int rank = 0;  // whose categories
};
MeasuredPeak fullest_rank_memory(const nlohmann::json& measurement);

// `run`: {"created", "options", "measurement", "machine"} as the runtime writes them.
// times_comparable = false (a CPU run against a GPU prediction): times and rates
// are shown side by side without an error.
ExecReport make_exec_report(const Plan& plan, const StepPrediction& prediction, const nlohmann::json& run,
                            bool times_comparable = true);

// One Chrome trace (Perfetto) with the predicted step (the simulator's events:
// one process per stage, a thread per stream) and the measured one (one
// process per rank: each action of the step program on the compute stream,
// CUDA-event times of the last timed step; asynchronous actions show only
// their issue, Sync the wait for them), so the two timelines of one plan open
// side by side. `run` must hold measurement.timeline (exec --trace).
nlohmann::json exec_trace_json(const Plan& plan, const SimResult& predicted, const nlohmann::json& run);

}  // namespace planner

#pragma once
// `planner exec`, the planner's half: the prediction for the plan that ran
// (costmodel predict()) beside what the runtime measured (runtime/exec.hpp's
// run document), category by category, as the result document of
// docs/RESULT.md and the table the CLI prints. No LibTorch: planner_core.
#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/plan.hpp"
#include "costmodel/predict.hpp"

namespace planner {

struct ExecReport {
  nlohmann::json result;  // docs/RESULT.md
  std::string table;      // human output
};

// `run`: {"created", "options", "measurement", "machine"} as the runtime writes them.
ExecReport make_exec_report(const Plan& plan, const StepPrediction& prediction, const nlohmann::json& run);

}  // namespace planner

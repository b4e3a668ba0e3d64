#pragma once
// `planner exec plan.json`, the runtime's half: run a plan (data parallelism,
// ZeRO, offload; one process per GPU under MPI) on this machine's GPUs, or on
// the CPU, and measure it. Result schema: docs/RESULT.md. No LibTorch types
// here: planner/ includes this header.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/run_config.hpp"
#include "specs/plan.hpp"

namespace planner::rt {

// `planner exec`'s options: the run's own (RunOptions, runtime/run_config.hpp)
// and the command's files and output.
struct ExecOptions : RunOptions {
  std::string plan_path;     // plan.json (load_plan)
  std::string profile_path;  // hardware profile for predict() (empty: the catalog's)
  std::string output_path;   // result.json, written atomically; empty: none
  std::string trace_path;    // --trace: predicted and measured timeline, one Chrome-trace file
  bool json = false;         // print the result JSON instead of the table
  bool oversubscribe = false;  // CPU: allow more ranks than cores (mpirun --oversubscribe)
};

// The measured run of a plan. With dp·tp·pp > 1 outside an MPI launch, this process
// only starts `mpirun -np N` with its own command line (refusing first, with
// InputError, a plan that needs more GPUs or cores than present) and returns
// mpirun's exit code with report = false; inside a launch every rank runs and
// rank 0 gets report = true. `run` holds {"created", "options", "measurement",
// "machine"} (docs/RESULT.md); planner/exec_report.hpp puts the prediction
// beside it.
// Throws planner::InputError (exit code 2) for bad input: a missing or malformed
// plan file, a plan with tp or pp > 1, steps < 1, warmup < 0, an unknown
// --device or no GPU for --device cuda, an unreadable or malformed token file,
// an output path in a directory that does not exist, a launch with another
// number of ranks than the plan's. Throws std::runtime_error (exit code 1) when
// the run fails (CUDA out of memory...).
// The plan is loaded once: by the caller (planner/cmd_exec.cpp, which checks
// it before anything starts), or from options.plan_path by the second form.
// `config` is the one run configuration everything after reads.
struct ExecRun {
  int exit_code = 0;
  bool report = true;
  RunConfig config;
  nlohmann::json run;
};
ExecRun run_plan(const ExecOptions& options, Plan plan);
ExecRun run_plan(const ExecOptions& options);

}  // namespace planner::rt

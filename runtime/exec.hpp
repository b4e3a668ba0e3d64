#pragma once
// `planner exec plan.json`, the runtime's half: run a plan (data parallelism,
// ZeRO, offload; one process per GPU under MPI) on this machine's GPUs, or on
// the CPU, and measure it. Result schema: docs/RESULT.md. No LibTorch types
// here: planner/ includes this header.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "specs/plan.hpp"

namespace planner::rt {

struct ExecOptions {
  std::string plan_path;             // plan.json (load_plan)
  int steps = 10;                    // timed steps, >= 1
  int warmup = 3;                    // untimed steps first, >= 0
  std::string output_path;           // result.json, written atomically; empty: none
  std::string tokens_path;           // raw little-endian token ids; empty: synthetic tokens
  std::string tokens_dtype = "uint16";  // uint16 | int32 (the token file's element type)
  bool json = false;                 // print the result JSON instead of the table
  std::string device = "auto";       // auto | cuda | cpu
  uint64_t seed = 1234;              // weights and synthetic tokens
  double lr = 3e-4;                  // AdamW learning rate (constant)
  std::string profile_path;          // hardware profile for predict() (empty: the catalog's)
  bool progress = true;              // per-step lines on stderr
  bool oversubscribe = false;        // CPU: allow more ranks than cores (mpirun --oversubscribe)
  int comm_timeout_seconds = 300;    // a collective that takes longer ends every rank
  bool time_actions = true;          // time each action of the step program (exposed communication)
  std::string trace_path;            // --trace: predicted and measured timeline, one Chrome-trace file
  bool kernels = false;              // --kernels: record one extra step's forward/backward GPU kernels
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
struct ExecRun {
  int exit_code = 0;
  bool report = true;
  Plan plan;
  nlohmann::json run;
};
ExecRun run_plan(const ExecOptions& options);

}  // namespace planner::rt

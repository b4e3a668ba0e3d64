#pragma once
// `planner exec plan.json`: run a one-device plan (dp = tp = pp = 1) on this
// machine's GPU, or on the CPU when there is none, measure it, and put the
// measurement beside the prediction (predict(plan)). Result schema: docs/RESULT.md.
// No LibTorch types here: planner/ includes this header.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

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
};

// Returns 0 after a successful run (the result file, if asked for, is written).
// Throws planner::InputError (exit code 2) for bad input: a missing or malformed
// plan file, a plan with dp/tp/pp > 1 or ZeRO/offload, steps < 1, warmup < 0, an
// unknown --device or no GPU for --device cuda, an unreadable or malformed token
// file, an output path in a directory that does not exist. Throws
// std::runtime_error (exit code 1) when the run fails (CUDA out of memory...);
// nothing is written then.
int run_exec(const ExecOptions& options);

// The same as run_exec, returning the result document instead of printing it and
// writing nothing (tests use it).
nlohmann::json exec_result(const ExecOptions& options);

}  // namespace planner::rt

#pragma once
// One run's configuration, built once from the plan and the run's options and
// read by everything after it: the launch (runtime/exec.cpp), the measured run
// (runtime/measure.cpp), the executor (runtime/engine.hpp) and, for its
// in-step part, `planner calibrate` (calibration/measure_in_step.cpp). The
// strategy's fields (precision, checkpointing, mbs, gas, ...) are read from the
// plan's Strategy, never copied. No LibTorch types: planner/ includes this.
#include <cstdint>
#include <string>

#include "specs/plan.hpp"

namespace planner::rt {

// AdamW (Loshchilov & Hutter 2019) with GPT-3's settings (Brown et al. 2020,
// appendix B); constant learning rate; clipping at a global L2 norm; fp16 with
// dynamic loss scaling (Micikevicius et al. 2018).
struct OptimizerSettings {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // on matrices and embeddings only
  double grad_clip = 1.0;     // global L2 norm; <= 0 turns clipping off
  double fp16_init_scale = 65536.0;
  int fp16_scale_window = 1000;  // clean steps before the loss scale doubles
};

// How a mixture of experts chooses each token's experts (runtime/model/moe.hpp;
// `planner exec --moe-routing`): Learned, the router's top-k (the model's own
// routing); Balanced, a benchmark mode that gives token t of a micro-batch the
// experts (t k + j) mod E, j < k, so that every expert gets exactly T k / E rows
// when E divides T k (the router, its softmax, the gate weights and the
// auxiliary loss still run). Megatron-LM's --moe-router-force-load-balancing
// is the same idea with random logits; this one is deterministic and exact.
enum class MoeRouting { Learned, Balanced };
const char* to_string(MoeRouting r);
// "learned" or "balanced"; anything else is an InputError naming `what` (the option).
MoeRouting parse_moe_routing(const std::string& text, const std::string& what = "--moe-routing");

// What a run chooses beside the plan (`planner exec`'s options).
struct RunOptions {
  std::string device = "auto";          // auto | cuda | cpu
  int steps = 10;                       // timed steps, >= 1
  int warmup = 3;                       // untimed steps first, >= 0
  std::string tokens_path;              // raw little-endian token ids; empty: synthetic tokens
  std::string tokens_dtype = "uint16";  // uint16 | int32 (the token file's element type)
  uint64_t seed = 1234;                 // weights and synthetic tokens
  OptimizerSettings optim;
  double mlm_mask_fraction = 0.15;      // encoders: fraction of positions masked for the MLM loss
  bool progress = true;                 // per-step lines on stderr
  int comm_timeout_seconds = 300;       // a collective that takes longer ends every rank
  bool time_actions = true;             // time each action of the step program (exposed communication)
  bool trace = false;                   // record the last timed step's action spans on every rank
  bool kernels = false;                 // GPU: one more step whose forward/backward kernels are recorded
  MoeRouting moe_routing = MoeRouting::Learned;  // mixture of experts: the router's choice or exactly balanced
  // The step program's overlap options (strategies/step_program.hpp
  // StepOptions), which the Engine honours; `planner exec` takes them from
  // the hardware profile its prediction uses, so the run is the program predicted.
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = false;
};

// The plan and the options of one run.
struct RunConfig {
  Plan plan;
  RunOptions options;
  const ModelSpec& model() const { return plan.model; }
  const Strategy& strategy() const { return plan.strategy; }
  int64_t seq() const { return plan.seq; }
};

// Checks the options that do not need the plan (steps, warm-up, device);
// throws InputError naming the bad one.
void check_run_options(const RunOptions& o);
// The configuration of a run of `plan` with `options` (check_run_options first).
RunConfig make_run_config(Plan plan, RunOptions options);
// A run of `model` under `strategy` at `seq` tokens with the default options
// (the global batch is the strategy's): the executor's tests and calibrate's
// in-step measurement, which have no plan file.
RunConfig make_run_config(const ModelSpec& model, const Strategy& strategy, int64_t seq);

}  // namespace planner::rt

#pragma once
// The step time of a plan as another engine runs it (issue 33): `planner
// predict --engine deepspeed|megatron|fsdp`. The plan is simulated with the
// engine's kernel and overlap choices (engine_profile), then the engine's own
// costs the simulator does not know are added as named terms, each citing its
// source (docs/ENGINE_TIME.md). The engine's host work (measured by a probe:
// costmodel/engines_host.hpp) then composes with the GPU's step as the
// engine's synchronisation orders them.
#include <string>
#include <vector>

#include "costmodel/engines.hpp"
#include "costmodel/hardware_profile.hpp"
#include "specs/plan.hpp"

namespace planner {

// The eager PyTorch kernels the engines' Python trainers (and Megatron-core
// without Transformer Engine) launch, against this runtime's: torch eager
// 0.3083 s over planner exec 0.2891 s for one step of GPT-1.3B (seq 2048,
// mbs 8, bf16) on one H100 (issue 33's measurement, before run1; not fitted).
constexpr double kEagerOverRuntime = 0.3083 / 0.2891;
// What the host/GPU form gave on runs 1-5's 35 launches (seen data; the
// numbers of docs/ENGINE_TIME.md, "Seen data", by
// scripts/engines/seen_steps.py), and held out on run 8's eight one-GPU
// launches (validation/engines/h200x1/run8 and run8b), named in every --engine answer.
inline constexpr const char* kSeenDataRange = "12.8% MAPE, -33% to +43%";
inline constexpr const char* kHeldOutRange =
    "9.8% MAPE, -21% to +9%, with a probe of that host; 17.4%, -6% to +59%, with the compiled-in constants";

struct EngineStepTerm {
  std::string name;    // "eager kernels", "host work and its syncs", ...
  double seconds = 0;  // added to the step (negative never)
  std::string source;  // where the term comes from (engine source, measurement, fit)
};

struct EngineStep {
  Engine engine = Engine::Ours;
  double simulated_seconds = 0;  // the plan simulated with engine_profile
  double step_seconds = 0;       // simulated + terms (the last: the host/GPU composition, engines_host.hpp)
  double host_seconds = 0;       // per step, the engine's host work (its micro-batches and tail)
  std::vector<EngineStepTerm> terms;
  std::vector<std::string> notes;  // fitted constants and what is not modelled
};

// The runtime's profile with the engine's software choices: Megatron-core
// without Transformer Engine runs unfused attention (flash_attention =
// false) with its default dropout 0.1, reduces gradients in fp32 without
// overlap; FSDP2 reduces in fp32 (the export's reduce_dtype); DeepSpeed
// overlaps its reduction (overlap_comm) in buckets of reduce_bucket_size and
// all-gathers ZeRO-1/2's updated parameters after the step, not overlapped.
HardwareProfile engine_profile(const Plan& plan, const HardwareProfile& profile, Engine engine);

// The engine's step: Ours gives the simulated step unchanged.
EngineStep engine_step_time(const Plan& plan, const HardwareProfile& profile, Engine engine);

// Counts the terms use (exposed for the tests' hand computations).
// Submodules holding parameters that DeepSpeed ZeRO-3 fetches in a forward
// (scripts/engines/torch_model.py: per layer q, k, v, out, up, (gate), down and
// the norms; embedding, learned positions, final norm, lm_head).
int64_t torch_model_param_modules(const ModelSpec& m);
// Parameter tensors of that model (weights, biases, norm weights and biases;
// a tied lm_head counted once): the hooks DeepSpeed registers per tensor.
int64_t torch_model_param_tensors(const ModelSpec& m);
// Module calls DTensor parallelizes per micro-batch under the FSDP export's tp
// plan: per layer its tensor-parallel linears, its norms (SequenceParallel
// under sp) and the two PrepareModuleInput redistributions; embedding, lm_head
// and the final norm.
int64_t dtensor_module_calls(const ModelSpec& m, bool sp);

}  // namespace planner

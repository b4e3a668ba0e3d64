#pragma once
// The step time of a plan as another engine runs it (issue 33): `planner
// predict --engine deepspeed|megatron|fsdp`. The plan is simulated with the
// engine's kernel and overlap choices (engine_profile), then the engine's own
// costs the simulator does not know are added as named terms, each citing its
// source (docs/ENGINE_TIME.md). Five host-side constants have no
// micro-benchmark and are fitted on run1's six launches only
// (validation/engines/h100x4/run1); the held-out launches check them.
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
// Fitted on run1 (validation/engines/h100x4/run1, 4x H100, llama-3.2-1b):
// DeepSpeed ZeRO's gradient hooks (overlap_comm registers one per parameter
// tensor, run in Python in every backward): host seconds per parameter tensor
// per micro-batch, from ds-z1 and ds-z2 (the mean of their two fits).
constexpr double kDeepSpeedGradHookSeconds = 8.22e-5;
// DeepSpeed ZeRO-3's parameter coordinator, host seconds per submodule fetch
// (forward and backward, per micro-batch): from ds-z3 alone.
constexpr double kDeepSpeedZ3FetchSeconds = 7.37e-4;
// FSDP2: host seconds per fully_shard unit per micro-batch (its pre/post
// forward and backward hooks, copy-in/copy-out): from fsdp-z3 alone.
constexpr double kFsdpUnitSeconds = 5.96e-3;
// DTensor tensor parallelism: host seconds per tensor-parallel module call per
// micro-batch, forward and backward (DTensor's dispatch and redistribution):
// from fsdp-z2-tp2-sp alone.
constexpr double kDTensorModuleSeconds = 1.72e-3;

// Megatron-core's local path (no TE, no apex): what the terms above leave of
// mg-pp2-vpp2-dp2-dopt's step, per layer of the critical stage per
// micro-batch (with the bubble's share): eager PyTorch's launches and the
// Python of its local modules, not separated. From that run alone.
constexpr double kMegatronLayerPassSeconds = 2.16e-3;

struct EngineStepTerm {
  std::string name;    // "eager kernels", "ZeRO-3 fetch hooks", ...
  double seconds = 0;  // added to the step (negative never)
  std::string source;  // where the term comes from (engine source, measurement, fit)
};

struct EngineStep {
  Engine engine = Engine::Ours;
  double simulated_seconds = 0;  // the plan simulated with engine_profile
  double step_seconds = 0;       // simulated + terms (host-bound terms as documented in engines_time.cpp)
  double host_seconds = 0;       // per step, the engine's Python host work that the GPU may wait for
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

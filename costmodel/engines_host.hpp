#pragma once
// The engines' host work and how each engine's synchronisation composes it
// with the GPU's (issue 33; docs/ENGINE_TIME.md, "Host and GPU"). The host
// constants are measured, not fitted on end-to-end runs: the defaults are
// validation/engines/probe6's tiny-model launches (4x H200, 64-core host;
// each trainer unmodified on a model whose GPU work is far below its host
// work, so a step is the host's own work), per count of what the engine walks
// (parameter tensors, submodules, layers). A profile's "engine_host" object
// (docs/FORMATS.md) replaces them with a probe run on the training host
// (scripts/engines/probe_to_profile.py).
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace planner {

struct ModelSpec;
struct Plan;
enum class Engine;

// Host seconds per count. Per micro-batch figures are for one forward and
// its backward; "tail" is after the last micro-batch (optimizer, clipping,
// the engine's step bookkeeping).
struct EngineHostConstants {
  // Set by engine_host_from_json: a profile's "engine_host" section (a probe
  // on the training host) replaced the compiled-in constants below.
  bool from_profile = false;
  std::string source =
      "validation/engines/probe6 (4x H200, 64-core host, torch 2.11, DeepSpeed 0.19.8, megatron-core 0.19): "
      "tiny-model launches (hidden 256, 16 layers, seq 128, mbs 1)";
  // torch_model.py's eager forward + backward alone (torch_model.py --probe,
  // 4 and 16 layers): per SwiGLU (Llama-like) layer, per GELU (GPT-2-like)
  // layer, and the GELU model's embedding + head beyond its layers.
  double eager_layer_swiglu_s = 3.42e-3;
  double eager_layer_gelu_s = 1.65e-3;
  double eager_outer_gelu_s = 1.4e-3;
  // DeepSpeed ZeRO-1/2 beyond the eager model: per parameter tensor per
  // micro-batch (its gradient hooks), and per tensor in the step's tail.
  double deepspeed_z1_tensor_s = 0.159e-3;
  double deepspeed_z2_tensor_s = 0.153e-3;
  double deepspeed_z12_tail_tensor_s = 0.076e-3;
  // DeepSpeed ZeRO-3: per pass (forward, backward) per submodule with
  // parameters and per parameter tensor (Llama and GPT-2 probes solved
  // together); per tensor in the tail.
  double deepspeed_z3_module_pass_s = 0.338e-3;
  double deepspeed_z3_tensor_pass_s = 0.288e-3;
  double deepspeed_z3_tail_tensor_s = 0.24e-3;
  // FSDP2 (fully_shard per block and the root) zero 2 / 3: per parameter
  // tensor per micro-batch, and per tensor in the tail (clipping's per-tensor
  // norm, the optimizer over DTensors).
  double fsdp_z2_tensor_s = 0.43e-3;
  double fsdp_z3_tensor_s = 0.375e-3;
  double fsdp_z2_tail_tensor_s = 0.89e-3;
  double fsdp_z3_tail_tensor_s = 0.67e-3;
  // DTensor tensor parallelism under FSDP2 zero 2 / 3: per tensor-parallel
  // linear per micro-batch, and per tensor in the tail (replacing FSDP2's).
  double dtensor_z2_linear_s = 1.69e-3;
  double dtensor_z3_linear_s = 2.0e-3;
  double dtensor_z2_tail_tensor_s = 1.47e-3;
  double dtensor_z3_tail_tensor_s = 1.37e-3;
  // Megatron-core's local spec (eager model included): per layer of a stage
  // per micro-batch, and per step (from gas 2 and gas 6 at dp 4).
  double megatron_layer_s = 6.62e-3;
  double megatron_tail_s = 0.020;
};

// The object as a profile carries it, and back over a base (every key
// optional; an unknown key or a non-number is refused naming it).
nlohmann::json engine_host_to_json(const EngineHostConstants& c);
EngineHostConstants engine_host_from_json(const nlohmann::json& j, const EngineHostConstants& base);

// The engine's host work for a plan, from the constants and the counts of
// torch_model.py / megatron-core's modules.
struct EngineHostWork {
  double micro_batch_seconds = 0;  // one micro-batch's forward and backward
  double tail_seconds = 0;         // after the last micro-batch
  std::string formula;             // the counts and constants, for the output
};
EngineHostWork engine_host_work(const Plan& plan, const EngineHostConstants& c, Engine engine);

// The GPU's side as the simulator gives it: the step's work (simulated step
// plus the engine's GPU terms) and its tail (the optimizer), the rest split
// evenly over the micro-batches.
struct EngineGpuWork {
  double step_seconds = 0;
  double tail_seconds = 0;
  double micro_batch_seconds(int gas) const { return (step_seconds - tail_seconds) / double(gas); }
};

// The compositions, one per engine's synchronisation (sources in the .cpp).
// DeepSpeed ZeRO-0/1/2: per micro-batch the longer of host and GPU, then the
// tail's host work and the GPU's tail after it.
double deepspeed_zero12_step(int gas, const EngineHostWork& h, const EngineGpuWork& g);
// FSDP2: the host's work and the GPU's drain after its last enqueue (the
// optimizer), or the GPU's step where the host keeps ahead.
double fsdp_step(int gas, const EngineHostWork& h, const EngineGpuWork& g);
// Megatron-core: per micro-batch the longer of host and GPU (the host's
// stretched by the pipeline's bubble like the GPU's), then the tail's host
// work and the GPU's tail.
double megatron_step(int gas, double bubble_scale, const EngineHostWork& h, const EngineGpuWork& g);

// DeepSpeed ZeRO-3: one module's host and GPU seconds within a pass.
struct ModuleWork {
  double host = 0, gpu = 0;
};
// The ZeRO-3 parameter coordinator's window: at each fetch, with more than
// `events` fetch events outstanding, the host waits on the oldest, so it runs
// at most events + 1 modules ahead of the GPU. Walks the modules in order and
// returns the time until both host and GPU are done (the micro-batch's
// closing reduce-stream synchronize).
double windowed_passes_seconds(const std::vector<ModuleWork>& modules, int events);
// The modules of one micro-batch of torch_model.py under ZeRO-3, forward then
// backward (and a recomputed forward under full checkpointing): host = the
// fetch cost per module and tensor plus the eager host work spread over the
// modules; GPU = the micro-batch's GPU seconds split by each module's GEMM
// work (attention's core with its output projection), a third forward.
std::vector<ModuleWork> zero3_module_work(const Plan& plan, const EngineHostConstants& c, double gpu_micro_batch);
// DeepSpeed ZeRO-3's step: gas x the windowed micro-batch, then the tail.
double deepspeed_zero3_step(const Plan& plan, const EngineHostConstants& c, const EngineHostWork& h,
                            const EngineGpuWork& g);

// The eager model's host seconds per micro-batch (torch_model.py's layers).
double eager_host_seconds(const ModelSpec& m, const EngineHostConstants& c);

// DeepSpeed 0.19.8 partitioned_param_coordinator.py: __max_ongoing_fetch_events = 2.
constexpr int kZero3FetchEvents = 2;

}  // namespace planner

#include "costmodel/engines_time.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "costmodel/engines_host.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"
#include "costmodel/predict_detail.hpp"

namespace planner {

namespace {

bool runs_python_trainer(Engine e) { return e == Engine::DeepSpeed || e == Engine::Fsdp; }

// Seconds the pipeline's critical path holds per second of one stage's
// compute: the bubble scales with the stage's compute (its idle slots are
// the other stages' passes), so a slower kernel lengthens both.
double critical_path_scale(const StepPrediction& p) {
  return p.compute_seconds > 0 ? 1 + p.bubble_seconds / p.compute_seconds : 1;
}

// Megatron-core's local DotProductAttention without apex's fused softmax
// (megatron/core/transformer/dot_product_attention.py, fused_softmax.py
// forward_torch_softmax): baddbmm writes the scaled scores, then mask_func
// (masked_fill with the broadcast s x s causal mask) reads and writes them,
// then torch's softmax; the backward runs softmax's and masked_fill's own.
// The simulator's unfused path prices one scale-mask-softmax pass forward
// (2e bytes per score) and its backward (3e) as streaming kernels. Added
// here: masked_fill's pass each way (2e, a broadcast operand: the strided
// class) and the softmax passes at the reduction class's rate less the
// streaming rate already counted; per layer of the critical stage and
// micro-batch (with the bubble, and a full recomputation's second forward).
double megatron_unfused_softmax_seconds(const Plan& plan, const HardwareProfile& p, const StepPrediction& sim) {
  const Strategy& s = plan.strategy;
  const ModelSpec& m = plan.model;
  const double e = bytes_per_element(s.precision == Precision::FP8 ? Precision::BF16 : s.precision);
  const double scores = double(s.mbs) * double(m.heads / s.tp) * double(plan.seq / s.cp) * double(plan.seq);
  auto fwd_bwd = [&](double fwd_bytes, double bwd_bytes, MemKernel k) {
    const double recompute = s.ckpt == Ckpt::None ? 0 : fwd_bytes;
    return memory_kernel_seconds(p, fwd_bytes + bwd_bytes + recompute, k);
  };
  const double mask = fwd_bwd(2 * e * scores, 2 * e * scores, MemKernel::Strided);
  const double softmax = fwd_bwd(2 * e * scores, 3 * e * scores, MemKernel::Reduction) -
                         fwd_bwd(2 * e * scores, 3 * e * scores, MemKernel::Streaming);
  const double layers = double(m.layers) / s.pp;
  return (mask + std::max(0.0, softmax)) * layers * double(s.gas) * critical_path_scale(sim);
}

// Megatron-core without gradient-accumulation fusion (no TE, no apex's
// fused_weight_gradient_mlp_cuda): each parameter's backward hook adds the
// bf16 gradient to its fp32 main_grad (distributed_data_parallel.py
// _make_backward_post_hook: param.main_grad.add_(param.grad)), reading 2 + 4
// bytes and writing 4 per parameter of the stage in every micro-batch.
double megatron_main_grad_seconds(const Plan& plan, const HardwareProfile& p) {
  const Strategy& s = plan.strategy;
  const ModelSpec& m = plan.model;
  const int layers = int(m.layers / s.pp);
  const int64_t first = stage_params_per_rank(m, layers, true, s.pp == 1, s.pp, s.tp);
  const int64_t last = stage_params_per_rank(m, layers, s.pp == 1, true, s.pp, s.tp);
  return memory_bound_seconds(p, 10.0 * double(std::max(first, last))) * double(s.gas);
}

// Strategies of the engine that no launch has measured (runs 1-5 had DeepSpeed
// ZeRO-1/2/3, FSDP2 zero 2/3 with and without DTensor tp, Megatron pp x vpp
// with the distributed optimizer): said, not refused.
std::vector<std::string> unmeasured_notes(const Plan& plan, Engine engine) {
  const Strategy& s = plan.strategy;
  std::vector<std::string> out;
  if (engine == Engine::DeepSpeed && (s.tp > 1 || s.pp > 1))
    out.push_back("DeepSpeed's AutoTP and pipeline engine were never launched (deepspeed_train.py refuses them): "
                  "their own costs are not modelled, only ZeRO's terms");
  if (s.offload != Offload::None && engine != Engine::Ours)
    out.push_back("offload is priced by the simulator's host copies and CPU Adam; no engine launch with offload "
                  "has been measured");
  if (engine == Engine::Megatron && s.zero >= 2)
    out.push_back("Megatron-FSDP (zero 2/3) was never launched (megatron_train.py refuses it): its own hooks are "
                  "not modelled");
  if (engine == Engine::Fsdp && s.zero <= 1)
    out.push_back("DDP / ZeroRedundancyOptimizer (zero 0/1): the host's work is the eager model's alone (DDP's "
                  "bucket hooks run in C++; not probed, not launched yet)");
  if (s.ckpt != Ckpt::None && engine != Engine::Ours)
    out.push_back("activation recomputation through the engine's own checkpointing was not launched; priced as "
                  "this runtime recomputes");
  return out;
}

// Where the host constants come from, and what the form was worth on the
// launches seen so far (docs/ENGINE_TIME.md, "Seen data").
std::string host_constants_note(const EngineHostConstants& c) {
  const bool probed = c.from_profile;
  return fmt::format("engine host constants: {}{}; on runs 1-5's 35 launches (seen data, other hosts than the "
                     "probe's) this form missed by {}, and held out on eight one-GPU launches (one H200) by {}: a guide "
                     "to the engine's overheads, not a number to plan on",
                     c.source, probed ? "" : " (a probe on the training host replaces them: profile \"engine_host\", "
                                             "scripts/engines/probe_to_profile.py)",
                     kSeenDataRange, kHeldOutRange);
}

// The engine's step from its host work and the GPU's (engines_host.hpp).
double composed_step(const Plan& plan, const EngineHostConstants& c, Engine engine, const EngineHostWork& host,
                     const EngineGpuWork& gpu, double bubble_scale) {
  const int gas = plan.strategy.gas;
  switch (engine) {
    case Engine::DeepSpeed:
      return plan.strategy.zero == 3 ? deepspeed_zero3_step(plan, c, host, gpu) : deepspeed_zero12_step(gas, host, gpu);
    case Engine::Fsdp: return fsdp_step(gas, host, gpu);
    case Engine::Megatron: return megatron_step(gas, bubble_scale, host, gpu);
    case Engine::Ours: break;
  }
  return gpu.step_seconds;
}

const char* composition_source(const Plan& plan, Engine engine) {
  if (engine == Engine::DeepSpeed && plan.strategy.zero == 3)
    return "DeepSpeed ZeRO-3: per module the coordinator's fetch waits on its oldest event beyond 2 "
           "(partitioned_param_coordinator.py), so the host runs at most 3 modules ahead of the GPU; each "
           "micro-batch ends in the reduce stream's synchronize (stage3.py); then the tail's host and GPU";
  if (engine == Engine::DeepSpeed)
    return "DeepSpeed ZeRO-1/2: per micro-batch max(host, GPU), the device synchronized at the gradient epilogue "
           "(stage_1_and_2.py, overlap_comm); then the tail's host work and the GPU's optimizer";
  if (engine == Engine::Fsdp)
    return "FSDP2: no host sync in the step; max(host's work + the GPU's drain after its last enqueue (the "
           "optimizer), the GPU's step)";
  return "megatron-core train_step: per micro-batch max(host x (1 + bubble/compute), GPU), then the grad norm's "
         "host sync, the tail's host work and the GPU's optimizer";
}

}  // namespace

int64_t torch_model_param_tensors(const ModelSpec& m) {
  const bool ln = m.norm != NormKind::RmsNorm;  // LayerNorm has a bias
  const int64_t norm = ln ? 2 : 1;
  const int64_t per_layer = 4 + (m.qkv_bias ? 3 : 0) + (m.out_bias ? 1 : 0) +
                            (m.mlp == MlpKind::SwiGlu ? 3 : 2) * (m.mlp_bias ? 2 : 1) +
                            m.norms_per_layer() * norm;
  const int64_t outer = 1 + (m.pos == PosEmbed::Learned ? 1 : 0) + (m.final_norm ? norm : 0) +
                        (m.tied_embeddings ? 0 : 1) + (m.lm_head_bias ? 1 : 0);
  return m.layers * per_layer + outer;
}

int64_t torch_model_param_modules(const ModelSpec& m) {
  // q, k, v, out; up and down (and gate under SwiGLU); the norms.
  const int64_t per_layer = 4 + (m.mlp == MlpKind::SwiGlu ? 3 : 2) + m.norms_per_layer();
  const int64_t outer = 1 /*embedding*/ + (m.pos == PosEmbed::Learned ? 1 : 0) + (m.final_norm ? 1 : 0) + 1 /*lm_head*/;
  return m.layers * per_layer + outer;
}

int64_t dtensor_module_calls(const ModelSpec& m, bool sp) {
  // The export's plan (planner/export_fsdp.cpp): q, k, v, out, up, (gate,) down
  // are Colwise/RowwiseParallel; under sp the norms run SequenceParallel and
  // attention and mlp take PrepareModuleInput.
  const int64_t linears = 4 + (m.mlp == MlpKind::SwiGlu ? 3 : 2);
  const int64_t per_layer = linears + (sp ? m.norms_per_layer() + 2 : 0);
  return m.layers * per_layer + 2 /*embedding, lm_head*/ + (sp && m.final_norm ? 1 : 0);
}

HardwareProfile engine_profile(const Plan& plan, const HardwareProfile& profile, Engine engine) {
  HardwareProfile p = profile;
  // The engines run eager PyTorch model code (megatron-core's local spec, the
  // exports' torch_model.py): ATen's kernel chains for rotary, SwiGLU and the
  // loss, which the eager factor below was measured beside.
  if (engine != Engine::Ours) p.fused_ops = false;
  switch (engine) {
    case Engine::Ours: break;
    case Engine::Megatron:
      // megatron_train.py builds the local (Megatron-core-only) layer spec: no
      // Transformer Engine, so DotProductAttention materialises the scores.
      p.flash_attention = false;
      // The export keeps Megatron's default dropout 0.1 (hidden and attention).
      p.dropout = true;
      // bf16: accumulate_allreduce_grads_in_fp32 (arguments.py sets it for
      // bf16), the export passes no --overlap-grad-reduce/--overlap-param-gather
      // (run1's log: overlap_grad_reduce=False, overlap_param_gather=False).
      p.grad_reduce_bytes_per_element = 4;
      p.overlap_grad_reduce = false;
      p.overlap_param_gather = false;
      p.tp_comm_overlap = 0;
      break;
    case Engine::DeepSpeed:
      // torch_model.py calls F.scaled_dot_product_attention(is_causal=True):
      // the flash kernel, as ours. overlap_comm: true in the export; its
      // reduce_bucket_size 5e8 elements. ZeRO-1/2 all-gather the updated
      // parameters at the end of step() (stage_1_and_2.py), not under the
      // next forward.
      p.overlap_grad_reduce = true;
      p.grad_bucket_bytes = 5e8 * bytes_per_element(plan.strategy.precision);
      p.overlap_param_gather = false;
      break;
    case Engine::Fsdp:
      // The export's MixedPrecisionPolicy reduce_dtype float32: gradients
      // reduce-scattered (or all-reduced by DDP) in fp32.
      p.grad_reduce_bytes_per_element = plan.strategy.zero >= 2 ? 4 : 0;
      p.overlap_grad_reduce = true;
      p.overlap_param_gather = false;
      break;
  }
  return p;
}

EngineStep engine_step_time(const Plan& plan, const HardwareProfile& profile, Engine engine) {
  EngineStep out;
  out.engine = engine;
  const Strategy& s = plan.strategy;
  const HardwareProfile p = engine_profile(plan, profile, engine);
  const StepPrediction sim = predict(plan, p);
  out.simulated_seconds = sim.step_seconds;
  if (engine == Engine::Ours) {
    out.step_seconds = sim.step_seconds;
    return out;
  }
  auto add = [&](std::string name, double seconds, std::string source) {
    out.terms.push_back({std::move(name), std::max(0.0, seconds), std::move(source)});
  };
  add("eager kernels", (sim.compute_seconds + sim.bubble_seconds) * (kEagerOverRuntime - 1),
      engine == Engine::Megatron
          ? "megatron-core without Transformer Engine or apex runs torch eager kernels (no fused norms, rotary, "
            "SwiGLU, cross-entropy): the step's compute (and bubble) x (0.3083/0.2891 - 1), torch eager over this "
            "runtime on one H100 (issue 33)"
          : "scripts/engines/torch_model.py is plain torch.nn in eager mode (no fused norms, rotary or "
            "cross-entropy; GQA's repeat_interleave): the step's compute x (0.3083/0.2891 - 1), torch eager over "
            "this runtime on one H100 (issue 33)");
  if (engine == Engine::Megatron)
    add("unfused mask + softmax", megatron_unfused_softmax_seconds(plan, p, sim),
        "dot_product_attention.py + fused_softmax.py forward_torch_softmax: masked_fill's own pass over the "
        "b*a/t*s*s scores each way (2e bytes per score, broadcast mask: strided rate) and torch's softmax at "
        "the reduction rate");
  if (engine == Engine::Megatron)
    add("main_grad accumulation", megatron_main_grad_seconds(plan, p),
        "distributed_data_parallel.py's backward hook without gradient-accumulation fusion: main_grad.add_(grad) "
        "per parameter of the critical stage per micro-batch (10 bytes each)");
  EngineGpuWork gpu{sim.step_seconds, sim.optimizer_seconds};
  for (const auto& t : out.terms) gpu.step_seconds += t.seconds;
  const EngineHostWork host = engine_host_work(plan, p.engine_host, engine);
  out.host_seconds = double(s.gas) * host.micro_batch_seconds + host.tail_seconds;
  out.step_seconds = composed_step(plan, p.engine_host, engine, host, gpu, critical_path_scale(sim));
  add("host work and its syncs", out.step_seconds - gpu.step_seconds,
      fmt::format("{}: host {} (engine_host constants: {}); the GPU's step {:.4f} s, its tail {:.4f} s",
                  composition_source(plan, engine), host.formula, p.engine_host.source, gpu.step_seconds,
                  gpu.tail_seconds));
  for (const std::string& n : unmeasured_notes(plan, engine)) out.notes.push_back(n);
  if (runs_python_trainer(engine))
    out.notes.push_back("the trainer is this repository's scripts/engines/" +
                        std::string(engine == Engine::Fsdp ? "fsdp_train.py" : "deepspeed_train.py") +
                        " (torch_model.py's modules); a model the user brings has other modules and kernels");
  if (engine == Engine::Megatron)
    out.notes.push_back("modelled without Transformer Engine (megatron_train.py's local layer spec, as run1 ran); "
                        "with TE's fused attention and kernels the step is nearer this runtime's, not modelled");
  out.notes.push_back(host_constants_note(p.engine_host));
  out.notes.push_back("not modelled: the first steps' allocator growth, CUDA graph capture (none used), a host "
                      "slower or busier than the probe's other than through a probe on it");
  return out;
}

}  // namespace planner

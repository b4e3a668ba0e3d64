#include "costmodel/engines_memory.hpp"

#include <algorithm>

namespace planner {

namespace {

// DeepSpeed 0.19.8 (deepspeed/runtime/fp16/fused_optimizer.py,
// runtime/zero/stage_1_and_2.py, runtime/zero/stage3.py).
ModelStateBytes deepspeed_states(double P, const Strategy& s) {
  const double d = s.dp_cp();  // the dp-cp group (Megatron's distributed optimizer shards over it)
  const double lp = bytes_per_element(s.precision);  // 16-bit (or fp32) weights and gradients
  // ZeRO-0: FP16_Optimizer keeps an fp32 master copy and, at the step, flattens
  // the gradients into an fp32 buffer (fused_optimizer.py step: grads_groups_flat
  // ... p.grad.to(fp32)): 4 + 4 + 8 per parameter beside the 16-bit weight and
  // gradient. fp32 training runs the torch optimizer on the weights themselves.
  if (s.zero == 0) {
    const double opt = s.precision == Precision::FP32 ? 8.0 : 16.0;
    return {lp * P, lp * P, opt * P, 0};
  }
  // ZeRO-1/2: each rank keeps an fp32 master partition
  // (single_partition_of_fp32_groups, a clone even in fp32), the Adam moments
  // and, for the step, its gradient partition in fp32: (4 + 4 + 8) / d. ZeRO-1
  // keeps the full 16-bit gradients until the accumulation boundary, ZeRO-2
  // partitions them: estimate_zero2_model_states_mem_needs's 2 + 18/d.
  // ZeRO-3 (stage3.py) also partitions the 16-bit weights, keeps the 16-bit
  // gradient partitions in grad_partitions_flat_buffer, and makes the fp32
  // gradient one sub-group (sub_group_size, 1e9 elements) at a time:
  // (2 + 2 + 4 + 8) / d + 4 min(P/d, 1e9). Its estimator says 18/d, two less
  // than this for models below 1e9 parameters per rank.
  ModelStateBytes out;
  out.gpu_params = s.zero == 3 ? lp * P / d : lp * P;
  out.gpu_grads = s.zero >= 2 ? lp * P / d : lp * P;
  out.gpu_optimizer = s.zero == 3 ? 12.0 * P / d + 4.0 * std::min(P / d, 1e9) : 16.0 * P / d;
  if (s.offload != Offload::None) {
    // ZeRO-Offload: the fp32 partitions (master, moments, gradient) live in
    // pinned host memory; with ZeRO-2/3 the reduced 16-bit gradient partitions
    // are copied there too, so the GPU keeps only the weights (the estimators'
    // cpu_offload branch: 2 per parameter for ZeRO-2, 2/d for ZeRO-3).
    out.host_bytes += out.gpu_optimizer + (s.zero == 3 ? out.gpu_grads : 0.0);  // stage3: its grad buffer too
    out.gpu_optimizer = 0;
    if (s.zero >= 2) out.gpu_grads = 0;
  }
  if (s.offload == Offload::All) {  // offload_param (ZeRO-3): the 16-bit partition too
    out.host_bytes += out.gpu_params;
    out.gpu_params = 0;
  }
  return out;
}

// Megatron-LM core_v0.19.0, docs/user-guide/features/dist_optimizer.md: bytes
// per parameter by precision, replicated part + sharded part with the
// distributed optimizer: fp16 4 + 16/d (20 without), bf16 6 + 12/d (18),
// fp32 8 + 8/d (16). bf16 accumulates and reduces gradients in fp32
// (arguments.py sets accumulate_allreduce_grads_in_fp32 for bf16).
// Megatron-FSDP (docs/user-guide/features/megatron_fsdp.md) shards the
// gradients too (optim_grads, zero=2) and the parameters (optim_grads_params,
// zero=3).
ModelStateBytes megatron_states(double P, const Strategy& s) {
  double p = 2, g = 4, o = 12;  // bf16: weight, fp32 main grad, fp32 main weight + moments
  if (s.precision == Precision::FP16) p = 2, g = 2, o = 16;  // + fp32 grad copy at the step
  if (s.precision == Precision::FP32) p = 4, g = 4, o = 8;
  const double d = s.dp_cp();  // the dp-cp group (Megatron's distributed optimizer shards over it)
  ModelStateBytes out;
  out.gpu_params = (s.zero == 3 ? p / d : p) * P;
  out.gpu_grads = (s.zero >= 2 ? g / d : g) * P;
  out.gpu_optimizer = (s.zero >= 1 ? o / d : o) * P;
  if (s.offload == Offload::Optimizer) {
    // --optimizer-cpu-offload (megatron/core/optimizer/cpu_offloading/): the
    // HybridDeviceOptimizer steps on the host with the fp32 main weights and
    // moments there, copying the gradient shard over (4/d).
    out.host_bytes = out.gpu_optimizer + 4.0 * P / d;
    out.gpu_optimizer = 0;
  }
  return out;
}

// PyTorch 2.13. zero=0/1: DDP over fp32 weights (the master copy) under
// torch.autocast, whose weight cache keeps a 16-bit copy of every weight used
// in the step (autocast cache_enabled=True); ZeroRedundancyOptimizer shards the
// Adam moments. zero=2/3: FSDP2 fully_shard keeps fp32 shards of weights,
// gradients (reduce_dtype fp32) and moments; MixedPrecisionPolicy all-gathers
// 16-bit weights. reshard_after_forward=False (zero=2) keeps every unsharded
// weight from its forward to its backward; CPUOffloadPolicy moves the shards
// and the optimizer step to the host.
ModelStateBytes fsdp_states(double P, const Strategy& s) {
  const double d = s.dp_cp();  // the dp-cp group (Megatron's distributed optimizer shards over it)
  const double lp = bytes_per_element(s.precision);
  const double cache = s.precision == Precision::FP32 ? 0.0 : lp;
  ModelStateBytes out;
  switch (s.zero) {
    case 0: out = {(4 + cache) * P, 4 * P, 8 * P, 0}; break;
    case 1: out = {(4 + cache) * P, 4 * P, 8 * P / d, 0}; break;
    case 2: out = {lp * P + 4 * P / d, 4 * P / d, 8 * P / d, 0}; break;
    default: out = {4 * P / d, 4 * P / d, 8 * P / d, 0}; break;
  }
  if (s.offload == Offload::All) {
    out.host_bytes = out.gpu_params + out.gpu_grads + out.gpu_optimizer;
    out = {0, 0, 0, out.host_bytes};
  }
  return out;
}

}  // namespace

ModelStateBytes engine_model_state_bytes(double P, const Strategy& s, Engine engine) {
  switch (engine) {
    case Engine::Ours: break;
    case Engine::DeepSpeed: return deepspeed_states(P, s);
    case Engine::Megatron: return megatron_states(P, s);
    case Engine::Fsdp: return fsdp_states(P, s);
  }
  return model_state_bytes(P, s, MemoryConstants{});
}

double gather_unit_params(const ModelSpec& m, int tp) {
  const double width = double(m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden);
  return std::max(double(m.layer_params()), double(m.vocab) * width) / tp;
}

double deepspeed_largest_module_params(const ModelSpec& m, int tp) {
  const double h = double(m.hidden), width = double(m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden);
  const double qkv = h * (double(m.q_dim()) + 2.0 * double(m.kv_dim()));
  const double mlp = h * double(m.ffn);
  return std::max({double(m.vocab) * width, qkv, mlp}) / tp;
}

// DeepSpeed 0.19.8 ZeRO-3, runtime/zero/partitioned_param_coordinator.py,
// once the first step has recorded the module trace (is_complete_trace):
// fetch_sub_module, at every module's fetch (containers with no parameters of
// their own included), all-gathers ahead up to stage3_prefetch_bucket_size
// elements of parameters not yet gathered, capped by stage3_max_live_parameters
// less __n_available_params (the elements gathered or in flight), so the
// forward soon runs at that cap; __params_to_release keeps a parameter that
// recurs within stage3_max_reuse_distance elements of the trace or whose later
// use the prefetcher has already walked past (__most_recent_step_id_param_fetched_for
// beyond the step), and by the end of the forward the prefetcher has walked
// into the backward's part of the trace: what is gathered stays gathered until
// its backward. Each gathered parameter is a whole 16-bit copy
// (partition_parameters.py AllGatherCoalescedHandle.wait), each one in flight
// its all-gather buffer. A replay of the coordinator over torch_model.py's
// module trace (scripts/engines/ds_zero3_trace.py) gives 1.002e9-1.023e9
// elements at the loss's backward for llama-3.2-1b/3b and gpt2-xl (the cap and
// the last parameter the prefetcher took), 773.5e6 of gpt2-large's 774e6.
// Persistent parameters (stage3_param_persistence_threshold 1e5: norms and
// biases, under 0.1% of these models) are left out.
double deepspeed_zero3_live_params(double params) { return std::min(params, DeepSpeedBuckets{}.max_live_elements); }

double engine_comm_bytes(const ModelSpec& m, const Strategy& s, Engine engine, double stage_params,
                         double pp_buffers) {
  const double lp = bytes_per_element(s.precision);
  // A gradient reduce-scatter in fp32 (FSDP2 reduce_dtype, Megatron-FSDP
  // main_grads_dtype) first copies the 16-bit unit gradient into an fp32 buffer.
  const double reduce_copy = s.precision == Precision::FP32 ? 0.0 : 4.0;
  double comm = pp_buffers;
  switch (engine) {
    case Engine::Ours: break;
    case Engine::DeepSpeed: {
      const DeepSpeedBuckets b;
      if (s.zero == 0) {
        // buffered_allreduce_fallback flattens up to 5e8 gradient elements at once.
        if (s.dp_cp() > 1) comm += lp * std::min(b.allreduce_elements, stage_params);
      } else if (s.zero <= 2) {
        // Contiguous-gradient reduce buffers of reduce_bucket_size elements each,
        // allocated at full size (stage_1_and_2.py setup_buckets: torch.empty).
        comm += (b.overlap_comm ? 2 : 1) * lp * b.reduce_elements;
      } else {
        // stage3.py: one reduce buffer, the parameters held gathered
        // (deepspeed_zero3_live_params) and the largest module's gradient.
        comm += lp * b.reduce_elements + lp * deepspeed_zero3_live_params(stage_params) +
                lp * deepspeed_largest_module_params(m, s.tp);
      }
      break;
    }
    case Engine::Megatron:
    case Engine::Fsdp: {
      // zero=0/1: Megatron reduces in place in its main_grad buffer; the DDP
      // export sets gradient_as_bucket_view=True, which saves "memory equal to
      // the total gradients size" (torch DDP docs) - no extra buckets either.
      const double unit = gather_unit_params(m, s.tp);
      if (s.zero >= 2) comm += unit * (lp + reduce_copy);      // one unit's gradient being reduce-scattered
      if (s.zero == 3) comm += 2 * unit * lp;                  // the unit computed and the one prefetched
      break;
    }
  }
  return comm;
}

bool engine_has_moments(const Strategy& s, Engine engine) {
  if (s.offload != Offload::None || s.finetune.frozen_base()) return false;
  if (engine == Engine::DeepSpeed) return s.zero >= 1;
  if (engine == Engine::Fsdp) return s.zero >= 2;
  return false;
}

namespace {

// DeepSpeed 0.19.8 ZeRO-1/2 (runtime/zero/stage_1_and_2.py), the export's
// config (bf16, no data_types.grad_accum_dtype: gradients accumulate in bf16,
// use_grad_accum_attribute off; contiguous_gradients and overlap_comm on).
// Alive throughout: the 16-bit weights and the fp32 master partition with
// the two Adam moments (12 P/d). Gradients: engine.zero_grad(set_to_none) after
// each step, so a gas-1 step has none at the loss; ZeRO-1 accumulates the
// full 16-bit param.grad over micro-batches and reduces only at the boundary,
// ZeRO-2 reduces every micro-batch into its partition (grads_in_partition,
// all_grad_tensors: views, 2 P/d). The two reduce_bucket_size buffers are made
// by setup_buckets at a backward's first gradient hook and freed by
// _release_ipg_buffers in its epilogue, which ZeRO-2 runs after every
// micro-batch but ZeRO-1 only at the accumulation boundary
// (engine.allreduce_gradients -> reduce_gradients): with gas > 1 ZeRO-1's
// buckets stay from the first micro-batch's backward to the last one's end.
// The step (step()): the other
// partitions' gradients freed first (free_grad_in_param_list), the own ones
// flattened (a 16-bit copy) and cast to fp32 (single_grad_partition).
std::vector<EngineMoment> deepspeed_zero12_moments(const Strategy& s, const EngineStepLive& in) {
  const double P = in.params, d = s.dp_cp(), lp = bytes_per_element(s.precision);
  const DeepSpeedBuckets b;
  const double buckets = (b.overlap_comm ? 2 : 1) * lp * b.reduce_elements;
  const double own = lp * P / d;                                   // the rank's gradient partition
  const double held = s.gas > 1 ? (s.zero == 1 ? lp * P : own) : 0.0;  // from earlier micro-batches
  const double at_end = s.zero == 1 ? lp * P : own;                // after the last backward
  const double fp32_copy = s.precision == Precision::FP32 ? 0.0 : 4.0 * P / d;  // .to(fp32); fp32: the same tensor
  const double kept_buckets = s.zero == 1 && s.gas > 1 ? buckets : 0.0;
  const double base_p = lp * P, base_o = 12.0 * P / d;
  return {
      {"loss backward", base_p, held, base_o, in.activations, in.loss_peak, in.fixed_comm + kept_buckets},
      {"backward with reduce buckets", base_p, held, base_o, in.activations, in.loss_grad, in.fixed_comm + buckets},
      {"end of backward", base_p, at_end, base_o, 0, 0, in.fixed_comm + buckets},
      {"optimizer step", base_p, own + own + fp32_copy, base_o, 0, 0, in.fixed_comm},
  };
}

// DeepSpeed 0.19.8 ZeRO-3 (runtime/zero/stage3.py). Alive throughout: the
// 16-bit weight partition, the 16-bit gradient partitions
// (grad_partitions_flat_buffer, zeros at init, which also accumulates the
// micro-batches), the fp32 master partition and moments (12 P/d), and the one
// reduce bucket (torch.empty(reduce_bucket_size) at init). At the loss's
// backward: the parameters the coordinator holds gathered,
// stage3_max_live_parameters of them (deepspeed_zero3_live_params). At the
// end of the backward: the largest module (the word embedding) gathered with
// the prefetch bucket and that module's full gradient (the estimator's 4 x
// largest layer). The step: one sub-group at a time
// (_prepare_fp32_grad_for_sub_group) flattens its gradients (16-bit copy)
// and casts them to fp32: 6 bytes per element of min(P/d, sub_group_size).
std::vector<EngineMoment> deepspeed_zero3_moments(const ModelSpec& m, const Strategy& s, const EngineStepLive& in) {
  const double P = in.params, d = s.dp_cp(), lp = bytes_per_element(s.precision);
  const DeepSpeedBuckets b;
  const double largest = lp * deepspeed_largest_module_params(m, s.tp);
  const double live = lp * deepspeed_zero3_live_params(P);
  const double bucket = lp * b.reduce_elements;
  const double sub_group = std::min(P / d, 1e9);  // stage3 sub_group_size default
  const double step_grads = lp * sub_group + (s.precision == Precision::FP32 ? 0.0 : 4.0 * sub_group);
  const double p = lp * P / d, g = lp * P / d, o = 12.0 * P / d, c = in.fixed_comm + bucket;
  return {
      {"loss backward", p, g, o, in.activations, in.loss_peak, c + live},
      {"end of backward", p, g, o, 0, 0, c + 2 * largest + lp * b.prefetch_elements},
      {"optimizer step", p, g + step_grads, o, 0, 0, c},
  };
}

// PyTorch FSDP2 fully_shard as scripts/engines/fsdp_train.py runs it: fp32
// parameters sharded (4 P/d, their own master copy), MixedPrecisionPolicy
// (bf16 params, fp32 reduce), fused AdamW moments (8 P/d), each block a unit
// and the root (embedding, final norm, head) one more; zero_grad(set_to_none)
// after the step; set_requires_gradient_sync(False) on all but the last
// micro-batch. At the loss's backward: zero=2 (reshard_after_forward=False)
// holds every unit's 16-bit weights gathered since its forward; zero=3 only
// the root's (FSDP2 does not reshard the root after its forward). Without
// gradient sync each unit keeps its unsharded gradient, cast to the fp32
// reduce dtype (FSDPParam.to_accumulated_grad_if_needed): 4 P, whole, from the
// first micro-batch to the last one's backward. At the end of the backward:
// the sharded fp32 gradients (4 P/d), one unit's gradient being reduced
// (16-bit and its fp32 copy) and, for zero=3, the unit computed and the one
// prefetched (engine_comm_bytes). The step works in place on the shards.
std::vector<EngineMoment> fsdp_moments(const ModelSpec& m, const Strategy& s, const EngineStepLive& in) {
  const double P = in.params, d = s.dp_cp(), lp = bytes_per_element(s.precision);
  const double shards = 4.0 * P / d, o = 8.0 * P / d;
  const double root = double(stage_params_per_rank(m, 0, true, true, 1, s.tp));
  const double gathered = s.zero == 2 ? lp * P : lp * root;
  const double held = s.gas > 1 ? 4.0 * P : 0.0;
  const double unit_buffers = engine_comm_bytes(m, s, Engine::Fsdp, P, 0.0);
  return {
      {"loss backward", shards + gathered, held, o, in.activations, in.loss_peak, in.fixed_comm},
      {"end of backward", shards, 4.0 * P / d, o, 0, 0, in.fixed_comm + unit_buffers},
  };
}

}  // namespace

std::vector<EngineMoment> engine_moments(const ModelSpec& m, const Strategy& s, Engine engine,
                                         const EngineStepLive& live) {
  if (!engine_has_moments(s, engine)) return {};
  if (engine == Engine::Fsdp) return fsdp_moments(m, s, live);
  return s.zero == 3 ? deepspeed_zero3_moments(m, s, live) : deepspeed_zero12_moments(s, live);
}

}  // namespace planner

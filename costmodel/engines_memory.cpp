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
        // stage3.py: one reduce buffer, the prefetch bucket and the gathered
        // largest module with its gradient (the estimator's 4 x largest layer).
        comm += lp * b.reduce_elements + lp * b.prefetch_elements + 2 * lp * deepspeed_largest_module_params(m, s.tp);
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

}  // namespace planner

#pragma once
// Durations of single GPU/CPU operations from a hardware profile. Pure
// functions, each with its formula in docs/TIME_MODEL.md ("Op costs").
#include <cstdint>

#include "costmodel/cluster_spec.hpp"
#include "costmodel/hardware_profile.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// Fraction of the large-GEMM rate that a (batch x) m x n x k GEMM reaches:
// tile padding, wave quantization over the SMs (split-K when there are fewer
// tiles than SMs) and the main-loop prologue for a short k, each relative to
// the 8192^3 GEMM the efficiency was measured on.
double gemm_shape_factor(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, int64_t batch = 1);

// C(m x n) = A(m x k) B(k x n), `batch` times: max(compute, memory) + one kernel overhead.
double gemm_seconds(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, Precision prec, int64_t batch = 1);

// A memory-bound kernel moving `bytes` (reads + writes) through HBM.
double memory_bound_seconds(const HardwareProfile& p, double bytes);

// Fused (flash) attention over `batch_heads` heads of `seq` tokens of head
// dimension `head_dim`. FLOPs counted as in the FlashAttention-2 benchmarks:
// forward 4 s^2 d per head, backward 2.5x that, halved when causal.
double flash_attention_forward_seconds(const HardwareProfile& p, int64_t batch_heads, int64_t seq, int64_t head_dim,
                                       bool causal, Precision prec);
double flash_attention_backward_seconds(const HardwareProfile& p, int64_t batch_heads, int64_t seq,
                                        int64_t head_dim, bool causal, Precision prec);

// Bytes the fused Adam step moves per parameter on the GPU: mixed precision
// reads fp32 master, m, v and the 16-bit gradient, writes master, m, v and the
// 16-bit weight (28), plus the gradient-norm read and the gradient zeroing (4);
// fp32 training: 36.
double gpu_adam_bytes_per_param(Precision prec);
double gpu_adam_seconds(const HardwareProfile& p, double params, Precision prec);

// DeepSpeed's CPU Adam (ZeRO-Offload, Ren et al. 2021) on `params` parameters
// by one process while `processes_per_node` share the host: the larger of the
// memory time (30 bytes/param over the host DRAM bandwidth share) and the
// arithmetic time (cpu_adam_flops_per_param over the cores' share).
double cpu_adam_seconds(const HardwareProfile& p, const ClusterSpec& c, double params, int processes_per_node);

// Host<->device copy of `bytes` at `link_Bps` (the GPU's share of its PCIe path).
double host_copy_seconds(const HardwareProfile& p, double bytes, double link_Bps);

}  // namespace planner

#pragma once
// Durations of single GPU/CPU operations from a hardware profile. Pure
// functions, each with its formula in docs/TIME_MODEL.md ("Op costs").
#include <cstdint>

#include "specs/cluster_spec.hpp"
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
// A weight gradient dW (m x n) = X^T (m x k) dY (k x n), k the tokens: the
// same at the profile's weight_grad_gemm_rel of the GEMM rate.
double weight_grad_gemm_seconds(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, Precision prec);

// A memory-bound kernel moving `bytes` (reads + writes) through HBM.
double memory_bound_seconds(const HardwareProfile& p, double bytes);

// Classes of memory-bound kernels: a vectorized stream (memory_efficiency), the
// non-vectorized elementwise path (strided/broadcast/converting operands) and
// row/column reductions, each at its fraction of the streaming rate.
// AdamW: the fused AdamW kernel (at::_fused_adamw_ on fp32 master, gradient and
// moments), which reads 16 bytes and writes 12 per parameter with a square root
// and a division between: calibrate times it (HardwareProfile::adamw_kernel_relative).
enum class MemKernel { Streaming, Strided, Reduction, AdamW };
double memory_kernel_seconds(const HardwareProfile& p, double bytes, MemKernel kind);

// Bytes moved and kernels launched by the memory-bound ops of one pass, by class.
struct MemoryOps {
  double streaming = 0, strided = 0, reduction = 0, adamw = 0;
  int kernels = 0;
  void add(MemKernel k, double bytes, int n = 1);
  double seconds(const HardwareProfile& p) const;  // bytes over each class's rate + one overhead per kernel
};

// Fused (flash) attention over `batch_heads` heads of `seq` tokens of head
// dimension `head_dim`. FLOPs counted as in the FlashAttention-2 benchmarks:
// forward 4 s^2 d per head, backward 2.5x that, halved when causal.
double flash_attention_forward_seconds(const HardwareProfile& p, int64_t batch_heads, int64_t seq, int64_t head_dim,
                                       bool causal, Precision prec);
double flash_attention_backward_seconds(const HardwareProfile& p, int64_t batch_heads, int64_t seq,
                                        int64_t head_dim, bool causal, Precision prec);

// Bytes the GPU optimizer step moves per parameter, as the runtime executes it
// (runtime/trainer.cpp): the gradient zeroing (e) and the gradient-norm read (e);
// mixed precision copies each 2^26-element chunk of 16-bit gradients into an fp32
// buffer (read e, write 4: a converting, non-vectorized copy), runs the fused
// AdamW on fp32 master, grad, m, v (read 16, write 12) and copies the master
// back to the 16-bit weights (read 4, write e): 44 bytes in bf16/fp16; fp32 runs
// AdamW on the gradients in place: 4 + 4 + 28 = 36.
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

#include "costmodel/op_costs.hpp"

#include <algorithm>
#include <cmath>

namespace planner {

namespace {

constexpr int64_t kReferenceGemm = 8192;  // the shape the efficiency was measured on

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Utilisation of the SMs by the tiles of one GEMM, before normalisation.
// cuBLAS offers tiles down to 16 rows/columns and picks none larger than the problem.
int64_t tile_for(int64_t dim, int64_t largest) {
  int64_t t = 16;
  while (t < dim && t < largest) t *= 2;
  return std::min(t, largest);
}

double raw_utilisation(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, int64_t batch) {
  const int64_t tm = tile_for(m, p.gemm_tile_m), tn = tile_for(n, p.gemm_tile_n), sms = p.sm_count;
  const int64_t tiles_m = ceil_div(m, tm), tiles_n = ceil_div(n, tn);
  const double fill = double(m) * double(n) / (double(tiles_m * tm) * double(tiles_n * tn));
  const int64_t tiles = batch * tiles_m * tiles_n;
  double waves;
  int64_t k_per_block = k;
  if (tiles >= sms) {
    waves = double(tiles) / double(ceil_div(tiles, sms) * sms);
  } else {
    // Split-K: cuBLAS cuts the reduction into up to sms/tiles slices of at least 256.
    const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(sms / tiles, k / 256));
    k_per_block = ceil_div(k, splits);
    waves = double(tiles * splits) / double(sms);
  }
  const double k_eff = double(k_per_block) / (double(k_per_block) + p.gemm_k_half);
  return fill * waves * k_eff;
}

}  // namespace

double gemm_shape_factor(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, int64_t batch) {
  const double ref = raw_utilisation(p, kReferenceGemm, kReferenceGemm, kReferenceGemm, 1);
  return std::min(1.0, raw_utilisation(p, m, n, k, batch) / ref);
}

namespace {
double gemm_at(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, Precision prec, int64_t batch, double rel) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2.0 * double(batch) * double(m) * double(n) * double(k);
  const double compute = flops / (p.gemm_flops(prec) * rel * gemm_shape_factor(p, m, n, k, batch));
  // fp8: the operands are one byte, the output bf16 (at::_scaled_mm's out_dtype).
  const double in_e = prec == Precision::FP8 ? 1.0 : double(bytes_per_element(prec));
  const double bytes =
      double(batch) * ((double(m) * k + double(k) * n) * in_e + double(m) * n * bytes_per_element(prec));
  return std::max(compute, bytes / p.memory_Bps()) + p.kernel_overhead_seconds;
}
}  // namespace

double gemm_seconds(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, Precision prec, int64_t batch) {
  return gemm_at(p, m, n, k, prec, batch, 1.0);
}

double weight_grad_gemm_seconds(const HardwareProfile& p, int64_t m, int64_t n, int64_t k, Precision prec) {
  return gemm_at(p, m, n, k, prec, 1, p.weight_grad_gemm_rel(prec));
}

double memory_bound_seconds(const HardwareProfile& p, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / p.memory_Bps() + p.kernel_overhead_seconds;
}

double memory_kernel_seconds(const HardwareProfile& p, double bytes, MemKernel kind) {
  if (bytes <= 0) return 0;
  const double rel = kind == MemKernel::Strided     ? p.strided_kernel_relative
                     : kind == MemKernel::Reduction ? p.reduction_kernel_relative
                     : kind == MemKernel::AdamW     ? p.adamw_kernel_relative
                                                    : 1.0;
  return bytes / (p.memory_Bps() * rel);
}

void MemoryOps::add(MemKernel k, double bytes, int n) {
  (k == MemKernel::Streaming ? streaming : k == MemKernel::Strided ? strided : k == MemKernel::AdamW ? adamw : reduction) +=
      bytes;
  kernels += n;
}

double MemoryOps::seconds(const HardwareProfile& p) const {
  return memory_kernel_seconds(p, streaming, MemKernel::Streaming) + memory_kernel_seconds(p, strided, MemKernel::Strided) +
         memory_kernel_seconds(p, reduction, MemKernel::Reduction) + memory_kernel_seconds(p, adamw, MemKernel::AdamW) +
         kernels * p.kernel_overhead_seconds;
}

namespace {
double flash_work(int64_t batch_heads, int64_t seq, int64_t head_dim, bool causal) {
  return 4.0 * double(batch_heads) * double(seq) * double(seq) * double(head_dim) * (causal ? 0.5 : 1.0);
}
}  // namespace

double flash_attention_forward_seconds(const HardwareProfile& p, int64_t bh, int64_t s, int64_t d, bool causal,
                                       Precision prec) {
  prec = working_precision(prec);  // attention stays bf16 under fp8
  return flash_work(bh, s, d, causal) / (p.gemm_flops(prec) * p.attention_forward_rel(prec, d, s)) +
         p.kernel_overhead_seconds;
}

double flash_attention_backward_seconds(const HardwareProfile& p, int64_t bh, int64_t s, int64_t d, bool causal,
                                        Precision prec) {
  prec = working_precision(prec);
  return 2.5 * flash_work(bh, s, d, causal) / (p.gemm_flops(prec) * p.attention_backward_rel(prec, d, s)) +
         p.kernel_overhead_seconds;
}

double gpu_adam_bytes_per_param(Precision prec) { return prec == Precision::FP32 ? 36.0 : 44.0; }

double gpu_adam_seconds(const HardwareProfile& p, double params, Precision prec) {
  if (params <= 0) return 0;
  const double e = bytes_per_element(prec);
  MemoryOps ops;
  ops.add(MemKernel::Streaming, e * params);                    // zero the gradients
  ops.add(MemKernel::Reduction, e * params);                    // global gradient norm
  if (prec == Precision::FP32) {
    ops.add(MemKernel::AdamW, 28 * params);                     // AdamW on the gradients in place
  } else {
    ops.add(MemKernel::Strided, (e + 4) * params);              // 16-bit gradients -> fp32 chunk
    ops.add(MemKernel::AdamW, 28 * params);                     // AdamW on fp32 master, grad, m, v
    ops.add(MemKernel::Streaming, (4 + e) * params);            // master -> 16-bit weights
  }
  ops.kernels = 1;  // the chunks' kernels are few and long
  return ops.seconds(p);
}

double cpu_adam_seconds(const HardwareProfile& p, const ClusterSpec& c, double params, int procs) {
  if (params <= 0) return 0;
  procs = std::max(1, procs);
  // Measured (planner calibrate): the node's rate, all its processes together
  // (every local rank at once under mpirun; one process alone otherwise, an
  // estimate for several: on the 32-core host of two H200s, one rank alone ran
  // 3.0e9 parameters/s (validation/archive/h200x2/run4), two ranks at once 1.83e9
  // each (validation/archive/h200x2/heldout-b)). The runtime gives each process its
  // part of the cores.
  // One process alone on the node: its own measured rate where the profile has
  // one beside a several-process node figure.
  // The measured rates are of the measured host (the GPU's typical node): a
  // cluster file's other CPU figures scale them by the slower of its FLOP/s
  // and memory-bandwidth ratios (the update is bound by one or the other), so
  // they count for calibrated GPUs too (issue 28).
  const ClusterSpec host = default_host(c);
  const double scale = std::min(host.cpu_flops > 0 && c.cpu_flops > 0 ? c.cpu_flops / host.cpu_flops : 1.0,
                                host.host_memory_bandwidth_Bps > 0 && c.host_memory_bandwidth_Bps > 0
                                    ? c.host_memory_bandwidth_Bps / host.host_memory_bandwidth_Bps
                                    : 1.0);
  if (procs == 1 && p.cpu_adam_params_per_second_one_process > 0)
    return params / (p.cpu_adam_params_per_second_one_process * scale);
  if (p.cpu_adam_params_per_second > 0) return params / (p.cpu_adam_params_per_second * scale / procs);
  // Fallbacks when the cluster does not say: a two-socket server of DDR4-3200,
  // 8 channels each (2 x 204.8 GB/s), and 64 cores at ~30 GFLOP/s fp32 AVX2 each.
  const double dram = c.host_memory_bandwidth_Bps > 0 ? c.host_memory_bandwidth_Bps : 409.6e9;
  const double flops = c.cpu_flops > 0 ? c.cpu_flops : 64 * 30e9;
  const double mem_s = params * 30.0 / (dram * p.host_memory_efficiency / procs);
  const double cpu_s = params * p.cpu_adam_flops_per_param / (flops / procs);
  return std::max(mem_s, cpu_s);
}

double host_copy_seconds(const HardwareProfile& p, double bytes, double link_Bps) {
  if (bytes <= 0) return 0;
  return bytes / (link_Bps * p.host_copy_efficiency) + p.kernel_overhead_seconds;
}

}  // namespace planner

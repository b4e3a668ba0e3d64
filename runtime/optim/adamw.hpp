#pragma once
// The AdamW update of one range of the optimizer shard, as the runtime's
// Engine runs it on the device and, under offload, on the host's worker thread
// (runtime/engine_tail.cpp). `planner calibrate` times this same function on buffers
// allocated as the Engine allocates them (calibration/measure_host.cpp), so that
// the profile's CPU AdamW rate is the runtime's, not a second copy of it.
#include <ATen/ATen.h>

#include <cstdint>

namespace planner::rt {

// On the device, 16-bit gradients are converted into an fp32 work chunk of at
// most this many elements (256 MB) before the fused AdamW: the chunk bounds the
// extra memory.
constexpr int64_t kOptChunk = int64_t(1) << 26;

struct AdamHyper {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.1, eps = 1e-8;
};

// AdamW over master[0, n): weight decay on [0, decay_len), none on the rest.
// grad16 is the gradient in the working precision; step_count and divisor are
// 0-d fp32 tensors on the buffers' device; out16, when given, receives the
// updated master in its own dtype.
//  - On the device: at::_fused_adamw_ per part in chunks of kOptChunk, a
//    16-bit gradient first converted into `work` (at least min(n, kOptChunk)
//    fp32 elements).
//  - On the host: host_adamw below (`work` is not used).
void adam_range(at::Tensor master, at::Tensor m, at::Tensor v, at::Tensor grad16, at::Tensor work, int64_t decay_len,
                const AdamHyper& h, const at::Tensor& step_count, const at::Tensor& divisor,
                at::Tensor out16 = at::Tensor());

// The host AdamW (runtime/optim/adamw.cpp): the same update as
// at::_fused_adamw_ with grad_scale = divisor (the same operations in the
// same order, bit for bit where the CPU has FMA), in one pass over contiguous
// arrays: per block of 4096 elements, the gradient is converted and divided
// in the core's cache, master, m and v updated, and the copy written in
// out_type (bf16, fp16 or fp32; out16 may be null). Memory sees 28 bytes per
// parameter with 16-bit gradients, about half of what converting into a work
// buffer, the fused AdamW and a copy as three LibTorch passes move; the host
// AdamW is bound by memory bandwidth (validation/archive/h100x2/cpu-adam, host-adam).
// fp16 is converted with F16C where the CPU has it and bf16 by shifts, both
// vectorized, so that neither precision is compute-bound.
//
// The work is spread over `threads` threads (the caller and helpers of a team
// kept for the process), which take blocks from a shared counter. LibTorch's
// operations split each operation into one static share per thread with a
// barrier after it, so one core taken away (the hypervisor, another rank's
// spinning thread) held every operation up; and an at::parallel_for written
// here would run on one thread, since this project is compiled without
// OpenMP (tried: 3e8 parameters/s against 3e9, validation/archive/h100x2/offload7).
void host_adamw(float* master, float* m, float* v, const void* grad, at::ScalarType grad_type, int64_t n,
                int64_t decay_len, const AdamHyper& h, double step, float divisor, void* out16, at::ScalarType out_type,
                int threads);

}  // namespace planner::rt

#pragma once
// The AdamW update of one range of the optimizer shard, as the runtime's
// Engine runs it on the device and, under offload, on the host's worker thread
// (runtime/engine.cpp). `planner calibrate` times this same function on buffers
// allocated as the Engine allocates them (runtime/calibrate_host.cpp), so that
// the profile's CPU AdamW rate is the runtime's, not a second copy of it.
#include <ATen/ATen.h>

#include <cstdint>

namespace planner::rt {

// 16-bit gradients are converted into an fp32 work chunk of at most this many
// elements (256 MB) before the fused AdamW: the chunk bounds the extra memory.
constexpr int64_t kOptChunk = int64_t(1) << 26;

struct AdamHyper {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.1, eps = 1e-8;
};

// AdamW (at::_fused_adamw_) over master[0, n): weight decay on [0, decay_len),
// none on the rest, each part in chunks of kOptChunk. grad16 is the gradient
// in the working precision (fp32 needs no work chunk); work holds at least
// min(n, kOptChunk) fp32 elements; step_count and divisor are 0-d fp32 tensors
// on the buffers' device; out16, when given, receives the updated master in
// its own dtype. Each operation is one of LibTorch's, parallel inside: code
// compiled here has no OpenMP, so an at::parallel_for written here runs its
// body on one thread, and every LibTorch operation inside it starts its own
// team (measured: tiles of 2^17 handed out that way ran the offload update at
// 3e8 parameters/s against 3e9, validation/h100x2/offload7).
void adam_range(at::Tensor master, at::Tensor m, at::Tensor v, at::Tensor grad16, at::Tensor work, int64_t decay_len,
                const AdamHyper& h, const at::Tensor& step_count, const at::Tensor& divisor,
                at::Tensor out16 = at::Tensor());

}  // namespace planner::rt

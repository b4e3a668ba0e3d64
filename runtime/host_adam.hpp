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

// On the host the update goes tile by tile: 2^17 elements (512 KB of fp32
// gradient per thread), each tile taken by the next free intra-op thread.
constexpr int64_t kHostTile = int64_t(1) << 17;

struct AdamHyper {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.1, eps = 1e-8;
};

// AdamW (at::_fused_adamw_) over master[0, n): weight decay on [0, decay_len),
// none on the rest. grad16 is the gradient in the working precision (fp32 needs
// no conversion); step_count and divisor are 0-d fp32 tensors on the buffers'
// device; out16, when given, receives the updated master in its own dtype.
//  - GPU: each part in chunks of kOptChunk converted into work (at least
//    min(n, kOptChunk) fp32 elements), out16 copied at the end.
//  - Host: tiles of kHostTile handed out dynamically to the intra-op threads
//    (at::parallel_for over one slot per thread, each pulling tiles from a
//    shared counter); each tile's gradient is converted into the thread's
//    part of work (or of a temporary when work holds fewer than
//    threads * kHostTile elements), updated and written to out16 while it is
//    in the core's cache. The arithmetic is the same element by element, so
//    the result does not depend on the tiling or the thread count.
void adam_range(at::Tensor master, at::Tensor m, at::Tensor v, at::Tensor grad16, at::Tensor work, int64_t decay_len,
                const AdamHyper& h, const at::Tensor& step_count, const at::Tensor& divisor,
                at::Tensor out16 = at::Tensor());

}  // namespace planner::rt

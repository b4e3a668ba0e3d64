#pragma once
// What the runtime's C++ needs to call its CUDA kernels
// (runtime/kernels/fused_kernels.hpp) on ATen tensors: the kernels' element
// type of a tensor and the current stream of its device. Only in builds with
// the kernels (PLANNER_FUSED_CUDA=1).
#if PLANNER_FUSED_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

#include "runtime/kernels/fused_kernels.hpp"

namespace planner::rt {

inline std::optional<fused::Dtype> kernel_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return fused::Dtype::F32;
    case at::kHalf: return fused::Dtype::F16;
    case at::kBFloat16: return fused::Dtype::BF16;
    default: return std::nullopt;
  }
}

inline void* stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

}  // namespace planner::rt
#endif

#pragma once
// The categories of a training step's memory, shared by the memory model
// (costmodel/memory_model.hpp predicts bytes per category) and the runtime
// (runtime/measure.hpp measures the same categories), so that prediction and
// measurement line up field by field without the runtime knowing the cost
// model. What each category holds: docs/MEMORY_MODEL.md ("Memory model").
#include <array>
#include <cstdint>

namespace planner {

enum class MemCategory {
  Parameters,       // working-precision weights resident on the GPU
  Gradients,        // working-precision gradients (or their ZeRO-2/3 shard + reduce buckets)
  OptimizerStates,  // fp32 master weights + Adam moments (K = 12 bytes/param in mixed precision)
  Activations,      // saved for backward, times the micro-batches in flight on the stage
  LogitsLoss,       // logits and their fp32 copy for the cross-entropy (last stage)
  CommBuffers,      // gradient buckets, ZeRO-3 gather buffers, PP send/recv buffers
  Overhead,         // CUDA context, cuBLAS workspace, caching-allocator fragmentation
  Count
};
constexpr int kMemCategories = static_cast<int>(MemCategory::Count);
const char* to_string(MemCategory c);  // "parameters", "gradients", "optimizer_states", ...

using MemBreakdown = std::array<int64_t, kMemCategories>;

}  // namespace planner

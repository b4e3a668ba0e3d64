#include "specs/memory_category.hpp"

namespace planner {

const char* to_string(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerStates: return "optimizer_states";
    case MemCategory::Activations: return "activations";
    case MemCategory::LogitsLoss: return "logits_loss";
    case MemCategory::CommBuffers: return "comm_buffers";
    case MemCategory::Overhead: return "overhead";
    case MemCategory::Count: break;
  }
  return "?";
}

}  // namespace planner

#pragma once
// The arithmetic of a LoRA/QLoRA plan's memory, line by line: what is frozen
// and in which format, the adapters with their states, the activations and
// the budget (max-model and memory print it; docs/MEMORY_MODEL.md).
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "costmodel/memory_model.hpp"
#include "specs/plan.hpp"

namespace planner {

struct FinetuneArithmetic {
  int stage = 0;                       // the peak stage, whose GPU the lines are for
  int layers = 0;
  double base_params = 0;              // frozen parameters on the GPU
  double nf4_params = 0;               // of which layer matrices in NF4 (QLoRA)
  double base_bytes = 0;               // the frozen base as stored
  double dequant_bytes = 0;            // QLoRA: one dequantised matrix
  double adapter_params = 0;           // adapters on the GPU
  double adapter_state_bytes = 0;      // their weights, gradients and optimizer states
  double activation_bytes = 0, logits_bytes = 0, other_bytes = 0;
  double peak_bytes = 0, usable_bytes = 0;
};

FinetuneArithmetic finetune_arithmetic(const Plan& plan, const MemoryReport& r);
std::string finetune_arithmetic_text(const Plan& plan, const MemoryReport& r);
nlohmann::json finetune_arithmetic_json(const Plan& plan, const MemoryReport& r);

}  // namespace planner

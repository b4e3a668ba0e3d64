#pragma once
// Internal to model_presets.cpp: the presets of today's decoders (Llama 3.1 and
// 3.2, Mistral, Qwen2.5, Qwen3, Gemma-2) and the mixture-of-experts names that
// are recognised and refused until MoE is modelled.
#include <string>
#include <vector>

#include "specs/model_spec.hpp"

namespace planner {

void add_current_presets(std::vector<ModelSpec>& out);
// The family lists ("llama-3.1", "qwen2.5", ...), smallest first.
std::vector<std::pair<std::string, std::vector<std::string>>> current_families();
// The refusal line of a mixture-of-experts model named `key` (normalised name),
// or "" when `key` is not one.
std::string moe_refusal(const std::string& key);

}  // namespace planner

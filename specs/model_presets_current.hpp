#pragma once
// Internal to model_presets.cpp: the presets of today's decoders (Llama 3.1 and
// 3.2, Mistral, Qwen2.5, Qwen3, Gemma-2; the mixtures of experts Mixtral,
// Qwen1.5-MoE, Qwen3-MoE) and the names of models that are recognised and
// refused because a part of them is not modelled (DeepSeek's latent attention).
#include <string>
#include <vector>

#include "specs/model_spec.hpp"

namespace planner {

void add_current_presets(std::vector<ModelSpec>& out);
// The LLaMA layout (rotary, RMSNorm, SwiGLU, no biases, untied head), the one
// builder both preset files use (model_presets.cpp).
ModelSpec llama_layout(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                       int64_t vocab, int64_t seq, int64_t published);
// The family lists ("llama-3.1", "qwen2.5", ...), smallest first.
std::vector<std::pair<std::string, std::vector<std::string>>> current_families();
// The refusal line of a recognised model whose attention is not modelled
// (DeepSeek-V2/V3's latent attention) named `key` (normalised name), or ""
// when `key` is not one.
std::string moe_refusal(const std::string& key);

}  // namespace planner

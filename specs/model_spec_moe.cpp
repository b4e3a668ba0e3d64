// ModelSpec's mixture-of-experts parameter counts (the shapes are described at
// MoeSpec, specs/model_spec.hpp). The tensors are those of Hugging Face's
// modeling_mixtral.py (block_sparse_moe: gate + experts w1/w2/w3),
// modeling_qwen2_moe.py (mlp.gate, experts, shared_expert, shared_expert_gate)
// and modeling_deepseek.py (MoEGate, experts, shared_experts).
#include "specs/model_spec.hpp"

namespace planner {

namespace {
// One MLP of inner width `f` in the model's MLP kind (as mlp_params()).
int64_t mlp_of_width(const ModelSpec& m, int64_t f) {
  if (f <= 0) return 0;
  const bool gated = m.mlp == MlpKind::SwiGlu;
  return (gated ? 3 : 2) * m.hidden * f + (m.mlp_bias ? (gated ? 2 : 1) * f + m.hidden : 0);
}
}  // namespace

int64_t ModelSpec::expert_params() const { return moe.enabled() ? mlp_of_width(*this, moe.expert_ffn) : 0; }
// Mixtral's block_sparse_moe.gate, Qwen2-MoE's mlp.gate, DeepSeek's MoEGate:
// one weight of experts x hidden, no bias.
int64_t ModelSpec::router_params() const { return moe.enabled() ? moe.experts * hidden : 0; }
int64_t ModelSpec::shared_expert_params() const {
  if (!moe.enabled()) return 0;
  return mlp_of_width(*this, moe.shared_ffn) + (moe.shared_gate ? hidden : 0);  // Qwen2-MoE shared_expert_gate: h -> 1
}
int64_t ModelSpec::moe_mlp_params() const {
  return moe.enabled() ? router_params() + moe.experts * expert_params() + shared_expert_params() : 0;
}
int64_t ModelSpec::moe_layer_params() const {
  return moe.enabled() ? layer_params() - mlp_params() + moe_mlp_params() : 0;
}
int64_t ModelSpec::active_params() const {
  return total_params() - moe_layers() * (moe.experts - moe.top_k) * expert_params();
}

}  // namespace planner

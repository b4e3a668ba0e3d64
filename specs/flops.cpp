#include "specs/flops.hpp"

namespace planner {

int64_t matmul_params(const ModelSpec& m) {
  const int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim();
  const int64_t attn = h * q /*q*/ + 2 * h * kv /*k, v*/ + q * h /*o*/;
  const int64_t mlp = (m.mlp == MlpKind::SwiGlu ? 3 : 2) * h * m.ffn;
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : h;
  int64_t head = width * m.vocab;  // output projection onto the vocabulary
  if (m.word_embed_dim > 0 && m.word_embed_dim != h) head += h * m.word_embed_dim;  // project_out
  if (m.mlm_head) head += h * h;  // BERT MLM transform
  if (!m.moe.enabled()) return m.layers * (attn + mlp) + head;
  // Mixture of experts: a MoE layer multiplies each token by top_k routed
  // experts and the shared MLP, the activated parameters, as Megatron-LM's
  // num_floating_point_operations counts them (training.py: moe_router_topk
  // x moe_ffn_hidden_size + the shared experts' width; the router's hidden x
  // experts, under 0.1% of a layer, left out as there).
  const int64_t gated = m.mlp == MlpKind::SwiGlu ? 3 : 2;
  const int64_t moe_mlp = gated * h * (m.moe.top_k * m.moe.expert_ffn + m.moe.shared_ffn);
  const int64_t dense_layers = m.layers - m.moe_layers();
  return dense_layers * (attn + mlp) + m.moe_layers() * (attn + moe_mlp) + head;
}

double attention_flops_per_token(const ModelSpec& m, int64_t seq) {
  // Per layer and token: Q K^T and A V, each 2 * keys * q_dim with keys = seq
  // (Megatron's convention: no causal halving). A windowed layer's query sees
  // at most `sliding_window` keys, so it is charged min(seq, window) keys in the
  // same convention.
  const double q = double(m.q_dim());
  const int64_t windowed = m.windowed_layers(seq);
  const double global_keys = double(m.layers - windowed) * double(seq);
  const double window_keys = double(windowed) * double(m.sliding_window);
  return 4.0 * q * (global_keys + window_keys);
}

double forward_flops_per_token(const ModelSpec& m, int64_t seq) {
  return 2.0 * static_cast<double>(matmul_params(m)) + attention_flops_per_token(m, seq);
}

double model_flops(const ModelSpec& m, int64_t seq, int64_t tokens) {
  return 3.0 * forward_flops_per_token(m, seq) * static_cast<double>(tokens);
}

double hardware_flops(const ModelSpec& m, int64_t seq, int64_t tokens, Ckpt ckpt) {
  const double model = model_flops(m, seq, tokens);
  switch (ckpt) {
    case Ckpt::None: return model;
    case Ckpt::Full: return model + forward_flops_per_token(m, seq) * static_cast<double>(tokens);
    case Ckpt::Selective: return model + attention_flops_per_token(m, seq) * static_cast<double>(tokens);
  }
  return model;
}

}  // namespace planner

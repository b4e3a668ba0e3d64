#pragma once
// Tiny ModelSpecs with the flags of each family's presets, for the runtime
// tests (tests/runtime, tests/dist).
#include "specs/model_spec.hpp"

namespace planner::test {

// Small ModelSpecs with the flags of each family's presets.
inline ModelSpec gpt2_like() {
  ModelSpec m;
  m.name = "tiny-gpt2";
  m.layers = 2, m.hidden = 32, m.heads = 4, m.kv_heads = 4, m.ffn = 128, m.vocab = 96, m.max_positions = 64;
  return m;  // learned positions, GELU, LayerNorm, biases everywhere, tied
}
inline ModelSpec neo_like() {
  ModelSpec m = gpt2_like();
  m.name = "tiny-neo";
  m.qkv_bias = false;  // GPT-Neo: no q/k/v biases, out_proj has one
  return m;
}
inline ModelSpec gptj_like() {
  ModelSpec m = gpt2_like();
  m.name = "tiny-gptj";
  m.pos = PosEmbed::Rotary, m.max_positions = 0;
  m.qkv_bias = false, m.out_bias = false, m.parallel_block = true;
  m.tied_embeddings = false, m.lm_head_bias = true;
  return m;
}
inline ModelSpec opt_like() {
  ModelSpec m = gpt2_like();
  m.name = "tiny-opt";
  m.mlp = MlpKind::Relu, m.position_offset = 2;
  return m;
}
inline ModelSpec opt350_like() {
  ModelSpec m = opt_like();
  m.name = "tiny-opt-350m";
  m.word_embed_dim = 16;  // project_in / project_out
  m.final_norm = false;
  return m;
}
inline ModelSpec llama_like() {
  ModelSpec m = gpt2_like();
  m.name = "tiny-llama";
  m.pos = PosEmbed::Rotary, m.max_positions = 0, m.mlp = MlpKind::SwiGlu, m.norm = NormKind::RmsNorm;
  m.kv_heads = 2;  // grouped-query attention
  m.ffn = 88;
  m.qkv_bias = m.out_bias = m.mlp_bias = false;
  m.tied_embeddings = false;
  return m;
}
// A LLaMA-like mixture of experts: 8 experts of width 16, top-2, a shared
// MLP of width 32 with Qwen2-MoE's sigmoid gate, dropless.
inline ModelSpec moe_like() {
  ModelSpec m = llama_like();
  m.name = "tiny-moe";
  m.moe.experts = 8, m.moe.top_k = 2, m.moe.expert_ffn = 16;
  m.moe.shared_experts = 1, m.moe.shared_ffn = 32, m.moe.shared_gate = true;
  return m;
}
inline ModelSpec bert_like() {
  ModelSpec m = gpt2_like();
  m.name = "tiny-bert";
  m.arch = Arch::Encoder, m.type_vocab = 2, m.embed_norm = true, m.final_norm = false;
  m.pooler = true, m.mlm_head = true;
  return m;
}

// Today's dense decoders (specs/model_presets_current.cpp), small.
inline ModelSpec mistral_like() {  // every layer windowed; at seq 16 a window of 5 keys
  ModelSpec m = llama_like();
  m.name = "tiny-mistral";
  m.sliding_window = 5, m.window_layers = m.layers;
  m.rope_theta = 1e6;
  return m;
}
inline ModelSpec qwen2_like() {  // q, k, v biased, o not; tied; rope base 1e6; window on the last layer
  ModelSpec m = llama_like();
  m.name = "tiny-qwen2";
  m.qkv_bias = true, m.tied_embeddings = true, m.rope_theta = 1e6;
  m.sliding_window = 6, m.window_layers = 1;
  return m;
}
inline ModelSpec qwen3_like() {  // head_dim 12 != hidden/heads = 8, per-head q/k norms
  ModelSpec m = llama_like();
  m.name = "tiny-qwen3";
  m.head_size = 12, m.qk_norm = true, m.rope_theta = 1e6;
  return m;
}
// sandwich norms, GeGLU, head_dim 16, windows on the even layers, final
// logit soft-capping with a cap of 1 (Gemma-2's is 30): a fresh model's
// logits (~0.1) bend by ~1% there, which the double-precision gradient check
// (1e-6) sees; the [softcap] test bends them far more (cap 0.25).
inline ModelSpec gemma2_like() {
  ModelSpec m = llama_like();
  m.name = "tiny-gemma2";
  m.layers = 3, m.head_size = 16, m.sandwich_norm = true, m.gelu_gate = true, m.tied_embeddings = true;
  m.sliding_window = 4, m.window_layers = 2, m.window_pattern = WindowPattern::Even;
  m.logit_softcap = 1.0;
  return m;
}
// Gemma-3-like: q/k norms, sandwich norms, GeGLU, and windows on all layers
// but every third (window_pattern period 3: layers 0, 1, 3 local, 2 global).
inline ModelSpec gemma3_like() {
  ModelSpec m = llama_like();
  m.name = "tiny-gemma3";
  m.layers = 4, m.head_size = 16, m.qk_norm = true, m.sandwich_norm = true, m.gelu_gate = true;
  m.tied_embeddings = true;
  m.sliding_window = 4, m.window_layers = 3, m.window_pattern = WindowPattern::Period, m.window_period = 3;
  return m;
}

}  // namespace planner::test

#include "costmodel/activations.hpp"

#include "costmodel/moe_costs.hpp"

namespace planner {

LayerActivationBytes layer_activation_bytes(const ModelSpec& m, int64_t s_in, int64_t b_in, int e, Ckpt ckpt,
                                            const AttentionImpl& impl) {
  const double s = double(s_in), b = double(b_in), h = double(m.hidden), a = double(m.heads);
  const double kv = double(m.kv_dim()), q = double(m.q_dim());
  const double sbh = s * b * h;
  LayerActivationBytes out;
  if (ckpt == Ckpt::Full) {
    // Only the layer's input survives the forward; the rest is recomputed in
    // the backward (Korthikanti et al. Table 2: 2sbh for 16-bit).
    out.replicated = e * sbh;
    return out;
  }
  // Norm inputs: two per layer (one for a parallel block, GPT-J; four for
  // Gemma-2's sandwich norms).
  const double norms = m.norms_per_layer();
  out.replicated += norms * e * sbh;
  // Inputs of the column-parallel GEMMs (QKV and the first MLP projection).
  // A parallel block feeds both from one norm output.
  out.replicated += (m.parallel_block ? 1 : 2) * e * sbh;
  // Q, K, V (inputs of the attention core), split by heads.
  out.split += e * s * b * (q + 2 * kv);
  // Qwen3's q and k norms keep their inputs (the projection's q and k).
  if (m.qk_norm) out.split += e * s * b * (q + kv);
  // Rotary positions in eager code make new, rotated Q and K for the attention
  // core, while the projection's output stays alive through V (a view of it):
  // Q and K are saved twice. Measured on H100 (TinyLlama-1.1B,
  // validation/h100/): 25.37 GiB of activations, 1.48 GiB above the count
  // without this term, which adds 1.55. The runtime's fused rotary returns new
  // q, k and v and frees the projection's output: nothing twice. Under Qwen3's
  // q/k norms the runtime keeps the projection's output (the norms' inputs,
  // the term above) and the rotated q and k, which that term already counts
  // (validation/h100/fused: qwen3-1.7b's activations 1.32 GiB under the
  // count with both terms, which added 1.34).
  if (m.pos == PosEmbed::Rotary && !impl.fused_ops) out.split += e * s * b * (q + kv);
  // Input of the attention output projection (row-parallel), split.
  out.split += e * (s * b * q);
  // MLP: activation-function input(s) and the second GEMM's input, split
  // (ReLU's backward needs only its output, which is also the second GEMM's
  // input: one tensor saved; measured on H100, OPT-1.3B: 18.12 GiB against
  // 24.17 when counted twice, 18.17 once). A mixture of experts' mean layer:
  // its router, dispatched tokens and experts (costmodel/moe_costs.cpp).
  const LayerActivationBytes mlp = mlp_activation_bytes(m, s, b, double(e), impl.fused_ops);
  out.replicated += mlp.replicated;
  out.split += mlp.split;
  if (impl.dropout) {
    // One-byte masks after the attention projection and after the MLP.
    out.replicated += 2 * sbh;
  }
  if (ckpt == Ckpt::None) {
    // A sliding window changes neither term: the fused kernel keeps one fp32
    // log-sum-exp per head and token whatever keys it visits, and without it
    // the window is a mask over the full s x s scores, which are kept.
    if (impl.flash) {
      out.split += 4 * a * s * b;  // fp32 log-sum-exp per head and token
    } else {
      out.split += e * a * s * s * b;  // softmax output
      if (impl.dropout) out.split += (1 + e) * a * s * s * b;  // its dropout mask and output
    }
  }
  return out;
}

LayerActivationBytes layer_backward_working_bytes(const ModelSpec& m, int64_t s, int64_t b, int elem_bytes) {
  const double e = elem_bytes, tokens = double(s) * double(b);
  const double up = m.mlp == MlpKind::SwiGlu ? 2.0 : 1.0;
  return {e * tokens * double(m.hidden), e * tokens * double(m.ffn) * up};
}

LayerActivationBytes layer_forward_working_bytes(const ModelSpec& m, int64_t s, int64_t b, int elem_bytes) {
  const double e = elem_bytes, tokens = double(s) * double(b);
  const double f = m.mlp == MlpKind::SwiGlu ? 3.0 : 2.0;
  return {e * tokens * double(m.hidden), e * tokens * double(m.ffn) * f};
}

}  // namespace planner

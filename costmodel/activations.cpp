#include "costmodel/activations.hpp"

namespace planner {

LayerActivationBytes layer_activation_bytes(const ModelSpec& m, int64_t s_in, int64_t b_in, int e, Ckpt ckpt,
                                            const AttentionImpl& impl) {
  const double s = double(s_in), b = double(b_in), h = double(m.hidden), a = double(m.heads);
  const double kv = double(m.kv_dim()), f = double(m.ffn);
  const double sbh = s * b * h;
  LayerActivationBytes out;
  if (ckpt == Ckpt::Full) {
    // Only the layer's input survives the forward; the rest is recomputed in
    // the backward (Korthikanti et al. Table 2: 2sbh for 16-bit).
    out.replicated = e * sbh;
    return out;
  }
  // Norm inputs: two per layer (one for a parallel block, GPT-J).
  const double norms = m.parallel_block ? 1 : 2;
  out.replicated += norms * e * sbh;
  // Inputs of the column-parallel GEMMs (QKV and the first MLP projection).
  // A parallel block feeds both from one norm output.
  out.replicated += (m.parallel_block ? 1 : 2) * e * sbh;
  // Q, K, V (inputs of the attention core), split by heads.
  out.split += e * s * b * (h + 2 * kv);
  // Input of the attention output projection (row-parallel), split.
  out.split += e * sbh;
  // MLP: activation-function input(s) and the second GEMM's input, split.
  if (m.mlp == MlpKind::SwiGlu) {
    out.split += 4 * e * s * b * f;  // gate, up, silu(gate), and their product (input of down_proj)
  } else {
    out.split += 2 * e * s * b * f;  // GeLU/ReLU input and the second GEMM's input
  }
  if (impl.dropout) {
    // One-byte masks after the attention projection and after the MLP.
    out.replicated += 2 * sbh;
  }
  if (ckpt == Ckpt::None) {
    if (impl.flash) {
      out.split += 4 * a * s * b;  // fp32 log-sum-exp per head and token
    } else {
      out.split += e * a * s * s * b;  // softmax output
      if (impl.dropout) out.split += (1 + e) * a * s * s * b;  // its dropout mask and output
    }
  }
  return out;
}

}  // namespace planner

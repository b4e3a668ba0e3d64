#include "specs/flops.hpp"

namespace planner {

int64_t matmul_params(const ModelSpec& m) {
  const int64_t h = m.hidden, kv = m.kv_dim();
  const int64_t attn = h * h /*q*/ + 2 * h * kv /*k, v*/ + h * h /*o*/;
  const int64_t mlp = (m.mlp == MlpKind::SwiGlu ? 3 : 2) * h * m.ffn;
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : h;
  int64_t head = width * m.vocab;  // output projection onto the vocabulary
  if (m.word_embed_dim > 0 && m.word_embed_dim != h) head += h * m.word_embed_dim;  // project_out
  if (m.mlm_head) head += h * h;  // BERT MLM transform
  return m.layers * (attn + mlp) + head;
}

double forward_flops_per_token(const ModelSpec& m, int64_t seq) {
  return 2.0 * static_cast<double>(matmul_params(m)) +
         4.0 * static_cast<double>(m.layers) * static_cast<double>(seq) * static_cast<double>(m.hidden);
}

double model_flops(const ModelSpec& m, int64_t seq, int64_t tokens) {
  return 3.0 * forward_flops_per_token(m, seq) * static_cast<double>(tokens);
}

double hardware_flops(const ModelSpec& m, int64_t seq, int64_t tokens, Ckpt ckpt) {
  const double model = model_flops(m, seq, tokens);
  switch (ckpt) {
    case Ckpt::None: return model;
    case Ckpt::Full: return model + forward_flops_per_token(m, seq) * static_cast<double>(tokens);
    case Ckpt::Selective:
      return model + 4.0 * static_cast<double>(m.layers) * static_cast<double>(seq) *
                         static_cast<double>(m.hidden) * static_cast<double>(tokens);
  }
  return model;
}

}  // namespace planner

#include "specs/lora_shapes.hpp"

#include <algorithm>

#include "specs/flops.hpp"

namespace planner {

std::vector<LayerMatrix> layer_matrices(const ModelSpec& m) {
  const int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn;
  std::vector<LayerMatrix> out{{"q", kLoraQ, h, q, true, 0}, {"k", kLoraK, h, kv, true, 0},
                               {"v", kLoraV, h, kv, true, 0}, {"o", kLoraO, q, h, false, 1}};
  if (m.mlp == MlpKind::SwiGlu) out.push_back({"gate", kLoraMlp, h, f, true, 2});
  out.push_back({"up", kLoraMlp, h, f, true, 2});
  out.push_back({"down", kLoraMlp, f, h, false, 3});
  return out;
}

int64_t adapter_params(const LayerMatrix& w, int r, int tp) {
  const int64_t t = std::max(1, tp);
  return w.column_parallel ? int64_t(r) * (w.d_in + w.d_out / t) : int64_t(r) * (w.d_in / t + w.d_out);
}

int64_t adapter_params_per_layer(const ModelSpec& m, const Finetune& f, int tp) {
  int64_t n = 0;
  for (const LayerMatrix& w : layer_matrices(m))
    if (f.targets_any(w.target)) n += adapter_params(w, f.r, tp);
  return n;
}

double finetune_flops_adjustment(const ModelSpec& m, const Finetune& f, int64_t tokens) {
  if (!f.frozen_base()) return 0;
  const double n = double(tokens);
  const double adapters = double(m.layers) * double(adapter_params_per_layer(m, f, 1));
  return -2.0 * n * double(matmul_params(m)) + 6.0 * n * adapters;
}

}  // namespace planner

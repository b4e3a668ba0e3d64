#include "costmodel/cp_costs.hpp"

#include <algorithm>

#include "costmodel/collectives.hpp"

namespace planner {

double cp_kv_chunk_bytes(const ModelSpec& m, int64_t seq, const Strategy& s, int e) {
  const double tokens = double(seq / s.cp) * s.mbs;
  return 2.0 * tokens * double(m.kv_dim()) / s.tp * e;
}

void scale_attention_for_cp(PassTimes& layer, int cp) {
  layer.forward.attention_seconds *= cp;
  layer.backward.attention_seconds *= cp;
  layer.recompute.attention_seconds *= cp;
}

CpRingSeconds cp_ring_seconds(const PassTimes& block, const ModelSpec& m, int64_t seq, const Strategy& s,
                              const GroupLink& link, double base) {
  CpRingSeconds out;
  if (s.cp == 1) return out;
  const int e = bytes_per_element(s.precision);
  const double kv = cp_kv_chunk_bytes(m, seq, s, e);
  const double t_kv = send_recv_seconds(kv, link, base);
  const double t_dkv = send_recv_seconds(kv * 4.0 / e, link, base);  // dK/dV accumulate in fp32
  const double steps = double(s.cp - 1);
  out.forward = steps * std::max(0.0, t_kv - block.forward.attention_seconds);
  out.backward = steps * std::max(0.0, t_kv + t_dkv - block.backward.attention_seconds) + t_dkv;
  // Full recomputation reruns the layer's forward, ring included. Selective
  // recomputation does not rerun ring attention: like flash, it keeps no
  // s x s tensor, and the runtime keeps its output and log-sum-exp
  // (runtime/model/context_parallel.hpp).
  if (s.ckpt == Ckpt::Full) out.backward += out.forward;
  return out;
}

double cp_ring_buffer_bytes(const ModelSpec& m, int64_t seq, const Strategy& s) {
  if (s.cp == 1) return 0;
  const int e = bytes_per_element(s.precision);
  const double kv = cp_kv_chunk_bytes(m, seq, s, e);
  return 2.0 * kv + 2.0 * kv * 4.0 / e;
}

}  // namespace planner

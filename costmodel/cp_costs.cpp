#include "costmodel/cp_costs.hpp"

#include <algorithm>

#include "costmodel/collectives.hpp"
#include "costmodel/op_costs.hpp"

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
                              const GroupLink& link, double base, double comm_slowdown) {
  CpRingSeconds out;
  if (s.cp == 1) return out;
  const int e = bytes_per_element(s.precision);
  const double kv = cp_kv_chunk_bytes(m, seq, s, e);
  const double t_kv = send_recv_seconds(kv, link, base);
  const double t_dkv = send_recv_seconds(kv * 4.0 / e, link, base);  // dK/dV accumulate in fp32
  const double steps = double(s.cp - 1);
  const double k = std::max(1.0, comm_slowdown);
  out.forward = steps * std::max(0.0, t_kv - block.forward.attention_seconds / k);
  out.backward = steps * std::max(0.0, t_kv + t_dkv - block.backward.attention_seconds / k) + t_dkv;
  // Full recomputation reruns the layer's forward, ring included. Selective
  // recomputation does not rerun ring attention: like flash, it keeps no
  // s x s tensor, and the runtime keeps its output and log-sum-exp
  // (runtime/model/context_parallel.hpp).
  if (s.ckpt == Ckpt::Full) out.backward += out.forward;
  return out;
}

CpRingBytes cp_ring_memory_bytes(const ModelSpec& m, int64_t seq, const Strategy& s) {
  CpRingBytes out;
  if (s.cp == 1) return out;
  const double e = bytes_per_element(s.precision), f = 4.0;  // activations; fp32 accumulators
  const double L = double(seq / s.cp), hd = double(m.head_dim());
  const double nq = s.mbs * L * double(m.heads / s.tp) * hd;      // q, out: elements on the rank
  const double nkv = s.mbs * L * double(m.kv_heads / s.tp) * hd;  // k, v
  // Grouped kv heads: cuDNN's blocks take K/V on their own kv heads and return
  // dK/dV per kv head (runtime/model/attention_block.hpp block_takes_kv_heads),
  // so nothing is repeated per query head. (Where the runtime falls back to
  // FlashAttention-2 blocks, it repeats them and says so; that is not priced.)
  const double steps = double(s.cp - 1);
  // Forward. Step 0: the output to fp32.
  double fwd = nq * (e + f);
  // Later steps, mean of the two kinds: an earlier rank's block copies K/V's
  // first half and merges over all queries; a later rank's copies the second
  // query half and merges over half.
  const double copies = 0.5 * (2.0 * nkv * e + nq * e);
  const double merge = 0.75 * nq * (2.0 * f + f + e);  // out *= a (r+w fp32); out += o b (r out, r o, w)
  fwd += steps * (copies + merge);
  fwd += nq * (f + e);  // the merged output back to the activations' dtype
  // Backward. dQ zeroed (fp32); per block: dQ += gQ; dK, dV (per kv head)
  // converted to fp32.
  const double heads_full = 2.0 * nkv * (e + f);
  const double dq_add = nq * (2.0 * f + e);
  double bwd = nq * f + dq_add + heads_full;
  const double earlier = 2.0 * nkv * e + dq_add + 0.5 * heads_full + 2.0 * nkv * f /* dK, dV zeroed */ +
                         2.0 * 0.5 * nkv * 2.0 * f /* half copied in */;
  const double later = 3.0 * nq * e /* dout, q, out halves */ + 0.5 * dq_add + heads_full;
  bwd += steps * (0.5 * (earlier + later) + 2.0 * nkv * 3.0 * f /* dK, dV += the travelling sums */);
  bwd += nq * (f + e) + 2.0 * nkv * (f + e);  // dQ, dK, dV back to the activations' dtype
  out.forward = fwd;
  out.backward = bwd;
  return out;
}

void add_cp_ring_memory(PassTimes& layer, const HardwareProfile& p, const ModelSpec& m, int64_t seq,
                        const Strategy& s) {
  if (s.cp == 1) return;
  const CpRingBytes b = cp_ring_memory_bytes(m, seq, s);
  const double fwd = memory_bound_seconds(p, b.forward), bwd = memory_bound_seconds(p, b.backward);
  layer.forward.memory_seconds += fwd;
  layer.backward.memory_seconds += bwd;
  if (s.ckpt == Ckpt::Full) layer.recompute.memory_seconds += fwd;
}

double cp_ring_buffer_bytes(const ModelSpec& m, int64_t seq, const Strategy& s) {
  if (s.cp == 1) return 0;
  const int e = bytes_per_element(s.precision);
  const double kv = cp_kv_chunk_bytes(m, seq, s, e);
  return 2.0 * kv + 2.0 * kv * 4.0 / e;
}

}  // namespace planner

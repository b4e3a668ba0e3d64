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
  // Two kernel classes (costmodel/op_costs.hpp): copies out of strided views,
  // broadcasts and dtype-converting adds run on ATen's non-vectorized path
  // (`strided`: validation/h200x2/cp45's kernel tables, direct_copy and
  // addcmul through elementwise_kernel); fills, casts and fp32 sums of
  // contiguous tensors stream.
  const double steps = double(s.cp - 1);
  // Forward. q, k, v made contiguous (views of the qkv projection's output),
  // the block's output to fp32 (step 0), the merged output back to the
  // activations' dtype and to (b, s, heads, d). Later steps, mean of the two
  // kinds: an earlier rank's block copies K/V's first half and merges over
  // all queries; a later rank's copies the second query half and merges over half.
  const double copies = 0.5 * (2.0 * nkv * e + nq * e);
  const double merge = 0.75 * nq * (2.0 * f + f + e);  // out *= a (r+w fp32); out += o b (r out, r o, w)
  out.forward = (nq + 2.0 * nkv) * 2.0 * e + nq * 2.0 * e + steps * (copies + merge);
  out.forward_stream = nq * (e + f) + nq * (f + e);
  // Backward. The incoming gradient made contiguous; dQ zeroed (fp32); per
  // block dQ += gQ (fp32 += the block's dtype); dK, dV (per kv head)
  // converted to fp32; an earlier rank's block also copies K/V's halves and
  // puts its dK/dV halves into zeroed fp32 buffers, a later rank's copies
  // the dout, q and out halves; the travelling sums added; dQ, dK, dV back
  // to the activations' dtype.
  const double conv = 2.0 * nkv * (e + f);
  const double dq_add = nq * (2.0 * f + e);
  const double earlier = 2.0 * nkv * e + dq_add + 2.0 * 0.5 * nkv * 2.0 * f;
  const double later = 3.0 * nq * e + 0.5 * dq_add;
  out.backward = nq * 2.0 * e + dq_add + steps * 0.5 * (earlier + later);
  out.backward_stream = nq * f + conv + steps * (0.5 * (0.5 * conv + 2.0 * nkv * f + conv) + 2.0 * nkv * 3.0 * f) +
                        nq * (f + e) + 2.0 * nkv * (f + e);
  // Launches, counted from runtime/model/context_parallel.cpp: forward 3
  // copies, 2 casts and 2 at the end, per later step about 9 (a copy or
  // two, the log-sum-exp merge's logaddexp, subtractions, exps, mul, addcmul,
  // copy); backward 7 and about 12 per later step.
  out.forward_kernels = 7 + 9 * steps;
  out.backward_kernels = 7 + 12 * steps;
  return out;
}

void add_cp_ring_memory(PassTimes& layer, const HardwareProfile& p, const ModelSpec& m, int64_t seq,
                        const Strategy& s) {
  if (s.cp == 1) return;
  const CpRingBytes b = cp_ring_memory_bytes(m, seq, s);
  auto seconds = [&](double strided, double stream, double kernels) {
    return memory_kernel_seconds(p, strided, MemKernel::Strided) + memory_kernel_seconds(p, stream, MemKernel::Streaming) +
           kernels * p.kernel_overhead_seconds;
  };
  const double fwd = seconds(b.forward, b.forward_stream, b.forward_kernels);
  const double bwd = seconds(b.backward, b.backward_stream, b.backward_kernels);
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

#include "costmodel/layer_costs.hpp"

#include "costmodel/collectives.hpp"
#include "costmodel/op_costs.hpp"

namespace planner {

OpTimes& OpTimes::operator+=(const OpTimes& o) {
  gemm_seconds += o.gemm_seconds;
  attention_seconds += o.attention_seconds;
  memory_seconds += o.memory_seconds;
  tp_comm_seconds += o.tp_comm_seconds;
  return *this;
}

OpTimes operator*(double k, const OpTimes& o) {
  return {k * o.gemm_seconds, k * o.attention_seconds, k * o.memory_seconds, k * o.tp_comm_seconds};
}

namespace {

// A linear layer Y(T x n) = X(T x k) W(k x n): forward one GEMM; backward the
// data gradient dX = dY W^T (T x k, reduction n) and the weight gradient
// dW = X^T dY (k x n, reduction T).
void linear(const HardwareProfile& p, Precision pr, int64_t T, int64_t n, int64_t k, PassTimes& out) {
  out.forward.gemm_seconds += gemm_seconds(p, T, n, k, pr);
  out.backward.gemm_seconds += gemm_seconds(p, T, k, n, pr) + gemm_seconds(p, k, n, T, pr);
}

// Megatron-LM's two tensor-parallel collectives per pass and layer part
// (Shoeybi et al. 2019, Fig. 3): an all-reduce of the (T x h) output, or with
// sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) one all-gather and
// one reduce-scatter of the same tensor.
double tp_collective(const HardwareProfile& p, double bytes, bool sp, const GroupLink& l) {
  if (l.size <= 1) return 0;
  const double base = p.collective_base_latency_seconds;
  return sp ? all_gather_seconds(bytes, l, base) + reduce_scatter_seconds(bytes, l, base)
            : all_reduce_seconds(bytes, l, base);
}

}  // namespace

PassTimes transformer_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                                  const GroupLink& tp_link) {
  PassTimes out;
  const Precision pr = s.precision;
  const double e = bytes_per_element(pr);
  const int64_t t = s.tp, T = s.seq * s.mbs, h = m.hidden, d = m.head_dim();
  const int64_t f_local = m.ffn / t, heads_local = m.heads / t, kv_local = m.kv_dim() / t;
  const double Tr = s.sp ? double(T) / t : double(T);  // tokens of the replicated (norm/residual) ops
  const bool drop = p.dropout;
  const bool causal = m.arch == Arch::Decoder;

  // GEMMs: QKV, attention output, MLP up (gate+up for SwiGLU), MLP down.
  linear(p, pr, T, h / t + 2 * kv_local, h, out);
  linear(p, pr, T, h, h / t, out);
  linear(p, pr, T, (m.mlp == MlpKind::SwiGlu ? 2 : 1) * f_local, h, out);
  linear(p, pr, T, h, f_local, out);

  // Attention core over b * a/t heads.
  const int64_t bh = s.mbs * heads_local;
  OpTimes core_fwd;
  if (p.flash_attention) {
    core_fwd.attention_seconds = flash_attention_forward_seconds(p, bh, s.seq, d, causal, pr);
    out.backward.attention_seconds += flash_attention_backward_seconds(p, bh, s.seq, d, causal, pr);
  } else {
    // Q K^T and softmax(.) V as batched GEMMs; the fused scale-mask-softmax reads
    // and writes the b a s^2 scores; dropout reads, writes and stores a 1-byte mask.
    const double scores = double(bh) * s.seq * s.seq;
    core_fwd.attention_seconds = gemm_seconds(p, s.seq, s.seq, d, pr, bh) + gemm_seconds(p, s.seq, d, s.seq, pr, bh);
    core_fwd.memory_seconds = memory_bound_seconds(p, 2 * e * scores) +
                              (drop ? memory_bound_seconds(p, (2 * e + 1) * scores) : 0);
    out.backward.attention_seconds += 2 * core_fwd.attention_seconds;  // two GEMMs per forward GEMM
    out.backward.memory_seconds += memory_bound_seconds(p, 3 * e * scores) +
                                   (drop ? memory_bound_seconds(p, (2 * e + 1) * scores) : 0);
  }
  out.forward += core_fwd;

  // Memory-bound kernels: two norms (read x, write y), the activation (GeLU:
  // read, write; SwiGLU: read gate and up, write), two residual adds (read two,
  // write one; dropout adds a 1-byte mask), rotary embedding on q and k.
  const double Th = Tr * double(h);
  const double Tf = double(T) * double(f_local);
  double fwd_bytes = 2 * (2 * e * Th) + 2 * (3 * e * Th + (drop ? Th : 0));
  double bwd_bytes = 2 * (3 * e * Th) + 2 * (drop ? 2 * e * Th + Th : 0);
  if (m.mlp == MlpKind::SwiGlu) fwd_bytes += 3 * e * Tf, bwd_bytes += 5 * e * Tf;
  else fwd_bytes += 2 * e * Tf, bwd_bytes += 3 * e * Tf;
  if (m.pos == PosEmbed::Rotary) {
    const double qk = double(T) * double(h / t + kv_local);
    fwd_bytes += 2 * e * qk, bwd_bytes += 2 * e * qk;
  }
  // Counted as separate kernels: 2 norms + activation + 2 residuals (+ rotary).
  const int kernels = 5 + (m.pos == PosEmbed::Rotary ? 1 : 0);
  out.forward.memory_seconds += memory_bound_seconds(p, fwd_bytes) + (kernels - 1) * p.kernel_overhead_seconds;
  out.backward.memory_seconds += memory_bound_seconds(p, bwd_bytes) + (kernels - 1) * p.kernel_overhead_seconds;

  // Tensor parallelism: after attention and after the MLP, forward and backward.
  const double act_bytes = e * double(T) * double(h);
  out.forward.tp_comm_seconds = 2 * tp_collective(p, act_bytes, s.sp, tp_link);
  out.backward.tp_comm_seconds = out.forward.tp_comm_seconds;

  // Recomputation inside the backward (Korthikanti et al. 2022, sec. 5): full
  // repeats the forward, its collectives included; selective repeats the
  // attention core, which a fused kernel already recomputes in its backward.
  if (s.ckpt == Ckpt::Full) out.recompute = out.forward;
  else if (s.ckpt == Ckpt::Selective && !p.flash_attention) out.recompute = core_fwd;
  return out;
}

PassTimes embedding_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                          const GroupLink& tp_link) {
  PassTimes out;
  const double e = bytes_per_element(s.precision);
  const double Th = double(s.seq) * s.mbs * m.hidden;
  const bool learned = m.pos == PosEmbed::Learned && m.max_positions > 0;
  // Lookup (read rows, write), position add (read two, write), dropout.
  out.forward.memory_seconds = memory_bound_seconds(p, 2 * e * Th) + (learned ? memory_bound_seconds(p, 3 * e * Th) : 0) +
                               (p.dropout ? memory_bound_seconds(p, 2 * e * Th + Th) : 0);
  // Scatter-add of the gradient rows into the table (read gradient, read-modify-write rows).
  out.backward.memory_seconds = memory_bound_seconds(p, 3 * e * Th) * (learned ? 2 : 1);
  // Vocabulary-parallel embedding: the partial lookups are summed across TP
  // (an all-reduce, or a reduce-scatter into the sequence-parallel region).
  if (tp_link.size > 1) {
    const double base = p.collective_base_latency_seconds;
    out.forward.tp_comm_seconds = s.sp ? reduce_scatter_seconds(e * Th, tp_link, base) : all_reduce_seconds(e * Th, tp_link, base);
  }
  return out;  // not recomputed: Megatron-LM checkpoints the transformer layers only
}

PassTimes head_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const GroupLink& tp_link) {
  PassTimes out;
  const Precision pr = s.precision;
  const double e = bytes_per_element(pr);
  const int64_t T = s.seq * s.mbs, t = s.tp;
  const double Tr = s.sp ? double(T) / t : double(T);
  const double Th = Tr * m.hidden;
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden;
  // Final norm.
  if (m.final_norm) {
    out.forward.memory_seconds += memory_bound_seconds(p, 2 * e * Th);
    out.backward.memory_seconds += memory_bound_seconds(p, 3 * e * Th);
  }
  if (m.word_embed_dim > 0 && m.word_embed_dim != m.hidden) linear(p, pr, T, width, m.hidden, out);  // project_out
  // Logits (T x V/t) and the vocabulary-parallel cross-entropy: the forward reads
  // the logits and writes fp32 log-probabilities; the backward reads those and
  // writes the logit gradient.
  linear(p, pr, T, m.vocab / t, width, out);
  const double TV = double(T) * double(m.vocab / t);
  out.forward.memory_seconds += memory_bound_seconds(p, TV * (e + 4)) + p.kernel_overhead_seconds * 3;
  out.backward.memory_seconds += memory_bound_seconds(p, TV * (4 + e));
  if (tp_link.size > 1) {
    const double base = p.collective_base_latency_seconds;
    // Max, sum of exponentials and target logit: three all-reduces of T floats.
    out.forward.tp_comm_seconds = 3 * all_reduce_seconds(4.0 * T, tp_link, base);
    // The head is column-parallel: its input gradient is summed across TP, and
    // with sequence parallelism its input all-gathered first.
    const double in_bytes = e * double(T) * m.hidden;
    out.backward.tp_comm_seconds = s.sp ? reduce_scatter_seconds(in_bytes, tp_link, base) : all_reduce_seconds(in_bytes, tp_link, base);
    if (s.sp) out.forward.tp_comm_seconds += all_gather_seconds(in_bytes, tp_link, base);
  }
  return out;  // the head is not recomputed (Megatron-LM checkpoints transformer layers only)
}

}  // namespace planner

#include "costmodel/layer_costs.hpp"

#include "costmodel/collectives.hpp"
#include "costmodel/fp8_costs.hpp"
#include "costmodel/mlp_ops.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"

#include <algorithm>

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

// The mean attention time of a layer relative to causal attention over the
// whole sequence on the full kernel: windowed layers do attended_pairs(s, w)
// of the s(s+1)/2, on the windowed kernel, whose rate relative to the full
// kernel's is `relative` (the profile's attention_window_*_relative; 0: not
// measured, taken as the full kernel's).
double window_time_factor(const ModelSpec& m, int64_t seq, double relative) {
  const int64_t windowed = m.windowed_layers(seq);
  if (windowed == 0) return 1.0;
  const double local = attended_pairs(seq, m.sliding_window) / attended_pairs(seq, 0);
  const double r = relative > 0 ? relative : 1.0;
  return (double(m.layers - windowed) + double(windowed) * local / r) / double(m.layers);
}

// A linear layer Y(T x n) = X(T x k) W(k x n): forward one GEMM; backward the
// data gradient dX = dY W^T (T x k, reduction n) and the weight gradient
// dW = X^T dY (k x n, reduction T).
void linear(const HardwareProfile& p, Precision pr, int64_t T, int64_t n, int64_t k, PassTimes& out) {
  out.forward.gemm_seconds += gemm_seconds(p, T, n, k, pr);
  out.backward.gemm_seconds += gemm_seconds(p, T, k, n, pr) + weight_grad_gemm_seconds(p, k, n, T, pr);
}

// The MLP activation's memory-bound kernels over T x f_local elements (Tf).
// fused: the runtime's GLU kernel (runtime/kernels/fused_kernels.cu), else the
// ATen chain that eager code (and the runtime's experts) run.
void add_mlp_activation_ops(MlpKind kind, double e, double Tf, bool fused, MemoryOps& fm, MemoryOps& bm) {
  using MK = MemKernel;
  switch (kind) {
    case MlpKind::Gelu:
    case MlpKind::Relu:
      fm.add(MK::Streaming, 2 * e * Tf);  // read, write
      bm.add(MK::Streaming, 3 * e * Tf);  // read input and gradient, write
      break;
    case MlpKind::SwiGlu:
      if (fused) {
        fm.add(MK::Streaming, 3 * e * Tf);  // read [gate | up], write the product
        bm.add(MK::Streaming, 5 * e * Tf);  // read [gate | up] and the gradient, write both halves' gradients
        break;
      }
      // silu(u[:, :f]) * u[:, f:] on narrowed (strided) halves of the up output.
      fm.add(MK::Strided, 2 * e * Tf + 3 * e * Tf, 2);
      // mul backward (g * up strided, g * silu), silu backward (strided), and each
      // narrow's backward: zero-fill the full (T x 2f) gradient and copy its half
      // in (strided), then the two full-size gradients are added.
      bm.add(MK::Strided, 3 * e * Tf + 3 * e * Tf + 2 * (2 * e * Tf), 4);
      bm.add(MK::Streaming, 3 * e * Tf + 2 * (2 * e * Tf) + 3 * (2 * e * Tf), 4);
      break;
  }
}

}  // namespace

void add_linear_times(const HardwareProfile& p, Precision pr, int64_t T, int64_t n, int64_t k, PassTimes& out) {
  linear(p, pr, T, n, k, out);
}

void add_mlp_times(const HardwareProfile& p, const ModelSpec& m, Precision pr, int64_t T, int64_t f_local,
                   PassTimes& out, bool fused_glu) {
  if (T <= 0 || f_local <= 0) return;
  const int64_t h = m.hidden;
  linear(p, pr, T, (m.mlp == MlpKind::SwiGlu ? 2 : 1) * f_local, h, out);
  linear(p, pr, T, h, f_local, out);
  MemoryOps fm, bm;
  add_mlp_activation_ops(m.mlp, bytes_per_element(pr), double(T) * double(f_local), fused_glu && p.fused_ops, fm,
                         bm);
  out.forward.memory_seconds += p.memory_in_step_factor * fm.seconds(p);
  out.backward.memory_seconds += p.memory_in_step_factor * bm.seconds(p);
}

double exposed_tp_comm_seconds(const HardwareProfile& p, double comm, double gemm, int tp) {
  const double f = std::clamp(p.tp_comm_overlap, 0.0, 1.0);
  if (f <= 0 || comm <= 0 || tp < 2) return comm;
  // Each collective cut into tp chunks, each chunk's transfer under the GEMM of
  // the previous one (Wang et al. 2023, "Overlap communication with dependent
  // computation via decomposition"; TransformerEngine's userbuffers ring
  // exchange): the pass takes max(comm, gemm) + min(comm, gemm) / tp, so the
  // collectives add that less the GEMMs.
  const double n = double(tp);
  const double pipelined = std::max(comm, gemm) + std::min(comm, gemm) / n - gemm;
  return (1 - f) * comm + f * pipelined;
}

namespace {

// One rank's share of a layer's dimensions.
struct LayerDims {
  double e;                 // bytes per element
  int64_t t, T, h, d;       // tp, tokens, hidden, head_dim
  int64_t f_local, heads_local, kv_local, q_local;
  double Tr;                // tokens of the replicated (norm/residual) ops
  LayerDims(const ModelSpec& m, const LayerShape& s)
      : e(bytes_per_element(s.precision)), t(s.tp), T(s.seq * s.mbs), h(m.hidden), d(m.head_dim()),
        f_local(m.ffn / t), heads_local(m.heads / t), kv_local(m.kv_dim() / t), q_local(m.q_dim() / t),
        Tr(s.sp ? double(T) / t : double(T)) {}
};

// The attention core over b * a/t heads: its forward (returned: selective
// recomputation repeats it), and its backward added to `out`.
OpTimes attention_core_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const LayerDims& x,
                             PassTimes& out) {
  const Precision pr = working_precision(s.precision);  // the attention core stays bf16 under fp8
  const double e = x.e;
  const int64_t d = x.d;
  const bool drop = p.dropout;
  const bool causal = m.arch == Arch::Decoder;
  const int64_t bh = s.mbs * x.heads_local;
  OpTimes core_fwd;
  // The fused kernels as a training pass runs them (HardwareProfile::attention_in_step_factor).
  const double attn_in_step = p.attention_in_step_factor;
  if (p.flash_attention) {
    // Sliding windows (Mistral, Gemma-2's local layers): the fused kernel skips
    // the key blocks outside the window, so a windowed layer's work is its
    // attended pairs over the causal layer's, done at the windowed kernel's
    // rate. This returns the mean layer of the model (windowed and global
    // layers by their counts); the placement of
    // local layers across pipeline stages (at most one layer's difference for
    // alternating patterns) is not modelled.
    const double window_f = window_time_factor(m, s.seq, p.attention_window_rel(false, d, m.sliding_window));
    const double window_b = window_time_factor(m, s.seq, p.attention_window_rel(true, d, m.sliding_window));
    core_fwd.attention_seconds = window_f * attn_in_step * flash_attention_forward_seconds(p, bh, s.seq, d, causal, pr);
    out.backward.attention_seconds +=
        window_b * attn_in_step * flash_attention_backward_seconds(p, bh, s.seq, d, causal, pr);
  } else {
    // Without a fused kernel the window is a mask on the full s x s scores:
    // same GEMMs, same bytes, no saving.
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
  return core_fwd;
}

// One norm's backward over Th elements (e bytes each). ATen: the input gradient
// (read x, dy; write dx) and the weight/bias gradient (read x, dy again), two
// kernels. The runtime's fused norm (runtime/model/fused_ops.hpp): one pass (read
// x, dy; write dx) keeping per-block partial weight (and bias) sums, and a
// kernel summing them into the weight's dtype.
void norm_backward_ops(double e, double Th, bool fused, MemoryOps& bm) {
  bm.add(MemKernel::Reduction, (fused ? 3 : 5) * e * Th, 2);
}

// Norms, residual adds, the MLP's activation and the bias gradients.
void block_memory_ops(const ModelSpec& m, const LayerShape& s, const LayerDims& x, bool drop, bool fused,
                      MemoryOps& fm, MemoryOps& bm) {
  using MK = MemKernel;
  const double e = x.e, Tr = x.Tr;
  const int64_t t = x.t, T = x.T, h = x.h, f_local = x.f_local, q_local = x.q_local, kv_local = x.kv_local;
  const double Th = Tr * double(h);
  const double Tf = double(T) * double(f_local);
  const int norms = m.norms_per_layer();
  // Norms: forward reads x, writes y. Backward: ATen's is two kernels, the input
  // gradient (read x, dy; write dx) and the weight/bias gradient (read x, dy
  // again); the runtime's fused norm one pass (read x, dy; write dx) whose
  // per-block partial weight sums a small kernel reduces (norm_ops).
  fm.add(MK::Reduction, norms * 2 * e * Th, norms);
  for (int i = 0; i < norms; ++i) norm_backward_ops(e, Th, fused, bm);
  // Two residual adds (read two, write one); in the backward the gradient of each
  // block input is the sum of its two uses (residual and branch): one add each.
  fm.add(MK::Streaming, 2 * (3 * e * Th + (drop ? Th : 0)), 2);
  bm.add(MK::Streaming, 2 * 3 * e * Th, 2);
  // The runtime's add_norm (pre-norm blocks): the attention's residual add and
  // the second norm are one kernel each way. Forward: read x and y, write the
  // sum and the norm (4 instead of the add's 3 and the norm's 2); backward: the
  // norm's pass also reads the residual path's gradient and adds it (1 more
  // instead of the accumulating add's 3).
  if (fused && m.arch != Arch::Encoder && !m.parallel_block) {
    fm.add(MK::Reduction, 2 * e * Th, 0);
    fm.add(MK::Streaming, -3 * e * Th, -1);
    bm.add(MK::Reduction, e * Th, 0);
    bm.add(MK::Streaming, -3 * e * Th, -1);
  }
  if (drop) bm.add(MK::Streaming, 2 * (2 * e * Th + Th), 2);
  // Activation.
  if (f_local > 0) add_mlp_activation_ops(m.mlp, e, Tf, fused, fm, bm);
  // Bias gradients: a column sum over the tokens of each biased output (read
  // the output gradient); the tiny accumulation into the flat buffer is a kernel.
  const double up_cols = double((m.mlp == MlpKind::SwiGlu ? 2 : 1) * f_local);
  auto bias = [&](bool has, double rows, double cols) {
    if (has) bm.add(MK::Reduction, e * rows * cols, 2);
  };
  bias(m.qkv_bias, double(T), double(q_local + 2 * kv_local));
  bias(m.out_bias, Tr, double(h));
  bias(m.mlp_bias, double(T), up_cols);
  bias(m.mlp_bias, Tr, double(h));
  bm.kernels += norms * 2;  // norm weight/bias gradients accumulated into the flat buffer
  // Under sp the row-parallel outputs' biases are added to the reduce-scattered
  // shard (runtime/model/transformer.cpp row_out): a broadcast add (read, write). Without sp
  // they are in the GEMM's epilogue on one tensor-parallel rank, as without tp.
  if (t > 1 && s.sp) {
    const int row_biases = (m.out_bias ? 1 : 0) + (m.mlp_bias ? 1 : 0);
    if (row_biases > 0) fm.add(MK::Strided, row_biases * 2 * e * Th, row_biases);
  }
}

// The fused QKV output's split, Qwen3's q and k norms, rotary embeddings.
void qkv_memory_ops(const ModelSpec& m, const LayerDims& x, bool fused, MemoryOps& fm, MemoryOps& bm) {
  using MK = MemKernel;
  const double e = x.e;
  const double Tq = double(x.T) * double(x.q_local), Tkv = double(x.T) * double(x.kv_local);
  // The runtime's fused rotary (runtime/model/fused_ops.hpp; not under Qwen3's
  // q/k norms, which sit between the split and the rotation): one kernel reads
  // the projection's output and writes rotated q, k and a copy of v; its
  // backward reads the three gradients and writes the output's.
  if (fused && m.pos == PosEmbed::Rotary && !m.qk_norm) {
    fm.add(MK::Streaming, 2 * e * (Tq + 2 * Tkv));
    bm.add(MK::Streaming, 2 * e * (Tq + 2 * Tkv));
    return;
  }
  // Qwen3's and Gemma-3's RMS q/k norms with the rotation after them
  // (runtime/kernels/qk_norm_kernels.cu, one kernel each way; v stays a view of
  // the projection's output). Forward: read q and k, write them normed and
  // rotated. Backward: read their gradients and the projection's q and k,
  // write the latter's gradient, and copy v's gradient into the whole; a
  // memset and a cast around it for the weights' gradients. Priced as the
  // layer's norms are (the reduction class).
  if (fused && m.pos == PosEmbed::Rotary && m.qk_norm && m.norm != NormKind::LayerNorm) {
    fm.add(MK::Reduction, 2 * e * (Tq + Tkv), 1);
    bm.add(MK::Reduction, 3 * e * (Tq + Tkv), 1);
    bm.add(MK::Streaming, 2 * e * Tkv, 2);
    return;
  }
  // The fused QKV output is split into q, k, v; the split's backward concatenates
  // the three gradients (read, write).
  bm.add(MK::Streaming, 2 * e * (Tq + 2 * Tkv));
  // Rotary (GPT-NeoX rotate-half) on q and k, X = bytes of one of them:
  // forward neg of a half (strided, X), cat of the halves (2X), x*cos and
  // rot*sin (broadcast, 2X each), add (3X); backward g*cos, g*sin (2X each),
  // neg (X), two narrow backwards (zero-fill X each, strided copy X each) and
  // two adds of the three gradient contributions (3X each).
  // Qwen3's q and k norms (per head, width head_dim): a norm kernel each, as
  // the layer's norms are priced.
  if (m.qk_norm) {
    fm.add(MK::Reduction, 2 * e * (Tq + Tkv), 2);
    bm.add(MK::Reduction, 5 * e * (Tq + Tkv), 4);
    bm.kernels += 2;
    // The runtime's q and k are strided views of the fused projection's output:
    // the norm kernels copy them to contiguous memory first, in the forward and
    // again in the backward (validation/h100/qwen3: 224 copies, 7.7 ms a step
    // of qwen3-1.7b). Eager code's separate q/k projections need no copy.
    if (fused) {
      fm.add(MK::Strided, 2 * e * (Tq + Tkv), 2);
      bm.add(MK::Strided, 2 * e * (Tq + Tkv), 2);
    }
  }
  // After the q/k norms the runtime rotates q and k with the fused kernel,
  // each apart: read and write them once each way.
  if (fused && m.pos == PosEmbed::Rotary) {
    fm.add(MK::Streaming, 2 * e * (Tq + Tkv), 2);
    bm.add(MK::Streaming, 2 * e * (Tq + Tkv), 2);
    return;
  }
  if (m.pos == PosEmbed::Rotary) {
    const double X = e * (Tq + Tkv);
    fm.add(MK::Strided, 7 * X, 4 * 2);
    fm.add(MK::Streaming, 3 * X, 2);
    bm.add(MK::Strided, 7 * X, 5 * 2);
    bm.add(MK::Streaming, 2 * X + 6 * X, 4 * 2);
  }
}

// Memory-bound kernels, as the runtime (runtime/model/transformer.cpp) launches them; bytes
// per class (MemoryOps), checked against the H100 kernel profile
// (docs/TIME_MODEL_CHECKS.md, "Checked against the runtime on H100").
void memory_kernel_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const LayerDims& x,
                         PassTimes& out) {
  using MK = MemKernel;
  const double e = x.e;
  const double Tq = double(x.T) * double(x.q_local), Tkv = double(x.T) * double(x.kv_local);
  const int64_t kv_local = x.kv_local, q_local = x.q_local;
  const double attn_in_step = p.attention_in_step_factor;
  MemoryOps fm, bm;
  block_memory_ops(m, s, x, p.dropout, p.fused_ops, fm, bm);
  qkv_memory_ops(m, x, p.fused_ops, fm, bm);
  // Attention backward's memory-bound kernels around the fused kernel (FlashAttention-2
  // and cuDNN alike): D = rowsum(dO * O) (read dO, O) and the fp32 dQ accumulator
  // converted to the working precision (read 4, write e), priced at their
  // memory-bound classes' rates, times attention_in_step_factor, and counted
  // as attention: they are the fused
  // backward's own kernels (flash_bwd_dot_do_o, flash_bwd_convert_dq), which a
  // kernel profile files under attention (runtime/kernel_profile.cpp). With
  // grouped-query attention dK and dV are summed over the query heads of each
  // kv head (an ordinary reduction).
  if (p.flash_attention) {
    MemoryOps helpers;
    helpers.add(MK::Reduction, 2 * e * Tq);
    helpers.add(MK::Streaming, (4 + e) * Tq);
    out.backward.attention_seconds += attn_in_step * helpers.seconds(p);
    if (kv_local < q_local) bm.add(MK::Streaming, 2 * (e * Tq + e * Tkv), 2);
  }
  // As a sustained training pass runs them (HardwareProfile::memory_in_step_factor).
  out.forward.memory_seconds += p.memory_in_step_factor * fm.seconds(p);
  out.backward.memory_seconds += p.memory_in_step_factor * bm.seconds(p);
}

// precision=fp8 under tp (runtime/model/fp8_linear.hpp): each layer linear's
// per-tensor amaxes of split tensors are reduced over the tp group (an
// all-reduce MAX, as Transformer Engine does), one all-reduce of two fp32
// scalars per linear forward (4 a layer; a MoE layer's attention part 2) and
// one of one scalar per column-parallel linear backward (2; 1). Each sits
// between the amax kernel and the cast that needs it, so nothing overlaps it:
// latency-bound, its own collective plus what a collective between GEMMs
// costs (HardwareProfile::tp_collective_extra). Full recomputation repeats the
// forward's (out.recompute = out.forward).
void fp8_amax_comm_times(const HardwareProfile& p, const LayerShape& s, const GroupLink& tp_link, const LayerDims& x,
                         PassTimes& out) {
  if (s.precision != Precision::FP8 || tp_link.size <= 1) return;
  const double base = p.collective_base_latency_seconds;
  const int linears = x.f_local > 0 ? 4 : 2;
  out.forward.tp_comm_seconds += linears * (all_reduce_seconds(8, tp_link, base) + p.tp_collective_extra(8));
  out.backward.tp_comm_seconds += linears / 2 * (all_reduce_seconds(4, tp_link, base) + p.tp_collective_extra(4));
}

// Tensor parallelism, as the runtime communicates (TransformerModel::layer,
// runtime/model/tensor_parallel.hpp): without sp an all-reduce after attention and after the MLP,
// forward and backward; GPT-J's parallel block sums the two branches' partial
// outputs first and needs one each way. With sp each column-parallel GEMM
// (qkv, fc1) all-gathers its input, gathers it again in the backward and
// reduce-scatters its input gradient; each region's output is
// reduce-scattered (all-gathered in the backward): forward 2 AG + 2 RS,
// backward 4 AG + 2 RS (parallel block: 2 AG + 1 RS, 3 AG + 2 RS).
void tp_comm_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const GroupLink& tp_link,
                   const LayerDims& x, PassTimes& out) {
  const double act_bytes = x.e * double(x.T) * double(x.h);
  if (tp_link.size > 1) {
    const double base = p.collective_base_latency_seconds;
    const int outs = m.parallel_block ? 1 : 2;
    if (s.sp) {
      // Each collective sits between GEMMs: its own transfer plus what that costs (HardwareProfile::tp_collective_extra).
      const double extra = p.tp_collective_extra(act_bytes);
      const double ag = all_gather_seconds(act_bytes, tp_link, base) + extra,
                   rs = reduce_scatter_seconds(act_bytes, tp_link, base) + extra;
      out.forward.tp_comm_seconds =
          exposed_tp_comm_seconds(p, 2 * ag + outs * rs, out.forward.gemm_seconds, tp_link.size);
      out.backward.tp_comm_seconds =
          exposed_tp_comm_seconds(p, (2 + outs) * ag + 2 * rs, out.backward.gemm_seconds, tp_link.size);
    } else {
      out.forward.tp_comm_seconds = outs * (all_reduce_seconds(act_bytes, tp_link, base) + p.tp_collective_extra(act_bytes));
      out.backward.tp_comm_seconds = out.forward.tp_comm_seconds;
    }
    fp8_amax_comm_times(p, s, tp_link, x, out);
  }
}

}  // namespace

PassTimes transformer_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                                  const GroupLink& tp_link) {
  PassTimes out;
  const Precision pr = s.precision;
  const LayerDims x(m, s);
  const int64_t T = x.T, h = x.h;

  // GEMMs: QKV, attention output, MLP up (gate+up for SwiGLU), MLP down; under
  // fp8 these four run at the FP8 rate, with their casts (add_fp8_cast_ops).
  MemoryOps f8f, f8b;
  auto layer_linear = [&](int64_t n, int64_t k) {
    linear(p, pr, T, n, k, out);
    if (pr == Precision::FP8) add_fp8_cast_ops(double(T), double(n), double(k), p.fused_ops, f8f, f8b);
  };
  layer_linear(x.q_local + 2 * x.kv_local, h);
  layer_linear(h, x.q_local);
  if (x.f_local > 0) {  // 0: a mixture-of-experts layer's attention part (costmodel/moe_costs.cpp)
    layer_linear((m.mlp == MlpKind::SwiGlu ? 2 : 1) * x.f_local, h);
    layer_linear(h, x.f_local);
  }
  out.forward.memory_seconds += p.memory_in_step_factor * f8f.seconds(p);
  out.backward.memory_seconds += p.memory_in_step_factor * f8b.seconds(p);

  const OpTimes core_fwd = attention_core_times(p, m, s, x, out);
  memory_kernel_times(p, m, s, x, out);
  tp_comm_times(p, m, s, tp_link, x, out);

  // Recomputation inside the backward (Korthikanti et al. 2022, sec. 5): full
  // repeats the forward, its collectives included; selective repeats the
  // attention core. The runtime's selective checkpoint (AttentionCoreCheckpoint)
  // reruns the core's forward in the backward with a fused kernel too, so it
  // costs one more fused forward (the H100 profile shows it).
  if (s.ckpt == Ckpt::Full) out.recompute = out.forward;
  else if (s.ckpt == Ckpt::Selective) out.recompute = core_fwd;
  return out;
}

PassTimes embedding_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                          const GroupLink& tp_link) {
  using MK = MemKernel;
  PassTimes out;
  const double e = bytes_per_element(s.precision);
  const int64_t T = s.seq * s.mbs, width = m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden;
  const double Th = double(T) * m.hidden, Tw = double(T) * width;
  const double Vw = double(vocab_rows_per_rank(m, s.tp)) * width;
  const bool learned = m.pos == PosEmbed::Learned && m.max_positions > 0;
  MemoryOps fm, bm;
  fm.add(MK::Streaming, 2 * e * Tw);  // lookup: read rows, write
  if (m.word_embed_dim > 0 && m.word_embed_dim != m.hidden)
    linear(p, working_precision(s.precision), T, m.hidden, width, out);  // project_in (bf16 under fp8)
  // Position (and token-type) rows broadcast over the batch: add (read two, write
  // one; the broadcast operand takes the non-vectorized path); their gradients are
  // sums over the batch.
  const int adds = (learned ? 1 : 0) + (m.type_vocab > 0 ? 1 : 0);
  if (adds > 0) {
    fm.add(MK::Strided, adds * 3 * e * Th, adds);
    bm.add(MK::Reduction, adds * e * Th, 2 * adds);
  }
  if (m.embed_norm) {
    fm.add(MK::Reduction, 2 * e * Th);
    norm_backward_ops(e, Th, p.fused_ops, bm);
    bm.kernels += 2;
  }
  if (p.dropout) fm.add(MK::Streaming, 2 * e * Th + Th), bm.add(MK::Streaming, 2 * e * Th + Th);
  // Dense embedding backward: zero a (V x w) table, sort the token ids and sum
  // the gradient rows per id (two passes reading the rows and writing fp32
  // partial sums, non-vectorized), then the table is added into the flat
  // gradient buffer (read two, write one).
  bm.add(MK::Streaming, e * Vw);
  bm.add(MK::Strided, 2 * (e + 4) * Tw, 2 + 10);  // + the sort's ~10 small kernels
  bm.add(MK::Streaming, 3 * e * Vw);
  out.forward.memory_seconds = fm.seconds(p);
  out.backward.memory_seconds = bm.seconds(p);
  // Vocabulary-parallel embedding: the partial lookups (T x width, before
  // project_in) are summed across TP (an all-reduce, or a reduce-scatter into the
  // sequence-parallel region, whose backward all-gathers the gradient), as the
  // runtime's TransformerModel::embed does.
  if (tp_link.size > 1) {
    const double base = p.collective_base_latency_seconds;
    const double extra = p.tp_collective_extra(e * Tw);  // between kernels, as every tensor-parallel collective
    out.forward.tp_comm_seconds =
        extra + (s.sp ? reduce_scatter_seconds(e * Tw, tp_link, base) : all_reduce_seconds(e * Tw, tp_link, base));
    if (s.sp) out.backward.tp_comm_seconds = extra + all_gather_seconds(e * Tw, tp_link, base);
  }
  return out;  // not recomputed: Megatron-LM checkpoints the transformer layers only
}

PassTimes head_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const GroupLink& tp_link) {
  using MK = MemKernel;
  PassTimes out;
  const Precision pr = working_precision(s.precision);  // the head stays bf16 under fp8
  const double e = bytes_per_element(pr);
  const int64_t T = s.seq * s.mbs, t = s.tp;
  const double Tr = s.sp ? double(T) / t : double(T);
  const double Th = Tr * m.hidden;
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden;
  MemoryOps fm, bm;
  // Final norm.
  if (m.final_norm) {
    fm.add(MK::Reduction, 2 * e * Th);
    norm_backward_ops(e, Th, p.fused_ops, bm);
    bm.kernels += 2;
  }
  if (m.word_embed_dim > 0 && m.word_embed_dim != m.hidden) linear(p, pr, T, width, m.hidden, out);  // project_out
  // BERT's MLM transform: dense + bias, GeLU, LayerNorm.
  if (m.mlm_head) {
    linear(p, pr, T, m.hidden, m.hidden, out);
    fm.add(MK::Streaming, 2 * e * Th), bm.add(MK::Streaming, 3 * e * Th);
    fm.add(MK::Reduction, 2 * e * Th);
    norm_backward_ops(e, Th, p.fused_ops, bm);
    bm.kernels += 2;
    bm.add(MK::Reduction, e * Th, 2);  // dense bias gradient
  }
  // Logits (T x ceil(V/t)), the rank's vocabulary padded to a multiple of 64 (the runtime pads
  // a copy of the weight so that cuBLAS keeps its aligned kernels): the pad is a
  // zero-fill and a copy in the forward and again in the backward, the padded
  // columns are set to -inf, and the weight gradient is computed into a new
  // tensor and added into the flat buffer.
  const int64_t V = vocab_rows_per_rank(m, int(t)), Vp = padded_vocab_columns(m, int(t));
  linear(p, pr, T, Vp, width, out);
  if (lm_head_padded(m, int(t))) {
    const double Vw = double(V) * width, Vpw = double(Vp) * width;
    fm.add(MK::Streaming, e * Vpw + 2 * e * Vw, 2);
    bm.add(MK::Streaming, e * Vpw + 2 * e * Vw, 2);
    fm.add(MK::Strided, e * double(T) * double(Vp - V));
    bm.add(MK::Streaming, 3 * e * Vw);
  }
  const double TV = double(T) * double(Vp);
  // Gemma-2's final soft-capping, y = cap * tanh(logits / cap), as the
  // runtime's loss runs it (runtime/model/transformer.cpp soft_cap): three
  // elementwise kernels (mul into a new tensor, tanh_, mul_) each reading and
  // writing the logits; and, since the loss forms its gradient in the
  // forward, the chain rule there too: y squared in place (read, write) and
  // grad += grad * y^2 * (-1/cap^2) (addcmul_: read two, write one).
  if (m.logit_softcap > 0) {
    fm.add(MK::Streaming, 3 * 2 * e * TV, 3);
    fm.add(MK::Streaming, 2 * e * TV + 3 * e * TV, 2);
  }
  if (m.lm_head_bias || m.mlm_head) bm.add(MK::Reduction, e * TV, 2);  // vocabulary bias gradient
  // Chunked fp32 cross-entropy (runtime ChunkedCrossEntropy), per chunk of rows:
  // log_softmax in fp32 (bf16 is first converted by a separate copy, fp16 is
  // converted inside the kernel) reading its input twice (max/sum, then the
  // output pass) and writing fp32; exp_ in place; the (rows x 1) scale mul_
  // (broadcast, non-vectorized); the copy of the gradient into the working
  // precision; about ten small kernels (gather, scatter_add, masks, sums). The
  // backward only scales the kept gradient by a 0-dim device tensor
  // (non-vectorized, read and write).
  //
  // Without TP the runtime runs its fused kernel instead (runtime/kernels/
  // fused_kernels.cu): one block per row reads the logits for the row's
  // maximum and sum of exponentials, then reads them again and writes the
  // gradient; the label mask, counts and the sum of the rows' losses are a
  // handful of small kernels.
  const int64_t rows = std::max<int64_t>(1, (int64_t(256) << 20) / (4 * Vp));
  const int chunks = int((T + rows - 1) / rows);
  if (p.fused_ops && t == 1) {
    fm.add(MK::Reduction, 3 * e * TV);
    fm.kernels += 6;
  } else {
    const double in = pr == Precision::BF16 ? 4.0 : e;
    if (pr == Precision::BF16) fm.add(MK::Strided, (e + 4) * TV);
    fm.add(MK::Reduction, (2 * in + 4) * TV);
    fm.add(MK::Streaming, 8 * TV);
    fm.add(MK::Strided, 8 * TV);
    fm.add(MK::Streaming, (4 + e) * TV);
    fm.kernels += chunks * 14;
  }
  // The backward scales the kept gradient by the loss's incoming gradient over
  // the factor it was stored with. ATen: a multiply by a 0-dim device tensor
  // (non-vectorized, read and write); the runtime's kernel (scale_by_ratio_)
  // reads the ratio on the device and writes nothing when it is 1, as it is
  // whenever the step's backward brings the factor the forward assumed.
  if (p.fused_ops)
    bm.kernels += 1;
  else
    bm.add(MK::Strided, 2 * e * TV);
  out.forward.memory_seconds += fm.seconds(p);
  out.backward.memory_seconds += bm.seconds(p);
  if (tp_link.size > 1) {
    const double base = p.collective_base_latency_seconds;
    // The runtime's vocabulary-parallel cross-entropy (ChunkedCrossEntropy), per
    // chunk of rows: an all-gather of the rows' maxima (fp32, t per row) and one
    // all-reduce of their sums of exponentials and target logits (2 fp32 per row).
    const double per_chunk = double(T) / chunks;
    out.forward.tp_comm_seconds =
        chunks * (all_gather_seconds(4.0 * per_chunk * t, tp_link, base) + p.tp_collective_extra(4.0 * per_chunk * t) +
                  all_reduce_seconds(8.0 * per_chunk, tp_link, base) + p.tp_collective_extra(8.0 * per_chunk));
    // The head is column-parallel: its input gradient is summed across TP, and
    // with sequence parallelism its input all-gathered first (and again in the
    // backward, for the weight gradient).
    const double in_bytes = e * double(T) * width;
    const double extra = p.tp_collective_extra(in_bytes);
    out.backward.tp_comm_seconds =
        extra + (s.sp ? reduce_scatter_seconds(in_bytes, tp_link, base) : all_reduce_seconds(in_bytes, tp_link, base));
    if (s.sp) out.forward.tp_comm_seconds += extra + all_gather_seconds(in_bytes, tp_link, base);
    if (s.sp) out.backward.tp_comm_seconds += extra + all_gather_seconds(in_bytes, tp_link, base);
  }
  return out;  // the head is not recomputed (Megatron-LM checkpoints transformer layers only)
}

}  // namespace planner

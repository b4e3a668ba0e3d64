#include <cmath>
#include "costmodel/finetune.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"
#include "specs/flops.hpp"

namespace planner {

int64_t matrix_params_per_layer(const ModelSpec& m, int tp) {
  int64_t n = 0;
  for (const LayerMatrix& w : layer_matrices(m)) n += w.d_in * w.d_out / std::max(1, tp);
  return n;
}

int64_t largest_matrix_per_rank(const ModelSpec& m, int tp) {
  // As the runtime stores them (LayerMatrix::runtime_matrix): q, k and v as
  // one matrix, a gated MLP's gate and up as one; each dequantised whole.
  int64_t size[4] = {0, 0, 0, 0};
  for (const LayerMatrix& w : layer_matrices(m)) size[w.runtime_matrix] += w.d_in * w.d_out / std::max(1, tp);
  return *std::max_element(size, size + 4);
}

double nf4_dequant_buffer_bytes(const ModelSpec& m, const Strategy& s, bool fused) {
  const double largest = double(largest_matrix_per_rank(m, s.tp));
  return double(bytes_per_element(s.precision)) * largest +
         (fused ? 0.0 : kNf4DequantTempBytesPerWeight * std::min(largest, double(kNf4DequantSlice)));
}

double frozen_base_bytes(const ModelSpec& m, const Strategy& s, double params, int layers) {
  const double e = bytes_per_element(s.precision);
  if (!s.finetune.quantized_base()) return e * params;
  const double nf4 = double(layers) * double(matrix_params_per_layer(m, s.tp));
  return nf4 * kNf4BitsPerParam / 8.0 + (params - nf4) * e;
}

double trainable_params_per_rank(const ModelSpec& m, const Strategy& s, double params, int layers) {
  if (!s.finetune.frozen_base()) return params;
  return double(layers) * double(adapter_params_per_layer(m, s.finetune, s.tp));
}

ModelStateBytes finetune_model_state_bytes(const ModelSpec& m, const Strategy& s, const MemoryConstants& k,
                                           double params, int layers, bool fused) {
  ModelStateBytes out = model_state_bytes(trainable_params_per_rank(m, s, params, layers), s, k);
  out.gpu_params += frozen_base_bytes(m, s, params, layers);
  if (s.finetune.quantized_base() && layers > 0) out.gpu_params += nf4_dequant_buffer_bytes(m, s, fused);
  return out;
}

double finetune_layer_activation_bytes(const ModelSpec& m, int64_t seq, int64_t mbs, int e, Ckpt ckpt,
                                       const AttentionImpl& impl, int tp, bool sp, const Finetune& f) {
  const double full = layer_activation_bytes(m, seq, mbs, e, ckpt, impl).total(tp, sp);
  if (!f.frozen_base()) return full;
  const double T = double(seq) * double(mbs), h = double(m.hidden), t = double(std::max(1, tp));
  // Each adapter keeps X A (T x r) for dB = (X A)^T dY. Under TP, X A of a
  // column-parallel matrix is whole on every rank (A is not split) and that of
  // a row-parallel one is summed over the ranks before B: whole too.
  double adapters = 0;
  for (const LayerMatrix& w : layer_matrices(m))
    if (f.targets_any(w.target)) adapters += double(e) * T * f.r;
  // With full recomputation only the layer input is kept; the adapters'
  // intermediates are recomputed with the rest.
  if (ckpt == Ckpt::Full) return full;
  // What full training keeps only for a weight gradient (activations.cpp's
  // terms), dropped when no adapter on those matrices needs it:
  double dropped = 0;
  const double repl = double(e) * T * h / (sp ? t : 1.0);  // a norm output, replicated over tp (split under sp)
  const bool qkv = f.targets_any(kLoraQ | kLoraK | kLoraV), mlp = f.targets_any(kLoraMlp);
  // The inputs of the QKV and MLP-up GEMMs (norm outputs; the norms' own
  // backward keeps the norm inputs, counted apart). A parallel block feeds
  // both from one.
  if (m.parallel_block) {
    if (!qkv && !mlp) dropped += repl;
  } else {
    if (!qkv) dropped += repl;
    if (!mlp) dropped += repl;
  }
  // The attention output (input of o): a fused kernel keeps it for its own
  // backward (FlashAttention-2 needs O for rowsum(dO * O)); materialised
  // attention needs only the softmax output and V.
  if (!impl.flash && !f.targets_any(kLoraO)) dropped += double(e) * T * double(m.q_dim()) / t;
  // The input of MLP down: SwiGLU's product and GeLU's output are kept only for
  // it; ReLU's output is also what ReLU's backward reads.
  if (!mlp && m.mlp != MlpKind::Relu) dropped += double(e) * T * double(m.ffn) / t;
  return full - dropped + adapters;
}

namespace {

// The weight-gradient GEMMs of a layer's four linear layers, as
// transformer_layer_times prices them (layer_costs.cpp, `linear`).
double layer_weight_grad_seconds(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s) {
  const int64_t t = s.tp, T = s.seq * s.mbs, h = m.hidden;
  const int64_t f_local = m.ffn / t, kv_local = m.kv_dim() / t, q_local = m.q_dim() / t;
  const Precision pr = s.precision;
  return weight_grad_gemm_seconds(p, h, q_local + 2 * kv_local, T, pr) + weight_grad_gemm_seconds(p, q_local, h, T, pr) +
         weight_grad_gemm_seconds(p, h, (m.mlp == MlpKind::SwiGlu ? 2 : 1) * f_local, T, pr) +
         weight_grad_gemm_seconds(p, f_local, h, T, pr);
}

}  // namespace

void apply_finetune_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const Finetune& f,
                                PassTimes& out) {
  if (!f.frozen_base()) return;
  const Precision pr = s.precision;
  const double e = bytes_per_element(pr);
  const int64_t T = s.seq * s.mbs, r = f.r, t = std::max(1, s.tp);
  // A frozen base computes no weight gradient: its backward is the data
  // gradients alone (dX = dY W^T), half of a linear layer's backward GEMMs.
  out.backward.gemm_seconds -= layer_weight_grad_seconds(p, m, s);
  using MK = MemKernel;
  MemoryOps fm, bm;
  unsigned seen = 0;  // the runtime matrices whose adapters' dX exists already (bit runtime_matrix)
  for (const LayerMatrix& w : layer_matrices(m)) {
    const int64_t di = w.column_parallel ? w.d_in : w.d_in / t, dout = w.column_parallel ? w.d_out / t : w.d_out;
    if (f.quantized_base()) {
      // Dequantise NF4 to the compute precision before the forward GEMM and
      // again before the backward's dX GEMM (bitsandbytes' MatMul4Bit keeps the
      // 4-bit state, not the dequantised matrix), as runtime/model/lora.cpp's
      // nf4_dequantize does it. With the runtime's kernel
      // (runtime/kernels/nf4_kernels.cu; the profile's fused_ops) one kernel a
      // matrix reads the packed codes (0.5 bytes a weight) and each 64-weight
      // block's 8-bit constant (with its 256-block's fp32 scale) and writes e:
      // the streaming rate. ATen's path, per slice of kNf4DequantSlice weights,
      // in bytes per weight: the packed codes to int32 indices (read 0.5, write
      // 2), the gather of the fp32 level pairs (read 2, write 4), the scale
      // multiply into the compute precision (read 4, write e); all three on
      // PyTorch's non-vectorized path (validation/h100/ft23's kernels:
      // _scatter_gather_elementwise_kernel and a casting BinaryFunctor), the
      // strided class; the per-block constants (1/64 of the weights) left out.
      const double weights = double(di) * double(dout);
      if (p.fused_ops) {
        const double bytes = weights * (0.5 + e + 1.0 / kNf4BlockSize + 4.0 / (kNf4BlockSize * kNf4AbsmaxBlockSize));
        fm.add(MK::Streaming, bytes, 1);
        bm.add(MK::Streaming, bytes, 1);
      } else {
        const double bytes = weights * (0.5 + 2 + 2 + 4 + 4 + e);
        const int kernels = 3 * int(std::ceil(weights / double(kNf4DequantSlice)));
        fm.add(MK::Strided, bytes, kernels);
        bm.add(MK::Strided, bytes, kernels);
      }
    }
    if (!f.targets_any(w.target)) continue;
    // As runtime/model/lora.cpp's LoraAdd runs them: the adapters of one
    // runtime matrix's parts share its input and its output.
    const bool first_in_group = !(seen & (1u << w.runtime_matrix));
    seen |= 1u << w.runtime_matrix;
    // Forward: Z = X A^T (T x r), then Y[:, part] += (alpha/r) Z B^T as one
    // GEMM accumulating into the part's columns of the base's output: no
    // separate add, but the (memory-bound, k = r) GEMM reads those columns too.
    const double accumulate = e * double(T) * double(dout) / p.memory_Bps();
    out.forward.gemm_seconds += gemm_seconds(p, T, r, di, pr) + gemm_seconds(p, T, dout, r, pr) + accumulate;
    // Backward: dZ = dY_part B (scaled: a T x r pass), dB = dY_part^T Z
    // (scaled: r x d_out), dA = dZ^T X, and dX = dZ A accumulated over the
    // matrix's adapted parts in one tensor (a later part's GEMM reads it),
    // added once into the base's input gradient.
    out.backward.gemm_seconds += gemm_seconds(p, T, r, dout, pr) + gemm_seconds(p, T, di, r, pr) +
                                 weight_grad_gemm_seconds(p, r, dout, T, pr) + weight_grad_gemm_seconds(p, di, r, T, pr) +
                                 (first_in_group ? 0.0 : e * double(T) * double(di) / p.memory_Bps());
    bm.add(MK::Streaming, 2 * e * (double(T) * double(r) + double(r) * double(dout)), 2);
    if (first_in_group) bm.add(MK::Streaming, 3 * e * double(T) * double(di), 1);
  }
  out.forward.memory_seconds += p.memory_in_step_factor * fm.seconds(p);
  out.backward.memory_seconds += p.memory_in_step_factor * bm.seconds(p);
  // Full recomputation repeats the forward, adapters and dequantisation included.
  if (s.ckpt == Ckpt::Full) out.recompute = out.forward;
}

void apply_finetune_head_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, PassTimes& head) {
  // The LM head is frozen: no weight gradient (its input gradient still flows).
  const int64_t T = s.seq * s.mbs, width = m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden;
  head.backward.gemm_seconds -= weight_grad_gemm_seconds(p, width, padded_vocab_columns(m, s.tp), T, s.precision);
}

void apply_finetune_embedding_times(PassTimes& embedding) {
  // A frozen embedding receives no gradient: nothing runs in its backward.
  embedding.backward = OpTimes{};
}

std::string finetune_assumed(const Strategy& s) {
  const Finetune& f = s.finetune;
  if (!f.frozen_base()) return "full training: AdamW on every weight (finetune=lora|qlora: adapters on a frozen base)";
  return fmt::format("{}: adapters of rank {} (alpha {}) on {} of every layer, AdamW on them only; base frozen in {}, "
                     "embedding and LM head without adapters, no adapter dropout",
                     to_string(f.mode), f.r, f.alpha, targets_to_string(f.targets),
                     f.quantized_base() ? fmt::format("NF4 with double quantization ({:.3f} bits/param; norms, biases, "
                                                      "embedding and head in {})", kNf4BitsPerParam, to_string(s.precision))
                                        : std::string(to_string(s.precision)));
}

}  // namespace planner

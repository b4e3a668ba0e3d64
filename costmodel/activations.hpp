#pragma once
// Activation memory of one transformer layer, after Korthikanti et al. 2022,
// "Reducing Activation Recomputation in Large Transformer Models", sec. 4 and
// Table 2. Every tensor a layer saves for its backward is counted once, split
// into what tensor parallelism divides by t and what it replicates (sequence
// parallelism divides that too).
#include <cstdint>

#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

struct AttentionImpl {
  // Fused (flash / memory-efficient) attention saves Q, K, V, the output and
  // the fp32 log-sum-exp; materialized attention also saves the a*s*s
  // softmax output (and its dropout mask and output when dropout is on).
  bool flash = true;
  // Dropout after attention scores, attention output and MLP (GPT-2/Megatron
  // style). Modern LLM training, and this project's runtime, use none.
  bool dropout = false;
  // The runtime's fused rotary and GLU (runtime/model/fused_ops.hpp): rotary
  // returns new q, k, v and frees the projection's output; GLU saves its input
  // only. false: eager code's views and intermediates (the engines).
  bool fused_ops = true;
};

struct LayerActivationBytes {
  double replicated = 0;  // saved by every TP rank in full (LN inputs, inputs of column-parallel GEMMs)
  double split = 0;       // divided across TP ranks (per-head and per-FFN-column tensors)
  double total(int tp, bool sp) const { return sp ? (replicated + split) / tp : replicated + split / tp; }
};

// Bytes one layer saves for the backward, for a micro-batch of `b` sequences of
// `s` tokens with `elem_bytes`-byte activations.
//  ckpt=none:      everything (Megatron: 34sbh + 5as^2b with dropout and materialized attention)
//  ckpt=selective: the attention core (softmax, its dropout, the s^2 terms and the
//                  log-sum-exp) is recomputed, so those are dropped
//  ckpt=full:      only the layer input (2sbh for 16-bit)
LayerActivationBytes layer_activation_bytes(const ModelSpec& m, int64_t s, int64_t b, int elem_bytes, Ckpt ckpt,
                                            const AttentionImpl& impl = {});

// What one layer's backward holds at its fullest beyond the tensors the layers
// saved, for a dense MLP: the layer output's gradient (b, s, h), and at the
// activation's backward the gradient of the up projection's output (b, s, 2f
// for SwiGLU's gate and up, b, s, f otherwise) beside that of the down
// projection's input (b, s, f), less the activation the down projection saved
// (b, s, f), freed by then. So e(sbh + 2sbf) for SwiGLU, e(sbh + sbf) for
// GeLU/ReLU. The order of allocations is the runtime's, read off the caching
// allocator's record on stage 0 of two pipeline plans
// (validation/h200x2/stage74).
LayerActivationBytes layer_backward_working_bytes(const ModelSpec& m, int64_t s, int64_t b, int elem_bytes);
// The transient tensors of one dense layer's forward when it saves nothing
// (full recomputation's first pass): at the down projection's output, the
// up projection's output (b, s, 2f for SwiGLU, b, s, f otherwise), the
// activation's (b, s, f) and the down projection's output (b, s, h) are
// alive. So e(sbh + 3sbf) for SwiGLU, e(sbh + 2sbf) otherwise; read off the
// caching allocator's record of a tp=2 run (validation/h200x2/tploss84: 1024,
// 512 and 256 MiB at the peak).
LayerActivationBytes layer_forward_working_bytes(const ModelSpec& m, int64_t s, int64_t b, int elem_bytes);

}  // namespace planner

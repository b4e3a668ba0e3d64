#pragma once
// FLOP counts of one training step, shared by the simulator (MFU) and the
// runtime (measured TFLOP/s), so both use one definition.
//
// Model FLOPs follow the convention of Narayanan et al. 2021 ("Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", eq. 3)
// and PaLM's MFU (Chowdhery et al. 2022, app. B): every matrix multiply counts 2
// FLOPs per multiply-add, the backward pass twice the forward, attention scores
// counted in full (no causal halving), recomputation not counted.
#include <cstdint>

#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// Parameters that take part in matrix multiplies (every weight matrix,
// including the LM head / tied embedding used as the output projection; not
// biases, norms or the input embedding lookup). A mixture of experts counts
// the activated ones: top_k routed experts and the shared MLP per MoE layer.
int64_t matmul_params(const ModelSpec& m);

// Forward FLOPs of the attention scores and their product with V (QK^T and
// AV) of one token over all layers: 4 * q_dim * keys per layer, keys = seq for
// a global layer and min(seq, sliding_window) for a windowed one (q_dim =
// heads * head_dim, = hidden unless head_dim is given).
double attention_flops_per_token(const ModelSpec& m, int64_t seq);

// Forward FLOPs of one token at sequence length `seq`:
//   2 * matmul_params + attention_flops_per_token
//   (= 2 * matmul_params + 4 * layers * seq * hidden without window or head_dim)
double forward_flops_per_token(const ModelSpec& m, int64_t seq);

// Model FLOPs of a training step on `tokens` tokens: 3 x forward.
double model_flops(const ModelSpec& m, int64_t seq, int64_t tokens);

// FLOPs the hardware executes, recomputation included: full checkpointing
// repeats the whole forward (4 x forward); selective repeats the attention core
// (QK^T, softmax, AV) only (Korthikanti et al. 2022, sec. 5).
double hardware_flops(const ModelSpec& m, int64_t seq, int64_t tokens, Ckpt ckpt);

}  // namespace planner

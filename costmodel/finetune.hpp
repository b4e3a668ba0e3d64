#pragma once
// LoRA and QLoRA on a frozen base: what they change in the memory model and in
// the time model. Formulas and their sources: docs/MEMORY_MODEL.md and
// docs/TIME_MODEL.md ("Fine-tuning: LoRA and QLoRA").
#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/activations.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/model_states.hpp"
#include "specs/lora_shapes.hpp"
#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// Weight-matrix parameters of one layer on one rank (what QLoRA stores in NF4;
// norms and biases stay in the working precision).
int64_t matrix_params_per_layer(const ModelSpec& m, int tp);
// The largest matrix of a layer on one rank: QLoRA's dequantisation buffer
// holds one at a time, in the compute precision.
int64_t largest_matrix_per_rank(const ModelSpec& m, int tp);
// QLoRA's dequantisation at its peak: the largest matrix in the compute
// precision, and without the runtime's kernel (`fused` false: ATen's path)
// its slice's temporaries (kNf4DequantSlice weights at
// kNf4DequantTempBytesPerWeight).
double nf4_dequant_buffer_bytes(const ModelSpec& m, const Strategy& s, bool fused);

// Bytes of a rank's frozen base holding `params` parameters of which
// `layers` transformer layers: the working precision for LoRA; for QLoRA the
// layers' matrices at kNf4BitsPerParam and the rest (embedding, head, norms,
// biases) in the working precision.
double frozen_base_bytes(const ModelSpec& m, const Strategy& s, double params, int layers);

// Parameters that train on one rank of a stage with `layers` layers: the
// adapters (fine-tuning) or `params` (full training).
double trainable_params_per_rank(const ModelSpec& m, const Strategy& s, double params, int layers);
// Model states of such a rank under fine-tuning: the frozen base (no
// gradient, no optimizer state, replicated over dp), QLoRA's dequantisation
// buffer (one layer matrix in the working precision, counted as parameters),
// and the adapters as any trained weights (model_state_bytes: 2 + 2 + K bytes
// per parameter, ZeRO-1 sharding their optimizer states over dp).
ModelStateBytes finetune_model_state_bytes(const ModelSpec& m, const Strategy& s, const MemoryConstants& k,
                                           double params, int layers, bool fused);

// Bytes one layer saves for its backward under fine-tuning, for a micro-batch
// (compare layer_activation_bytes(...).total(tp, sp) for full training): a
// frozen matrix needs no weight gradient, so its input is not kept for one
// unless its adapter's A needs it (dA = X^T (dY B^T) s) or another op's
// backward does; each adapter keeps X A (T x r) for dB = (X A)^T dY s.
double finetune_layer_activation_bytes(const ModelSpec& m, int64_t seq, int64_t mbs, int elem_bytes, Ckpt ckpt,
                                       const AttentionImpl& impl, int tp, bool sp, const Finetune& f);

// Time: replaces a layer's (and the embedding's and head's) full-training pass
// times by fine-tuning's: no weight-gradient GEMMs for the frozen matrices,
// the adapters' six GEMMs per matrix, and for QLoRA the dequantisation of every
// matrix in the forward, the backward and any recomputation (memory-bound).
void apply_finetune_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const Finetune& f,
                                PassTimes& layer);
void apply_finetune_head_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, PassTimes& head);
void apply_finetune_embedding_times(PassTimes& embedding);

// One line for the `assumed:` list naming the choice.
std::string finetune_assumed(const Strategy& s);

}  // namespace planner

#pragma once
// The shapes LoRA and QLoRA put adapters on, shared by the cost model
// (costmodel/finetune.*) and the runtime (its measured FLOPs, MFU): the
// layer's matrices, the adapters' parameter counts, and a fine-tuning step's
// FLOPs beside full training's (specs/flops.hpp).
#include <cstdint>
#include <vector>

#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// One linear layer of a transformer layer, per rank under tensor parallelism
// (column-parallel: q, k, v, MLP up and gate split their outputs; row-parallel:
// o and MLP down split their inputs; Shoeybi et al. 2019).
struct LayerMatrix {
  const char* name;    // "q", "k", "v", "o", "gate", "up", "down" (PEFT's q_proj, ..., down_proj)
  unsigned target;     // the LoraTarget bit that puts an adapter on it
  int64_t d_in, d_out; // whole matrix
  bool column_parallel;
  // The runtime's matrix it is part of (runtime/model/transformer.cpp: q, k
  // and v fused, 0; o, 1; a gated MLP's gate and up fused, 2; down, 3): the
  // adapters of one runtime matrix share its input and output.
  int runtime_matrix;
};
std::vector<LayerMatrix> layer_matrices(const ModelSpec& m);

// Adapter parameters on one rank for one matrix: A (d_in x r) and B (r x d_out),
// r (d_in + d_out) in all (Hu et al. 2021, sec. 4.1); tensor parallelism splits
// A of a row-parallel and B of a column-parallel matrix, the other factor is
// whole on every rank.
int64_t adapter_params(const LayerMatrix& w, int r, int tp);
// Adapter parameters of one transformer layer on one rank.
int64_t adapter_params_per_layer(const ModelSpec& m, const Finetune& f, int tp);
// FLOPs of a fine-tuning step on `tokens` tokens: full training's (specs/flops.hpp)
// less the weight gradients of the frozen matrices (2 FLOPs per multiply-add,
// one per weight per token), plus the adapters' 6 FLOPs per parameter per token.
double finetune_flops_adjustment(const ModelSpec& m, const Finetune& f, int64_t tokens);

}  // namespace planner

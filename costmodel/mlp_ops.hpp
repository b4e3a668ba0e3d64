#pragma once
// The pieces of a layer's time that the mixture-of-experts layer
// (costmodel/moe_costs.cpp) prices again at its experts' shapes; defined in
// layer_costs.cpp beside the dense layer that uses them, so both price a
// linear layer and an MLP by the same formulas.
#include <cstdint>

#include "costmodel/layer_costs.hpp"

namespace planner {

// A linear layer Y(T x n) = X(T x k) W(k x n): the forward GEMM; the data and
// weight gradients in the backward.
void add_linear_times(const HardwareProfile& p, Precision pr, int64_t T, int64_t n, int64_t k, PassTimes& out);
// One MLP of local inner width `f_local` over T tokens in the model's MLP
// kind: its two (gated: gate+up, down) GEMMs and the activation's
// memory-bound kernels, as transformer_layer_times prices the dense MLP.
// fused_glu: the runtime's fused GLU kernel where the profile has it
// (HardwareProfile::fused_ops); the runtime's experts run the ATen chain.
void add_mlp_times(const HardwareProfile& p, const ModelSpec& m, Precision pr, int64_t T, int64_t f_local,
                   PassTimes& out, bool fused_glu = false);

}  // namespace planner

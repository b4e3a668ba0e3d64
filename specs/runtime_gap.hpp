#pragma once
// What `planner exec` does not run, as one line naming it (empty when it runs
// it): the rules runtime/ enforces, in one place, so that `plan` and
// `predict` can say that an answer is predicted but not run, and the runtime
// refuses with the same words. The cost model prices every legal strategy;
// these are the runtime's own limits on top of legality (strategies/,
// costmodel/compat.cpp), which no plan that breaks them reaches.
#include <cstdint>
#include <string>

#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// The runtime's mixture-of-experts layer (runtime/model/moe.*) on this model
// with these group sizes: "" or "the runtime does not execute mixture of
// experts with ... (model)". Empty for a dense model.
std::string moe_runtime_gap(const ModelSpec& m, int tp, int ep);

// The whole plan: runtime_model_gap (the model's layers), the MoE layer's
// limits, what the Engine runs with a MoE model (ep > 1 with cp = 1 only,
// no adapters on a MoE model), precision=fp8 (each GEMM's widths, per tp
// rank, and a micro-batch's tokens multiples of 16, at::_scaled_mm's rule)
// and sp's sequence split (seq a multiple of tp).
std::string runtime_gap(const ModelSpec& m, const Strategy& s, int64_t seq);

// Whether planner exec on a GPU reserves the LM head's tensors as one block
// from the start of the head's chunk to the head (runtime/engine.cpp
// head_reserve_block_bytes): an LM head (not BERT's MLM head), pp = 1 or
// 1F1B, and `logits_bytes` (one micro-batch's rows x the rank's padded
// vocabulary columns, in the working precision) of 128 MiB or more. The
// memory model counts what lives beside that block (costmodel/memory_model.cpp).
bool runtime_reserves_head_block(const ModelSpec& m, const Strategy& s, double logits_bytes);

}  // namespace planner

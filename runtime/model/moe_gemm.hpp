#pragma once
// The mixture-of-experts layer's GEMMs against its weights
// (runtime/model/moe.hpp: the router, the routed experts on both paths, the
// shared MLP and its gate) as autograd functions that save the parameter
// leaves themselves, never a view of them (transpose, unbind, .t()), and read
// them again in the backward.
//
// Why: ZeRO-3 (runtime/engine_zero.cpp) gathers a unit's parameters into a
// pooled buffer for its forward, releases the buffer, and gathers them again
// for its backward into whichever buffer is free then (ParamStore::bind swaps
// the leaves' storage under them). A view saved by autograd in the forward
// keeps the forward's buffer, which by the backward holds another unit's
// weights: before these functions a MoE model at ZeRO-3 was 6e-5 off one
// process in the loss and 2e-3 in the parameters (commit 990c59d). A saved
// leaf unpacks as the parameter, bound to the backward's buffer: the contract
// the dense layers' LinearAccum keeps (runtime/model/transformer.cpp). As
// there, each weight gradient is accumulated into the leaf's bound gradient
// (an in-place GEMM where the layout allows), or returned to autograd when
// none is bound.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace planner::rt {

// y = x w^T for a (out, in) parameter leaf w: (..., in) -> (..., out).
at::Tensor weight_linear(const at::Tensor& x, const at::Tensor& w);

// The local experts' GEMM, one per expert: x (N, in) holds rows[j] rows of
// expert j after those of experts 0..j-1 (sum(rows) == N), w the stacked
// (E, out, in) parameter leaf; row block j times w[j]^T, (N, out). Each
// expert's rows are padded with zeros to a multiple of pad_rows for the
// GEMMs both ways (PLANNER_MOE_PAD_ROWS; the padding's outputs are dropped and
// add nothing to the weight gradient).
at::Tensor expert_gemm(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& rows, int64_t pad_rows);

// The same in one at::_grouped_mm each way (and one for the weight
// gradient), the groups' row ends `ends` (int32 (E), on x's device): rows
// [ends[j-1], ends[j]) times w[j]^T. The backward's two grouped GEMMs are
// the ones LibTorch's own _grouped_mm backward issues for this layout (the
// same values bit for bit, checked on the CPU and on an H200 in bf16).
at::Tensor grouped_expert_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& ends);

}  // namespace planner::rt

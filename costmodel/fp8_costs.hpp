#pragma once
// precision=fp8 (runtime/model/fp8_linear.hpp) beside its GEMMs, which
// op_costs.cpp prices at the FP8 rate: the per-tensor scaling's memory-bound
// kernels around each linear layer (time, docs/TIME_MODEL.md "FP8") and the
// fp8 copies that live during a linear's backward (memory,
// docs/MEMORY_MODEL.md "FP8").
#include <cstdint>

#include "costmodel/op_costs.hpp"
#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// The casts around Y = X W^T (X: T x k, W: n x k): forward kernels into `fm`,
// backward into `bm`; `fused`: the runtime's own cast kernels
// (runtime/kernels/fp8_kernels.cu, HardwareProfile::fused_ops), else ATen's.
void add_fp8_cast_ops(double T, double n, double k, bool fused, MemoryOps& fm, MemoryOps& bm);

// Bytes of the transient fp8 copies of the layer linear whose backward holds
// the most (0 unless s.precision is FP8); `seq` is a rank's tokens of one
// sequence (seq/cp); `fused` as above.
double fp8_linear_transient_bytes(const ModelSpec& m, const Strategy& s, int64_t seq, bool fused);

}  // namespace planner

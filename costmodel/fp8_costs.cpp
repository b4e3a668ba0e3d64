// precision=fp8's costs beside the GEMMs (costmodel/fp8_costs.hpp).
#include "costmodel/fp8_costs.hpp"

#include <algorithm>
#include <utility>

namespace planner {

// precision=fp8: the memory-bound kernels around one linear layer's FP8 GEMMs
// (Y = X W^T, X: T x k, W: n x k), as runtime/model/fp8_linear.cpp runs them:
// per-tensor dynamic scaling (torchtitan's float8 "tensorwise" recipe;
// Micikevicius et al. 2022), each GEMM input's amax (one reduction reading it,
// five tiny kernels for scale = max_fp8 / amax and its inverse) and its scaled
// cast (bf16 x scale into fp32, then cast to fp8: 2+4 + 4+1 = 11 bytes per
// element, two kernels). Forward: X and W. Backward: dY, and X and W again
// (the bf16 tensors are what is saved, as torchao's Float8Linear does); Hopper's
// FP8 tensor cores take one operand layout ("TN"), so dX = dY W needs W's fp8
// copy transposed and dW = dY^T X needs dY's and X's (read and write one byte
// each); _scaled_mm cannot accumulate into the gradient buffer, so dW (bf16) is
// added to it (read two, write one).
// Kernel classes, from the kernels of validation/h100x4/diag23 (llama-3.2-1b,
// one H100): the scale multiply runs on PyTorch's non-vectorized path (a
// bf16 tensor times a 0-dim fp32 tensor into fp32: BinaryFunctor<float> in
// gpu_kernel_impl), most of the fp8 casts and the transposed copies on the
// non-vectorized float8_copy kernel: all at the strided class's measured
// rate (strided_kernel_relative); the amax a reduction; the dW add a
// vectorized stream.
void add_fp8_cast_ops(double T, double n, double k, MemoryOps& fm, MemoryOps& bm) {
  using MK = MemKernel;
  constexpr double kCast = 11;
  const double X = T * k, W = k * n, G = T * n;
  fm.add(MK::Reduction, 2 * (X + W), 2 * (1 + 5));  // forward: X and W
  fm.add(MK::Strided, kCast * (X + W), 2 * 2);
  bm.add(MK::Reduction, 2 * (G + X + W), 3 * (1 + 5));  // backward: dY, X and W
  bm.add(MK::Strided, kCast * (G + X + W), 3 * 2);
  bm.add(MK::Strided, 2 * (W + G + X), 3);  // the transposed copies
  bm.add(MK::Streaming, 3 * 2 * W);         // dW into the gradient buffer
}

// precision=fp8: the fp8 copies that live while one layer linear's backward
// runs (runtime/model/fp8_linear.cpp; Y = X W^T, X: T x k, W: n x k, one byte
// per element): the output gradient's cast (its fp32 scaled temporary, 4 Tn,
// then dY8, Tn), W's cast and transposed copy (4 kn temporary, then 2 kn),
// X's cast and transpose (4 Tk, then 2 Tk), dY8's transpose and the bf16 dW
// (Tn + 2 kn): the largest of those moments over the layer's linears. The fp8
// weights are not cached between GEMMs (Transformer Engine keeps an fp8 copy
// of each weight and its transpose, 2 bytes per weight; this runtime recasts).
double fp8_linear_transient_bytes(const ModelSpec& m, const Strategy& s, int64_t seq) {
  if (s.precision != Precision::FP8) return 0;
  const double T = double(seq) * s.mbs, t = s.tp;
  const double h = double(m.hidden), f = double(m.ffn) / t, q = double(m.q_dim()) / t, kv = double(m.kv_dim()) / t;
  const double up = (m.mlp == MlpKind::SwiGlu ? 2 : 1) * f;
  double worst = 0;
  for (auto [n, k] : {std::pair{q + 2 * kv, h}, {h, q}, {up, h}, {h, f}}) {
    const double Tn = T * n, Tk = T * k, kn = k * n;
    worst = std::max({worst, 5 * Tn, Tn + 5 * kn, Tn + 5 * Tk, 2 * Tn + 2 * Tk + 2 * kn});
  }
  return worst;
}

}  // namespace planner

// precision=fp8's costs beside the GEMMs (costmodel/fp8_costs.hpp).
#include "costmodel/fp8_costs.hpp"

#include <algorithm>
#include <utility>

namespace planner {

// precision=fp8: the memory-bound kernels around one linear layer's FP8 GEMMs
// (Y = X W^T, X: T x k, W: n x k), as runtime/model/fp8_linear.cpp runs them:
// per-tensor dynamic scaling (torchtitan's float8 "tensorwise" recipe;
// Micikevicius et al. 2022). Forward: the amax of X and of W (one reduction
// each, reading 2 bytes per element) and their scaled casts. Backward: dY's
// amax and cast (e5m2), and X's and W's casts again from the forward's amax
// (the bf16 tensors are what is saved, as torchao's Float8Linear does);
// Hopper's FP8 tensor cores take one operand layout ("TN"), so dX = dY W
// takes W's cast transposed and dW = dY^T X takes dY's and X's; _scaled_mm
// cannot accumulate into the gradient buffer, so dW (bf16) is added to it
// (read two, write one: a vectorized stream).
//
// The runtime's kernels (runtime/kernels/fp8_kernels.cu; `fused`): the amax
// is a memset and one kernel that reads the tensor once with 16-byte loads
// and keeps one maximum per block; one cast kernel computes the scale, reads
// 2 bytes and writes 1 per element for each layout it writes (16-byte loads;
// a 64 x 64 tile through shared memory when it transposes). All priced at
// the streaming rate: the amax is a streaming read, not the reduction class
// (norms, column sums: partial sums written and read again). On one H200
// (validation/h200/fp8_fused) the amax kernels ran at 0.84 of the streaming
// rate, the row-major casts at 0.92.
//
// ATen's path (no kernels): each scale is five tiny kernels (comparison,
// reciprocal, multiply, select, and the inverse); the cast is a scale
// multiply into fp32 and a cast to fp8 (2+4 + 4+1 = 11 bytes per element, two
// kernels), and each transposed operand a copy (read and write one byte).
// Kernel classes from the kernels of validation/h100x4/diag23 (llama-3.2-1b,
// one H100): the scale multiply runs on PyTorch's non-vectorized path (a
// bf16 tensor times a one-element fp32 tensor into fp32: BinaryFunctor<float>
// in gpu_kernel_impl), most of the fp8 casts and the transposed copies on the
// non-vectorized float8_copy kernel: all at the strided class's measured rate
// (strided_kernel_relative); the amax a reduction.
void add_fp8_cast_ops(double T, double n, double k, bool fused, MemoryOps& fm, MemoryOps& bm) {
  using MK = MemKernel;
  const double X = T * k, W = k * n, G = T * n;
  if (fused) {
    fm.add(MK::Streaming, 2 * (X + W), 2 * 2);      // amax of X and W: a memset and a read each
    fm.add(MK::Streaming, 3 * (X + W), 2);          // their row-major casts
    bm.add(MK::Streaming, 2 * G, 2);                // amax of dY
    bm.add(MK::Streaming, 4 * G + 3 * (X + W), 3);  // dY both ways, W and X transposed
  } else {
    constexpr double kCast = 11;
    fm.add(MK::Reduction, 2 * (X + W), 2 * (1 + 5));  // forward: X and W
    fm.add(MK::Strided, kCast * (X + W), 2 * 2);
    bm.add(MK::Reduction, 2 * G, 1 + 3 * 5);  // dY's amax; the three scales
    bm.add(MK::Strided, kCast * (G + X + W), 3 * 2);
    bm.add(MK::Strided, 2 * (W + G + X), 3);  // the transposed copies
  }
  bm.add(MK::Streaming, 3 * 2 * W);  // dW into the gradient buffer
}

// precision=fp8: the fp8 copies that live while one layer linear runs
// (runtime/model/fp8_linear.cpp; Y = X W^T, X: T x k, W: n x k, one byte per
// element), the largest moment over the layer's linears. The runtime's
// kernels: the forward GEMM's X8 and W8 (Tk + kn); dX = dY W with dY8 both
// ways and W8 transposed (2 Tn + kn); dW = dY^T X with dY8 transposed, X8
// transposed and the bf16 dW (Tn + Tk + 2 kn). ATen's path adds each cast's
// fp32 scaled temporary (4 bytes per element) beside its fp8 result: X's and
// W's in the forward (5 Tk; Tk + 5 kn), dY's (5 Tn), W's beside dY8 both ways
// (2 Tn + 5 kn), X's beside dY8 transposed (Tn + 5 Tk), and the dW moment. The
// fp8 weights are not cached between GEMMs (Transformer Engine keeps an fp8
// copy of each weight and its transpose, 2 bytes per weight; this runtime
// recasts).
double fp8_linear_transient_bytes(const ModelSpec& m, const Strategy& s, int64_t seq, bool fused) {
  if (s.precision != Precision::FP8) return 0;
  const double T = double(seq) * s.mbs, t = s.tp;
  const double h = double(m.hidden), f = double(m.ffn) / t, q = double(m.q_dim()) / t, kv = double(m.kv_dim()) / t;
  const double up = (m.mlp == MlpKind::SwiGlu ? 2 : 1) * f;
  double worst = 0;
  for (auto [n, k] : {std::pair{q + 2 * kv, h}, {h, q}, {up, h}, {h, f}}) {
    const double Tn = T * n, Tk = T * k, kn = k * n;
    worst = std::max({worst, Tk + kn, 2 * Tn + kn, Tn + Tk + 2 * kn});
    if (!fused) worst = std::max({worst, 5 * Tk, Tk + 5 * kn, 5 * Tn, 2 * Tn + 5 * kn, Tn + 5 * Tk});
  }
  return worst;
}

}  // namespace planner

#pragma once
// Fused operations of the runtime's transformer: each is one autograd function
// whose forward and backward run one CUDA kernel (runtime/kernels/fused_kernels.cu)
// on CUDA tensors when the kernels were built, and the same arithmetic as
// ATen operations otherwise (CPU, double, or a build without nvcc). Either way
// the function saves the same tensors, so the memory a step keeps does not
// depend on the path (costmodel/activations.cpp counts it).
//
// Why: on one H100 (validation/h100/compile) the chains of ATen elementwise
// kernels these replace (strided multiplies of rotate-half, SwiGLU's narrowed
// halves and their zero-filled gradients, the loss's fp32 log-softmax, exp,
// scale and copy) were most of the step's memory-bound time, and the gap to
// torch.compile.
//
// PLANNER_FUSED_KERNELS=0 in the environment runs the ATen path on CUDA too (a
// diagnosis switch: the kernels against their composition in one call).
#include <ATen/ATen.h>

#include <array>
#include <cstdint>

namespace planner::rt {

// Whether this build has the CUDA kernels and the environment lets them run.
bool fused_kernels_enabled();

// PLANNER_FUSED_KERNELS: unset, empty or "1" run the kernels (where built),
// "0" the ATen path; any other value is refused (InputError naming it), as
// planner exec checks before any rank starts.
bool fused_kernels_from_env();

// Whether the kernels run for t: enabled, a CUDA tensor, of a dtype they take
// (fp32, fp16, bf16).
bool kernels_run_on(const at::Tensor& t);

// Gated linear unit: u (..., 2f) = [gate | up] -> act(gate) * up (..., f),
// act = SiLU (SwiGLU) or GELU's tanh form (GeGLU). Saves u only.
at::Tensor glu(const at::Tensor& u, bool gelu);

// Rotary positions (GPT-NeoX rotate-half) applied to a fused projection's
// output qkv (b, s, (nq + 2 nkv) d) with tables cos, sin of (s, 1, d) (or
// (s, d)): returns q (b, s, nq, d) and k (b, s, nkv, d) rotated and v (b, s,
// nkv, d), each contiguous. Saves nothing but the tables; the projection's
// output is free once the three exist.
std::array<at::Tensor, 3> rotary_qkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t nq,
                                     int64_t nkv, int64_t d);

// Rotary positions on one tensor x (b, s, n, d) of any strides (Qwen3's q and
// k after their per-head norms, which sit between the projection and the
// rotation): returns x rotated, contiguous. Saves nothing but the tables.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Qwen3's and Gemma-3's per-head RMS norms of q and k (weights wq, wk of
// head width d) and the rotary positions after them, on a fused projection's
// output qkv (b, s, (nq + 2 nkv) d), tables as rotary_qkv's: returns q (b, s,
// nq, d) and k (b, s, nkv, d), normed and rotated, contiguous, and v (b, s,
// nkv, d), a view of qkv. Saves qkv (v keeps it alive anyway) and the
// weights; the backward recomputes each head's rstd from it. On CUDA one
// kernel each way (qk_norm_rotary_kernels_take), whose backward writes the
// gradient of the whole of qkv (v's copied in) and the weights' gradients.
std::array<at::Tensor, 3> qk_norm_rotary_qkv(const at::Tensor& qkv, const at::Tensor& wq, const at::Tensor& wk,
                                             const at::Tensor& cos, const at::Tensor& sin, int64_t nq, int64_t nkv,
                                             int64_t d, double eps);

// LayerNorm (rms = false; b may be undefined) or RMSNorm (rms = true) over
// the last dimension with weight w, as at::layer_norm / at::rms_norm with eps.
// On CUDA one kernel each way; its backward computes the weight and bias
// gradients in the same pass over the rows as the input gradient.
at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps, bool rms);

// The residual add and the norm after it: returns {a, norm(a)} with a = x + y.
// On CUDA one kernel each way: the backward adds the gradient reaching a
// through the residual path to the norm's input gradient in the same kernel.
std::array<at::Tensor, 2> add_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& w, const at::Tensor& b,
                                   double eps, bool rms);

// g *= num / den in place, num a one-element tensor: on CUDA one kernel that
// reads num on the device (no host sync) and writes nothing when the ratio is
// exactly 1.
void scale_by_ratio_(at::Tensor& g, const at::Tensor& num, double den);

// The cross-entropy kernel for logits (n, V) on CUDA when enabled and built
// (fp32/fp16/bf16, contiguous): fills grad (n, V) with (softmax - onehot) *
// scale / count on labelled rows (0 elsewhere) and returns the sum of the
// labelled rows' losses (fp32 device scalar). Returns an undefined tensor
// when the kernel cannot run; the caller then computes it with ATen.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& count,
                               double scale, at::Tensor& grad);

}  // namespace planner::rt

#pragma once
// FP8 linear layers (precision=fp8): the transformer layers' qkv, attention
// output and MLP GEMMs run on FP8 tensor cores through at::_scaled_mm, with
// per-tensor dynamic scaling, as torchtitan's float8 "tensorwise" recipe
// (torchao Float8Linear) does:
//   amax  = max |x| over the whole tensor (fp32),
//   scale = max_fp8 / amax (1 when amax is 0),
//   x8    = cast(x * scale) (|x * scale| <= max_fp8),    x ~= x8 / scale.
// Forward activations and weights in e4m3 (max 448), output gradients in e5m2
// (max 57344): the "hybrid" format of Micikevicius et al. 2022, "FP8 formats
// for deep learning" (e4m3's precision forward, e5m2's range for gradients),
// which is also Transformer Engine's Format.HYBRID and torchao's default for
// the tensorwise recipe's grad_output. Everything else (embedding, head,
// norms, attention core, master weights, gradients, optimizer states) stays
// as under bf16.
//
// The GEMMs accumulate in fp32 and write bf16 (out_dtype). The bf16 input and
// weight are what the backward keeps (torchao saves the high-precision
// tensors too): the backward casts them again (with the forward's amax, one
// fp32 number each), so the saved activations are those of bf16 training.
// Hopper's FP8 tensor cores take one operand layout, A row-major and B
// column-major, so the backward's GEMMs take transposed casts: dY's both
// ways, W's and X's transposed only (costmodel/fp8_costs.cpp prices the
// kernels and holds the copies).
//
// Tensor parallelism (Megatron-LM's column- and row-parallel layers, with and
// without sequence parallelism): a per-tensor scale must be the one the whole
// tensor would get in one process, so every amax of a tensor that is split
// over the tp ranks is the maximum over the tp group (an all-reduce MAX of the
// scalars, as Transformer Engine reduces its amaxes over the tp group): then
// every element is cast exactly as in one process. Forward: one all-reduce of
// the two amaxes [X, W] per linear (W is always split; X is split for a
// row-parallel layer, replicated or, under sp, gathered for a column-parallel
// one, where reducing it changes nothing). Backward: one all-reduce of dY's
// amax for a column-parallel layer (its output columns are split); a
// row-parallel layer's dY is the same on every rank (reduce_from_tp's
// backward is the identity; under sp scatter_seq's is an all-gather), so its
// amax is not reduced. Under sp the column-parallel layer all-gathers its
// sequence shard inside the function, casts the gathered input (whose amax is
// already the whole tensor's), keeps only the shard, gathers it again in the
// backward for dW and reduce-scatters dX, as the bf16 LinearAccum does.
//
// at::_scaled_mm: CUDA at compute capability 8.9 or later, every dimension a
// multiple of 16, and the CPU where the LibTorch build has the kernel (the
// 2.13 CPU build this project's CI uses does; fp8_gemm_available tries it);
// its signature is the same from torch 2.4 through 2.11 and 2.13.
#include <ATen/ATen.h>

#include <set>

namespace planner::rt {

class Communicator;  // runtime/comm/communicator.hpp
class TransformerModel;

// The largest finite magnitudes of the two formats (Micikevicius et al. 2022, Table 1).
constexpr double kE4m3Max = 448.0;
constexpr double kE5m2Max = 57344.0;

struct Fp8Tensor {
  at::Tensor data;       // float8 (e4m3fn or e5m2), the shape of the input
  at::Tensor scale_inv;  // fp32, one element: 1 / scale (what at::_scaled_mm multiplies by)
};

// max |x| as a one-element fp32 tensor on x's device.
at::Tensor fp8_amax(const at::Tensor& x);
// max_fp8 / amax as a one-element fp32 tensor (1 where amax is 0).
at::Tensor fp8_scale_from_amax(const at::Tensor& amax, at::ScalarType fp8);
// max_fp8 / max|x| as a one-element fp32 tensor on x's device (1 where x is all zero).
at::Tensor fp8_scale(const at::Tensor& x, at::ScalarType fp8);
struct Fp8Casts {
  Fp8Tensor row;  // the cast, rows x cols (undefined data unless asked)
  Fp8Tensor t;    // its transpose, cols x rows, contiguous (undefined unless asked)
};
// The scaled cast of the matrix x2 (rows x cols) to `fp8` with the scale of
// `amax` (fp8_amax of x2, or of the same values earlier), row-major and/or
// transposed. On CUDA with the runtime's kernels (runtime/kernels/fp8_kernels.cu,
// PLANNER_FUSED_KERNELS) one kernel writes both; otherwise ATen's scale
// multiply, cast and transposing copy. The same bytes either way.
Fp8Casts cast_fp8(const at::Tensor& x2, const at::Tensor& amax, at::ScalarType fp8, bool row, bool transposed);
// The scaled cast of x (any floating dtype) to `fp8` (Float8_e4m3fn or Float8_e5m2).
Fp8Tensor quantize_fp8(const at::Tensor& x, at::ScalarType fp8);
// data * scale_inv in `out` (the inverse of quantize_fp8, up to its rounding).
at::Tensor dequantize_fp8(const Fp8Tensor& q, at::ScalarType out);
// a (m x k, row-major) times b (k x n, column-major: the transpose of a
// contiguous n x k tensor), both fp8, into `out` (bf16): at::_scaled_mm.
// bias (empty: none) is added in the GEMM's epilogue, in `out`.
at::Tensor fp8_mm(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out, const at::Tensor& bias = {});
// Where one FP8 linear sits in the tensor-parallel layout (see above).
struct Fp8Tp {
  Communicator* tp = nullptr;   // the tp group whose amaxes are reduced; null: one process (tp = 1)
  bool row = false;             // row-parallel (x: this rank's input columns); else column-parallel
  bool gather_seq = false;      // column-parallel under sp: x is this rank's sequence shard (b, s/tp, in)
  bool bias_in_forward = true;  // false on tp ranks > 0 of a row-parallel layer (the sum carries it once);
                                // the bias's gradient accumulates on every rank either way
};
// y = x w^T + b (b empty: none) with its GEMMs in FP8, forward and backward
// (the autograd function the hook below calls). x (.., in), w (out, in).
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const Fp8Tp& tp = {});
// Whether at::_scaled_mm runs on `device`: a 16 x 16 FP8 GEMM tried once per
// device (CUDA needs compute capability 8.9 or later; a CPU kernel exists in
// some LibTorch builds, 2.13's CPU build among them, not in others).
bool fp8_gemm_available(const at::Device& device);

// Routes the layers' linear layers (qkv, o, fc1, fc2 of every layer; not the
// embedding's projection, the head or the MLM transform) through the FP8
// autograd function, by the model's linear_hook (the hook LoRA uses as well:
// the two are not combined, check_compat refuses fp8 with a frozen base).
// Under tensor parallelism (`tp`: the model's tp group, needed when the
// model's tp_size() > 1) qkv and fc1 are column-parallel, o and fc2
// row-parallel, with or without sp (Fp8Tp above). The weight and bias
// gradients accumulate into the parameters' gradient buffers as the bf16
// linear does (runtime/model/transformer.cpp, LinearAccum).
class Fp8Linears {
 public:
  explicit Fp8Linears(TransformerModel& model, Communicator* tp = nullptr);
  ~Fp8Linears();
  Fp8Linears(const Fp8Linears&) = delete;
  Fp8Linears& operator=(const Fp8Linears&) = delete;

 private:
  TransformerModel& model_;
  Communicator* tp_ = nullptr;  // null without tp
  std::set<int> weights_;       // the layer matrices' parameter ids
  std::set<int> rows_;          // of those, the row-parallel ones (o, fc2)
};

}  // namespace planner::rt

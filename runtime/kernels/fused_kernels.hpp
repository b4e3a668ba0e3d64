#pragma once
// The runtime's own CUDA kernels (runtime/kernels/fused_kernels.cu), built with
// nvcc where CMake finds a CUDA compiler beside a CUDA LibTorch
// (PLANNER_FUSED_CUDA=1); runtime/model/fused_ops.cpp calls them for CUDA
// tensors and otherwise runs the same functions as ATen operations. Plain C++:
// pointers, sizes and the stream, no torch types (nvcc never parses LibTorch's
// headers). Every kernel computes in fp32 and rounds its outputs once.
//
// Layouts: every pointer is a contiguous row-major array; `rows` counts tokens.

#include <cstdint>

namespace planner::rt::fused {

enum class Dtype { F32, F16, BF16 };

// SwiGLU / GeGLU: u is (rows, 2f) = [gate | up]; a = act(gate) * up (rows, f),
// act = SiLU, or GELU's tanh form when gelu. Backward: du = [da * up * act'(gate) |
// da * act(gate)].
void glu_forward(Dtype t, const void* u, void* a, int64_t rows, int64_t f, bool gelu, void* stream);
void glu_backward(Dtype t, const void* u, const void* da, void* du, int64_t rows, int64_t f, bool gelu, void* stream);

// Rotary positions (GPT-NeoX rotate-half) on a fused projection's output:
// qkv is (rows, (nq + 2 nkv) d) = [q heads | k heads | v heads]; cos and sin
// are (s, d) tables and row r is at position r mod s. Writes q (rows, nq d)
// and k (rows, nkv d) rotated, v (rows, nkv d) copied. Backward: the inverse
// rotation of dq and dk and the copy of dv, into dqkv (rows, (nq + 2 nkv) d).
void rotary_forward(Dtype t, const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v,
                    int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, void* stream);
void rotary_backward(Dtype t, const void* dq, const void* dk, const void* dv, const void* cos, const void* sin,
                     void* dqkv, int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, void* stream);

// Cross-entropy over logits (rows, V), one pass for the row's maximum and sum
// of exponentials and one for the gradient: row_loss[r] = logsumexp(z_r) -
// z_r[label_r] and grad_r = (softmax(z_r) - onehot(label_r)) * scale / *count,
// both zero where label_r == -100. count is a device float (the labelled
// rows, at least 1).
void cross_entropy_forward(Dtype t, const void* logits, const int64_t* labels, const float* count, double scale,
                           void* grad, float* row_loss, int64_t rows, int64_t V, void* stream);

// LayerNorm (rms = false: (a - mean) rstd w + b) or RMSNorm (rms = true:
// a rstd w) over rows of width h, with an optional residual before it: when
// y is given, a = x + y (rounded to the dtype) is written to sum and
// normalised, else a = x (sum unused). b may be null. Writes out, and per row
// the fp32 rstd and (LayerNorm) mean for the backward. norm_supported says
// whether a row of h elements fits the kernels: up to 8192 elements one at a
// time, and, when every pointer is 16-byte aligned and h a multiple of 16
// bytes, up to 8192 16-byte vectors.
bool norm_supported(Dtype t, int64_t h, bool aligned);
void norm_forward(Dtype t, const void* x, const void* y, const void* w, const void* b, void* sum, void* out,
                  float* mean, float* rstd, int64_t rows, int64_t h, double eps, bool rms, void* stream);

// The norm's backward from the output gradient dn and the saved a, w, mean,
// rstd: da = the input gradient, plus dres (the gradient reaching a through the
// residual path) when given. The weight and bias gradients dw and db (h each,
// in the dtype t; db may be null) are summed in two steps through dw_part and
// db_part, fp32 scratch of parts x h, parts = norm_backward_parts(rows).
int norm_backward_parts(int64_t rows);
void norm_backward(Dtype t, const void* dn, const void* a, const void* w, const float* mean, const float* rstd,
                   const void* dres, void* da, float* dw_part, float* db_part, void* dw, void* db, int parts,
                   int64_t rows, int64_t h, bool rms, void* stream);

// Qwen3's and Gemma-3's per-head RMS norms of q and k, then rotary positions
// (runtime/kernels/qk_norm_kernels.cu). qkv is (rows, (nq + 2 nkv) d) = [q
// heads | k heads | v heads]; wq and wk the norms' weights (d each); cos and
// sin (s, d) tables, row r at position r mod s. Forward writes q (rows, nq d)
// and k (rows, nkv d): rotary(x rstd w) per head. Backward, from dq, dk and dv
// (contiguous, as q, k and v), writes dqkv (rows, (nq + 2 nkv) d) and adds the
// weights' gradients into dw (fp32, 2 d: q's then k's; zeroed here first).
// qk_norm_rotary_supported says whether a head of d elements fits: d / 16
// bytes a power of two up to 32; every pointer 16-byte aligned.
bool qk_norm_rotary_supported(Dtype t, int64_t d);
void qk_norm_rotary_forward(Dtype t, const void* qkv, const void* wq, const void* wk, const void* cos, const void* sin,
                            void* q, void* k, int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, double eps,
                            void* stream);
void qk_norm_rotary_backward(Dtype t, const void* dq, const void* dk, const void* dv, const void* qkv, const void* wq,
                             const void* wk, const void* cos, const void* sin, void* dqkv, float* dw, int64_t rows,
                             int64_t s, int64_t nq, int64_t nkv, int64_t d, double eps, void* stream);

// x (n elements) *= *num / den in place, where num is a device float; nothing
// is written when the ratio is exactly 1 (the cross-entropy's backward, whose
// kept gradient is pre-multiplied by the factor the backward brings).
void scale_by_ratio(Dtype t, void* x, int64_t n, const float* num, double den, void* stream);

// ---- FP8 per-tensor scaling (runtime/kernels/fp8_kernels.cu) -----------------
// The casts around an FP8 GEMM (runtime/model/fp8_linear.hpp), in two kernels
// instead of ATen's six: fp8_amax reads x once; fp8_cast reads it again and
// writes one byte per element, row-major, transposed, or both in one pass.

// *amax = max |x| over n elements (fp32; NaN when x holds one), overwritten.
void fp8_amax(Dtype t, const void* x, int64_t n, float* amax, void* stream);

// The scaled cast of x (rows x cols, row-major) with scale = fmax / *amax as
// (1 / amax) * fmax in fp32, or 1 when amax is not > 0 (ATen's arithmetic in
// fp8_linear.cpp, so both give the same bytes): q = fp8(float(x) * scale),
// rounded to nearest even and saturated at fmax (e5m2: fmax 57344, else
// e4m3 448). Writes q into out (rows x cols) and/or its transpose into out_t
// (cols x rows); either may be null. *scale_inv = 1 / scale. The transposed
// form takes fp16/bf16 with rows and cols multiples of 8 and x 16-byte
// aligned (fp8_cast_supported).
bool fp8_cast_supported(Dtype t, const void* x, int64_t rows, int64_t cols);
void fp8_cast(Dtype t, const void* x, int64_t rows, int64_t cols, const float* amax, bool e5m2, void* out, void* out_t,
              float* scale_inv, void* stream);

// ---- QLoRA's NF4 dequantisation (runtime/kernels/nf4_kernels.cu) ------------
// runtime/model/lora.hpp's Nf4Tensor to `t` in one kernel: out[i] =
// levels[code_i] * absmax[i / 64] with absmax[b] = float(absmax_codes[b]) *
// absmax_scale[b / 256] + mean, each product and the sum rounded in fp32 as
// ATen's path rounds them (no fused multiply-add), the result once into t.
// codes: ceil(n / 2) bytes, weight 2i in the low nibble; absmax_codes:
// float8_e4m3fn bytes; levels: the 16 NF4 levels (host memory).
void nf4_dequantize(Dtype t, const uint8_t* codes, const uint8_t* absmax_codes, const float* absmax_scale, float mean,
                    const float* levels, void* out, int64_t n, void* stream);

}  // namespace planner::rt::fused

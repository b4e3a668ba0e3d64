#include "runtime/model/fused_ops.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

#include "runtime/model/kernel_dispatch.hpp"

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool kernels_run_on(const at::Tensor& t) {
#if PLANNER_FUSED_CUDA
  return fused_kernels_enabled() && t.is_cuda() && kernel_dtype(t).has_value();
#else
  (void)t;
  return false;
#endif
}

namespace {

at::Tensor act(const at::Tensor& g, bool gelu) { return gelu ? at::gelu(g, "tanh") : at::silu(g); }

struct GluFn : torch::autograd::Function<GluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& u_in, bool gelu) {
    at::Tensor u = u_in.contiguous();
    const int64_t f = u.size(-1) / 2;
    ctx->save_for_backward({u});
    ctx->saved_data["gelu"] = gelu;
    auto shape = u.sizes().vec();
    shape.back() = f;
    if (kernels_run_on(u)) {
#if PLANNER_FUSED_CUDA
      at::Tensor a = at::empty(shape, u.options());
      fused::glu_forward(*kernel_dtype(u), u.data_ptr(), a.data_ptr(), u.numel() / (2 * f), f, gelu, stream_of(u));
      return a;
#endif
    }
    return act(u.narrow(-1, 0, f), gelu) * u.narrow(-1, f, f);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor u = ctx->get_saved_variables()[0];
    const bool gelu = ctx->saved_data["gelu"].toBool();
    const int64_t f = u.size(-1) / 2;
    at::Tensor da = grads[0].contiguous();
    if (kernels_run_on(u)) {
#if PLANNER_FUSED_CUDA
      at::Tensor du = at::empty_like(u);
      fused::glu_backward(*kernel_dtype(u), u.data_ptr(), da.data_ptr(), du.data_ptr(), u.numel() / (2 * f), f, gelu,
                          stream_of(u));
      return {du, at::Tensor()};
#endif
    }
    const at::Tensor g = u.narrow(-1, 0, f), up = u.narrow(-1, f, f);
    at::Tensor dg = gelu ? at::gelu_backward(da * up, g, "tanh") : at::silu_backward(da * up, g);
    return {at::cat({dg, da * act(g, gelu)}, -1), at::Tensor()};
  }
};

// rotate_half(x) = [-x2, x1] over the last dimension.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({x.narrow(-1, h, h).neg(), x.narrow(-1, 0, h)}, -1);
}

// Tables as (s, d), contiguous.
at::Tensor table(const at::Tensor& t, int64_t d) { return t.reshape({-1, d}).contiguous(); }

// The ATen path on x (b, s, n, d) with (S, d) tables: y = x cos + rotate_half(x) sin,
// and its transpose dx = dy cos - rotate_half(dy sin).
at::Tensor rotate(const at::Tensor& x, const at::Tensor& c, const at::Tensor& sn) {
  const int64_t s = x.size(1);
  return (x * c.narrow(0, 0, s).unsqueeze(1) + rotate_half(x) * sn.narrow(0, 0, s).unsqueeze(1)).contiguous();
}
at::Tensor unrotate(const at::Tensor& g, const at::Tensor& c, const at::Tensor& sn) {
  const int64_t s = g.size(1);
  return g * c.narrow(0, 0, s).unsqueeze(1) - rotate_half(g * sn.narrow(0, 0, s).unsqueeze(1));
}

struct RotaryQkvFn : torch::autograd::Function<RotaryQkvFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& qkv_in, const at::Tensor& cos_in,
                             const at::Tensor& sin_in, int64_t nq, int64_t nkv, int64_t d) {
    at::Tensor qkv = qkv_in.contiguous();
    const int64_t b = qkv.size(0), s = qkv.size(1);
    const at::Tensor c = table(cos_in, d), sn = table(sin_in, d);
    ctx->saved_data["cos"] = c;
    ctx->saved_data["sin"] = sn;
    ctx->saved_data["dims"] = std::vector<int64_t>{nq, nkv, d};
    if (kernels_run_on(qkv) && c.scalar_type() == qkv.scalar_type()) {
#if PLANNER_FUSED_CUDA
      at::Tensor q = at::empty({b, s, nq, d}, qkv.options()), k = at::empty({b, s, nkv, d}, qkv.options()),
                 v = at::empty({b, s, nkv, d}, qkv.options());
      fused::rotary_forward(*kernel_dtype(qkv), qkv.data_ptr(), c.data_ptr(), sn.data_ptr(), q.data_ptr(),
                            k.data_ptr(), v.data_ptr(), b * s, c.size(0), nq, nkv, d, stream_of(qkv));
      return {q, k, v};
#endif
    }
    auto parts = qkv.split_with_sizes({nq * d, nkv * d, nkv * d}, -1);
    return {rotate(parts[0].view({b, s, nq, d}), c, sn), rotate(parts[1].view({b, s, nkv, d}), c, sn),
            parts[2].reshape({b, s, nkv, d}).contiguous()};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor c = ctx->saved_data["cos"].toTensor(), sn = ctx->saved_data["sin"].toTensor();
    const auto dims = ctx->saved_data["dims"].toIntVector();
    const int64_t nq = dims[0], nkv = dims[1], d = dims[2];
    at::Tensor dq = grads[0].contiguous(), dk = grads[1].contiguous(), dv = grads[2].contiguous();
    const int64_t b = dq.size(0), s = dq.size(1);
    if (kernels_run_on(dq) && c.scalar_type() == dq.scalar_type()) {
#if PLANNER_FUSED_CUDA
      at::Tensor dqkv = at::empty({b, s, (nq + 2 * nkv) * d}, dq.options());
      fused::rotary_backward(*kernel_dtype(dq), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), c.data_ptr(),
                             sn.data_ptr(), dqkv.data_ptr(), b * s, c.size(0), nq, nkv, d, stream_of(dq));
      return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
#endif
    }
    at::Tensor dqkv = at::cat({unrotate(dq, c, sn).reshape({b, s, -1}), unrotate(dk, c, sn).reshape({b, s, -1}),
                               dv.reshape({b, s, -1})}, -1);
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct RotaryFn : torch::autograd::Function<RotaryFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    at::Tensor x = x_in.contiguous();
    const at::Tensor c = table(cos_in, x.size(3)), sn = table(sin_in, x.size(3));
    ctx->saved_data["cos"] = c;
    ctx->saved_data["sin"] = sn;
    if (kernels_run_on(x) && c.scalar_type() == x.scalar_type()) {
#if PLANNER_FUSED_CUDA
      at::Tensor y = at::empty_like(x);
      // The qkv kernel with no k or v heads: x's heads are all "q".
      fused::rotary_forward(*kernel_dtype(x), x.data_ptr(), c.data_ptr(), sn.data_ptr(), y.data_ptr(), nullptr,
                            nullptr, x.size(0) * x.size(1), c.size(0), x.size(2), 0, x.size(3), stream_of(x));
      return y;
#endif
    }
    return rotate(x, c, sn);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor c = ctx->saved_data["cos"].toTensor(), sn = ctx->saved_data["sin"].toTensor();
    at::Tensor g = grads[0].contiguous();
    if (kernels_run_on(g) && c.scalar_type() == g.scalar_type()) {
#if PLANNER_FUSED_CUDA
      at::Tensor dx = at::empty_like(g);
      fused::rotary_backward(*kernel_dtype(g), g.data_ptr(), nullptr, nullptr, c.data_ptr(), sn.data_ptr(),
                             dx.data_ptr(), g.size(0) * g.size(1), c.size(0), g.size(2), 0, g.size(3), stream_of(g));
      return {dx, at::Tensor(), at::Tensor()};
#endif
    }
    return {unrotate(g, c, sn), at::Tensor(), at::Tensor()};
  }
};

#if PLANNER_FUSED_CUDA
bool aligned16(const at::Tensor& t) { return !t.defined() || (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0; }
#endif
// t, or a 16-byte-aligned copy of it when it is not aligned (the kernels' vector loads).
at::Tensor aligned_copy(const at::Tensor& t) {
#if PLANNER_FUSED_CUDA
  return aligned16(t) ? t : t.clone();
#else
  return t;
#endif
}
#if PLANNER_FUSED_CUDA

// LayerNorm / RMSNorm over the last dimension, with an optional residual add
// before it (y defined): returns {x + y, norm(x + y)}, or {norm(x)}. Saves the
// norm's input, the weight and the per-row fp32 mean and rstd, as ATen's
// layer_norm and rms_norm do. Its backward adds the gradient that reaches x + y
// through the residual path (the first output's) inside the kernel, and sums
// the weight and bias gradients from per-block partial sums (one pass over the
// rows instead of ATen's second kernel reading them again).
struct NormFn : torch::autograd::Function<NormFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& x_in, const std::optional<at::Tensor>& y_in,
                             const at::Tensor& w_in, const std::optional<at::Tensor>& b_in, double eps, bool rms) {
    const at::Tensor x = x_in.contiguous();
    const bool has_y = y_in.has_value() && y_in->defined(), has_b = b_in.has_value() && b_in->defined();
    const at::Tensor y = has_y ? y_in->contiguous() : at::Tensor();
    // The weight and bias may be views into a flat parameter buffer at any
    // offset: an aligned copy of h elements lets the kernel read 16 bytes at a time.
    const at::Tensor w = aligned_copy(w_in);
    const at::Tensor b = has_b ? aligned_copy(*b_in) : at::Tensor();
    const int64_t h = x.size(-1), rows = x.numel() / h;
    at::Tensor a = has_y ? at::empty_like(x) : x;
    at::Tensor out = at::empty_like(x);
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor mean = at::empty({rms ? 0 : rows}, f32), rstd = at::empty({rows}, f32);
    fused::norm_forward(*kernel_dtype(x), x.data_ptr(), has_y ? y.data_ptr() : nullptr, w.data_ptr(),
                        has_b ? b.data_ptr() : nullptr, has_y ? a.data_ptr() : nullptr, out.data_ptr(),
                        rms ? nullptr : mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, h, eps, rms,
                        stream_of(x));
    ctx->save_for_backward({a, w, mean, rstd});
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["has_y"] = has_y;
    ctx->saved_data["has_b"] = has_b;
    if (has_y) return {a, out};
    return {out};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor a = saved[0], w = saved[1], mean = saved[2], rstd = saved[3];
    const bool rms = ctx->saved_data["rms"].toBool(), has_y = ctx->saved_data["has_y"].toBool(),
               has_b = ctx->saved_data["has_b"].toBool();
    // Outputs {a, out} with a residual, {out} without: the last gradient is the norm's.
    at::Tensor dn = grads.back().defined() ? grads.back().contiguous() : at::zeros_like(a);
    at::Tensor dres = has_y && grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    const int64_t h = a.size(-1), rows = a.numel() / h;
    dn = aligned_copy(dn), dres = aligned_copy(dres);
    at::Tensor da = at::empty_like(a);
    const int parts = fused::norm_backward_parts(rows);
    const auto f32 = a.options().dtype(at::kFloat);
    at::Tensor dw_part = at::empty({parts, h}, f32);
    at::Tensor db_part = has_b ? at::empty({parts, h}, f32) : at::Tensor();
    at::Tensor dw = at::empty({h}, w.options()), db = has_b ? at::empty({h}, w.options()) : at::Tensor();
    fused::norm_backward(*kernel_dtype(a), dn.data_ptr(), a.data_ptr(), w.data_ptr(),
                         rms ? nullptr : mean.data_ptr<float>(), rstd.data_ptr<float>(),
                         dres.defined() ? dres.data_ptr() : nullptr, da.data_ptr(), dw_part.data_ptr<float>(),
                         has_b ? db_part.data_ptr<float>() : nullptr, dw.data_ptr(), has_b ? db.data_ptr() : nullptr,
                         parts, rows, h, rms, stream_of(a));
    return {da, has_y ? da : at::Tensor(), dw, db, at::Tensor(), at::Tensor()};
  }
};

// The norm kernels take these tensors: CUDA, one of their dtypes, the weight
// (and bias) of the input's dtype and width, rows the kernels fit.
bool norm_kernels_take(const at::Tensor& x, const at::Tensor& y, const at::Tensor& w, const at::Tensor& b) {
  if (!kernels_run_on(x) || x.dim() < 1 || !w.defined() || w.dim() != 1) return false;
  const int64_t h = x.size(-1);
  auto same = [&](const at::Tensor& t, bool whole) {
    return !t.defined() || (t.scalar_type() == x.scalar_type() && t.device() == x.device() &&
                            (whole ? t.sizes() == x.sizes() : (t.dim() == 1 && t.size(0) == h)));
  };
  if (!same(y, true) || !same(w, false) || !same(b, false)) return false;
  const bool aligned = aligned16(x) && aligned16(y);  // the weight and bias are copied when not
  return fused::norm_supported(*kernel_dtype(x), h, aligned && x.is_contiguous() && (!y.defined() || y.is_contiguous()));
}
#endif

// The per-head RMS norm's and rotation's backward for one of q, k as ATen
// operations, in fp32 for 16-bit tensors (as the kernel computes): x (b, s, n,
// d) the norm's input, dy the rotated output's gradient. Returns dx; dw gets
// the weight's gradient, sum over rows of dn xhat.
at::Tensor qk_backward_aten(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& dy_in,
                            const at::Tensor& c, const at::Tensor& sn, double eps, at::Tensor& dw) {
  const auto op = x_in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor x = x_in.to(op), w = w_in.to(op), dn = unrotate(dy_in.to(op), c.to(op), sn.to(op));
  const at::Tensor rstd = (x * x).mean(-1, true).add(eps).rsqrt(), xh = x * rstd, g = dn * w;
  dw = (dn * xh).reshape({-1, x.size(-1)}).sum(0).to(w_in.scalar_type());
  return (rstd * (g - xh * (g * xh).mean(-1, true))).to(x_in.scalar_type());
}

// Qwen3's and Gemma-3's q/k norms and rotation on the projection's output
// (fused_ops.hpp qk_norm_rotary_qkv). v is returned as a view of qkv, which
// the function saves: a custom function's view output, its gradient arriving
// in this backward.
struct QkNormRotaryFn : torch::autograd::Function<QkNormRotaryFn> {
  static bool kernels_take(const at::Tensor& qkv, const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& c,
                           int64_t d) {
#if PLANNER_FUSED_CUDA
    auto same = [&](const at::Tensor& t) { return t.scalar_type() == qkv.scalar_type() && t.device() == qkv.device(); };
    return kernels_run_on(qkv) && same(wq) && same(wk) && same(c) && aligned16(qkv) &&
           fused::qk_norm_rotary_supported(*kernel_dtype(qkv), d);
#else
    (void)qkv, (void)wq, (void)wk, (void)c, (void)d;
    return false;
#endif
  }
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& qkv_in, const at::Tensor& wq_in,
                             const at::Tensor& wk_in, const at::Tensor& cos_in, const at::Tensor& sin_in, int64_t nq,
                             int64_t nkv, int64_t d, double eps) {
    const at::Tensor qkv = qkv_in.contiguous();
    const int64_t b = qkv.size(0), s = qkv.size(1);
    const at::Tensor c = table(cos_in, d), sn = table(sin_in, d);
    const bool kern = kernels_take(qkv, wq_in, wk_in, c, d);
    // The weights may sit at any offset of a flat buffer: 16-byte aligned copies for the kernel.
    const at::Tensor wq = kern ? aligned_copy(wq_in) : wq_in, wk = kern ? aligned_copy(wk_in) : wk_in;
    ctx->save_for_backward({qkv, wq, wk});
    ctx->saved_data["cos"] = c;
    ctx->saved_data["sin"] = sn;
    ctx->saved_data["dims"] = std::vector<int64_t>{nq, nkv, d};
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["kern"] = kern;
    at::Tensor v = qkv.narrow(-1, (nq + nkv) * d, nkv * d).view({b, s, nkv, d});
    if (kern) {
#if PLANNER_FUSED_CUDA
      at::Tensor q = at::empty({b, s, nq, d}, qkv.options()), k = at::empty({b, s, nkv, d}, qkv.options());
      fused::qk_norm_rotary_forward(*kernel_dtype(qkv), qkv.data_ptr(), wq.data_ptr(), wk.data_ptr(), c.data_ptr(),
                                    sn.data_ptr(), q.data_ptr(), k.data_ptr(), b * s, c.size(0), nq, nkv, d, eps,
                                    stream_of(qkv));
      return {q, k, v};
#endif
    }
    auto parts = qkv.split_with_sizes({nq * d, nkv * d, nkv * d}, -1);
    return {rotate(at::rms_norm(parts[0].view({b, s, nq, d}), {d}, wq, eps), c, sn),
            rotate(at::rms_norm(parts[1].view({b, s, nkv, d}), {d}, wk, eps), c, sn), v};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor qkv = saved[0], wq = saved[1], wk = saved[2];
    const at::Tensor c = ctx->saved_data["cos"].toTensor(), sn = ctx->saved_data["sin"].toTensor();
    const auto dims = ctx->saved_data["dims"].toIntVector();
    const int64_t nq = dims[0], nkv = dims[1], d = dims[2], b = qkv.size(0), s = qkv.size(1);
    const double eps = ctx->saved_data["eps"].toDouble();
    auto grad = [&](size_t i, int64_t n) {
      return grads[i].defined() ? grads[i].contiguous() : at::zeros({b, s, n, d}, qkv.options());
    };
    at::Tensor dq = grad(0, nq), dk = grad(1, nkv), dv = grad(2, nkv);
    if (ctx->saved_data["kern"].toBool()) {
#if PLANNER_FUSED_CUDA
      dq = aligned_copy(dq), dk = aligned_copy(dk), dv = aligned_copy(dv);
      at::Tensor dqkv = at::empty_like(qkv), dw = at::empty({2 * d}, qkv.options().dtype(at::kFloat));
      fused::qk_norm_rotary_backward(*kernel_dtype(qkv), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), qkv.data_ptr(),
                                     wq.data_ptr(), wk.data_ptr(), c.data_ptr(), sn.data_ptr(), dqkv.data_ptr(),
                                     dw.data_ptr<float>(), b * s, c.size(0), nq, nkv, d, eps, stream_of(qkv));
      const at::Tensor dw16 = dw.to(wq.scalar_type());
      return {dqkv, dw16.narrow(0, 0, d), dw16.narrow(0, d, d), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
              at::Tensor(), at::Tensor()};
#endif
    }
    auto parts = qkv.split_with_sizes({nq * d, nkv * d, nkv * d}, -1);
    at::Tensor dwq, dwk;
    const at::Tensor dxq = qk_backward_aten(parts[0].view({b, s, nq, d}), wq, dq, c, sn, eps, dwq);
    const at::Tensor dxk = qk_backward_aten(parts[1].view({b, s, nkv, d}), wk, dk, c, sn, eps, dwk);
    at::Tensor dqkv = at::cat({dxq.reshape({b, s, -1}), dxk.reshape({b, s, -1}), dv.reshape({b, s, -1})}, -1);
    return {dqkv, dwq, dwk, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor aten_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps, bool rms) {
  const int64_t h = x.size(-1);
  if (rms) return at::rms_norm(x, {h}, w, eps);
  return at::layer_norm(x, {h}, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt, eps);
}

}  // namespace

bool fused_kernels_from_env() {
  const char* e = std::getenv("PLANNER_FUSED_KERNELS");
  if (!e || !*e || std::strcmp(e, "1") == 0) return true;
  if (std::strcmp(e, "0") == 0) return false;
  throw InputError("PLANNER_FUSED_KERNELS='" + clip(e) +
                   "' is not an accepted value: '0' (the ATen operations), or '1', unset or empty (the fused kernels "
                   "where built)");
}

bool fused_kernels_enabled() {
#if PLANNER_FUSED_CUDA
  static const bool on = fused_kernels_from_env();
  return on;
#else
  return false;
#endif
}

at::Tensor glu(const at::Tensor& u, bool gelu) { return GluFn::apply(u, gelu); }

std::array<at::Tensor, 3> rotary_qkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t nq,
                                     int64_t nkv, int64_t d) {
  auto out = RotaryQkvFn::apply(qkv, cos, sin, nq, nkv, d);
  return {out[0], out[1], out[2]};
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFn::apply(x, cos, sin);
}

std::array<at::Tensor, 3> qk_norm_rotary_qkv(const at::Tensor& qkv, const at::Tensor& wq, const at::Tensor& wk,
                                             const at::Tensor& cos, const at::Tensor& sin, int64_t nq, int64_t nkv,
                                             int64_t d, double eps) {
  auto out = QkNormRotaryFn::apply(qkv, wq, wk, cos, sin, nq, nkv, d, eps);
  return {out[0], out[1], out[2]};
}

at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps, bool rms) {
#if PLANNER_FUSED_CUDA
  if (norm_kernels_take(x, at::Tensor(), w, b))
    return NormFn::apply(x, std::optional<at::Tensor>(), w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt,
                         eps, rms)[0];
#endif
  return aten_norm(x, w, b, eps, rms);
}

std::array<at::Tensor, 2> add_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& w, const at::Tensor& b,
                                   double eps, bool rms) {
#if PLANNER_FUSED_CUDA
  if (norm_kernels_take(x, y, w, b)) {
    auto out = NormFn::apply(x, std::optional<at::Tensor>(y), w,
                             b.defined() ? std::optional<at::Tensor>(b) : std::nullopt, eps, rms);
    return {out[0], out[1]};
  }
#endif
  at::Tensor a = x + y;
  return {a, aten_norm(a, w, b, eps, rms)};
}

void scale_by_ratio_(at::Tensor& g, const at::Tensor& num, double den) {
#if PLANNER_FUSED_CUDA
  if (kernels_run_on(g) && g.is_contiguous() && num.is_cuda() && num.numel() == 1) {
    const at::Tensor n = num.to(at::kFloat).contiguous();
    fused::scale_by_ratio(*kernel_dtype(g), g.data_ptr(), g.numel(), n.data_ptr<float>(), den, stream_of(g));
    return;
  }
#endif
  g.mul_((num / den).to(g.scalar_type()));
}

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& count,
                               double scale, at::Tensor& grad) {
  if (!kernels_run_on(logits) || !logits.is_contiguous() || logits.dim() != 2) return {};
#if PLANNER_FUSED_CUDA
  const int64_t n = logits.size(0), V = logits.size(1);
  at::Tensor lab = labels.to(at::kLong).contiguous();
  at::Tensor cnt = count.to(at::kFloat).contiguous();
  at::Tensor row_loss = at::empty({n}, logits.options().dtype(at::kFloat));
  fused::cross_entropy_forward(*kernel_dtype(logits), logits.data_ptr(), lab.data_ptr<int64_t>(),
                               cnt.data_ptr<float>(), scale, grad.data_ptr(), row_loss.data_ptr<float>(), n, V,
                               stream_of(logits));
  return row_loss.sum();
#else
  (void)labels, (void)count, (void)scale, (void)grad;
  return {};
#endif
}

}  // namespace planner::rt

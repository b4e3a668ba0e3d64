// The fused operations (runtime/model/fused_ops.hpp) against the plain ATen
// formulas they replace, differentiated by autograd: on the CPU in double (the
// ATen path of each function, with its own hand-written backward), and on a
// GPU, when there is one, the CUDA kernels in fp32 and bf16 (run on the device:
// validation/suites/h100x1_compile2.json).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>

#include "catch.hpp"
#include "runtime/model/fused_ops.hpp"

using namespace planner::rt;

namespace {

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble).cpu(), y = b.to(at::kDouble).cpu();
  return ((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item<double>();
}

at::Tensor rotate_half_ref(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

// Rotary tables as the runtime builds them (TransformerModel::prepare), (s, 1, d).
std::pair<at::Tensor, at::Tensor> tables(int64_t s, int64_t d, const at::TensorOptions& o) {
  auto f = at::TensorOptions().dtype(at::kDouble);
  at::Tensor inv = at::pow(10000.0, at::arange(0, d, 2, f) / double(d)).reciprocal();
  at::Tensor ang = at::outer(at::arange(s, f), inv);
  at::Tensor emb = at::cat({ang, ang}, -1).unsqueeze(1);
  return {emb.cos().to(o), emb.sin().to(o)};
}

struct Case {
  at::TensorOptions opt;
  double tol;  // relative to the largest reference value
};

std::vector<Case> cases() {
  std::vector<Case> out{{at::TensorOptions().dtype(at::kDouble), 1e-12}};
  if (at::hasCUDA()) {
    out.push_back({at::TensorOptions().dtype(at::kFloat).device(at::kCUDA), 1e-5});
    out.push_back({at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA), 2e-2});
  }
  return out;
}

}  // namespace

TEST_CASE("glu: SwiGLU and GeGLU match act(gate) * up and its autograd gradient", "[fused]") {
  for (const Case& c : cases()) {
    for (bool gelu : {false, true}) {
      INFO("dtype " << c.opt.dtype() << " gelu " << gelu);
      at::manual_seed(3);
      const int64_t f = 24;
      at::Tensor u0 = at::randn({2, 5, 2 * f}, at::TensorOptions().dtype(at::kDouble)) * 2;
      at::Tensor da0 = at::randn({2, 5, f}, at::TensorOptions().dtype(at::kDouble));
      at::Tensor u = u0.to(c.opt).requires_grad_(true);
      at::Tensor a = glu(u, gelu);
      auto du = torch::autograd::grad({a}, {u}, {da0.to(c.opt)});
      at::Tensor r = u0.clone().requires_grad_(true);
      at::Tensor g = r.narrow(-1, 0, f);
      at::Tensor ref = (gelu ? at::gelu(g, "tanh") : at::silu(g)) * r.narrow(-1, f, f);
      auto dref = torch::autograd::grad({ref}, {r}, {da0});
      CHECK(a.sizes() == ref.sizes());
      CHECK(max_rel(a, ref) < c.tol);
      CHECK(max_rel(du[0], dref[0]) < c.tol);
    }
  }
}

TEST_CASE("rotary_qkv: rotated q and k, copied v, and the gradient of the fused projection output", "[fused]") {
  for (const Case& c : cases()) {
    INFO("dtype " << c.opt.dtype());
    at::manual_seed(5);
    const int64_t b = 2, s = 7, nq = 4, nkv = 2, d = 16, w = (nq + 2 * nkv) * d;
    auto [cos, sin] = tables(s, d, c.opt);
    at::Tensor x0 = at::randn({b, s, w}, at::TensorOptions().dtype(at::kDouble));
    at::Tensor x = x0.to(c.opt).requires_grad_(true);
    auto out = rotary_qkv(x, cos, sin, nq, nkv, d);
    // The formula the runtime ran before: views of the projection, x cos + rotate_half(x) sin.
    at::Tensor r = x0.clone().requires_grad_(true);
    auto [cd, sd] = tables(s, d, at::TensorOptions().dtype(at::kDouble));
    auto parts = r.split_with_sizes({nq * d, nkv * d, nkv * d}, -1);
    at::Tensor q = parts[0].view({b, s, nq, d}), k = parts[1].view({b, s, nkv, d});
    std::vector<at::Tensor> ref{q * cd + rotate_half_ref(q) * sd, k * cd + rotate_half_ref(k) * sd,
                                parts[2].reshape({b, s, nkv, d})};
    std::vector<at::Tensor> gs;
    for (int i = 0; i < 3; ++i) {
      CHECK(out[i].sizes() == ref[i].sizes());
      CHECK(out[i].is_contiguous());
      CHECK(max_rel(out[i], ref[i]) < c.tol);
      gs.push_back(at::randn(ref[i].sizes(), at::TensorOptions().dtype(at::kDouble)));
    }
    auto dx = torch::autograd::grad({out[0], out[1], out[2]}, {x}, {gs[0].to(c.opt), gs[1].to(c.opt), gs[2].to(c.opt)});
    auto dref = torch::autograd::grad(ref, {r}, gs);
    CHECK(max_rel(dx[0], dref[0]) < c.tol);
  }
}

TEST_CASE("rotary: one tensor of any strides (Qwen3's normed q and k) rotated, and its gradient", "[fused]") {
  for (const Case& c : cases()) {
    INFO("dtype " << c.opt.dtype());
    at::manual_seed(7);
    const int64_t b = 2, s = 5, n = 3, d = 16;
    auto [cos, sin] = tables(s, d, c.opt);
    // A strided view, as the q of a fused projection is.
    at::Tensor big0 = at::randn({b, s, n + 1, d}, at::TensorOptions().dtype(at::kDouble));
    at::Tensor big = big0.to(c.opt).requires_grad_(true);
    at::Tensor y = rotary(big.narrow(2, 1, n), cos, sin);
    at::Tensor r = big0.clone().requires_grad_(true);
    auto [cd, sd] = tables(s, d, at::TensorOptions().dtype(at::kDouble));
    at::Tensor x = r.narrow(2, 1, n);
    at::Tensor ref = x * cd + rotate_half_ref(x) * sd;
    CHECK(y.is_contiguous());
    CHECK(max_rel(y, ref) < c.tol);
    at::Tensor g = at::randn(ref.sizes(), at::TensorOptions().dtype(at::kDouble));
    auto dx = torch::autograd::grad({y}, {big}, {g.to(c.opt)});
    auto dref = torch::autograd::grad({ref}, {r}, {g});
    CHECK(max_rel(dx[0], dref[0]) < c.tol);
  }
}

TEST_CASE("qk_norm_rotary_qkv: per-head RMS norms of q and k, then rotary; v a view; gradients of qkv and the weights",
          "[fused]") {
  // Head widths 16, 128 (Qwen3) and 256 (Gemma-3): 1, 8 and 16 threads a head
  // in the bf16 kernel; 600 positions make the backward's blocks loop.
  for (const int64_t d : {int64_t(16), int64_t(128), int64_t(256)}) {
    for (const Case& c : cases()) {
      INFO("dtype " << c.opt.dtype() << " head_dim " << d);
      at::manual_seed(11);
      const int64_t b = 2, s = 600, nq = 4, nkv = 2, w = (nq + 2 * nkv) * d;
      const double eps = 1e-6;
      auto [cos, sin] = tables(s, d, c.opt);
      const auto dbl = at::TensorOptions().dtype(at::kDouble);
      at::Tensor x0 = at::randn({b, s, w}, dbl) * 3, flat0 = at::randn({2 * d + 1}, dbl) * 0.5 + 1;
      at::Tensor x = x0.to(c.opt).requires_grad_(true), flat = flat0.to(c.opt).requires_grad_(true);
      // The weights as views at an odd offset of a flat buffer, as the runtime keeps parameters.
      auto out = qk_norm_rotary_qkv(x, flat.narrow(0, 1, d), flat.narrow(0, 1 + d, d), cos, sin, nq, nkv, d, eps);
      CHECK(out[2].data_ptr() == static_cast<char*>(x.data_ptr()) + (nq + nkv) * d * x.element_size());
      at::Tensor r = x0.clone().requires_grad_(true), rf = flat0.clone().requires_grad_(true);
      auto [cd, sd] = tables(s, d, dbl);
      auto parts = r.split_with_sizes({nq * d, nkv * d, nkv * d}, -1);
      auto normed = [&](const at::Tensor& t, const at::Tensor& wt) {
        at::Tensor n = t * (t * t).mean(-1, true).add(eps).rsqrt() * wt;
        return n * cd + rotate_half_ref(n) * sd;
      };
      std::vector<at::Tensor> ref{normed(parts[0].view({b, s, nq, d}), rf.narrow(0, 1, d)),
                                  normed(parts[1].view({b, s, nkv, d}), rf.narrow(0, 1 + d, d)),
                                  parts[2].reshape({b, s, nkv, d})};
      std::vector<at::Tensor> gs;
      for (int i = 0; i < 3; ++i) {
        CHECK(out[i].sizes() == ref[i].sizes());
        CHECK(max_rel(out[i], ref[i]) < c.tol);
        gs.push_back(at::randn(ref[i].sizes(), dbl));
      }
      CHECK(out[0].is_contiguous());
      CHECK(out[1].is_contiguous());
      auto dx = torch::autograd::grad({out[0], out[1], out[2]}, {x, flat},
                                      {gs[0].to(c.opt), gs[1].to(c.opt), gs[2].to(c.opt)});
      auto dref = torch::autograd::grad(ref, {r, rf}, gs);
      CHECK(max_rel(dx[0], dref[0]) < c.tol);
      // The weight gradients sum over 1200 rows: bf16's one rounding of each sum.
      CHECK(max_rel(dx[1].narrow(0, 1, 2 * d), dref[1].narrow(0, 1, 2 * d)) < c.tol);
    }
  }
}

TEST_CASE("fused_cross_entropy: loss and gradient as log-softmax in fp32 (GPU only)", "[fused]") {
  if (!at::hasCUDA() || !fused_kernels_enabled()) {
    // No kernel here: the function declines, and the caller's ATen path runs.
    at::Tensor lg = at::randn({3, 8}), grad = at::empty_like(lg);
    CHECK_FALSE(fused_cross_entropy(lg, at::zeros({3}, at::kLong), at::ones({}), 1.0, grad).defined());
    return;
  }
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    INFO("dtype " << dt);
    at::manual_seed(9);
    const int64_t n = 37, V = 1000;  // V not a multiple of 8: the scalar path; then a padded one
    for (int64_t cols : {V, int64_t(1024)}) {
      at::Tensor z = (at::randn({n, cols}, at::kDouble) * 3);
      if (cols > V) z.narrow(1, V, cols - V).fill_(-INFINITY);
      at::Tensor labels = at::randint(0, V, {n}, at::kLong);
      labels[4] = -100, labels[20] = -100;
      const double scale = 0.25;
      at::Tensor zc = z.to(dt).cuda(), grad = at::empty_like(zc);
      at::Tensor count = labels.ne(-100).sum().to(at::kFloat).cuda();
      at::Tensor loss_sum = fused_cross_entropy(zc, labels.cuda(), count, scale, grad);
      REQUIRE(loss_sum.defined());
      // Reference in double from the same (rounded) logits.
      at::Tensor zr = zc.to(at::kDouble).cpu();
      at::Tensor lp = at::log_softmax(zr, 1);
      at::Tensor valid = labels.ne(-100);
      at::Tensor tgt = at::where(valid, labels, at::zeros({}, at::kLong)).unsqueeze(1);
      const double ref_loss = -(lp.gather(1, tgt).squeeze(1) * valid.to(at::kDouble)).sum().item<double>();
      at::Tensor g = lp.exp();
      g.scatter_add_(1, tgt, -valid.to(at::kDouble).unsqueeze(1));
      g.mul_(valid.to(at::kDouble).unsqueeze(1) * (scale / valid.sum().item<double>()));
      CHECK(std::abs(loss_sum.item<double>() - ref_loss) / ref_loss < 1e-5);
      CHECK(max_rel(grad, g) < (dt == at::kFloat ? 1e-5 : 1e-2));
      CHECK(grad[4].abs().max().item<double>() == 0.0);
    }
  }
}

namespace {

// LayerNorm (or RMSNorm) in double, written out: (a - mean) / sqrt(var + eps) w + b.
at::Tensor norm_ref(const at::Tensor& a, const at::Tensor& w, const at::Tensor& b, double eps, bool rms) {
  if (rms) return a * (a.pow(2).mean(-1, true) + eps).rsqrt() * w;
  const at::Tensor mu = a.mean(-1, true);
  const at::Tensor var = (a - mu).pow(2).mean(-1, true);
  return (a - mu) * (var + eps).rsqrt() * w + b;
}

}  // namespace

TEST_CASE("add_norm and norm: the residual add and LayerNorm/RMSNorm, their input, weight and bias gradients",
          "[fused]") {
  for (const Case& c : cases()) {
    for (bool rms : {false, true}) {
      // 64: 16-byte vectors in every dtype; 36: one element at a time in bf16;
      // 128 and 256: the per-head q/k norms of Qwen3 and Gemma-3.
      // 600 rows: several per block of the backward's partial sums.
      for (int64_t h : {int64_t(64), int64_t(36), int64_t(128), int64_t(256)}) {
        INFO("dtype " << c.opt.dtype() << " rms " << rms << " h " << h);
        at::manual_seed(11);
        const auto dbl = at::TensorOptions().dtype(at::kDouble);
        const double eps = rms ? 1e-6 : 1e-5;
        at::Tensor x0 = at::randn({2, 300, h}, dbl) + 0.5, y0 = at::randn({2, 300, h}, dbl);
        // The weight a view at an odd offset of a larger buffer, as parameters are.
        at::Tensor wbuf0 = at::randn({h + 1}, dbl) * 0.5 + 1, b0 = at::randn({h}, dbl) * 0.1;
        at::Tensor x = x0.to(c.opt).requires_grad_(true), y = y0.to(c.opt).requires_grad_(true);
        at::Tensor wbuf = wbuf0.to(c.opt).requires_grad_(true), b = b0.to(c.opt).requires_grad_(true);
        at::Tensor w = wbuf.narrow(0, 1, h);
        auto [a, n] = add_norm(x, y, w, rms ? at::Tensor() : b, eps, rms);
        at::Tensor n1 = norm(x, w, rms ? at::Tensor() : b, eps, rms);
        // The reference from the same (rounded) inputs, in double.
        at::Tensor xr = x.detach().to(at::kDouble).cpu().requires_grad_(true);
        at::Tensor yr = y.detach().to(at::kDouble).cpu().requires_grad_(true);
        at::Tensor wr = wbuf.detach().to(at::kDouble).cpu().narrow(0, 1, h).clone().requires_grad_(true);
        at::Tensor br = b.detach().to(at::kDouble).cpu().requires_grad_(true);
        at::Tensor ar = xr + yr;
        at::Tensor nr = norm_ref(ar, wr, br, eps, rms), n1r = norm_ref(xr, wr, br, eps, rms);
        CHECK(max_rel(a, ar) < c.tol);
        CHECK(max_rel(n, nr) < c.tol);
        CHECK(max_rel(n1, n1r) < c.tol);
        // Gradients of a loss that uses both outputs (the residual path and the norm's).
        at::Tensor ga = at::randn(ar.sizes(), dbl), gn = at::randn(ar.sizes(), dbl), g1 = at::randn(ar.sizes(), dbl);
        auto d = torch::autograd::grad({a, n, n1}, {x, y, wbuf, b}, {ga.to(c.opt), gn.to(c.opt), g1.to(c.opt)},
                                       std::nullopt, false, true);
        auto dr = torch::autograd::grad({ar, nr, n1r}, {xr, yr, wr, br}, {ga, gn, g1}, std::nullopt, false, true);
        CHECK(max_rel(d[0], dr[0]) < c.tol);
        CHECK(max_rel(d[1], dr[1]) < c.tol);
        CHECK(max_rel(d[2].narrow(0, 1, h), dr[2]) < c.tol);
        CHECK(d[2][0].item<double>() == 0.0);
        if (!rms) CHECK(max_rel(d[3], dr[3]) < c.tol);
      }
    }
  }
}

TEST_CASE("scale_by_ratio_: g *= num / den, read on the device; a ratio of exactly 1 leaves g as it was", "[fused]") {
  for (const Case& c : cases()) {
    INFO("dtype " << c.opt.dtype());
    at::manual_seed(13);
    at::Tensor g0 = at::randn({37, 24}, at::TensorOptions().dtype(at::kDouble)).to(c.opt);
    const auto f = at::TensorOptions().dtype(at::kFloat).device(c.opt.device());
    at::Tensor g = g0.clone();
    scale_by_ratio_(g, at::full({}, 0.125, f), 0.125);
    CHECK(at::equal(g, g0));
    scale_by_ratio_(g, at::full({}, 0.0625, f), 0.125);
    CHECK(max_rel(g, g0 * 0.5) < 1e-12);
  }
}

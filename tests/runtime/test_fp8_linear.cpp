// precision=fp8's arithmetic (runtime/model/fp8_linear.hpp) on the CPU:
// per-tensor dynamic scaling against numbers computed by hand, and, where
// this LibTorch runs at::_scaled_mm on the CPU, the FP8 linear's forward and
// backward against the same GEMMs on the dequantised operands.
#include <ATen/ATen.h>

#include <cmath>
#include <utility>
#include <vector>

#include "runtime/model/fp8_linear.hpp"
#include "runtime/model/transformer.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::rt;

namespace {

std::vector<double> values(const at::Tensor& t) {
  const at::Tensor f = t.to(at::kDouble).contiguous();
  return std::vector<double>(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
}

}  // namespace

TEST_CASE("fp8: scale = max / amax, exact values stay exact (e4m3)", "[fp8]") {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = at::tensor({1.0f, -2.0f, 0.5f, 4.0f}).to(dt);
    // amax 4, scale 448 / 4 = 112: 112, -224, 56, 448 are all e4m3 numbers
    // (1.75 x 2^6, -1.75 x 2^7, 1.75 x 2^5, 1.75 x 2^8).
    CHECK(fp8_scale(x, at::kFloat8_e4m3fn).item<double>() == Approx(112.0));
    const Fp8Tensor q = quantize_fp8(x, at::kFloat8_e4m3fn);
    CHECK(q.data.scalar_type() == at::kFloat8_e4m3fn);
    CHECK(values(q.data) == std::vector<double>{112, -224, 56, 448});
    CHECK(q.scale_inv.item<double>() == Approx(4.0 / 448.0));
    const std::vector<double> back = values(dequantize_fp8(q, at::kFloat)), want{1.0, -2.0, 0.5, 4.0};
    for (size_t i = 0; i < want.size(); ++i) CHECK(back[i] == Approx(want[i]).epsilon(1e-6));
  }
}

TEST_CASE("fp8: rounding to the nearest e4m3 / e5m2 number", "[fp8]") {
  // amax 3: scale 448 / 3 = 149.33; 1 x 149.33 lies between the e4m3 numbers
  // 144 and 160 (steps of 16 in [128, 256)) and rounds to 144: it comes back
  // as 144 x 3 / 448 = 0.9642857.
  const Fp8Tensor a = quantize_fp8(at::tensor({3.0f, 1.0f}), at::kFloat8_e4m3fn);
  CHECK(values(a.data) == std::vector<double>{448, 144});
  CHECK(values(dequantize_fp8(a, at::kFloat))[1] == Approx(144.0 * 3.0 / 448.0));
  // e5m2 (gradients): max 57344, amax 1000, scale 57.344; 57.344 lies between
  // 56 and 64 (steps of 8 in [32, 64)) and rounds to 56.
  const Fp8Tensor g = quantize_fp8(at::tensor({1.0f, -1000.0f}), at::kFloat8_e5m2);
  CHECK(g.data.scalar_type() == at::kFloat8_e5m2);
  CHECK(fp8_scale(at::tensor({1.0f, -1000.0f}), at::kFloat8_e5m2).item<double>() == Approx(57.344));
  CHECK(values(g.data) == std::vector<double>{56, -57344});
  CHECK(values(dequantize_fp8(g, at::kFloat))[0] == Approx(56.0 / 57.344));
  // All zeros: scale 1 (no division by zero), zeros out.
  const Fp8Tensor z = quantize_fp8(at::zeros({3}), at::kFloat8_e4m3fn);
  CHECK(z.scale_inv.item<double>() == 1.0);
  CHECK(values(z.data) == std::vector<double>{0, 0, 0});
  CHECK_THROWS(quantize_fp8(at::ones({2}), at::kBFloat16));
}

namespace {

// The devices whose at::_scaled_mm runs: the CPU where this LibTorch has the
// kernel, and the GPU (compute capability 8.9 or later), where the casts run
// on the runtime's own kernels when they were built.
std::vector<at::Device> fp8_devices() {
  std::vector<at::Device> out;
  if (fp8_gemm_available(at::Device(at::kCPU))) out.emplace_back(at::kCPU);
  if (at::hasCUDA() && fp8_gemm_available(at::Device(at::kCUDA, 0))) out.emplace_back(at::kCUDA, 0);
  return out;
}

}  // namespace

TEST_CASE("fp8 linear: forward and backward are the GEMMs of the dequantised operands", "[fp8]") {
  const std::vector<at::Device> devices = fp8_devices();
  if (devices.empty()) WARN("at::_scaled_mm runs on no device of this build: the FP8 linear is checked on the GPU only");
  for (const at::Device& dev : devices) {
    INFO("device " << dev.str());
    at::manual_seed(7);
    const auto bf = at::TensorOptions().dtype(at::kBFloat16).device(dev);
    const at::Tensor x = at::randn({2, 16, 48}, bf).requires_grad_(true);
    const at::Tensor w = (at::randn({32, 48}, bf) * 0.1).requires_grad_(true);
    const at::Tensor b = at::randn({32}, bf).requires_grad_(true);
    const at::Tensor g = at::randn({2, 16, 32}, bf);
    const at::Tensor y = fp8_linear(x, w, b);
    REQUIRE(y.sizes() == at::IntArrayRef({2, 16, 32}));
    y.backward(g);

    // The reference: fp32 GEMMs of what the casts kept.
    auto deq = [](const at::Tensor& t, at::ScalarType f) { return dequantize_fp8(quantize_fp8(t, f), at::kFloat); };
    const at::Tensor x2 = x.detach().reshape({-1, 48}), g2 = g.reshape({-1, 32});
    const at::Tensor xq = deq(x2, at::kFloat8_e4m3fn), wq = deq(w.detach(), at::kFloat8_e4m3fn);
    const at::Tensor gq = deq(g2, at::kFloat8_e5m2);
    const at::Tensor y_ref = at::mm(xq, wq.t()) + b.detach().to(at::kFloat);
    const at::Tensor gx_ref = at::mm(gq, wq), gw_ref = at::mm(gq.t(), xq);
    // Only the bf16 output's rounding (2^-8 relative) and the addition order differ.
    auto rel = [](const at::Tensor& a, const at::Tensor& r) {
      return (a.to(at::kFloat) - r).norm().item<double>() / r.norm().item<double>();
    };
    CHECK(rel(y.detach().reshape({-1, 32}), y_ref) < 8e-3);
    CHECK(rel(x.grad().reshape({-1, 48}), gx_ref) < 8e-3);
    CHECK(rel(w.grad(), gw_ref) < 8e-3);
    CHECK(rel(b.grad(), g2.to(at::kFloat).sum(0)) < 8e-3);
    // And within FP8's own error of the full-precision linear: e4m3 keeps 3
    // mantissa bits (relative rounding error at most 2^-4 per element).
    const at::Tensor y_full = at::mm(x2.to(at::kFloat), w.detach().to(at::kFloat).t()) + b.detach().to(at::kFloat);
    CHECK(rel(y.detach().reshape({-1, 32}), y_full) < 0.0625);
    // Dimensions that are not multiples of 16 are refused by name.
    CHECK_THROWS_WITH(fp8_linear(at::randn({3, 48}, bf), w.detach(), b.detach()),
                      PLANNER_CONTAINS("multiples of 16"));
  }
}

TEST_CASE("fp8 casts: the amax and the scaled casts, row-major and transposed, are ATen's bytes", "[fp8]") {
  // On the GPU with the runtime's kernels this compares fp8_kernels.cu with
  // ATen's arithmetic (the scale as (1 / amax) * max, the product in fp32,
  // round to nearest even); on the CPU both sides are ATen.
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  if (at::hasCUDA()) devices.emplace_back(at::kCUDA, 0);
  at::manual_seed(11);
  for (const at::Device& dev : devices)
    for (at::ScalarType dt : {at::kBFloat16, at::kFloat, at::kHalf})
      for (at::ScalarType f8 : {at::kFloat8_e4m3fn, at::kFloat8_e5m2})
        // 64-multiples, ragged tile edges (136 = 2 x 64 + 8, 72 = 64 + 8), one
        // odd-length row (row-major only). The kernels transpose 16-bit inputs
        // whose sides are multiples of 8 (fp32 falls back to ATen).
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{256, 384}, {136, 72}, {1, 1001}}) {
          INFO(dev.str() << " " << c10::toString(dt) << " " << c10::toString(f8) << " " << rows << " x " << cols);
          // Magnitudes over six decades, so that some products land in FP8's
          // subnormals, and one exact maximum.
          at::Tensor x = (at::randn({rows, cols}) * at::exp(at::randn({rows, cols}) * 3)).to(dt).to(dev);
          const at::Tensor amax = fp8_amax(x);
          const at::Tensor amax_ref = x.abs().max().to(at::kFloat).reshape({1});
          CHECK(at::equal(amax.cpu(), amax_ref.cpu()));
          const at::Tensor scale = fp8_scale_from_amax(amax_ref, f8);
          const at::Tensor want = at::mul(x, scale).to(f8).cpu().view(at::kByte);
          const bool both = rows > 1;
          const Fp8Casts c = cast_fp8(x, amax, f8, true, both);
          CHECK(at::equal(c.row.data.cpu().view(at::kByte), want));
          CHECK(at::equal(c.row.scale_inv.cpu(), scale.reciprocal().cpu()));
          if (both) {
            CHECK(at::equal(c.t.data.cpu().view(at::kByte), want.t().contiguous()));
            const Fp8Casts t_only = cast_fp8(x, amax, f8, false, true);
            CHECK_FALSE(t_only.row.data.defined());
            CHECK(at::equal(t_only.t.data.cpu().view(at::kByte), want.t().contiguous()));
          }
        }
  // All zeros: scale 1, zero bytes.
  for (const at::Device& dev : devices) {
    const at::Tensor z = at::zeros({64, 64}, at::TensorOptions().dtype(at::kBFloat16).device(dev));
    const Fp8Casts c = cast_fp8(z, fp8_amax(z), at::kFloat8_e4m3fn, true, true);
    CHECK(c.row.scale_inv.item<double>() == 1.0);
    CHECK(c.row.data.to(at::kFloat).abs().sum().item<double>() == 0.0);
    CHECK(c.t.data.to(at::kFloat).abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("fp8 linears on a model: the loss and gradients of bf16 within FP8's error", "[fp8]") {
  if (!fp8_gemm_available(at::Device(at::kCPU))) {
    WARN("at::_scaled_mm does not run on this CPU build: checked on the device only");
    return;
  }
  // A Llama-shaped model whose widths are multiples of 16 (at::_scaled_mm):
  // qkv 64 + 2 x 32 = 128, SwiGLU up 2 x 96, 2 x 16 tokens.
  ModelSpec m;
  m.name = "tiny-llama-16";
  m.layers = 2, m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.ffn = 96, m.vocab = 128, m.max_positions = 0;
  m.pos = PosEmbed::Rotary, m.mlp = MlpKind::SwiGlu, m.norm = NormKind::RmsNorm;
  m.qkv_bias = m.out_bias = m.mlp_bias = false, m.tied_embeddings = false;
  const int64_t seq = 16;
  const auto cpu = at::Device(at::kCPU);
  TransformerModel ref(m, seq), f8(m, seq);
  ref.materialize(cpu, at::kBFloat16, 3);
  f8.materialize(cpu, at::kBFloat16, 3);
  at::manual_seed(9);
  const at::Tensor ids = at::randint(m.vocab, {2, seq + 1}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor x = ids.narrow(1, 0, seq).contiguous(), y = ids.narrow(1, 1, seq).contiguous();
  at::Tensor lr = ref.loss(x, y, Ckpt::None);
  lr.backward();
  {
    Fp8Linears hook(f8);
    CHECK_THROWS(Fp8Linears(f8));  // one hook at a time (LoRA's is the same)
    at::Tensor lf = f8.loss(x, y, Ckpt::None);
    lf.backward();
    // Initial loss ~ ln 128 = 4.85; FP8's relative rounding (2^-4 at most per
    // element, far less on average) moves it by a few thousandths.
    CHECK(std::abs(lf.item<double>() - lr.item<double>()) < 0.02);
  }
  CHECK(f8.linear_hook == nullptr);  // unhooked with the Fp8Linears
  // Every gradient finite and close: the layer matrices' through the FP8
  // GEMMs, the rest (embedding, head, norms) through bf16 ones fed by them.
  // The output gradients are e5m2 (2 mantissa bits: up to 2^-3 relative per
  // element): 0.05 over all and 0.08 for a qkv matrix when this was written.
  const at::Tensor gr = ref.store().grads.to(at::kFloat), gf = f8.store().grads.to(at::kFloat);
  CHECK(at::isfinite(gf).all().item<bool>());
  CHECK((gf - gr).norm().item<double>() / gr.norm().item<double>() < 0.15);
  const int qkv = f8.layer_ids(0).qkv_w;
  const at::Tensor wr = ref.store().get(qkv).grad().to(at::kFloat), wf = f8.store().get(qkv).grad().to(at::kFloat);
  CHECK(wf.abs().sum().item<double>() > 0);
  CHECK((wf - wr).norm().item<double>() / wr.norm().item<double>() < 0.15);
}

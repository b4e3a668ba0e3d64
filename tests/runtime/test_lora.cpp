// LoRA and QLoRA on the runtime's model (runtime/model/lora.hpp), fp32 on the
// CPU: the adapted model's loss equals a dense model's whose weights are the
// merged W + alpha/r B A (LoRA) or dequant(NF4(W)) + alpha/r B A (QLoRA), step
// after step of AdamW over the adapters; the base never changes; NF4's
// round-trip error stays within its quantization bound.
#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "runtime/model/lora.hpp"
#include "lora/lora_check.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::rt;
using namespace planner::test;

TEST_CASE("lora: losses equal the dense model with merged weights", "[lora]") {
  for (const ModelSpec& m : {gpt2_like(), llama_like()}) {
    for (FinetuneMode mode : {FinetuneMode::Lora, FinetuneMode::Qlora}) {
      for (unsigned targets : {unsigned(kLoraAll), unsigned(kLoraQ | kLoraV)}) {
        Finetune f;
        f.mode = mode, f.r = 4, f.alpha = 8, f.targets = targets;
        INFO(m.name << " " << to_string(mode) << " " << targets_to_string(targets));
        const LoraRun r = run_lora(m, f, 16, 4, 0, 2, 2);
        REQUIRE(r.losses.size() == 4);
        for (size_t k = 0; k < r.losses.size(); ++k) CHECK(std::abs(r.losses[k] - r.dense_losses[k]) <= 1e-5);
        // Training moved the loss (the adapters learn) and never the base.
        CHECK(r.losses.back() < r.losses.front());
        CHECK(r.base_change == 0.0);
      }
    }
  }
}

TEST_CASE("lora: only the adapters train, r (in + out) per adapted matrix", "[lora]") {
  const ModelSpec m = llama_like();  // h 32, q 32, kv 16, ffn 88, 2 layers
  TransformerModel model(m, 16);
  model.materialize(at::Device(at::kCPU), at::kFloat, 1);
  Finetune f;
  f.mode = FinetuneMode::Lora, f.r = 4;
  LoraAdapters lora(model, f, 3);
  // Per layer: q 4(32+32), k 4(32+16), v 4(32+16), o 4(32+32), gate 4(32+88),
  // up 4(32+88), down 4(88+32) = 256+192+192+256+480+480+480 = 2336.
  CHECK(lora.numel() == 2 * 2336);
  for (int id = 0; id < int(model.store().infos().size()); ++id) CHECK(!model.store().get(id).requires_grad());
  for (const at::Tensor& p : lora.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("lora: NF4 round trip within its quantization bound", "[lora]") {
  const auto& L = nf4_levels();
  // The levels: 16, sorted, exactly -1, 0 and 1 among them (Dettmers et al. 2023, app. E).
  CHECK(L.front() == -1.0f);
  CHECK(L.back() == 1.0f);
  CHECK(L[7] == 0.0f);
  for (size_t i = 1; i < L.size(); ++i) CHECK(L[i] > L[i - 1]);
  double half_gap = 0;
  for (size_t i = 1; i < L.size(); ++i) half_gap = std::max(half_gap, double(L[i] - L[i - 1]) / 2);
  CHECK(half_gap == Approx((1.0 - 0.6961928009986877) / 2));

  at::manual_seed(0);
  const int64_t n = 64 * 256 * 4;
  const at::Tensor w = at::randn({n / 128, 128}) * 0.02;
  const Nf4Tensor q = nf4_quantize(w);
  const at::Tensor back = nf4_dequantize(q, at::kFloat);
  REQUIRE(back.sizes() == w.sizes());
  // Per weight: |w - level * c'| <= c * half_gap + |c - c'|, c the block's absmax
  // and c' its double-quantized value.
  const at::Tensor blocks = w.reshape({-1, 64});
  const at::Tensor c = blocks.abs().amax(1);
  const at::Tensor c2 = nf4_absmax(q);
  const at::Tensor bound = (c * half_gap + (c - c2).abs()).unsqueeze(1) * (1 + 1e-6);
  const at::Tensor err = (back.reshape({-1, 64}) - blocks).abs();
  CHECK((err <= bound).all().item<bool>());
  // Double quantization: 8-bit floats (3 mantissa bits) of the centred
  // constants, relative rounding at most 2^-4 of each one's distance to the mean.
  // (Subnormals, below 2^-6 of the block's scale: absolute error up to 2^-10 of it.)
  const at::Tensor scale = q.absmax_scale.repeat_interleave(256).narrow(0, 0, c.numel());
  CHECK(((c - c2).abs() <= (c - q.absmax_mean).abs() * 0.0625 + scale * (1.0 / 1024) + 1e-12).all().item<bool>());
  // Storage: 4 + 8/64 + 32/(64*256) bits per weight (plus the one mean).
  CHECK(q.packed_bits() / double(n) == Approx(kNf4BitsPerParam + 32.0 / double(n)));
  // NF4 beats a 4-bit integer grid (k/7, k = -7..7, same blocks) on normal
  // weights, the paper's reason for it (sec. 3, Table 2's comparison).
  const at::Tensor int4 = (blocks / c.unsqueeze(1) * 7).round() / 7 * c.unsqueeze(1);
  const double mse_nf4 = (back.reshape({-1, 64}) - blocks).pow(2).mean().item<double>();
  const double mse_int4 = (int4 - blocks).pow(2).mean().item<double>();
  CHECK(mse_nf4 < mse_int4);
}

TEST_CASE("nf4 dequantisation: level times the block's double-quantized absmax, rounded once into the dtype", "[lora]") {
  // On the GPU with the runtime's kernels this checks runtime/kernels/nf4_kernels.cu
  // against the formula in ATen; on the CPU, ATen's path against it.
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  if (at::hasCUDA()) devices.emplace_back(at::kCUDA, 0);
  const auto& L = nf4_levels();
  const at::Tensor levels = at::tensor(std::vector<float>(L.begin(), L.end()));
  at::manual_seed(5);
  for (const at::Device& dev : devices)
    // Whole 16-weight groups over many 256-blocks of constants, a ragged
    // tail (n % 16 != 0) and an odd count (a half-used last byte).
    for (int64_t n : {int64_t(64 * 256 * 3 + 64 * 17), int64_t(64 * 5 + 40), int64_t(1001)})
      for (at::ScalarType dt : {at::kBFloat16, at::kHalf, at::kFloat}) {
        INFO(dev.str() << " n " << n << " " << c10::toString(dt));
        const at::Tensor w = (at::randn({n}) * at::exp(at::randn({n}))).to(dev);
        const Nf4Tensor q = nf4_quantize(w);
        const at::Tensor got = nf4_dequantize(q, dt).cpu();
        // The reference: unpack the nibbles, look the levels up, times the
        // block's constant (fp32 product), rounded into dt.
        const at::Tensor bytes = q.codes.cpu().to(at::kLong);
        const at::Tensor idx = at::stack({bytes.bitwise_and(15), bytes.bitwise_right_shift(4)}, 1).reshape({-1});
        const at::Tensor absmax = nf4_absmax(q).cpu().repeat_interleave(64);
        const at::Tensor want = (levels.index_select(0, idx.narrow(0, 0, n)) * absmax.narrow(0, 0, n)).to(dt);
        CHECK(at::equal(got, want));
      }
}

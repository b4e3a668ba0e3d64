// The Engine (the executor of the step program) on one process, fp32, against
// the plain Trainer: the same losses and parameters after three steps for every
// ZeRO stage and offload mode that one process can run (dp = 1: the shards are
// the whole model), with accumulation and checkpointing, on several families.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "runtime/host_adam.hpp"
#include "catch.hpp"
#include "equivalence.hpp"
#include "tiny_models.hpp"

using namespace planner;
using namespace planner::test;

TEST_CASE("engine: dp=1 runs equal the single-process trainer", "[engine]") {
  const char* strategies[] = {"zero=0,mbs=2,gas=2",         "zero=0,mbs=1,gas=3,ckpt=full",
                              "zero=1,offload=optimizer,mbs=2,gas=2", "zero=2,mbs=2,gas=2,ckpt=selective",
                              "zero=3,mbs=2,gas=2",         "zero=3,offload=all,mbs=1,gas=2,ckpt=full"};
  for (const ModelSpec& m : {gpt2_like(), llama_like(), bert_like()}) {
    for (const char* text : strategies) {
      Strategy s = Strategy::parse(text);
      s.precision = Precision::FP32;
      INFO(m.name << " " << text);
      const RunResult a = run_single(m, s, 16, 3);
      const RunResult b = run_engine(m, s, 16, 3, nullptr);
      for (size_t k = 0; k < a.losses.size(); ++k) CHECK(std::abs(a.losses[k] - b.losses[k]) <= 1e-5);
      CHECK(max_abs_diff(b.params, a.params) <= 1e-5);
      // The parameters moved: the comparison is not between two initial states.
      CHECK(max_abs_diff(a.params, run_single(m, s, 16, 0).params) > 1e-4);
    }
  }
}

// The host AdamW (runtime/host_adam.hpp) against one fused call per part over
// the whole buffer: equal element for element, with a 16-bit copy written.
TEST_CASE("host AdamW: adam_range equals one fused call per part", "[engine][adam]") {
  const int before = at::get_num_threads();
  const int64_t n = 3 * 131072 + 12345, decay = 131072 + 777;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::manual_seed(7);
  const at::Tensor master0 = at::randn({n}, f32), m0 = at::rand({n}, f32), v0 = at::rand({n}, f32);
  const at::Tensor g32 = at::randn({n}, f32) * 0.01;
  const at::Tensor step = at::full({}, 3.0, f32), divisor = at::full({}, 1.5, f32);
  const rt::AdamHyper h;
  for (const bool bf16 : {true, false}) {
    const at::Tensor grad = bf16 ? g32.to(at::kBFloat16) : g32;
    // The reference: the gradient in fp32, each part in one call. (The fused
    // AdamW may unscale an fp32 gradient in place: every run gets its own copy.)
    at::Tensor rm = master0.clone(), rmm = m0.clone(), rv = v0.clone();
    const at::Tensor rg = grad.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    for (int part = 0; part < 2; ++part) {
      const int64_t a = part == 0 ? 0 : decay, len = part == 0 ? decay : n - decay;
      at::_fused_adamw_({rm.narrow(0, a, len)}, {rg.narrow(0, a, len)}, {rmm.narrow(0, a, len)}, {rv.narrow(0, a, len)},
                        {}, {step}, h.lr, h.beta1, h.beta2, part == 0 ? h.weight_decay : 0.0, h.eps, false, false,
                        divisor, std::nullopt);
    }
    for (const int threads : {1, 2}) {
      INFO("bf16 " << bf16 << ", threads " << threads);
      at::set_num_threads(threads);
      at::Tensor mm = master0.clone(), m = m0.clone(), v = v0.clone();
      at::Tensor out = at::zeros({n}, f32.dtype(grad.scalar_type()));
      const at::Tensor work = at::empty({std::min(n, rt::kOptChunk)}, f32);
      rt::adam_range(mm, m, v, grad.clone(), work, decay, h, step, divisor, out);
      CHECK(at::equal(mm, rm));
      CHECK(at::equal(m, rmm));
      CHECK(at::equal(v, rv));
      CHECK(at::equal(out, rm.to(grad.scalar_type())));
      CHECK(!at::equal(mm, master0));  // it moved
    }
  }
  at::set_num_threads(before);
}

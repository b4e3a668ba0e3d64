// The Engine (the executor of the step program) on one process, fp32, against
// the plain Trainer: the same losses and parameters after three steps for every
// ZeRO stage and offload mode that one process can run (dp = 1: the shards are
// the whole model), with accumulation and checkpointing, on several families.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <thread>
#include <vector>

#include "runtime/engine.hpp"
#include "runtime/optim/adamw.hpp"
#include "specs/model_spec.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

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
      check_close(a, b);
      // The parameters moved: the comparison is not between two initial states.
      CHECK(max_abs_diff(a.params, run_single(m, s, 16, 0).params) > 1e-4);
    }
  }
}

// The host AdamW (runtime/optim/adamw.hpp, its own one-pass loop on its own
// thread team) against LibTorch's fused AdamW, one call per part over the
// whole buffer with the gradient in fp32: the same results (see the tails
// below), with the parameters' copy written, for each gradient type, thread
// count and a buffer shorter than one block.
TEST_CASE("host AdamW: adam_range equals one fused call per part", "[engine][adam]") {
  const int before = at::get_num_threads();
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor step = at::full({}, 3.0, f32), divisor = at::full({}, 1.5, f32);
  const rt::AdamHyper h;
  for (const int64_t n : {int64_t(3 * 131072 + 12345), int64_t(1000)}) {
    const int64_t decay = n > 1000 ? 131072 + 777 : 333;
    at::manual_seed(7);
    const at::Tensor master0 = at::randn({n}, f32), m0 = at::rand({n}, f32), v0 = at::rand({n}, f32);
    const at::Tensor g32 = at::randn({n}, f32) * 0.01;
    for (const at::ScalarType type : {at::kBFloat16, at::kHalf, at::kFloat}) {
      const at::Tensor grad = g32.to(type);
      // The reference: the gradient in fp32, each part in one call. (The fused
      // AdamW may unscale an fp32 gradient in place: every run gets its own copy.)
      at::Tensor rm = master0.clone(), rmm = m0.clone(), rv = v0.clone();
      const at::Tensor rg = grad.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      for (int part = 0; part < 2; ++part) {
        const int64_t a = part == 0 ? 0 : decay, len = part == 0 ? decay : n - decay;
        at::_fused_adamw_({rm.narrow(0, a, len)}, {rg.narrow(0, a, len)}, {rmm.narrow(0, a, len)},
                          {rv.narrow(0, a, len)}, {}, {step}, h.lr, h.beta1, h.beta2,
                          part == 0 ? h.weight_decay : 0.0, h.eps, false, false, divisor, std::nullopt);
      }
      for (const int threads : {1, 2, 5}) {
        INFO("n " << n << ", gradient " << c10::toString(type) << ", threads " << threads);
        at::set_num_threads(threads);
        at::Tensor mm = master0.clone(), m = m0.clone(), v = v0.clone();
        at::Tensor out = at::zeros({n}, f32.dtype(type));
        const at::Tensor work = at::empty({std::min(n, rt::kOptChunk)}, f32);
        const at::Tensor g = grad.clone();
        rt::adam_range(mm, m, v, g, work, decay, h, step, divisor, out);
        // LibTorch's kernel computes each call's last (length mod vector width)
        // elements in scalar code, where v's update is not fused: those may
        // differ in v's last bit, and so in the master's. Everywhere else: equal.
        auto differing = [](const at::Tensor& a, const at::Tensor& b) { return a.ne(b).sum().item<int64_t>(); };
        auto rel = [](const at::Tensor& a, const at::Tensor& b) {
          return ((a - b).abs() / b.abs().clamp_min(1e-30)).max().item<double>();
        };
        const int64_t tails = 2 * 16;  // at most one vector's tail per part
        CHECK(differing(mm, rm) <= tails);
        CHECK(rel(mm, rm) < 1e-6);
        CHECK(at::equal(m, rmm));
        CHECK(differing(v, rv) <= tails);
        CHECK(rel(v, rv) < 2.5e-7);  // one unit in the last place
        CHECK(differing(out, rm.to(type)) <= tails);
        CHECK(at::equal(g, grad));         // the gradient is read, not unscaled in place
        CHECK(!at::equal(mm, master0));  // it moved
      }
    }
  }
  at::set_num_threads(before);
}

// Two callers at once (two Engines' worker threads in one process): the host
// AdamW's team takes one job at a time, and each caller gets its own result.
TEST_CASE("host AdamW: two callers at once get the same results as one at a time", "[engine][adam]") {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor step = at::full({}, 2.0, f32), divisor = at::full({}, 1.0, f32);
  const rt::AdamHyper h;
  const int before = at::get_num_threads();
  at::set_num_threads(4);  // helpers for each caller, even on a 2-core machine
  const int64_t n = 64 * 4096 + 17;
  at::manual_seed(11);
  std::vector<at::Tensor> master0, grad;
  for (int k = 0; k < 2; ++k) master0.push_back(at::randn({n}, f32)), grad.push_back(at::randn({n}, f32).to(at::kBFloat16));
  auto update = [&](int k, int reps) {
    at::Tensor mm = master0[size_t(k)].clone(), m = at::zeros({n}, f32), v = at::zeros({n}, f32);
    for (int r = 0; r < reps; ++r) rt::adam_range(mm, m, v, grad[size_t(k)], at::Tensor(), n / 2, h, step, divisor);
    return mm;
  };
  const at::Tensor alone0 = update(0, 20), alone1 = update(1, 20);
  at::Tensor both0, both1;
  std::thread a([&] { both0 = update(0, 20); });
  std::thread b([&] { both1 = update(1, 20); });
  a.join();
  b.join();
  CHECK(at::equal(both0, alone0));
  CHECK(at::equal(both1, alone1));
  CHECK(!at::equal(alone0, master0[0]));
  at::set_num_threads(before);
}

// The head's block (runtime/engine.cpp head_reserve_block_bytes), by hand.
TEST_CASE("head block: what the head allocates, in bytes, and where no block is used", "[engine][memory]") {
  const ModelSpec llama = model_preset("llama-3.2-3b");  // hidden 3072, vocabulary 128256 = 64 x 2004
  const Strategy one = Strategy::parse("dp=1,mbs=6,gas=2,precision=bf16");
  // 24576 tokens: the final norm's output 24576 x 3072 x 2 B and the logits
  // with their gradient, 2 x 24576 x 128256 x 2 B; no padded copy.
  const int64_t tokens = 6 * 4096;
  const int64_t want = tokens * 3072 * 2 + 2 * tokens * 128256 * 2;
  CHECK(rt::head_reserve_block_bytes(llama, one, 4096, 128256, 128256, true) == want);
  CHECK(rt::head_reserve_block_bytes(llama, one, 4096, 128256, 128256, false) == 0);  // the CPU: none
  // cp 2 halves the rank's tokens; 1F1B keeps the block, GPipe and interleaving drop it.
  const Strategy cp = Strategy::parse("cp=2,mbs=6,gas=2,precision=bf16");
  CHECK(rt::head_reserve_block_bytes(llama, cp, 8192, 128256, 128256, true) == want);
  CHECK(rt::head_reserve_block_bytes(llama, Strategy::parse("pp=2,mbs=6,gas=4,schedule=1f1b"), 4096, 128256,
                                     128256, true) == want);
  CHECK(rt::head_reserve_block_bytes(llama, Strategy::parse("pp=2,mbs=6,gas=4,schedule=gpipe"), 4096, 128256,
                                     128256, true) == 0);
  CHECK(rt::head_reserve_block_bytes(llama, Strategy::parse("pp=2,vpp=2,mbs=6,gas=4,schedule=interleaved"), 4096,
                                     128256, 128256, true) == 0);
  // Logits under 128 MiB: none (one token's row is 256 KB here; 511 tokens).
  CHECK(rt::head_reserve_block_bytes(llama, Strategy::parse("mbs=1,precision=bf16"), 511, 128256, 128256, true) == 0);
  // gpt2-xl: 50257 rows padded to 50304, so the padded copy 50304 x 1600 x 2 B
  // joins; tp 2 + sp: the rank's 25152 columns, the norm's output over s/2
  // tokens and the gathered input over all of them.
  const ModelSpec gpt = model_preset("gpt2-xl");
  const Strategy g = Strategy::parse("dp=1,mbs=16,precision=bf16");
  CHECK(rt::head_reserve_block_bytes(gpt, g, 1024, 50304, 50257, true) ==
        16384 * 1600 * 2 + 50304 * 1600 * 2 + 2 * int64_t(16384) * 50304 * 2);
  const Strategy tsp = Strategy::parse("tp=2,sp=1,mbs=16,precision=bf16");
  CHECK(rt::head_reserve_block_bytes(gpt, tsp, 1024, 25152, 25129, true) ==
        8192 * 1600 * 2 + 16384 * 1600 * 2 + 25152 * 1600 * 2 + 2 * int64_t(16384) * 25152 * 2);
  // GPipe keeps the logits' tensor instead (6 x 4096 x 128256 x 2 B = 6.0
  // GiB); interleaving, 1F1B and pp = 1 do not, nor the CPU, nor logits under
  // 128 MiB (1 x 256 x 128256 x 2 B = 62.6 MiB).
  CHECK(rt::keeps_head_logits(llama, Strategy::parse("pp=2,mbs=6,gas=4,schedule=gpipe"), 4096, 128256, true));
  CHECK_FALSE(rt::keeps_head_logits(llama, Strategy::parse("pp=2,vpp=2,mbs=6,gas=4,schedule=interleaved"), 4096,
                                    128256, true));
  CHECK_FALSE(rt::keeps_head_logits(llama, Strategy::parse("pp=2,mbs=6,gas=4,schedule=gpipe"), 4096, 128256, false));
  CHECK_FALSE(rt::keeps_head_logits(llama, Strategy::parse("pp=2,mbs=6,gas=4,schedule=1f1b"), 4096, 128256, true));
  CHECK_FALSE(rt::keeps_head_logits(llama, one, 4096, 128256, true));
  CHECK_FALSE(rt::keeps_head_logits(llama, Strategy::parse("pp=2,mbs=1,gas=4,schedule=gpipe"), 256, 128256, true));
}

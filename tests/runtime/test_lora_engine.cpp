// The Engine's fine-tuning (runtime/engine.hpp with finetune=lora|qlora), fp32
// on the CPU, one process: each step's loss equals that of a dense model whose
// layer matrices are the merged W + alpha/r B A (QLoRA: dequant(NF4(W)) +
// alpha/r B A) on the same micro-batches, step after step of AdamW on the
// adapters; the frozen base is bit-for-bit what it was; only the adapters
// have gradients and optimizer states.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "lora/lora_engine.hpp"
#include "runtime/batch.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::rt;
using namespace planner::test;

namespace {

// The dense twin's loss for step k: the mean over the step's micro-batches.
double dense_loss(TransformerModel& dense, const Engine& e, const RunConfig& c, TokenSource& tokens, int64_t k) {
  const Strategy& s = c.strategy();
  double sum = 0;
  for (int mb = 0; mb < s.gas; ++mb) {
    std::vector<int64_t> scratch;
    auto [ids, labels] = make_batch(tokens, c.model(), c.seq(), c.options.seed, c.options.mlm_mask_fraction, k, mb,
                                    s.mbs, at::Device(at::kCPU), scratch);
    at::NoGradGuard g;
    sum += dense.loss(ids, labels, Ckpt::None).item<double>();
  }
  (void)e;
  return sum / s.gas;
}

void check_against_dense(const ModelSpec& m, const Strategy& s) {
  const int64_t seq = 16;
  const RunConfig c = lora_config(m, s, seq);
  auto tokens = std::make_shared<SyntheticTokens>(m.vocab, c.options.seed);
  Engine e(c, at::kCPU, tokens, nullptr);
  REQUIRE(e.lora() != nullptr);
  ParamStore& base = e.model().store();
  std::vector<at::Tensor> before;
  for (int id = 0; id < int(base.infos().size()); ++id) before.push_back(base.get(id).clone());
  TransformerModel dense(m, seq);
  dense.materialize(at::Device(at::kCPU), at::kFloat, 1);
  SyntheticTokens ref_tokens(m.vocab, c.options.seed);
  std::vector<double> losses;
  for (int64_t k = 0; k < 4; ++k) {
    {
      at::NoGradGuard g;
      for (int id = 0; id < int(base.infos().size()); ++id) {
        const bool matrix = e.lora()->is_matrix(id);
        dense.store().get(id).copy_(matrix ? e.lora()->merged_weight(id) : base.get(id));
      }
    }
    const double want = dense_loss(dense, e, c, ref_tokens, k);
    const double got = e.step(k).item<double>();
    losses.push_back(got);
    CHECK(std::abs(got - want) <= 1e-5);
  }
  // The adapters learned (B starts at zero, so step 0 is the base's loss)...
  CHECK(losses.back() != losses.front());
  CHECK(e.lora()->parameters().back().abs().max().item<double>() > 0);
  // ... and the base did not move, bit for bit (QLoRA's matrices are not bound: NF4 only).
  for (int id = 0; id < int(base.infos().size()); ++id) {
    if (!base.get(id).defined() || base.get(id).numel() == 0) {
      CHECK((s.finetune.quantized_base() && e.lora()->is_matrix(id)));
      continue;
    }
    CHECK(at::equal(base.get(id), before[size_t(id)]));
    CHECK(!base.get(id).requires_grad());
  }
  // Gradients and optimizer states only for the adapters (fp32: AdamW's
  // moments, the parameters are their own master copy).
  int64_t a = 0;
  for (const at::Tensor& p : e.lora()->parameters()) a += p.numel();
  CHECK(e.grad_bytes() == 4 * a);
  CHECK(e.optimizer_state_bytes() == 8 * a);
}

}  // namespace

TEST_CASE("engine lora: losses equal the dense model with merged weights, the base unchanged", "[lora][engine]") {
  for (const ModelSpec& m : {gpt2_like(), llama_like()}) {
    for (const char* text : {"finetune=lora,lora_r=4,lora_alpha=8,mbs=2,gas=2",
                             "finetune=qlora,lora_r=4,lora_alpha=8,mbs=1,gas=2",
                             "finetune=lora,lora_r=4,lora_targets=q+v,mbs=2,gas=1,ckpt=full"}) {
      INFO(m.name << " " << text);
      Strategy s = Strategy::parse(text);
      s.precision = Precision::FP32;
      check_against_dense(m, s);
    }
  }
}

TEST_CASE("engine lora: sequence parallelism with finetune is refused by name", "[lora][engine]") {
  Strategy s = Strategy::parse("finetune=lora");
  s.tp = 2, s.sp = true;
  const RunConfig c = lora_config(llama_like(), s, 16);
  CHECK_THROWS_WITH(Engine(c, at::kCPU, std::make_shared<SyntheticTokens>(64, 1), nullptr),
                    PLANNER_CONTAINS("finetune=lora runs with sp=0"));
}

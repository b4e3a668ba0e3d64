// The Engine's fine-tuning under data parallelism with ZeRO-0/1/2/3 on the
// adapters, under tensor parallelism (adapters split as their matrices) and
// under pipeline parallelism (dist_np2, dist_np4), fp32 on the
// CPU: losses and every adapter after three steps within 1e-5 of one process
// running the same global batch (dp * gas micro-batches) through the Engine.
#include <chrono>

#include "lora/lora_engine.hpp"
#include "runtime/comm/communicator.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::test;

namespace {

void check_lora(int dp, int pp, const std::string& text, int tp) {
  const RankGrid grid(dp, pp, tp);
  auto dpc = rt::make_communicator(grid.all_dp_groups(), "dp", at::Device(at::kCPU), std::chrono::seconds(120));
  auto ppc = rt::make_communicator(grid.all_pp_groups(), "pp", at::Device(at::kCPU), std::chrono::seconds(120));
  auto tpc = rt::make_communicator(grid.all_tp_groups(), "tp", at::Device(at::kCPU), std::chrono::seconds(120));
  for (const ModelSpec& base : {llama_like(), gpt2_like()}) {
    Strategy s = Strategy::parse(text);
    s.dp = dp, s.pp = pp, s.tp = tp, s.precision = Precision::FP32;
    ModelSpec m = base;
    m.layers = 2 * pp;
    INFO(m.name << " dp=" << dp << " pp=" << pp << " " << text);
    Strategy one = s;
    one.gas = s.gas * s.dp, one.dp = 1, one.pp = 1, one.tp = 1, one.zero = 0;
    const LoraEngineRun a = run_lora_engine(m, one, 16, 3);
    const LoraEngineRun b = run_lora_engine(m, s, 16, 3, dp > 1 ? dpc.get() : nullptr, pp > 1 ? ppc.get() : nullptr,
                                            tp > 1 ? tpc.get() : nullptr);
    REQUIRE(a.losses.size() == b.losses.size());
    // QLoRA under tp quantises each rank's shard of a matrix (its own blocks
    // of 64 and double-quantization constants), so its base is not the one
    // process's NF4 base: the losses agree to the quantization's noise only.
    const bool own_nf4 = tp > 1 && s.finetune.quantized_base();
    for (size_t k = 0; k < a.losses.size(); ++k) CHECK(std::abs(a.losses[k] - b.losses[k]) <= (own_nf4 ? 2e-3 : 1e-5));
    REQUIRE(a.adapters.sizes() == b.adapters.sizes());
    if (!own_nf4) CHECK((a.adapters - b.adapters).abs().max().item<double>() <= 1e-5);
    CHECK(a.losses.back() != a.losses.front());  // the adapters moved
  }
}

}  // namespace

TEST_CASE("dist: Engine LoRA/QLoRA with dp and ZeRO-0..3 on the adapters equals one process", "[dist][lora]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  for (const char* mode : {"lora", "qlora"})
    for (int zero : {0, 1, 2, 3})
      check_lora(w.size, 1, std::string("finetune=") + mode + ",lora_r=4,lora_alpha=8,mbs=1,gas=2,zero=" +
                                std::to_string(zero), 1);
}

TEST_CASE("dist: Engine LoRA/QLoRA under pipeline parallelism equals one process", "[dist][lora][pp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  check_lora(1, w.size, "finetune=lora,lora_r=4,mbs=1,gas=4,schedule=1f1b", 1);
  check_lora(1, w.size, "finetune=qlora,lora_r=4,mbs=1,gas=2,schedule=gpipe", 1);
  if (w.size == 4) check_lora(2, 2, "finetune=lora,lora_r=4,mbs=1,gas=2,zero=1", 1);
}

TEST_CASE("dist: Engine LoRA/QLoRA under tensor parallelism equals one process", "[dist][lora][tp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 2 && w.size != 4) return;
  for (const char* mode : {"lora", "qlora"}) {
    const std::string f = std::string("finetune=") + mode + ",lora_r=4,lora_alpha=8,mbs=1,gas=2";
    if (w.size == 2) check_lora(1, 1, f, 2);
    if (w.size == 4) {
      check_lora(2, 1, f + ",zero=1", 2);
      check_lora(1, 2, f + ",schedule=1f1b", 2);
    }
  }
}

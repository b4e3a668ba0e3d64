// Data parallelism, ZeRO-1/2/3 and offload under mpirun (dist_np2, dist_np4),
// fp32 on the CPU: every rank runs the strategy with dp = the world size
// through the Engine and, alone, the plain single-process Trainer on the same
// global batch (dp * gas micro-batches); losses and every parameter after three
// steps must agree within 1e-5. With accumulation (gas > 1) and with
// checkpointing; tied (GPT-2-like) and untied grouped-query (LLaMA-like) models.
#include <chrono>

#include "equivalence.hpp"
#include "runtime/comm/communicator.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::test;

TEST_CASE("dist: DP, ZeRO-1/2/3 and offload equal the single-process run", "[dist][equivalence]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;  // one rank: nothing data-parallel to compare
  auto dp = rt::make_communicator(RankGrid(w.size, 1, 1).all_dp_groups(), "dp", at::Device(at::kCPU),
                                  std::chrono::seconds(120));
  const char* strategies[] = {
      "zero=0,mbs=2,gas=2",           "zero=0,mbs=1,gas=2,ckpt=full",       "zero=1,mbs=2,gas=2",
      "zero=1,offload=optimizer,mbs=2,gas=2", "zero=2,mbs=1,gas=3,ckpt=selective", "zero=2,offload=optimizer,mbs=2,gas=2",
      "zero=3,mbs=2,gas=2",           "zero=3,offload=optimizer,mbs=1,gas=2,ckpt=full",
      "zero=3,offload=all,mbs=2,gas=2"};
  for (const ModelSpec& m : {gpt2_like(), llama_like()}) {
    for (const char* text : strategies) {
      Strategy s = Strategy::parse(text);
      s.dp = w.size;
      s.precision = Precision::FP32;
      INFO(m.name << " dp=" << s.dp << " " << text);
      const RunResult one = run_single(m, s, 16, 3);
      const RunResult par = run_engine(m, s, 16, 3, dp.get());
      REQUIRE(one.losses.size() == par.losses.size());
      for (size_t k = 0; k < one.losses.size(); ++k) CHECK(std::abs(one.losses[k] - par.losses[k]) <= 1e-5);
      CHECK(max_abs_diff(par.params, one.params) <= 1e-5);
    }
  }
}

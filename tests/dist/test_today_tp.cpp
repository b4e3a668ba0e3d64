// Today's dense decoders under tensor (and sequence) parallelism and data
// parallelism on the CPU (MPI): sliding windows (all layers, the last layer,
// the even layers), q/k/v biases, head_dim apart from hidden/heads, Qwen3's
// per-head q/k norms (replicated weights whose gradients each tp rank holds
// only for its heads), Gemma-2's sandwich norms and GeGLU. Losses and every
// parameter after three steps within 1e-5 of the single-process Trainer
// (fp32). Context parallelism with a window is refused (legality and
// TransformerModel::set_context_parallel), so it is not run here.
#include <chrono>
#include <string>

#include "equivalence.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/device.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::test;

namespace {

void check_today(int dp, int tp, const std::vector<const char*>& texts) {
  const RankGrid grid(dp, 1, tp);
  const at::Device cpu(at::kCPU);
  const auto timeout = std::chrono::seconds(120);
  auto dpc = rt::make_communicator(grid.all_dp_groups(), "dp", cpu, timeout);
  auto tpc = rt::make_communicator(grid.all_tp_groups(), "tp", cpu, timeout);
  for (ModelSpec m : {mistral_like(), qwen2_like(), qwen3_like(), gemma2_like()})
    for (const char* text : texts)
      for (int sp = 0; sp <= 1; ++sp) {
        if (m.kv_heads % tp != 0) m.kv_heads = m.heads;  // tp = 4 splits the kv heads too
        Strategy s = Strategy::parse(text);
        s.dp = dp, s.tp = tp, s.sp = sp == 1, s.precision = Precision::FP32;
        INFO(m.name << " " << s.to_string());
        const RunResult one = run_single(m, s, 16, 3);
        const RunResult par = run_engine(m, s, 16, 3, dp > 1 ? dpc.get() : nullptr, nullptr, tpc.get());
        REQUIRE(one.losses.size() == par.losses.size());
        for (size_t k = 0; k < one.losses.size(); ++k) CHECK(std::abs(one.losses[k] - par.losses[k]) <= 1e-5);
        REQUIRE(par.params.numel() == one.params.numel());
        CHECK(max_abs_diff(par.params, one.params) <= 1e-5);
      }
}

}  // namespace

TEST_CASE("dist: today's dense decoders (windows, q/k norms, head_dim) under tp equal one process", "[dist][tp][window]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size == 2) check_today(1, 2, {"mbs=2,gas=2", "mbs=1,gas=2,ckpt=selective", "mbs=1,gas=2,ckpt=full"});
  if (w.size == 4) {
    check_today(1, 4, {"mbs=2,gas=2"});
    check_today(2, 2, {"zero=1,mbs=1,gas=2"});
  }
}

// Context parallelism (ring attention, runtime/model/context_parallel.hpp)
// through the Engine on the CPU (MPI), alone and with data and tensor
// parallelism (with and without sequence parallelism) and a pipeline: losses
// and every parameter after three steps within 1e-5 of the single-process
// Trainer on the same global batch (fp32). Models: a LLaMA-like (rotary,
// grouped-query attention: 4 heads, 2 kv heads) and a GPT-2-like (learned
// positions, tied embeddings).
#include <chrono>
#include <string>

#include "equivalence.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/model/context_parallel.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::test;

namespace {

struct CpComms {
  std::unique_ptr<rt::Communicator> dp_cp, pp, tp, cp;
};

CpComms make_cp_comms(int dp, int pp, int tp, int cp) {
  const RankGrid grid(dp, pp, tp, cp);
  const at::Device cpu(at::kCPU);
  const auto timeout = std::chrono::seconds(120);
  return {rt::make_communicator(grid.all_dp_cp_groups(), "dp", cpu, timeout),
          rt::make_communicator(grid.all_pp_groups(), "pp", cpu, timeout),
          rt::make_communicator(grid.all_tp_groups(), "tp", cpu, timeout),
          rt::make_communicator(grid.all_cp_groups(), "cp", cpu, timeout)};
}

void check_cp(int dp, int pp, int tp, int cp, const std::vector<ModelSpec>& models,
              const std::vector<const char*>& texts, bool with_sp = false, int64_t seq = 16) {
  CpComms c = make_cp_comms(dp, pp, tp, cp);
  for (const ModelSpec& m : models)
    for (const char* text : texts)
      for (int sp = 0; sp <= (with_sp ? 1 : 0); ++sp) {
        Strategy s = Strategy::parse(text);
        s.dp = dp, s.pp = pp, s.tp = tp, s.cp = cp, s.sp = sp == 1, s.precision = Precision::FP32;
        INFO(m.name << " " << s.to_string());
        const RunResult one = run_single(m, s, seq, 3);
        const RunResult par = run_engine(m, s, seq, 3, s.dp_cp() > 1 ? c.dp_cp.get() : nullptr,
                                         s.pp > 1 ? c.pp.get() : nullptr, s.tp > 1 ? c.tp.get() : nullptr, c.cp.get());
        REQUIRE(one.losses.size() == par.losses.size());
        for (size_t k = 0; k < one.losses.size(); ++k) CHECK(std::abs(one.losses[k] - par.losses[k]) <= 1e-5);
        REQUIRE(par.params.numel() == one.params.numel());
        CHECK(max_abs_diff(par.params, one.params) <= 1e-5);
      }
}

}  // namespace

TEST_CASE("dist: ring attention equals causal attention over the whole sequence", "[dist][cp]") {
  // One layer's attention alone, forward and backward, against ATen's SDPA on
  // the gathered sequence: q with 4 heads, k/v with 2 (grouped-query).
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  const RankGrid grid(1, 1, 1, w.size);
  auto comm = rt::make_communicator(grid.all_cp_groups(), "cp", at::Device(at::kCPU), std::chrono::seconds(60));
  const int64_t seq = 8 * w.size, b = 2, d = 8;
  rt::ContextParallel cp(comm.get(), seq);
  at::manual_seed(7);  // every rank draws the same full tensors
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({b, 4, seq, d}, opt), k = at::randn({b, 2, seq, d}, opt), v = at::randn({b, 2, seq, d}, opt);
  at::Tensor dout = at::randn({b, 4, seq, d}, opt);
  auto leaf = [](const at::Tensor& t) { return t.to(at::kFloat).detach().requires_grad_(true); };
  at::Tensor qf = leaf(q), kf = leaf(k), vf = leaf(v);
  at::Tensor ref = at::scaled_dot_product_attention(qf, kf, vf, {}, 0.0, true, std::nullopt, true);
  ref.backward(dout.to(at::kFloat));
  at::Tensor ql = leaf(cp.shard(q, 2)), kl = leaf(cp.shard(k, 2)), vl = leaf(cp.shard(v, 2));
  at::Tensor out = cp.attention(ql, kl, vl);
  out.backward(cp.shard(dout, 2).to(at::kFloat));
  CHECK(max_abs_diff(out.detach(), cp.shard(ref.detach(), 2)) <= 1e-5);
  CHECK(max_abs_diff(ql.grad(), cp.shard(qf.grad(), 2)) <= 1e-5);
  CHECK(max_abs_diff(kl.grad(), cp.shard(kf.grad(), 2)) <= 1e-5);
  CHECK(max_abs_diff(vl.grad(), cp.shard(vf.grad(), 2)) <= 1e-5);
  // Positions: chunks rank and 2cp-1-rank of 2cp chunks of 8/2 = 4 tokens.
  const at::Tensor pos = cp.positions(at::kCPU);
  CHECK(pos[0].item<int64_t>() == 4 * cp.rank());
  CHECK(pos[4].item<int64_t>() == 4 * (2 * w.size - 1 - cp.rank()));
}

TEST_CASE("dist: context parallelism equals the single-process run", "[dist][cp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size == 2) {
    check_cp(1, 1, 1, 2, {llama_like(), gpt2_like()},
             {"mbs=2,gas=2", "mbs=1,gas=2,ckpt=full", "mbs=1,gas=2,ckpt=selective", "zero=1,mbs=2,gas=1"});
  }
  if (w.size == 4) {
    check_cp(1, 1, 1, 4, {llama_like(), gpt2_like()}, {"mbs=2,gas=2", "zero=2,mbs=1,gas=2,ckpt=full"});
    check_cp(2, 1, 1, 2, {llama_like(), gpt2_like()}, {"mbs=1,gas=2", "zero=1,mbs=2,gas=1", "zero=3,mbs=1,gas=2"});
    check_cp(1, 1, 2, 2, {llama_like()}, {"mbs=2,gas=2", "zero=1,mbs=1,gas=2,ckpt=full"}, /*with_sp=*/true);
    check_cp(1, 1, 2, 2, {gpt2_like()}, {"mbs=2,gas=2"});
    ModelSpec llama = llama_like();
    llama.layers = 4;
    check_cp(1, 2, 1, 2, {llama}, {"mbs=1,gas=4,schedule=1f1b"});
  }
}

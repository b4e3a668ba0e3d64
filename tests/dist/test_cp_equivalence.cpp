// Context parallelism (ring attention, runtime/model/context_parallel.hpp)
// through the Engine on the CPU (MPI), alone and with data and tensor
// parallelism (with and without sequence parallelism) and a pipeline: losses
// and every parameter after three steps within 1e-5 of the single-process
// Trainer on the same global batch (fp32). Models: a LLaMA-like (rotary,
// grouped-query attention: 4 heads, 2 kv heads) and a GPT-2-like (learned
// positions, tied embeddings).
#include <chrono>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/context_parallel.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

namespace {

// Every strategy of `texts` on every model at dp x pp x tp x cp (sp off, and on
// with_sp) equals one process.
void check_cp(int dp, int pp, int tp, int cp, const std::vector<ModelSpec>& models,
              const std::vector<const char*>& texts, bool with_sp = false) {
  check_grid({dp, pp, tp, cp}, models, texts, with_sp);
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

// Mixture of experts (runtime/model/moe.hpp) with expert parallelism through
// the Engine on the CPU (MPI): all-to-all dispatch and combine over the ep
// group, expert gradients over the expert-data-parallel group, alone and with
// data, tensor and pipeline parallelism. Losses and every parameter after
// three steps within 1e-5 of the single-process Trainer on the same global
// batch (fp32). Model: tests/tiny_models.hpp's moe_like (8 experts, top-2, a
// gated shared MLP; deterministic routing; the auxiliary loss's gradient in
// every step).
#include <chrono>
#include <map>
#include <numeric>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/moe.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

namespace {

// Every strategy of `texts` on m at dp x pp x tp with ep (sp off) equals one process, both with `routing`.
void check_ep(int dp, int pp, int tp, int ep, const ModelSpec& m, const std::vector<const char*>& texts,
              rt::MoeRouting routing = rt::MoeRouting::Learned) {
  rt::RunOptions o;
  o.moe_routing = routing;
  check_grid({dp, pp, tp, 1, ep}, {m}, texts, /*with_sp=*/false, /*seq=*/16, o);
}

// Every strategy of `texts` on m at dp x tp with ep and sequence parallelism
// (sp=1) equals one process, with `routing`.
void check_sp(int dp, int tp, int ep, const ModelSpec& m, const std::vector<const char*>& texts,
              rt::MoeRouting routing = rt::MoeRouting::Learned) {
  rt::RunOptions o;
  o.moe_routing = routing;
  const GridComms c = make_grid_comms({dp, 1, tp, 1, ep});
  for (const char* text : texts) {
    Strategy s = Strategy::parse(text);
    s.dp = dp, s.tp = tp, s.ep = ep, s.sp = true, s.precision = Precision::FP32;
    check_equivalent(m, s, /*seq=*/16, c, 3, {}, o);
  }
}

// moe_like with GELU experts and an ungated shared MLP, a dense first layer.
ModelSpec moe_gelu() {
  ModelSpec m = moe_like();
  m.name = "tiny-moe-gelu";
  m.mlp = MlpKind::Gelu, m.layers = 3, m.moe.dense_layers = 1, m.moe.shared_gate = false;
  return m;
}

}  // namespace

TEST_CASE("dist: all_to_all_v exchanges uneven runs", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  std::vector<int> all(size_t(w.size));
  for (int i = 0; i < w.size; ++i) all[size_t(i)] = i;
  auto c = rt::make_communicator({all}, "a2a", at::Device(at::kCPU), std::chrono::seconds(60));
  // Rank r sends r + p + 1 values to rank p, each 100 r + p.
  std::vector<int64_t> send, recv;
  std::vector<at::Tensor> parts;
  for (int p = 0; p < w.size; ++p) {
    send.push_back(w.rank + p + 1), recv.push_back(p + w.rank + 1);
    parts.push_back(at::full({w.rank + p + 1}, double(100 * w.rank + p), at::kDouble));
  }
  at::Tensor out = at::empty({std::accumulate(recv.begin(), recv.end(), int64_t(0))}, at::kDouble);
  c->all_to_all_v(at::cat(parts), send, out, recv)->wait();
  int64_t at_ = 0;
  for (int p = 0; p < w.size; ++p) {
    CHECK(out.narrow(0, at_, recv[size_t(p)]).eq(double(100 * p + w.rank)).all().item<bool>());
    at_ += recv[size_t(p)];
  }
}

TEST_CASE("dist: expert parallelism equals the single-process run", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  ModelSpec m = moe_like();
  ModelSpec m4 = moe_like();
  m4.layers = 4, m4.moe.dense_layers = 1;  // a dense first layer too
  if (w.size == 2) {
    check_ep(2, 1, 1, 2, m, {"mbs=2,gas=2", "mbs=1,gas=2,ckpt=full"});
    check_ep(2, 1, 1, 1, m, {"mbs=2,gas=2"});
    check_ep(1, 1, 2, 1, m, {"mbs=2,gas=2"});
    check_ep(1, 2, 1, 1, m4, {"mbs=1,gas=4,schedule=1f1b"});
  }
  if (w.size == 4) {
    check_ep(4, 1, 1, 4, m, {"mbs=2,gas=2"});
    check_ep(4, 1, 1, 2, m, {"mbs=1,gas=2"});
    check_ep(2, 1, 2, 2, m, {"mbs=2,gas=2"});
    check_ep(2, 2, 1, 2, m4, {"mbs=1,gas=4,schedule=1f1b"});
  }
}

// ZeRO-1/2 with a MoE model (runtime/engine_detail.hpp's Piece): the local
// experts' optimizer states (and, ZeRO-2, gradients) sharded over the
// expert-data-parallel group (dp/ep ranks: 2 at dp 4 x ep 2; 1 at dp = ep,
// where each rank keeps its experts' whole), the rest over dp; the updated
// chunks all-gathered within each group. Three steps, so the sharded Adam
// moments are read back twice; the auxiliary loss's gradient in every step.
TEST_CASE("dist: expert parallelism with ZeRO-1/2 equals the single-process run", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  ModelSpec m = moe_like();
  ModelSpec m4 = moe_like();
  m4.layers = 4, m4.moe.dense_layers = 1;  // a dense first layer too
  const std::vector<const char*> zero12 = {"zero=1,mbs=2,gas=2", "zero=2,mbs=1,gas=3,ckpt=full"};
  if (w.size == 2) {
    check_ep(2, 1, 1, 2, m, {"zero=1,mbs=2,gas=2", "zero=2,mbs=2,gas=2", "zero=1,offload=optimizer,mbs=1,gas=2",
                             "zero=2,offload=optimizer,mbs=2,gas=2"});
    check_ep(2, 1, 1, 1, m, {"zero=2,mbs=2,gas=2"});  // ZeRO-2 with a MoE model at ep = 1
  }
  if (w.size == 4) {
    check_ep(4, 1, 1, 2, m, {"zero=1,mbs=2,gas=2", "zero=2,mbs=1,gas=3,ckpt=full",
                             "zero=2,offload=optimizer,mbs=1,gas=2"});
    check_ep(4, 1, 1, 4, m, zero12);
    check_ep(2, 1, 2, 2, m, zero12);
    check_ep(2, 2, 1, 2, m4, {"zero=1,mbs=1,gas=4,schedule=1f1b"});
    check_ep(4, 1, 1, 1, m, {"zero=2,mbs=1,gas=2"});
  }
}

// What the Engine keeps per rank with ZeRO-1/2 at ep > 1, as the memory
// model prices it (costmodel/memory_model.cpp: the local experts' states
// over dp/ep ranks, the rest over dp): in each unit the local experts'
// elements over the expert-data-parallel group and the rest over dp, each
// rounded up to a multiple of its group (fp32: the Adam moments, 8 bytes an
// element; ZeRO-2's gradient shards 4).
TEST_CASE("dist: ZeRO-1/2 at ep > 1 shard the experts' states over the expert-data-parallel group", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  for (int ep = 2; ep <= w.size; ep *= 2) {  // np 4: edp 2 and 1
    const GridComms c = make_grid_comms({w.size, 1, 1, 1, ep});
    const int edp = w.size / ep;
    for (int zero : {1, 2}) {
      Strategy s = Strategy::parse("mbs=1,gas=1");
      s.dp = w.size, s.ep = ep, s.zero = zero, s.precision = Precision::FP32;
      INFO(s.to_string());
      const rt::RunConfig rc = run_config(moe_like(), s, 16);
      rt::Engine e(rc, at::kCPU, std::make_shared<rt::SyntheticTokens>(rc.model().vocab, 1), c.dp_cp.get(), nullptr,
                   nullptr, nullptr, c.ep.get(), c.edp.get());
      std::map<int, std::pair<int64_t, int64_t>> per_unit;  // unit -> (dense, local experts) elements
      for (const rt::ParamInfo& i : e.model().store().infos())
        (i.expert ? per_unit[i.group].second : per_unit[i.group].first) += i.numel;
      int64_t shard = 0, experts = 0;
      for (const auto& [u, n] : per_unit) {
        shard += (n.first + w.size - 1) / w.size + (n.second + edp - 1) / edp;
        experts += n.second;
      }
      REQUIRE(experts > 0);
      CHECK(e.optimizer_state_bytes() == 8 * shard);
      CHECK(e.grad_bytes() == (zero == 2 ? 4 * shard : e.param_bytes()));
    }
  }
}

// The program's overlap options with the experts' pieces: every Reduce held
// for the Sync (a ZeRO-2 unit reduce-scattered once for the step, over both
// groups), and the ZeRO-1/2 all-gathers waited for by the next forward.
TEST_CASE("dist: expert parallelism with ZeRO-1/2 and the overlap options equals the single-process run",
          "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 4) return;
  rt::RunOptions o;
  o.overlap_grad_reduce = false, o.overlap_param_gather = true;
  check_grid({4, 1, 1, 1, 2}, {moe_like()}, {"zero=1,mbs=1,gas=2", "zero=2,mbs=1,gas=2"}, /*with_sp=*/false, 16, o);
}

// Balanced routing (runtime/model/moe.hpp, `planner exec --moe-routing
// balanced`): token t of a micro-batch to experts (t k + j) mod E on every
// rank and in the one process alike (the micro-batches are the same), so the
// ep runs equal the single process as with the router's routing. moe_like: 8
// experts, top-2; mbs 2 x seq 16 = 32 tokens, 64 assignments, 8 per expert,
// 32 rows per rank at ep 2 (16 at ep 4), and with mbs 1 (16 tokens) 4 per expert.
TEST_CASE("dist: expert parallelism with balanced routing equals the single-process run", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  const ModelSpec m = moe_like();
  const auto bal = rt::MoeRouting::Balanced;
  if (w.size == 2) {
    check_ep(2, 1, 1, 2, m, {"mbs=2,gas=2", "mbs=1,gas=2,ckpt=full"}, bal);
    check_ep(2, 1, 1, 1, m, {"mbs=2,gas=2"}, bal);
  }
  if (w.size == 4) {
    check_ep(4, 1, 1, 2, m, {"mbs=1,gas=2"}, bal);
    check_ep(2, 1, 2, 2, m, {"mbs=2,gas=2"}, bal);
  }
}

// Sequence parallelism with a MoE model (runtime/model/moe.hpp): the layer
// all-gathers the sequence shards over tp before the router and the experts
// and reduce-scatters its tp-partial output; the router's and the shared
// gate's gradients are each shard's part, summed over tp with the other
// replicated parameters, and the auxiliary loss reaches the router once.
// Against one process: losses and every parameter after three steps.
TEST_CASE("dist: MoE with sequence parallelism at tp > 1 equals the single-process run", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  const ModelSpec m = moe_like();
  if (w.size == 2) {
    check_sp(1, 2, 1, m, {"mbs=2,gas=2", "mbs=1,gas=2,ckpt=full"});
    check_sp(1, 2, 1, moe_gelu(), {"mbs=2,gas=1"});
    check_sp(1, 2, 1, m, {"mbs=1,gas=2"}, rt::MoeRouting::Balanced);
  }
  if (w.size == 4) {
    check_sp(2, 2, 1, m, {"mbs=2,gas=2", "zero=1,mbs=1,gas=2", "zero=2,mbs=2,gas=1,ckpt=full"});
    check_sp(2, 2, 2, m, {"mbs=2,gas=2", "zero=1,mbs=1,gas=2", "zero=2,mbs=2,gas=2"});
    check_sp(2, 2, 2, moe_gelu(), {"zero=1,mbs=1,gas=2"});
  }
}

// ZeRO-3 with a MoE model: each layer unit's parameters are gathered into a
// pooled buffer for its forward, released, and gathered again (into whichever
// buffer is free) for its backward, so the MoE layer's autograd must read its
// weights there (runtime/model/moe_gemm.hpp), not through views saved in the
// forward. Three MoE layers over the pool's two layer buffers: a layer's
// forward buffer holds another layer's weights by its backward. With ep > 1
// the local experts' shards are gathered over the expert-data-parallel group
// and the rest over dp (runtime/engine_detail.hpp's Piece).
TEST_CASE("dist: MoE with ZeRO-3 equals the single-process run", "[dist][moe]") {
  const rt::WorldInfo w = rt::init_world();
  ModelSpec m = moe_like();
  m.layers = 3;
  if (w.size == 2) {
    check_ep(2, 1, 1, 1, m, {"zero=3,mbs=2,gas=2", "zero=3,mbs=1,gas=2,ckpt=full"});
    check_ep(2, 1, 1, 2, m, {"zero=3,mbs=2,gas=2", "zero=3,offload=all,mbs=1,gas=2"});
    check_ep(2, 1, 1, 1, moe_gelu(), {"zero=3,mbs=1,gas=2"});
  }
  if (w.size == 4) {
    check_ep(4, 1, 1, 1, m, {"zero=3,mbs=1,gas=2"});
    check_ep(4, 1, 1, 2, m, {"zero=3,mbs=1,gas=2", "zero=3,offload=optimizer,mbs=1,gas=2,ckpt=full"});
    check_ep(4, 1, 1, 4, m, {"zero=3,mbs=1,gas=2"});
    check_sp(2, 2, 1, m, {"zero=3,mbs=2,gas=1"});
    check_sp(2, 2, 2, m, {"zero=3,mbs=1,gas=2"});
  }
}

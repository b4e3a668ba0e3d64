// Context parallelism (cp): the Strategy's text form, the rank grid with cp
// inside tp-cp-pp-dp, the legality rules and the engines' refusals.
#include <set>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/cp_costs.hpp"
#include "costmodel/engines.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/op_costs.hpp"
#include "costmodel/predict.hpp"
#include "costmodel/simulator.hpp"
#include "strategies/search_space.hpp"
#include "strategies/step_program.hpp"
#include "strategies/errors.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/strategy.hpp"
#include "test_util.hpp"

using namespace planner;

namespace {
Plan cp_plan(const std::string& model, const std::string& gpus, const std::string& strategy, int64_t seq) {
  PlanRequest req;
  req.model = model, req.gpus = gpus, req.strategy = strategy, req.seq = seq;
  return build_plan(req);
}
}  // namespace

TEST_CASE("cp: text form omits cp=1 and round-trips cp>1", "[cp][strategy]") {
  Strategy s = Strategy::parse("dp=2,tp=2,cp=2");
  CHECK(s.cp == 2);
  CHECK(s.world() == 8);
  CHECK(s.dp_cp() == 4);
  CHECK(s.to_string() ==
        "dp=2,tp=2,pp=1,cp=2,zero=0,offload=none,ckpt=none,mbs=1,gas=1,schedule=1f1b,vpp=1,precision=bf16,sp=0");
  CHECK(Strategy::parse(s.to_string()) == s);
  // cp=1 (given or not) prints exactly as before context parallelism existed.
  CHECK(Strategy::parse("dp=2,cp=1").to_string() ==
        "dp=2,tp=1,pp=1,zero=0,offload=none,ckpt=none,mbs=1,gas=1,schedule=1f1b,vpp=1,precision=bf16,sp=0");
  CHECK_THROWS_AS(Strategy::parse("cp=0"), InputError);
  CHECK_THROWS_AS(Strategy::parse("dp=1024,tp=1024,cp=2").validate(), InputError);
}

TEST_CASE("cp: the rank grid puts cp right after tp (tp-cp-pp-dp)", "[cp][strategy]") {
  // The worked example of rank_grid.hpp: dp=2, pp=1, tp=2, cp=2.
  const RankGrid g(2, 1, 2, 2);
  CHECK(g.world() == 8);
  CHECK(g.coord(6) == RankCoord{1, 0, 0, 1});
  CHECK(g.rank(RankCoord{1, 0, 1, 1}) == 7);
  CHECK(g.all_tp_groups() == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(g.all_cp_groups() == std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(g.all_dp_groups() == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(g.all_dp_cp_groups() == std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}});
  // cp=4 with pp=2, tp=1, dp=1: the cp ring is consecutive ranks within a stage.
  const RankGrid h(1, 2, 1, 4);
  CHECK(h.all_cp_groups() == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(h.all_pp_groups() == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(h.dp_cp_group(5) == std::vector<int>{4, 5, 6, 7});
  // cp=1 is the grid of before: the dp-cp group is the dp group.
  const RankGrid k(2, 2, 2);
  for (int r = 0; r < k.world(); ++r) CHECK(k.dp_cp_group(r) == k.dp_group(r));
  // Every rank round-trips and each group kind partitions the ranks.
  for (auto [dp, pp, tp, cp] : {std::tuple{2, 2, 2, 2}, std::tuple{1, 3, 2, 4}, std::tuple{3, 1, 1, 2}}) {
    const RankGrid grid(dp, pp, tp, cp);
    for (int r = 0; r < grid.world(); ++r) CHECK(grid.rank(grid.coord(r)) == r);
    for (auto groups : {grid.all_tp_groups(), grid.all_pp_groups(), grid.all_dp_groups(), grid.all_cp_groups(),
                        grid.all_dp_cp_groups()}) {
      std::set<int> seen;
      for (auto& grp : groups)
        for (int r : grp) CHECK(seen.insert(r).second);
      CHECK(int(seen.size()) == grid.world());
    }
  }
  CHECK_THROWS_AS(RankGrid(1, 1, 1, 0), InputError);
}

TEST_CASE("cp: legality (seq divisible by 2*cp, the GPU count, causal decoders)", "[cp][compat]") {
  const Plan p = cp_plan("llama-2-7b", "8xH100", "tp=2,cp=2", 8192);
  CHECK(p.strategy.dp == 2);  // 8 GPUs / (tp 2 * cp 2)
  CHECK(p.global_batch == 2);
  CHECK(test_util::contains(test_util::error_of([] { cp_plan("llama-2-7b", "8xH100", "tp=2,cp=4", 4100); }), "not a multiple of 8"));
  CHECK(test_util::contains(test_util::error_of([] { cp_plan("llama-2-7b", "8xH100", "dp=1,tp=2,cp=2", 8192); }), "dp*tp*pp*cp = 1*2*1*2 = 4 must equal the GPU count 8"));
  CHECK(test_util::contains(test_util::error_of([] { cp_plan("bert-large", "4xH100", "cp=2", 512); }), "causal decoder"));
  CHECK(test_util::contains(test_util::error_of([] { cp_plan("gpt2", "4xH100", "tp=2,sp=1,cp=2", 1024); }), "learned positions"));
  // Sequence parallelism splits each rank's seq/cp tokens over tp.
  CHECK(test_util::contains(test_util::error_of([] { cp_plan("llama-2-7b", "8xH100", "tp=4,sp=1,cp=2", 4); }), "seq/cp = 2 tokens over the tp ranks"));
  CHECK(test_util::contains(test_util::error_of([] { cp_plan("llama-2-7b", "8xH100", "tp=2,cp=2,precision=fp32", 8192); }), "flash kernels"));
  CHECK_NOTHROW(cp_plan("llama-2-7b", "8xH100", "tp=2,sp=1,cp=2", 8192));
}

TEST_CASE("cp: engines that lack context parallelism refuse it by name", "[cp][export]") {
  const Plan p = cp_plan("llama-2-7b", "8xH100", "tp=2,cp=2", 8192);
  CHECK(engine_gap(p, Engine::Megatron).empty());
  CHECK(test_util::contains(engine_gap(p, Engine::DeepSpeed), "context parallelism"));
  CHECK(test_util::contains(engine_gap(p, Engine::Fsdp), "context parallelism"));
}

// ---- Cost model (step 2) ----

TEST_CASE("cp: a KVF before every layer's F and a KVB before its B", "[cp][step_program]") {
  Strategy s = Strategy::parse("cp=2,mbs=1,gas=1,precision=fp32");
  const StepProgram p = build_step_program(s, 2);
  // Units: 0 embedding, 1-2 layers, 3 head. The gradients are all-reduced over
  // the dp-cp group (2 ranks), and the loss too.
  CHECK(to_string(p) ==
        "0F0.0 0KVF0.1 0F0.1 0KVF0.2 0F0.2 0F0.3 0B0.3 0AR3 0KVB0.2 0B0.2 0AR2 0KVB0.1 0B0.1 0AR1 0B0.0 0AR0 0Sync "
        "0LRdp 0Norm 0Clip 0Opt\n");
  CHECK(parse_step_lists(to_string(p).substr(0, to_string(p).size() - 1)) == p.stages);
  CHECK(parse_step_action("1KVB3.7.c1") == StepAction{StepOp::CpRingB, 1, 3, 7, 1});
  // cp=1: no exchange.
  s.cp = 1;
  CHECK(to_string(build_step_program(s, 2)) == "0F0.0 0F0.1 0F0.2 0F0.3 0B0.3 0B0.2 0B0.1 0B0.0 0Sync 0Norm 0Clip 0Opt\n");
}

TEST_CASE("cp: the simulator puts the exposed ring on the compute stream", "[cp][sim]") {
  const Strategy s = Strategy::parse("cp=2,dp=1,mbs=1,gas=2,precision=fp32");
  const StepProgram p = build_step_program(s, 2);
  TableCostModel cost(p.partition);
  for (int u = 0; u < p.partition.units(); ++u) {
    UnitCost& c = cost.unit(u);
    c.forward_seconds = 1, c.backward_seconds = 2;
    if (u == 1 || u == 2) c.cp_ring_forward_seconds = 0.5, c.cp_ring_backward_seconds = 0.25;
  }
  // Two micro-batches of 4 units (F 1 + B 2 each) and of 2 layers' rings
  // (0.5 + 0.25 each): 2 * (12 + 1.5) = 27 s; the all-reduces cost nothing.
  CHECK(simulate(p, cost).makespan_seconds == Approx(27.0).epsilon(1e-12));
  CHECK(makespan_lower_bound(cost, 2) == Approx(27.0).epsilon(1e-12));
}

TEST_CASE("cp: K/V chunk bytes and the exposed ring, by hand", "[cp][time]") {
  const ModelSpec m = resolve_model("llama-2-7b");  // kv_dim 4096 (32 kv heads of 128)
  Strategy s = Strategy::parse("tp=2,cp=4,mbs=1");
  // 2 (K, V) x 8192/4 tokens x 4096/2 x 2 bytes = 16 MiB.
  CHECK(cp_kv_chunk_bytes(m, 8192, s, 2) == 16.0 * (1 << 20));
  GroupLink link;
  link.size = 2, link.seconds_per_byte = 1e-11, link.hop_latency_seconds = 1e-5;
  PassTimes block;
  block.forward.attention_seconds = 1e-4, block.backward.attention_seconds = 2.5e-4;
  // t_kv = 2e-5 + 1e-5 + 16 MiB x 1e-11 = 1.9777216e-4; t_dkv (fp32) = 3e-5 + 3.3554432e-4.
  // forward = 3 (t_kv - 1e-4); backward = 3 (t_kv + t_dkv - 2.5e-4) + t_dkv.
  CpRingSeconds r = cp_ring_seconds(block, m, 8192, s, link, 2e-5);
  CHECK(r.forward == Approx(2.9331648e-4).epsilon(1e-9));
  CHECK(r.backward == Approx(1.30549376e-3).epsilon(1e-9));
  // Full recomputation reruns the forward ring inside the backward.
  s.ckpt = Ckpt::Full;
  CHECK(cp_ring_seconds(block, m, 8192, s, link, 2e-5).backward == Approx(1.30549376e-3 + 2.9331648e-4).epsilon(1e-9));
  s.ckpt = Ckpt::Selective;  // not rerun: ring attention keeps its output and log-sum-exp
  CHECK(cp_ring_seconds(block, m, 8192, s, link, 2e-5).backward == Approx(1.30549376e-3).epsilon(1e-9));
  // The exchange 3x slower beside the block (comm_slowdown_beside_compute 3):
  // by the block's end a third of its alone-time is done; the rest is exposed.
  // forward = 3 (t_kv - 1e-4 / 3); backward = 3 (t_kv + t_dkv - 2.5e-4 / 3) + t_dkv.
  s.ckpt = Ckpt::None;
  const double t_kv = 1.9777216e-4, t_dkv = 3e-5 + 3.3554432e-4;
  CpRingSeconds slow = cp_ring_seconds(block, m, 8192, s, link, 2e-5, 3.0);
  CHECK(slow.forward == Approx(3 * (t_kv - 1e-4 / 3)).epsilon(1e-9));
  CHECK(slow.backward == Approx(3 * (t_kv + t_dkv - 2.5e-4 / 3) + t_dkv).epsilon(1e-9));
  // A slowdown below 1 is taken as 1.
  CHECK(cp_ring_seconds(block, m, 8192, s, link, 2e-5, 0.5).forward == Approx(r.forward).epsilon(1e-12));
  // A block long enough hides the forward ring.
  block.forward.attention_seconds = 1e-3;
  CHECK(cp_ring_seconds(block, m, 8192, s, link, 2e-5).forward == 0);
  PassTimes layer = block;
  scale_attention_for_cp(layer, 4);
  CHECK(layer.forward.attention_seconds == Approx(4e-3));
  CHECK(layer.backward.attention_seconds == Approx(1e-3));
  s.cp = 1;
  CHECK(cp_ring_seconds(block, m, 8192, s, link, 2e-5).backward == 0);
}

TEST_CASE("cp: the ring's elementwise memory traffic, by hand", "[cp][time]") {
  // llama-2-7b (no GQA: 32 heads of 128), tp=2, cp=2, seq 8: 4 tokens a rank,
  // nq = nkv = 4 x 16 x 128 = 8192 elements, bf16 (2 bytes), fp32 sums (4).
  // Strided class (copies out of views, broadcasts, converting adds):
  //   forward  = q, k, v contiguous 3x8192x4 + output back 8192x4 + one step
  //              (copies 0.5(2x8192x2 + 8192x2) + merge 0.75x8192x14)     = 241664
  //   backward = gradient contiguous 8192x4 + dQ += 8192x10 + one step
  //              (mean of earlier 2x8192x2 + 81920 + 2x0.5x8192x8 = 180224
  //              and later 3x8192x2 + 0.5x81920 = 90112)                  = 249856
  // Streaming (fills, casts, contiguous fp32 sums):
  //   forward  = output to fp32 8192x6 + back 8192x6                      = 98304
  //   backward = dQ zeroed 8192x4 + dK, dV to fp32 2x8192x6 + one step
  //              (0.5(0.5x98304 + dK, dV zeroed 2x8192x4 + 98304) + sums
  //              2x8192x12) + dQ, dK, dV back 3x8192x6                    = 581632
  const ModelSpec m = resolve_model("llama-2-7b");
  Strategy s = Strategy::parse("tp=2,cp=2,mbs=1");
  CpRingBytes b = cp_ring_memory_bytes(m, 8, s);
  CHECK(b.forward == Approx(241664.0));
  CHECK(b.backward == Approx(249856.0));
  CHECK(b.forward_stream == Approx(98304.0));
  CHECK(b.backward_stream == Approx(581632.0));
  // GQA (llama-3-8b: 32 heads, 8 kv heads of 128), tp=1, cp=2, seq 8:
  // nq = 16384, nkv = 4096; cuDNN's blocks take K/V on the kv heads and return
  // dK/dV per kv head (nothing repeated per query head):
  //   forward  = (16384 + 2x4096)x4 + 16384x4 + 0.5(2x4096x2 + 16384x2)
  //              + 0.75x16384x14                                          = 360448
  //   backward = 16384x4 + 16384x10 + 0.5(earlier 2x4096x2 + 163840
  //              + 2x0.5x4096x8 = 212992, later 3x16384x2 + 81920 = 180224) = 425984
  //   streaming forward 2x16384x6 = 196608; backward 16384x4 + 2x4096x6
  //              + 0.5(0.5x49152 + 2x4096x4 + 49152) + 2x4096x12 + 16384x6
  //              + 2x4096x6                                               = 413696
  const ModelSpec g = resolve_model("llama-3-8b");
  s = Strategy::parse("cp=2,mbs=1");
  b = cp_ring_memory_bytes(g, 8, s);
  CHECK(b.forward == Approx(360448.0));
  CHECK(b.backward == Approx(425984.0));
  CHECK(b.forward_stream == Approx(196608.0));
  CHECK(b.backward_stream == Approx(413696.0));
  CHECK(b.forward_kernels == 16);  // 7 + 9 a later step
  CHECK(b.backward_kernels == 19);  // 7 + 12 a later step
  // None without cp; priced into the layer at the two rates (and rerun by full recomputation).
  CHECK(cp_ring_memory_bytes(g, 8, Strategy::parse("tp=2,mbs=1")).forward == 0.0);
  const HardwareProfile p = default_profile(gpu_by_name("H100-SXM"));
  PassTimes t;
  s.ckpt = Ckpt::Full;
  add_cp_ring_memory(t, p, g, 8, s);
  const double fwd = 360448.0 / (p.memory_Bps() * p.strided_kernel_relative) + 196608.0 / p.memory_Bps() +
                     16 * p.kernel_overhead_seconds;
  const double bwd = 425984.0 / (p.memory_Bps() * p.strided_kernel_relative) + 413696.0 / p.memory_Bps() +
                     19 * p.kernel_overhead_seconds;
  CHECK(t.forward.memory_seconds == Approx(fwd));
  CHECK(t.backward.memory_seconds == Approx(bwd));
  CHECK(t.recompute.memory_seconds == Approx(t.forward.memory_seconds));
}

TEST_CASE("cp: memory holds seq/cp tokens and the ring's buffers", "[cp][memory]") {
  // cp=2 at seq 8192 on 8 GPUs against cp=1 at seq 4096 on 4: the same tokens
  // per rank, so the same logits, and the same activations but the output
  // projection's own copy of the ring's output, 4096 x 4096/2 x 2 B = 16 MiB a
  // layer, 32 layers; the comm buffers differ by the cp ring's communicator
  // and its chunk buffers: K/V 2 x 4096 x 4096/2 x 2 B = 32 MiB, twice, and
  // dK/dV in fp32 twice: 192 MiB.
  const Plan a = cp_plan("llama-2-7b", "8xH100", "dp=2,tp=2,cp=2,zero=0,mbs=1,gas=1", 8192);
  const Plan b = cp_plan("llama-2-7b", "4xH100", "dp=2,tp=2,zero=0,mbs=1,gas=1", 4096);
  CHECK(cp_ring_buffer_bytes(a.model, 8192, a.strategy) == 192.0 * (1 << 20));
  const MemoryReport ma = estimate_memory(a), mb = estimate_memory(b);
  const MemBreakdown& x = ma.peak_breakdown();
  const MemBreakdown& y = mb.peak_breakdown();
  CHECK(x[int(MemCategory::Activations)] - y[int(MemCategory::Activations)] == 32 * 16 * (int64_t(1) << 20));
  CHECK(x[int(MemCategory::LogitsLoss)] == y[int(MemCategory::LogitsLoss)]);
  CHECK(x[int(MemCategory::Parameters)] == y[int(MemCategory::Parameters)]);
  const double comm = double(default_profile(a.cluster.gpu).nccl_communicator_bytes) + 192.0 * (1 << 20);
  CHECK(double(x[int(MemCategory::CommBuffers)] - y[int(MemCategory::CommBuffers)]) == Approx(comm).epsilon(1e-12));
  // Under ZeRO-1 the optimizer states shard over dp-cp = 4 ranks.
  const Plan z = cp_plan("llama-2-7b", "8xH100", "dp=2,tp=2,cp=2,zero=1,mbs=1,gas=1", 8192);
  const Plan z1 = cp_plan("llama-2-7b", "8xH100", "dp=4,tp=2,zero=1,mbs=1,gas=1", 4096);
  CHECK(estimate_memory(z).peak_breakdown()[int(MemCategory::OptimizerStates)] ==
        estimate_memory(z1).peak_breakdown()[int(MemCategory::OptimizerStates)]);
}

TEST_CASE("cp: prediction at a long sequence, and the search tries cp from seq 8192", "[cp][predict][search]") {
  // A cp=2 rank computes seq/2 tokens: its GEMMs are those of seq/2, its
  // attention twice a causal block of seq/2 (a quarter of the pairs of seq).
  const Plan with = cp_plan("llama-2-7b", "8xH100", "dp=1,tp=4,cp=2,zero=1,ckpt=full,mbs=1,gas=8", 32768);
  const Plan half = cp_plan("llama-2-7b", "4xH100", "dp=1,tp=4,zero=1,ckpt=full,mbs=1,gas=8", 16384);
  const HardwareProfile prof = default_profile(with.cluster.gpu);
  CostContext c2(with.model, with.cluster, 32768, prof), c1(half.model, half.cluster, 16384, prof);
  const PassTimes t2 = c2.layer_times(with.strategy), t1 = c1.layer_times(half.strategy);
  CHECK(t2.forward.gemm_seconds == t1.forward.gemm_seconds);
  CHECK(t2.forward.attention_seconds == Approx(2 * t1.forward.attention_seconds).epsilon(1e-12));
  CHECK(t2.backward.attention_seconds == Approx(2 * t1.backward.attention_seconds).epsilon(1e-12));
  // The ring is priced on layer units only.
  const TableCostModel table = build_cost_model(with, prof);
  CHECK(table.unit(1).cp_ring_backward_seconds > 0);
  CHECK(table.unit(0).cp_ring_backward_seconds == 0);
  CHECK(table.unit(33).cp_ring_backward_seconds == 0);  // the head
  CHECK(predict(with).step_seconds > predict(half).step_seconds);  // twice the attention of seq/2, plus the ring
  SpaceLimits L;
  L.world = 8, L.global_batch = 8, L.layers = 32, L.heads = 32, L.kv_heads = 32, L.ffn = 11008;
  const int64_t without = count_strategies(L);
  L.max_cp = 8, L.seq = 32768;
  const std::vector<Strategy> all = enumerate_strategies(L);
  CHECK(int64_t(all.size()) > without);
  int cp_plans = 0;
  for (const Strategy& s : all) {
    cp_plans += s.cp > 1;
    CHECK(s.world() == 8);
    CHECK(32768 % (2 * s.cp) == 0);
  }
  CHECK(cp_plans == int64_t(all.size()) - without);
  L.seq = 6;  // 2*cp must divide seq: only cp = 1 and 3 (3 does not divide 8): nothing added
  CHECK(count_strategies(L) == without);
}

TEST_CASE("cp: selective recomputation does not rerun ring attention", "[cp][time]") {
  // The runtime keeps the ring's output and log-sum-exp (runtime/model/
  // transformer.cpp attention()): selective recomputes nothing under cp, so the
  // layer's recompute is empty and the step equals no recomputation's. Without
  // cp, selective reruns the attention core's forward.
  const Plan sel = cp_plan("llama-3.2-1b", "2xH200", "cp=2,ckpt=selective,mbs=1", 32768);
  const Plan none = cp_plan("llama-3.2-1b", "2xH200", "cp=2,mbs=1", 32768);
  const HardwareProfile prof = default_profile(sel.cluster.gpu);
  CostContext c(sel.model, sel.cluster, 32768, prof);
  const PassTimes t = c.layer_times(sel.strategy);
  CHECK(t.recompute.attention_seconds == 0);
  CHECK(t.recompute.memory_seconds == 0);
  CHECK(predict(sel).step_seconds == Approx(predict(none).step_seconds).epsilon(1e-12));
  const Plan plain = cp_plan("llama-3.2-1b", "1xH200", "ckpt=selective,mbs=1", 16384);
  CostContext c1(plain.model, plain.cluster, 16384, prof);
  CHECK(c1.layer_times(plain.strategy).recompute.attention_seconds > 0);
}

TEST_CASE("cp with ep: the text form, the expert groups at every cp index, the experts' states", "[cp][moe]") {
  const Strategy s = Strategy::parse("dp=4,tp=2,cp=2,ep=2");
  CHECK(s.to_string() ==
        "dp=4,tp=2,pp=1,cp=2,zero=0,offload=none,ckpt=none,mbs=1,gas=1,schedule=1f1b,vpp=1,precision=bf16,sp=0,ep=2");
  CHECK(Strategy::parse(s.to_string()) == s);
  // dp=4, pp=1, tp=1, cp=2 (rank = 2 dp + cp), ep=2: an ep group is two
  // consecutive dp indices at one cp index; an expert-dp group the dp indices
  // equal modulo 2 at both cp indices (the cp ranks hold the same experts).
  const RankGrid g(4, 1, 1, 2);
  CHECK(g.ep_group(0, 2) == std::vector<int>{0, 2});
  CHECK(g.ep_group(3, 2) == std::vector<int>{1, 3});
  CHECK(g.ep_group(5, 2) == std::vector<int>{5, 7});
  CHECK(g.expert_dp_group(0, 2) == std::vector<int>{0, 1, 4, 5});
  CHECK(g.expert_dp_group(7, 2) == std::vector<int>{2, 3, 6, 7});
  for (auto groups : {g.all_ep_groups(2), g.all_expert_dp_groups(2)}) {
    std::set<int> seen;
    for (auto& grp : groups)
      for (int r : grp) CHECK(seen.insert(r).second);
    CHECK(int(seen.size()) == g.world());
  }
  // Mixtral on 16 GPUs under ZeRO-1: dp=4 x cp=2 with ep=2 shards the dense
  // states over dp*cp = 8 and the experts' over dp/ep*cp = 4, as dp=8 with
  // ep=2 does (8 and 4): the same states per rank.
  const Plan a = cp_plan("mixtral-8x7b", "16xH100", "dp=4,tp=2,cp=2,ep=2,zero=1,mbs=1,gas=2", 8192);
  const Plan b = cp_plan("mixtral-8x7b", "16xH100", "dp=8,tp=2,ep=2,zero=1,mbs=1,gas=1", 8192);
  const MemBreakdown x = estimate_memory(a).peak_breakdown(), y = estimate_memory(b).peak_breakdown();
  CHECK(x[int(MemCategory::OptimizerStates)] == y[int(MemCategory::OptimizerStates)]);
  CHECK(x[int(MemCategory::Parameters)] == y[int(MemCategory::Parameters)]);
  CHECK(predict(a).step_seconds > 0);
  // The search space holds plans with both, each by the rules of both.
  SpaceLimits L;
  L.world = 16, L.global_batch = 16, L.layers = 32, L.heads = 32, L.kv_heads = 8, L.ffn = 14336;
  L.experts = 8, L.expert_ffn = 14336, L.max_cp = 16, L.seq = 8192, L.fp32 = false;
  int both = 0;
  for_each_strategy(L, [&](const Strategy& t) {
    both += t.cp > 1 && t.ep > 1;
    CHECK(t.world() == 16);
    CHECK(t.dp % t.ep == 0);
  });
  CHECK(both > 0);
}

// Mixture of experts in the cost model, by hand: activated FLOPs (Mixtral-8x7B
// against its published 12.9B active parameters), the model states of a small
// MoE sharded by ep and ZeRO over the expert-data-parallel group, the tokens
// each expert computes, the all-to-all, and the time and memory of a step
// moving the way they must with ep and the imbalance knob.
#include <cmath>

#include "catch.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/moe_costs.hpp"
#include "costmodel/predict.hpp"
#include "specs/cluster_spec.hpp"
#include "specs/flops.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;
using test_util::error_of;

namespace {

// As test_moe.cpp: hidden 8, 3 layers (the first dense, ffn 16), 4 experts of
// width 6, top 2, a gated shared expert of width 12; SwiGLU, no biases,
// untied, vocab 10: 3176 parameters, of which 2 x 4 x 144 = 1152 in experts.
ModelSpec tiny_moe() {
  ModelSpec m;
  m.name = "tiny-moe";
  m.layers = 3, m.hidden = 8, m.heads = 2, m.kv_heads = 2, m.ffn = 16, m.vocab = 10;
  m.pos = PosEmbed::Rotary, m.mlp = MlpKind::SwiGlu, m.norm = NormKind::RmsNorm;
  m.qkv_bias = m.out_bias = m.mlp_bias = false;
  m.tied_embeddings = false;
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.expert_ffn = 6;
  m.moe.shared_experts = 1, m.moe.shared_ffn = 12, m.moe.shared_gate = true;
  m.moe.dense_layers = 1;
  return m;
}

Plan plan_of(const ModelSpec& m, const std::string& gpus, const std::string& strategy, int64_t seq) {
  Plan p;
  p.model = m;
  p.cluster = resolve_cluster(gpus);
  p.strategy = Strategy::parse(strategy);
  p.seq = seq;
  p.global_batch = p.strategy.global_batch();
  return p;
}

}  // namespace

TEST_CASE("Mixtral-8x7B's model FLOPs count its activated parameters", "[moe][flops]") {
  const ModelSpec m = model_preset("mixtral-8x7b");
  // Per layer: attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040; two of
  // the eight experts, 2 x 3 x 4096 x 14336 = 352,321,536; the LM head
  // 4096 x 32000. The router (32,768 per layer) is left out, as Megatron does.
  CHECK(matmul_params(m) == int64_t(32) * (41'943'040 + 352'321'536) + int64_t(4096) * 32000);
  // Against the published 12.9B active: the matmul parameters are those less
  // the input embedding (131M), the norms and the routers.
  CHECK(double(matmul_params(m)) / 12.9e9 == Approx(0.988).epsilon(0.005));
  CHECK(forward_flops_per_token(m, 4096) == 2.0 * double(matmul_params(m)) + 4.0 * 4096 * 32 * 4096);
  // The same FLOPs as the dense model of the activated width (ffn = 2 x 14336).
  ModelSpec dense = m;
  dense.moe = {};
  dense.ffn = 2 * 14336;
  CHECK(model_flops(m, 4096, 1000) == model_flops(dense, 4096, 1000));
}

TEST_CASE("tokens per local expert: balanced, imbalanced, capped", "[moe]") {
  ModelSpec m = model_preset("mixtral-8x7b");
  // 4096 tokens on each of 2 ranks, 2 experts each, top 2 of 8: 4096 x 2 x 2 / 8.
  CHECK(tokens_per_local_expert(m, 4096, 2) == 2048);
  CHECK(tokens_per_local_expert(m, 4096, 1) == 1024);
  m.moe.imbalance = 1.5;
  CHECK(tokens_per_local_expert(m, 4096, 2) == 3072);
  m.moe.capacity_factor = 1.25;  // the capacity drops what is over 1.25x
  CHECK(tokens_per_local_expert(m, 4096, 2) == 2560);
  CHECK(routed_tokens_per_rank(m, 4096) == 4096.0 * 2 * 1.25);
}

TEST_CASE("all-to-all time by hand", "[moe][collectives]") {
  GroupLink g;
  g.size = 4, g.nodes = 1, g.per_node = 4, g.seconds_per_byte = 1e-9, g.hop_latency_seconds = 1e-6;
  // base + (n - 1) a + (n - 1)/n S / B
  CHECK(all_to_all_seconds(1e6, g, 5e-6) == Approx(5e-6 + 3e-6 + 0.75 * 1e6 * 1e-9).epsilon(1e-12));
  CHECK(all_to_all_seconds(1e6, GroupLink{}, 5e-6) == 0);
  // Across 2 nodes of 4: 4 of 8 shares cross the network, 3 stay inside.
  GroupLink x = g;
  x.size = 8, x.nodes = 2, x.intra_seconds_per_byte = 1e-9, x.inter_seconds_per_byte = 1e-8;
  CHECK(all_to_all_seconds(1e6, x, 0) == Approx(7e-6 + 0.5 * 1e6 * 1e-8).epsilon(1e-12));
}

TEST_CASE("a small MoE's model states by hand: experts sharded by ep and ZeRO over dp/ep", "[moe][memory]") {
  const ModelSpec m = tiny_moe();
  // dp=4, ep=2, ZeRO-1, bf16: each rank holds 2 of 4 experts in both MoE
  // layers (2 x 2 x 144 = 576) and everything else (3176 - 1152 = 2024).
  const Plan p = plan_of(m, "4xH100", "dp=4,ep=2,zero=1,mbs=1,gas=1", 16);
  REQUIRE_NOTHROW(check_compat(p));
  const MemoryReport r = estimate_memory(p);
  const StageMemory& s = r.stages.at(0);
  CHECK(s.params == 2024 + 576);
  CHECK(s.gpu[int(MemCategory::Parameters)] == 2 * 2600);
  CHECK(s.gpu[int(MemCategory::Gradients)] == 2 * 2600);
  // The optimizer's 12 bytes per parameter: the dense part over 4 dp ranks,
  // the experts over their expert-data-parallel group of 4 / 2 = 2.
  CHECK(s.gpu[int(MemCategory::OptimizerStates)] == 12 * 2024 / 4 + 12 * 576 / 2);
  // ep = 1: all four experts on every rank, sharded over all 4.
  const MemoryReport r1 = estimate_memory(plan_of(m, "4xH100", "dp=4,zero=1,mbs=1,gas=1", 16));
  CHECK(r1.stages.at(0).params == 3176);
  CHECK(r1.stages.at(0).gpu[int(MemCategory::OptimizerStates)] == 12 * 3176 / 4);
}

TEST_CASE("ep: legality, and what it changes in a step", "[moe][predict]") {
  const ModelSpec m = model_preset("mixtral-8x7b");
  CHECK(contains(error_of([&] { check_compat(plan_of(m, "8x8xH100", "dp=64,ep=16,zero=1", 4096)); }),
                 "ep=16 must divide the experts (8)"));
  ModelSpec dense = model_preset("mistral-7b");
  CHECK(contains(error_of([&] { check_compat(plan_of(dense, "8xH100", "dp=8,ep=2", 4096)); }),
                 "needs a mixture-of-experts model"));
  // Mixtral-8x7B on 64 H100s, tp=2 x dp=32, ZeRO-1: with ep=8 each rank keeps
  // 1 of 8 experts: far less memory, and the step pays the all-to-alls.
  const StepPrediction e1 = predict(plan_of(m, "8x8xH100", "tp=2,dp=32,zero=1,sp=1,mbs=1,gas=4,ckpt=full", 4096));
  const StepPrediction e8 = predict(plan_of(m, "8x8xH100", "tp=2,dp=32,ep=8,zero=1,sp=1,mbs=1,gas=4,ckpt=full", 4096));
  INFO("ep=1: " << e1.step_seconds << " s, " << e1.memory.per_gpu_peak_bytes / 1e9 << " GB; ep=8: " << e8.step_seconds
                << " s, " << e8.memory.per_gpu_peak_bytes / 1e9 << " GB");
  CHECK(e8.memory.per_gpu_peak_bytes < 0.5 * e1.memory.per_gpu_peak_bytes);
  // The same model FLOPs whatever the parallelism: MFU on activated parameters.
  CHECK(e8.model_flops_per_step == e1.model_flops_per_step);
  CHECK(e1.model_flops_per_step == model_flops(m, 4096, 32 * 4 * 4096));
  // An imbalance of 2 (the busiest expert gets twice its share): slower.
  ModelSpec skew = m;
  skew.moe.imbalance = 2;
  const StepPrediction s8 = predict(plan_of(skew, "8x8xH100", "tp=2,dp=32,ep=8,zero=1,sp=1,mbs=1,gas=4,ckpt=full", 4096));
  CHECK(s8.step_seconds > e8.step_seconds);
  CHECK(s8.memory.per_gpu_peak_bytes > e8.memory.per_gpu_peak_bytes);
}

TEST_CASE("a MoE of one expert costs what the dense layer costs, plus its router and permutations", "[moe][time]") {
  const HardwareProfile p = default_profile(gpu_by_name("H100"));
  ModelSpec dense = model_preset("mistral-7b");
  dense.sliding_window = dense.window_layers = 0;
  ModelSpec one = dense;
  one.moe.experts = 1, one.moe.top_k = 1, one.moe.expert_ffn = dense.ffn;
  const LayerShape s{4096, 1, 1, false, Precision::BF16, Ckpt::None};
  const PassTimes d = transformer_layer_times(p, dense, s, GroupLink{});
  const PassTimes o = moe_mean_layer_times(p, one, s, GroupLink{}, 1);
  // The same GEMMs plus the router (4096 x 1 x 4096: tiny), the same attention.
  CHECK(o.forward.attention_seconds == Approx(d.forward.attention_seconds).epsilon(1e-12));
  CHECK(o.forward.gemm_seconds > d.forward.gemm_seconds);
  CHECK(o.forward.gemm_seconds < 1.02 * d.forward.gemm_seconds);
  CHECK(o.forward.memory_seconds > d.forward.memory_seconds);
  // Eight experts of the same width, top 2, on one rank: twice the MLP GEMM
  // work in 8 GEMMs of 1024 tokens (less efficient than 2 of 4096).
  ModelSpec eight = one;
  eight.moe.experts = 8, eight.moe.top_k = 2;
  const PassTimes x = moe_mean_layer_times(p, eight, s, GroupLink{}, 1);
  const double mlp_fwd = d.forward.gemm_seconds - o.forward.gemm_seconds;  // < 0: the router's share
  INFO("dense " << d.forward.gemm_seconds << ", 1 expert " << o.forward.gemm_seconds << ", 8x top-2 "
                << x.forward.gemm_seconds << " (" << mlp_fwd << ")");
  CHECK(x.forward.gemm_seconds > 1.5 * d.forward.gemm_seconds);
}

TEST_CASE("dense first layers are counted on the stage that holds them", "[moe][memory]") {
  // tiny_moe over pp=3, one layer a stage: stage 0 the embedding (80) and the
  // dense layer (656); stage 1 a MoE layer (1176); stage 2 a MoE layer, the
  // final norm (8) and the untied head (80).
  const MemoryReport r = estimate_memory(plan_of(tiny_moe(), "3xH100", "pp=3,mbs=1,gas=3", 16));
  REQUIRE(r.stages.size() == 3);
  CHECK(r.stages[0].params == 80 + 656);
  CHECK(r.stages[1].params == 1176);
  CHECK(r.stages[2].params == 1176 + 8 + 80);
  CHECK(r.stages[0].params + r.stages[1].params + r.stages[2].params == tiny_moe().total_params());
  // The same split by moe_stage_params: expert parameters only on the MoE stages.
  const Strategy s = Strategy::parse("pp=3,mbs=1,gas=3");
  CHECK(moe_stage_params(tiny_moe(), s, 0, {1, 1, 1}, 736).experts == 0);
  CHECK(moe_stage_params(tiny_moe(), s, 1, {1, 1, 1}, 656).experts == 4 * 144);
  CHECK(moe_stage_params(tiny_moe(), s, 1, {1, 1, 1}, 656).moe_layers == 1);
}

// The host floor (moe_costs.hpp moe_host_seconds, calibrate's moe_host part):
// a MoE layer's forward with its all-to-all takes at least the host's
// forward seconds, its backward the host's backward seconds (plus a forward
// under full recomputation), weighted by the MoE layers' share; nothing
// without the profile's fields; the ep figures for ep > 1 where measured.
TEST_CASE("the MoE host floor by hand", "[moe][time]") {
  ModelSpec m = model_preset("mixtral-8x7b");
  m.layers = 8, m.moe.dense_layers = 2;  // 6 of 8 layers MoE
  const Plan plan = plan_of(m, "4xH100", "dp=2,ep=2,tp=2,zero=1,mbs=1,gas=2", 1024);
  HardwareProfile p = default_profile(plan.cluster.gpu);
  // No MoE host figures (the shipped H100 profile has some).
  p.moe_host_forward_seconds = p.moe_host_backward_seconds = 0;
  p.moe_host_forward_row_seconds = p.moe_host_backward_row_seconds = 0;
  p.moe_host_ep_size = 0;
  p.moe_host_ep_forward_seconds = p.moe_host_ep_backward_seconds = 0;
  p.moe_host_ep_forward_row_seconds = p.moe_host_ep_backward_row_seconds = 0;
  const UnitCost none = build_cost_model(plan, p).unit(1);
  CHECK(none.moe_host_forward_seconds == 0);
  CHECK(moe_host_seconds(p, 2, 100).measured == false);
  // ep = 1 figures only: taken for ep = 2, said.
  p.moe_host_forward_seconds = 0.05, p.moe_host_forward_row_seconds = 1e-6;
  p.moe_host_backward_seconds = 0.02, p.moe_host_backward_row_seconds = 0;
  const double rows = 1024.0 * 2;  // mbs 1 x seq 1024 x top-2, balanced
  MoeHostSeconds h = moe_host_seconds(p, 2, rows);
  CHECK(h.ep_unmeasured);
  CHECK(h.forward == Approx(0.05 + 1e-6 * rows));
  const UnitCost u = build_cost_model(plan, p).unit(1);
  // Forward: 0.75 x (host - (kernels + all-to-all)), the kernels far below 50 ms here.
  CHECK(u.moe_host_forward_seconds ==
        Approx(0.75 * (h.forward - (none.forward_seconds + none.moe_a2a_forward_seconds))).epsilon(1e-9));
  CHECK(u.forward_seconds == Approx(none.forward_seconds + u.moe_host_forward_seconds).epsilon(1e-12));
  CHECK(u.moe_host_backward_seconds ==
        Approx(0.75 * (0.02 - (none.backward_seconds + none.moe_a2a_backward_seconds))).epsilon(1e-9));
  // Measured at ep = 2: those figures instead.
  p.moe_host_ep_size = 2, p.moe_host_ep_forward_seconds = 0.08, p.moe_host_ep_backward_seconds = 0.03;
  h = moe_host_seconds(p, 2, rows);
  CHECK_FALSE(h.ep_unmeasured);
  CHECK(h.forward == Approx(0.08));
  CHECK(moe_host_seconds(p, 1, rows).forward == Approx(0.05 + 1e-6 * rows));
  // A host faster than the kernels adds nothing.
  p.moe_host_ep_forward_seconds = p.moe_host_ep_backward_seconds = 1e-9;
  CHECK(build_cost_model(plan, p).unit(1).moe_host_forward_seconds == 0);
  CHECK(build_cost_model(plan, p).unit(1).moe_host_backward_seconds == 0);
  // A shared MLP adds the profile's shared figures to either, only where a host time is measured.
  p.moe_host_ep_forward_seconds = 0.08, p.moe_host_ep_backward_seconds = 0.03;
  p.moe_host_shared_forward_seconds = 0.004, p.moe_host_shared_backward_seconds = 0.006;
  CHECK(moe_host_seconds(p, 2, rows, true).forward == Approx(0.084));
  CHECK(moe_host_seconds(p, 2, rows, true).backward == Approx(0.036));
  CHECK(moe_host_seconds(p, 2, rows, false).forward == Approx(0.08));
  CHECK(moe_host_seconds(p, 1, rows, true).backward == Approx(0.02 + 0.006));
  HardwareProfile none_measured = p;
  none_measured.moe_host_forward_seconds = none_measured.moe_host_backward_seconds = 0;
  none_measured.moe_host_forward_row_seconds = 0, none_measured.moe_host_ep_size = 0;
  CHECK_FALSE(moe_host_seconds(none_measured, 1, rows, true).measured);
  CHECK(moe_host_seconds(none_measured, 1, rows, true).forward == 0);
}

TEST_CASE("the MoE block's memory-bound kernels by hand, as the runtime runs them", "[moe][time]") {
  // e = 2 bytes, T = 10 tokens, R = 20 routed rows, h = 4.
  MemoryOps f1, b1, f2, b2, fs, bs;
  add_moe_dispatch_ops(2, 10, 20, 4, 1, false, false, f1, b1);
  add_moe_dispatch_ops(2, 10, 20, 4, 2, false, false, f2, b2);
  add_moe_dispatch_ops(2, 10, 20, 4, 2, true, true, fs, bs);
  // Forward at ep = 1: two gathers of every row (read + write: 2 x 2 x 20 x 4
  // = 320 bytes each); the top_k copies 2 x (10 + 20) x 4 = 240 and the
  // combine multiply 2 x 2 x 20 x 4 = 320 (both non-vectorized); the sum over
  // top_k 2 x (20 + 10) x 4 = 240.
  CHECK(f1.streaming == 640);
  CHECK(f1.strided == 560);
  CHECK(f1.reduction == 240);
  CHECK(f1.kernels == 5);
  // ep > 1 gathers the received rows into local-expert order and back: two more.
  CHECK(f2.streaming == 1280);
  CHECK(f2.kernels == 7);
  CHECK(f2.strided == f1.strided);
  // Backward at ep = 2: the four gathers (1280) and the input's gradients
  // added (3 x 2 x 10 x 4 = 240); the multiply's gradients 2 x (10 + 20) x 4 +
  // 3 x 2 x 20 x 4 = 720; the weights' reduction over h 160 and the top_k
  // copies' sum 240.
  CHECK(b2.streaming == 1520);
  CHECK(b2.strided == 720);
  CHECK(b2.reduction == 400);
  CHECK(b2.kernels == 9);
  // A gated shared MLP: its sum (240 each way) and the gate's multiply (240 forward, 480 backward).
  CHECK(fs.streaming == f2.streaming + 240);
  CHECK(fs.strided == f2.strided + 240);
  CHECK(bs.streaming == b2.streaming + 240);
  CHECK(bs.strided == b2.strided + 480);
}

// precision=fp8 in the planning half: parsing and legality (Hopper only), the
// FP8 GEMM rate, the cast kernels' bytes, the transient fp8 buffers and the
// opt-in search, against numbers computed by hand.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/engines.hpp"
#include "costmodel/fp8_costs.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/op_costs.hpp"
#include "planner/search.hpp"
#include "specs/plan.hpp"
#include "strategies/errors.hpp"

using namespace planner;

namespace {

Plan plan_on(const char* gpus, const char* strategy, int64_t seq = 2048) {
  Plan p;
  p.model = model_preset("llama-2-7b");
  p.cluster = parse_cluster(gpus);
  p.strategy = Strategy::parse(strategy);
  p.seq = seq;
  p.global_batch = p.strategy.global_batch();
  return p;
}

// A profile whose round numbers make the arithmetic easy (test_time_ops.cpp's toy).
HardwareProfile toy() {
  HardwareProfile p;
  p.gpu = "toy";
  p.peak_fp32_flops = 25e12;
  p.peak_fp16_flops = p.peak_bf16_flops = 100e12;
  p.peak_fp8_flops = 200e12;
  p.gemm_efficiency = 0.5;
  p.memory_bandwidth_Bps = 1e12;
  p.memory_efficiency = 0.5;  // streaming at 500 GB/s
  p.sm_count = 100;
  p.kernel_overhead_seconds = 0;
  return p;
}

}  // namespace

TEST_CASE("precision=fp8 parses, prints and keeps bf16 elements", "[fp8]") {
  const Strategy s = Strategy::parse("dp=1,precision=fp8");
  CHECK(s.precision == Precision::FP8);
  CHECK(s.to_string().find("precision=fp8") != std::string::npos);
  CHECK(Strategy::parse(s.to_string()) == s);
  CHECK(bytes_per_element(Precision::FP8) == 2);  // activations and weights stay bf16
  CHECK(working_precision(Precision::FP8) == Precision::BF16);
  CHECK(working_precision(Precision::FP16) == Precision::FP16);
}

TEST_CASE("fp8 is legal only where the GPU has FP8 tensor cores", "[fp8]") {
  // H100 SXM datasheet: FP8 3,958 TFLOP/s with sparsity, 1,979 dense.
  CHECK(gpu_by_name("H100-SXM").peak_fp8 == Approx(1979e12));
  CHECK(gpu_by_name("H100-PCIE").peak_fp8 == Approx(1512e12));
  CHECK(gpu_by_name("H200").peak_fp8 == Approx(1979e12));
  CHECK(gpu_by_name("B200").peak_fp8 == Approx(4500e12));
  CHECK(gpu_by_name("A100-80GB-SXM").peak_fp8 == 0);
  CHECK_NOTHROW(check_compat(plan_on("1xH100", "dp=1,precision=fp8")));
  try {
    check_compat(plan_on("1xA100", "dp=1,precision=fp8"));
    FAIL("fp8 on an A100 was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("A100") != std::string::npos);
    CHECK(std::string(e.what()).find("fp8") != std::string::npos);
  }
  // The exports write no FP8 recipe: every engine but this runtime refuses it.
  CHECK_FALSE(engine_gap(plan_on("1xH100", "dp=1,precision=fp8"), Engine::Megatron).empty());
  CHECK(engine_gap(plan_on("1xH100", "dp=1,precision=fp8"), Engine::Ours).empty());
}

TEST_CASE("GPU JSON carries peak_fp8_TFLOPS only where it is not zero", "[fp8]") {
  nlohmann::json h = gpu_by_name("H100-SXM"), a = gpu_by_name("A100-80GB-SXM");
  CHECK(h["peak_fp8_TFLOPS"].get<double>() == Approx(1979));
  CHECK_FALSE(a.contains("peak_fp8_TFLOPS"));
  CHECK(h.get<GpuSpec>() == gpu_by_name("H100-SXM"));
}

TEST_CASE("FP8 GEMMs run at the FP8 peak, MFU counts against the bf16 peak", "[fp8]") {
  HardwareProfile p = toy();
  CHECK(p.gemm_flops(Precision::FP8) == Approx(100e12));  // 200 x 0.5: bf16's efficiency until calibrated
  CHECK(p.peak_flops(Precision::FP8) == Approx(100e12));  // the bf16 peak
  p.gemm_efficiency_fp8 = 0.4;
  CHECK(p.gemm_flops(Precision::FP8) == Approx(80e12));
  // 8192^3: 2 * 8192^3 / 80e12 s; the operands are one byte each, not memory-bound.
  CHECK(gemm_seconds(p, 8192, 8192, 8192, Precision::FP8) == Approx(2.0 * std::pow(8192.0, 3) / 80e12));
  // The datasheet profile of an H100: twice the bf16 rate.
  const HardwareProfile h = datasheet_profile(gpu_by_name("H100-SXM"));
  CHECK(h.gemm_flops(Precision::FP8) == Approx(2 * h.gemm_flops(Precision::BF16)));
}

TEST_CASE("fp8 layer: the four linears at the FP8 rate plus their casts; attention unchanged", "[fp8]") {
  const HardwareProfile p = toy();
  ModelSpec m = model_preset("llama-2-7b");  // h 4096, 32 heads, no GQA, SwiGLU ffn 11008
  LayerShape s;
  s.seq = 2048, s.mbs = 1;
  s.precision = Precision::BF16;
  const PassTimes b = transformer_layer_times(p, m, s, GroupLink{});
  s.precision = Precision::FP8;
  const PassTimes f = transformer_layer_times(p, m, s, GroupLink{});
  CHECK(f.forward.attention_seconds == Approx(b.forward.attention_seconds));
  CHECK(f.backward.attention_seconds == Approx(b.backward.attention_seconds));
  // The GEMMs: at 2x the rate (all four are compute-bound at T = 2048).
  CHECK(f.forward.gemm_seconds == Approx(b.forward.gemm_seconds / 2).epsilon(1e-6));
  // The casts (fp8_costs.cpp add_fp8_cast_ops), over (T, n, k) of qkv
  // (12288, 4096), o (4096, 4096), up (22016, 4096), down (4096, 11008),
  // X = T k, W = k n, G = T n. The runtime's own kernels (the profile's
  // fused_ops, the default), all at the streaming rate (500 GB/s): forward
  // 2(X + W) bytes read by the amax kernels and 3 (X + W) by the casts (read
  // 2, write 1).
  const double T = 2048;
  const double shapes[4][2] = {{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}};
  double XW = 0, GXW = 0, G = 0, W = 0;
  for (auto& nk : shapes) {
    const double n = nk[0], k = nk[1];
    XW += T * k + k * n;
    GXW += T * n + T * k + k * n;
    G += T * n;
    W += k * n;
  }
  const double Bps = 0.5e12, red = 0.67 * Bps, strided = 0.55 * Bps;
  CHECK(f.forward.memory_seconds - b.forward.memory_seconds == Approx(5 * XW / Bps).epsilon(1e-9));
  // Backward: dY's amax (2 G), its cast both ways (read 2, write 2), X's and
  // W's transposed casts from the forward's amax (3 each), dW added into the
  // gradient buffer (6 kn).
  CHECK(f.backward.memory_seconds - b.backward.memory_seconds ==
        Approx((2 * G + 4 * G + 3 * XW + 6 * W) / Bps).epsilon(1e-9));

  // ATen's path (a profile without the runtime's kernels): 11 bytes a cast
  // element (bf16 x scale into fp32, then to fp8) on PyTorch's non-vectorized
  // kernels (the strided class, 0.55 of the stream); the backward's amax of
  // dY only, its casts of dY, X, W and their transposing copies (2 bytes an
  // element, strided), and the dW add.
  HardwareProfile pa = p;
  pa.fused_ops = false;
  s.precision = Precision::BF16;
  const PassTimes ba = transformer_layer_times(pa, m, s, GroupLink{});
  s.precision = Precision::FP8;
  const PassTimes fa = transformer_layer_times(pa, m, s, GroupLink{});
  CHECK(fa.forward.memory_seconds - ba.forward.memory_seconds ==
        Approx(2 * XW / red + 11 * XW / strided).epsilon(1e-9));
  CHECK(fa.backward.memory_seconds - ba.backward.memory_seconds ==
        Approx(2 * G / red + 11 * GXW / strided + 2 * GXW / strided + 6 * W / Bps).epsilon(1e-9));
}

TEST_CASE("fp8 under tp: one amax all-reduce per linear forward, one per column-parallel backward", "[fp8]") {
  // runtime/model/fp8_linear.hpp: forward one all-reduce MAX of [amax X,
  // amax W] (8 bytes) per linear, backward one of amax dY (4 bytes) for qkv
  // and fc1; each latency-bound and in the way of its cast, so not overlapped.
  const HardwareProfile p = toy();
  const ModelSpec m = model_preset("llama-2-7b");
  GroupLink g;
  g.size = 2, g.per_node = 2, g.seconds_per_byte = 1.0 / 100e9, g.hop_latency_seconds = 2e-6;
  const double base = p.collective_base_latency_seconds;
  const double a8 = all_reduce_seconds(8, g, base) + p.tp_collective_extra(8);
  const double a4 = all_reduce_seconds(4, g, base) + p.tp_collective_extra(4);
  REQUIRE(a8 > 0);
  for (bool sp : {false, true}) {
    INFO("sp=" << sp);
    LayerShape s;
    s.seq = 2048, s.mbs = 1, s.tp = 2, s.sp = sp;
    s.precision = Precision::BF16;
    const PassTimes b = transformer_layer_times(p, m, s, g);
    s.precision = Precision::FP8;
    const PassTimes f = transformer_layer_times(p, m, s, g);
    CHECK(f.forward.tp_comm_seconds - b.forward.tp_comm_seconds == Approx(4 * a8).epsilon(1e-9));
    CHECK(f.backward.tp_comm_seconds - b.backward.tp_comm_seconds == Approx(2 * a4).epsilon(1e-9));
    s.ckpt = Ckpt::Full;  // the recomputed forward reduces its amaxes again
    const PassTimes r = transformer_layer_times(p, m, s, g);
    CHECK(r.recompute.tp_comm_seconds == Approx(f.forward.tp_comm_seconds));
  }
  // No tp: no collective.
  LayerShape one;
  one.seq = 2048, one.mbs = 1, one.precision = Precision::FP8;
  CHECK(transformer_layer_times(p, m, one, GroupLink{}).forward.tp_comm_seconds == 0);
}

TEST_CASE("fp8 memory: the transient fp8 copies of the largest linear, nothing else", "[fp8]") {
  Plan b = plan_on("1xH100", "dp=1,mbs=1,gas=1,precision=bf16", 2048);
  Plan f = b;
  f.strategy.precision = Precision::FP8;
  const MemoryReport mb = estimate_memory(b), mf = estimate_memory(f);
  const auto& gb = mb.stages[0].gpu;
  const auto& gf = mf.stages[0].gpu;
  for (MemCategory c : {MemCategory::Parameters, MemCategory::Gradients, MemCategory::OptimizerStates,
                        MemCategory::Activations, MemCategory::LogitsLoss})
    CHECK(gf[int(c)] == gb[int(c)]);
  // llama-2-7b at T = 2048: the MLP up projection (n = 22016, k = 4096) holds
  // the most, at its weight-gradient GEMM: dY8 transposed (Tn), X8
  // transposed (Tk) and the bf16 dW (2 kn) (fp8_costs.cpp, the runtime's
  // kernels), against 2 Tn + kn at dX's GEMM.
  const double T = 2048, n = 22016, k = 4096;
  const double expect = T * n + T * k + 2 * k * n;  // 0.22 GiB
  CHECK(expect > 2 * T * n + k * n);
  CHECK(double(gf[int(MemCategory::Overhead)] - gb[int(MemCategory::Overhead)]) == Approx(expect).margin(2));
  // Without the kernels (ATen's path) the weight's fp32 temporary and fp8
  // copy (5 kn) beside dY8 both ways (2 Tn) is the largest moment: 0.50 GiB.
  const Strategy sf = f.strategy;
  CHECK(fp8_linear_transient_bytes(f.model, sf, 2048, false) == Approx(2 * T * n + 5 * k * n));
  CHECK(fp8_linear_transient_bytes(f.model, sf, 2048, true) == Approx(expect));
}

TEST_CASE("search: fp8 only with --allow fp8, and only where the GPU has it", "[fp8]") {
  SearchRequest req;
  req.model = model_preset("llama-3.2-1b");
  req.cluster = parse_cluster("1xH100");
  req.seq = 2048;
  req.global_batch = 8;
  req.top_k = 50;
  auto any_fp8 = [](const SearchResult& r) {
    return std::any_of(r.plans.begin(), r.plans.end(),
                       [](const RankedPlan& p) { return p.plan.strategy.precision == Precision::FP8; });
  };
  const SearchResult plain = search_plans(req);
  CHECK_FALSE(any_fp8(plain));
  apply_allow_option("fp8", req);
  CHECK(req.search_fp8);
  const SearchResult with = search_plans(req);
  REQUIRE_FALSE(with.plans.empty());
  CHECK(any_fp8(with));
  // Never worse than without it: the bf16 plans are still in the space.
  CHECK(with.plans.front().prediction.step_seconds <= plain.plans.front().prediction.step_seconds);
  req.cluster = parse_cluster("1xA100");
  CHECK_FALSE(any_fp8(search_plans(req)));
  CHECK_THROWS_AS(apply_allow_option("fp4", req), InputError);
}

TEST_CASE("calibrate fits gemm_efficiency_fp8 from FP8 points against the FP8 peak", "[fp8]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  // 8192^3 (shape factor 1): bf16 at 0.8 of 989.5 TFLOP/s, fp8 at 0.7 of 1979.
  const double flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  auto point = [&](const char* prec, double rate) {
    return nlohmann::json{{"precision", prec}, {"label", "reference"}, {"layout", "nt"}, {"m", 8192}, {"n", 8192},
                          {"k", 8192}, {"seconds", flops / rate}, {"back_to_back_seconds", flops / rate}};
  };
  nlohmann::json m = {{"format", "planner-calibration"}, {"device", "cuda"}, {"ranks", 1}, {"quick", false},
                      {"created", "2026-01-01T00:00:00Z"},
                      {"machine", {{"gpu_name", "NVIDIA H100 80GB HBM3"}, {"hostname", "test"}}}};
  m["gemm"] = nlohmann::json::array({point("bf16", 0.8 * 989.5e12), point("fp8", 0.7 * 1979e12)});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.gemm_efficiency_bf16 == Approx(0.8));
  CHECK(p.gemm_efficiency == Approx(0.8));  // the main (16-bit) figure stays bf16's
  CHECK(p.gemm_efficiency_fp8 == Approx(0.7));
  CHECK(p.gemm_flops(Precision::FP8) == Approx(0.7 * 1979e12));
  // With calibrate's fp8 in-step rows: the points' efficiency times the
  // median over the models of calibrate's time for a step's GEMMs / the
  // step's GEMM kernels' time (1.2 and 1.3 here: 0.7 x 1.25), the bf16 one
  // from its own rows (1.05).
  auto row = [](const char* model, const char* prec, double alone, double step) {
    return nlohmann::json{{"model", model}, {"precision", prec}, {"layers", 24}, {"alone_gemm_seconds", alone},
                          {"step_gemm_seconds", step}};
  };
  m["in_step"] = nlohmann::json::array({row("a", "fp8", 1.2, 1.0), row("b", "fp8", 1.3, 1.0), row("a", "bf16", 1.05, 1.0),
                                        row("a", "fp8", 9.0, 1.0)});
  m["in_step"][3]["layers"] = 8;  // not the deepest row of its model: left out
  const HardwareProfile q = fit_profile(m, &gpu);
  CHECK(q.gemm_efficiency_fp8 == Approx(0.7 * 1.25));
  CHECK(q.gemm_efficiency_bf16 == Approx(0.8 * 1.05));
}

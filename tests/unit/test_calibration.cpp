// planner calibrate's fitting (costmodel/calibration.hpp) and the profile
// fields it fills, with hand-computed numbers.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/calibration.hpp"
#include "specs/cluster_spec.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/topology.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/hardware_profile.hpp"
#include "specs/model_spec.hpp"
#include "specs/plan.hpp"
#include "costmodel/op_costs.hpp"
#include "test_util.hpp"

using namespace planner;
using nlohmann::json;
using test_util::error_of;

namespace {

constexpr double kH100Peak = 989.5e12, kH100Tf32 = 494.5e12;

// Seconds of an n^3 GEMM at `eff` of `peak` (shape factor 1 at 8192^3 by definition).
double gemm_s(double n, double peak, double eff) { return 2 * n * n * n / (peak * eff); }

json h100_measurements() {
  json m = {{"format", "planner-calibration"},
            {"device", "cuda"},
            {"ranks", 1},
            {"quick", false},
            {"created", "2026-01-01T00:00:00Z"},
            {"machine", {{"gpu_name", "NVIDIA H100 80GB HBM3"}, {"hostname", "test"}}}};
  // Streaming 3.0, 3.2 and 3.1 TB/s (median 3.1); strided 1.55 (0.5 of it); reduction 2.17 (0.7).
  m["memory_kernels"] = json::array({{{"class", "streaming"}, {"name", "copy"}, {"bytes", 3e9}, {"seconds", 1e-3}},
                                     {{"class", "streaming"}, {"name", "add"}, {"bytes", 3.2e9}, {"seconds", 1e-3}},
                                     {{"class", "streaming"}, {"name", "gelu"}, {"bytes", 3.1e9}, {"seconds", 1e-3}},
                                     {{"class", "strided"}, {"name", "convert"}, {"bytes", 1.55e9}, {"seconds", 1e-3}},
                                     {{"class", "reduction"}, {"name", "norm"}, {"bytes", 2.17e9}, {"seconds", 1e-3}},
                                     {{"class", "adamw"}, {"name", "fused AdamW"}, {"bytes", 2.48e9}, {"seconds", 1e-3}}});
  m["kernel_overhead_seconds"] = 3e-6;
  // bf16 8192^3 at 0.8, 0.7 and 0.9 of the peak: median 0.8. fp32 (TF32) at 0.5.
  const int64_t n = 8192;
  m["gemm"] = json::array();
  for (double eff : {0.8, 0.7, 0.9})
    m["gemm"].push_back({{"precision", "bf16"}, {"layout", "nn"}, {"m", n}, {"n", n}, {"k", n},
                         {"seconds", gemm_s(n, kH100Peak, eff)}});
  m["gemm"].push_back({{"precision", "fp32"}, {"layout", "nn"}, {"m", n}, {"n", n}, {"k", n},
                       {"seconds", gemm_s(n, kH100Tf32, 0.5)}});
  // Pinned 40 and 50 GB/s over PCIe 5 (50 GB/s per direction in the catalog): 0.9.
  m["host_copies"] = json::array({{{"direction", "h2d"}, {"pinned", true}, {"bytes", 1e9}, {"seconds", 0.025}},
                                  {{"direction", "d2h"}, {"pinned", true}, {"bytes", 1e9}, {"seconds", 0.02}},
                                  {{"direction", "h2d"}, {"pinned", false}, {"bytes", 1e9}, {"seconds", 0.1}}});
  m["cpu_adam"] = {{"params", 1e8}, {"seconds", 0.05}, {"threads", 32}};
  m["memory"] = {{"total_bytes", 85017493504LL},
                 {"free_after_context_bytes", 84000000000LL},
                 {"context_bytes", 800000000LL},
                 {"workspace_bytes", 40000000LL},
                 {"probe", {{"reserved_bytes", 83000000000LL}, {"outside_allocator_bytes", 900000000LL}}}};
  return m;
}

// Whether `p`, saved with `key` set to `value`, is refused on loading.
bool refused_with(const HardwareProfile& p, const GpuSpec& gpu, const char* key, const json& value) {
  json j = profile_to_json(p);
  j[key] = value;
  try {
    (void)profile_from_json(j, default_profile(gpu));
  } catch (const InputError&) {
    return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a profile round-trips through JSON, calibration included", "[calibrate]") {
  HardwareProfile p = datasheet_profile(gpu_by_name("H100-SXM"));
  p.gemm_efficiency_bf16 = 0.77;
  p.cpu_adam_params_per_second = 2.5e9;
  p.gpu_memory_bytes = 84'000'000'000;
  p.context_bytes = 123456789;
  p.memory_headroom = 0.05;
  p.calibration = std::make_shared<const json>(json{{"gemm", json::array({{{"m", 1}}})}});
  const json j = profile_to_json(p);
  // Loaded over another GPU's default: every field comes from the file.
  const HardwareProfile q = profile_from_json(j, default_profile(gpu_by_name("A100-80GB-SXM")));
  CHECK(profile_to_json(q) == j);
  CHECK(q.gemm_efficiency_for(Precision::BF16) == 0.77);
  CHECK(q.gemm_efficiency_for(Precision::FP16) == p.gemm_efficiency);  // 0: the generic one
  CHECK(q.calibration->at("gemm")[0]["m"] == 1);
  CHECK(test_util::contains(error_of([&] { profile_from_json(json{{"calibration", 3}}, p); }), "'calibration' must be an object"));
  CHECK(test_util::contains(error_of([&] { profile_from_json(json{{"gemm_efficiency_bf16", 1.5}}, p); }), "gemm_efficiency_bf16"));
  CHECK(test_util::contains(error_of([&] { profile_from_json(json{{"memory_headroom", 1.0}}, p); }), "memory_headroom"));
}

TEST_CASE("--headroom accepts a percentage, a fraction, bytes or 0", "[calibrate]") {
  HardwareProfile p;
  apply_headroom("5%", p);
  CHECK(p.memory_headroom == Approx(0.05));
  CHECK(p.memory_headroom_bytes == 0);
  CHECK(p.headroom_bytes(1000) == 50);
  apply_headroom("0.1", p);
  CHECK(p.memory_headroom == Approx(0.1));
  apply_headroom("1.5GiB", p);
  CHECK(p.memory_headroom == 0);
  CHECK(p.memory_headroom_bytes == int64_t(1.5 * (1 << 30)));
  CHECK(p.headroom_bytes(int64_t(80) << 30) == int64_t(1.5 * (1 << 30)));
  apply_headroom("0", p);
  CHECK(p.headroom_bytes(int64_t(80) << 30) == 0);
  for (const char* bad : {"", "abc", "150%", "-1", "1.5", "2%%", "1e400"})
    CHECK(test_util::contains(error_of([&] { apply_headroom(bad, p); }), "--headroom"));
}

TEST_CASE("measured CPU AdamW rate replaces the modelled one, shared by the node's processes", "[calibrate]") {
  HardwareProfile p = default_profile(gpu_by_name("H100-SXM"));
  const ClusterSpec c = parse_cluster("8xH100");
  const double modelled = cpu_adam_seconds(p, c, 1e9, 2);
  p.cpu_adam_params_per_second = 2e9;
  CHECK(cpu_adam_seconds(p, c, 1e9, 2) == Approx(1.0));  // 1e9 / (2e9 / 2)
  CHECK(cpu_adam_seconds(p, c, 1e9, 2) != Approx(modelled));
}

TEST_CASE("CUDA device names map to catalog GPUs", "[calibrate]") {
  CHECK(match_gpu("NVIDIA H100 80GB HBM3")->name == "H100-SXM");
  CHECK(match_gpu("NVIDIA H200")->name == "H200");
  CHECK(match_gpu("NVIDIA H100 PCIe")->name == "H100-PCIE");
  CHECK(match_gpu("NVIDIA A100-SXM4-40GB")->name == "A100-40GB-SXM");
  CHECK(match_gpu("NVIDIA GeForce RTX 3090")->name == "RTX3090");
  CHECK(match_gpu("NVIDIA GeForce RTX 3090 Ti")->name == "RTX3090Ti");
  CHECK(match_gpu("Tesla V100-SXM2-16GB")->name == "V100-16GB");
  CHECK_FALSE(match_gpu("Some Future GPU").has_value());
}

TEST_CASE("calibrate fits the profile from measured points (hand numbers, H100)", "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  // Fused attention: b=1, 16 heads, s=2048, d=128, causal: 4 b a s^2 d / 2 FLOPs.
  const double work = 4.0 * 16 * 2048.0 * 2048.0 * 128 / 2;
  const double gemm = kH100Peak * 0.8;  // the fitted bf16 GEMM rate
  const double fwd = work / (gemm * 0.5);
  // Backward: 2.5x the work at 0.4 of the GEMM rate, plus the helper kernels the
  // layer model prices apart: rowsum(dO O) reads 2e T h (reduction class, 2.17
  // TB/s) and the dQ conversion moves (4 + e) T h (streaming, 3.1 TB/s), plus
  // two launches; T h = 2048 * 16 * 128.
  const double th = 2048.0 * 16 * 128;
  const double helpers = 4 * th / 2.17e12 + 6 * th / 3.1e12 + 2 * 3e-6;
  const double bwd = 2.5 * work / (gemm * 0.4) + helpers;
  m["attention"] = json::array({{{"precision", "bf16"}, {"batch", 1}, {"heads", 16}, {"kv_heads", 16}, {"seq", 2048},
                                 {"head_dim", 128}, {"causal", true}, {"forward_seconds", fwd},
                                 {"backward_seconds", bwd}}});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.memory_efficiency == Approx(3.1 / 3.35));
  CHECK(p.strided_kernel_relative == Approx(0.5));
  CHECK(p.reduction_kernel_relative == Approx(0.7));
  CHECK(p.adamw_kernel_relative == Approx(0.8));  // 2.48 TB/s over 3.1
  CHECK(p.kernel_overhead_seconds == Approx(3e-6));
  CHECK(p.gemm_efficiency_bf16 == Approx(0.8));
  CHECK(p.gemm_efficiency == Approx(0.8));
  CHECK(p.allow_tf32);  // the runtime's fp32 matmuls run on TF32
  CHECK(p.gemm_efficiency_fp32 == Approx(0.5));
  CHECK(p.gemm_efficiency_fp16 == 0);  // not measured
  CHECK(p.attention_forward_relative == Approx(0.5));
  CHECK(p.attention_backward_relative == Approx(0.4));
  CHECK(p.host_copy_efficiency == Approx(45.0 / 50.0));
  CHECK(p.cpu_adam_params_per_second == Approx(2e9));
  CHECK(p.gpu_memory_bytes == 83'900'000'000);
  CHECK(p.context_bytes == 800'000'000);
  CHECK(p.workspace_bytes == 40'000'000);
  CHECK(p.nccl_communicator_bytes == default_profile(gpu).nccl_communicator_bytes);  // one rank: unchanged
  // The points are kept with the fitted model's time beside each.
  REQUIRE(p.calibration);
  const json& c = *p.calibration;
  CHECK(c["fits"].contains("gemm_efficiency_bf16"));
  CHECK(c["catalog_gpu"] == "H100-SXM");
  CHECK(c["gemm"][0]["shape_factor"].get<double>() == Approx(1.0));
  // The 0.8 point: the model's time is the measured one plus one launch.
  CHECK(c["gemm"][0]["model_seconds"].get<double>() == Approx(gemm_s(8192, kH100Peak, 0.8) + 3e-6));
  CHECK(c["attention"][0]["forward_error_pct"].get<double>() == Approx(3e-6 / fwd * 100).margin(1e-6));
  // The fitted profile loads as any profile does.
  CHECK(profile_to_json(profile_from_json(profile_to_json(p), default_profile(gpu))) == profile_to_json(p));
}

TEST_CASE("calibrate keeps fp32 attention apart and takes the offload-like CPU AdamW (hand numbers, H100)",
          "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  // Attention without helper-kernel share in the forward: b=1, 16 heads, s=2048,
  // d=128, causal. bf16 at 0.5 of the bf16 GEMM rate (0.8 x 989.5), fp32 at 0.2
  // of the fp32 rate (TF32 494.5 x the fitted 0.5).
  const double work = 4.0 * 16 * 2048.0 * 2048.0 * 128 / 2;
  const double bf16_rate = kH100Peak * 0.8, fp32_rate = 494.5e12 * 0.5;
  const double th = 2048.0 * 16 * 128;
  const double helpers16 = 4 * th / 2.17e12 + 6 * th / 3.1e12 + 2 * 3e-6;
  const double helpers32 = 8 * th / 2.17e12 + 8 * th / 3.1e12 + 2 * 3e-6;
  auto point = [&](const char* prec, double fwd, double bwd) {
    return json{{"precision", prec}, {"batch", 1}, {"heads", 16}, {"kv_heads", 16}, {"seq", 2048}, {"head_dim", 128},
                {"causal", true}, {"forward_seconds", fwd}, {"backward_seconds", bwd}};
  };
  // An fp32 grouped-query case (SDPA's math path, ten times slower) is left out of the fp32 rates.
  json gqa32 = point("fp32", 10 * work / (fp32_rate * 0.2), 10 * 2.5 * work / (fp32_rate * 0.1) + helpers32);
  gqa32["kv_heads"] = 4;
  m["attention"] = json::array({point("bf16", work / (bf16_rate * 0.5), 2.5 * work / (bf16_rate * 0.4) + helpers16),
                                point("fp32", work / (fp32_rate * 0.2), 2.5 * work / (fp32_rate * 0.1) + helpers32),
                                gqa32});
  // The plain CPU AdamW at 2e9/s; as the offload step runs it 1.5e9/s.
  m["cpu_adam"]["as_offload_runs_it"] = {{"params", 3e8}, {"seconds", 0.2}, {"threads", 32}};
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.gemm_efficiency_fp32 == Approx(0.5));
  CHECK(p.attention_forward_relative == Approx(0.5));
  CHECK(p.attention_backward_relative == Approx(0.4));
  CHECK(p.attention_forward_relative_fp32 == Approx(0.2));
  CHECK(p.attention_backward_relative_fp32 == Approx(0.1));
  CHECK(p.attention_forward_rel(Precision::FP32, 128, 2048) == Approx(0.2));
  CHECK((*p.calibration)["attention"][2].contains("excluded"));
  CHECK(p.attention_forward_rel(Precision::FP32) == Approx(0.2));
  CHECK(p.attention_forward_rel(Precision::BF16) == Approx(0.5));
  CHECK(p.attention_backward_rel(Precision::FP16) == Approx(0.4));
  CHECK(p.cpu_adam_params_per_second == Approx(1.5e9));
  // The fp32 points' model times come from the fp32 figures.
  const json& c = *p.calibration;
  CHECK(c["attention"][1]["forward_error_pct"].get<double>() == Approx(3e-6 / (work / (fp32_rate * 0.2)) * 100).margin(1e-6));
  CHECK(c["fits"].contains("attention_backward_relative_fp32"));
  // Saved and loaded as any field.
  const HardwareProfile q = profile_from_json(profile_to_json(p), default_profile(gpu));
  CHECK(q.attention_backward_relative_fp32 == Approx(0.1));
  CHECK(refused_with(p, gpu, "attention_forward_relative_fp32", 1.5));
}

TEST_CASE("calibrate scales a GPU's GEMM and attention rates by their speed in a training step (hand numbers, H100)",
          "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();  // bf16 GEMMs at calibrate's points: median 0.8 of the peak; fp32 0.5
  const double work = 4.0 * 16 * 2048.0 * 2048.0 * 128 / 2;
  const double th = 2048.0 * 16 * 128;
  const double helpers = 4 * th / 2.17e12 + 6 * th / 3.1e12 + 2 * 3e-6;
  // Attention measured against the fitted bf16 rate 0.8 x 1.1 (the GEMM factor below): 0.5 and 0.4 of it.
  const double rate = kH100Peak * 0.8 * 1.1;
  m["attention"] = json::array({{{"precision", "bf16"}, {"batch", 1}, {"heads", 16}, {"kv_heads", 16}, {"seq", 2048},
                                 {"head_dim", 128}, {"causal", true}, {"forward_seconds", work / (rate * 0.5)},
                                 {"backward_seconds", 2.5 * work / (rate * 0.4) + helpers}}});
  // Three bf16 models whose GEMMs calibrate times at 1.05, 1.20 and 1.10 x
  // their time in the step (median 1.10); fp16's one row is not bf16's; fp32
  // 0.98. Attention: calibrate's time 0.90 (bf16) and 0.80 (fp16) of the
  // step's.
  auto row = [](const char* prec, double gemm_ratio, double attention_ratio) {
    return json{{"precision", prec}, {"model", "m"}, {"alone_gemm_seconds", 1e-2 * gemm_ratio},
                {"step_gemm_seconds", 1e-2}, {"alone_attention_seconds", 2e-3 * attention_ratio},
                {"step_attention_seconds", 2e-3}};
  };
  // A row whose attention ran SDPA's math path (no fused attention captured:
  // its batched GEMMs count in the step) is left out.
  json math = row("bf16", 0.5, 1.0);
  math["attention"] = json::array();
  m["in_step"] = json::array({row("bf16", 1.05, 0.90), row("bf16", 1.20, 0.90), row("bf16", 1.10, 0.90), math,
                              row("fp16", 2.0, 0.80), row("fp32", 0.98, 1.0)});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.gemm_efficiency_bf16 == Approx(0.8 * 1.10));
  CHECK(p.gemm_efficiency == Approx(0.8 * 1.10));
  CHECK(p.gemm_efficiency_fp32 == Approx(0.5 * 0.98));
  // The attention's own in-step ratios are kept, not applied: its rates are
  // relative to the scaled GEMM rate, as measured.
  CHECK(p.attention_forward_relative == Approx(0.5));
  CHECK(p.attention_backward_relative == Approx(0.4));
  REQUIRE(p.attention_rates.size() == 1);
  CHECK(p.attention_rates[0].forward == Approx(0.5));
  CHECK(p.attention_forward_rel(Precision::BF16, 128, 2048) == Approx(0.5));
  const json& c = *p.calibration;
  CHECK(c["fits"]["gemm_efficiency_bf16"]["from"].get<std::string>().find("training step") != std::string::npos);
  {
    // Models of eight layers: the GEMM ratios (median of 1.05, 1.20, 1.10,
    // 1.10) scale the GEMM rate; their attention ratios are not applied either.
    json d = m;
    d["in_step"] = json::array();
    for (auto [g, a] : std::vector<std::pair<double, double>>{{1.05, 0.90}, {1.20, 0.90}, {1.10, 0.90}, {1.10, 2.0}}) {
      json r = row("bf16", g, a);
      r["layers"] = 8;
      d["in_step"].push_back(r);
    }
    const HardwareProfile q = fit_profile(d, &gpu);
    CHECK(q.gemm_efficiency_bf16 == Approx(0.8 * 1.10));
    CHECK(q.attention_forward_relative == Approx(0.5));
    CHECK(q.attention_backward_relative == Approx(0.4));
    REQUIRE(q.attention_rates.size() == 1);
    CHECK(q.attention_rates[0].forward == Approx(0.5));
  }
  // Above 1 of the datasheet after scaling: kept at 1.
  m["in_step"] = json::array({row("bf16", 1.5, 1.0)});
  CHECK(fit_profile(m, &gpu).gemm_efficiency_bf16 == Approx(1.0));
  // A CPU calibration has no step kernel times: its own rates stand.
  json cpu = {{"format", "planner-calibration"}, {"device", "cpu"}, {"ranks", 1}, {"quick", true},
              {"machine", {{"cpu", "x"}}}};
  cpu["gemm"] = json::array({{{"precision", "fp32"}, {"layout", "nn"}, {"m", 256}, {"n", 256}, {"k", 256},
                              {"seconds", 2.0 * 256 * 256 * 256 / 1e11}}});
  cpu["in_step"] = json::array({{{"precision", "fp32"}, {"alone_gemm_seconds", 1e-3}}});
  CHECK(fit_profile(cpu, nullptr).peak_fp32_flops == Approx(1e11));
}

TEST_CASE("calibrate scales the attention by its time in a training pass; the memory-bound ratio is kept (H100)",
          "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();  // streaming 3.1 TB/s (median), strided 0.5 and reduction 0.7 of it
  const HardwareProfile p0 = fit_profile(m, &gpu);
  CHECK(p0.attention_in_step_factor == 1.0);
  // The layer model's times for one pass of a two-layer GPT-Neo-1.3B at 4 x
  // 2048 tokens with the rates fitted from m.
  ModelSpec spec = model_preset("gpt-neo-1.3b");
  spec.layers = 2;
  auto times_of = [&](const char* prec, const HardwareProfile& prof) {
    Plan plan;
    plan.model = spec;
    plan.cluster = parse_cluster("1xH100-SXM");
    plan.seq = 2048, plan.global_batch = 4;
    plan.strategy = Strategy::parse(std::string("mbs=4,gas=1,precision=") + prec);
    return step_op_times(plan, prof, 0);
  };
  // Attention measured in the pass at 1.05, 1.08 (bf16) and 1.12 (fp16) x the
  // layer model's: median 1.08. Left out: a row whose kernel profile did not
  // count the backward's helpers as attention (3.0), the fp32 row (2.0) and
  // a row measured before the spec was recorded (1.5). The memory-bound sums
  // (1.2 x the model's) are compared and kept, not applied.
  auto row = [&](const char* prec, double ratio, bool with_spec, bool helpers) {
    json r = {{"precision", prec}, {"model", "gpt-neo-1.3b"}, {"layers", 2}, {"tokens", 8192}, {"mbs", 4},
              {"seq", 2048}, {"step_memory_bound_seconds", 1.2 * times_of(prec, p0).memory_seconds},
              {"step_attention_seconds", ratio * times_of(prec, p0).attention_seconds},
              {"attention_with_helpers", helpers}};
    if (with_spec) r["spec"] = spec;
    return r;
  };
  m["in_step"] = json::array({row("bf16", 1.05, true, true), row("bf16", 1.08, true, true), row("fp16", 1.12, true, true),
                              row("bf16", 3.0, true, false), row("fp32", 2.0, true, true),
                              row("bf16", 1.5, false, true)});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.attention_in_step_factor == Approx(1.08));
  CHECK((*p.calibration)["fits"].contains("attention_in_step_factor"));
  // The layer model's attention (fused kernels and the backward's helpers)
  // takes 1.08x as long; its memory-bound kernels are as before.
  CHECK(times_of("bf16", p).attention_seconds == Approx(1.08 * times_of("bf16", p0).attention_seconds));
  CHECK(times_of("bf16", p).memory_seconds == Approx(times_of("bf16", p0).memory_seconds));
  const json& c = *p.calibration;
  CHECK(c["in_step"][0]["model_attention_seconds"].get<double>() == Approx(times_of("bf16", p0).attention_seconds));
  CHECK(c["in_step"][0]["model_memory_bound_seconds"].get<double>() == Approx(times_of("bf16", p0).memory_seconds));
  bool noted = false;
  for (const auto& n : c["fit_notes"]) noted = noted || n.get<std::string>().find("memory-bound kernels in the in-step") == 0;
  CHECK(noted);
  CHECK(profile_from_json(profile_to_json(p), default_profile(gpu)).attention_in_step_factor == Approx(1.08));
  CHECK(refused_with(p, gpu, "attention_in_step_factor", 3.0));
}

TEST_CASE("calibrate takes the layers' memory-bound factor from two depths, the attention from the deepest (H100)",
          "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  const HardwareProfile p0 = fit_profile(m, &gpu);
  CHECK(p0.memory_in_step_factor == 1.0);
  auto times_of = [&](int64_t layers, const HardwareProfile& prof) {
    Plan plan;
    plan.model = model_preset("gpt-neo-1.3b");
    plan.model.layers = layers;
    plan.cluster = parse_cluster("1xH100-SXM");
    plan.seq = 2048, plan.global_batch = 4;
    plan.strategy = Strategy::parse("mbs=4,gas=1,precision=bf16");
    return step_op_times(plan, prof, 0);
  };
  // Two layers: the pass's memory-bound kernels as the model says (the head's
  // mostly), attention 2.0x the model's; six layers: the four more layers'
  // memory-bound kernels 1.15x the model's, attention 1.1x. The layers' factor
  // is 1.15 (the difference), the attention's 1.1 (the deeper row only).
  auto row = [&](int64_t layers, double mem, double att) {
    ModelSpec spec = model_preset("gpt-neo-1.3b");
    spec.layers = layers;
    return json{{"precision", "bf16"}, {"model", "gpt-neo-1.3b"}, {"layers", layers}, {"tokens", 8192}, {"mbs", 4},
                {"seq", 2048}, {"spec", spec}, {"step_memory_bound_seconds", mem},
                {"step_attention_seconds", att * times_of(layers, p0).attention_seconds},
                {"attention_with_helpers", true}};
  };
  const double m2 = times_of(2, p0).memory_seconds, m6 = times_of(6, p0).memory_seconds;
  m["in_step"] = json::array({row(2, m2, 2.0), row(6, m2 + 1.15 * (m6 - m2), 1.1)});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.memory_in_step_factor == Approx(1.15));
  CHECK(p.attention_in_step_factor == Approx(1.1));
  // The layers' memory-bound kernels take 1.15x as long; the head's as before.
  CHECK(times_of(6, p).memory_seconds - times_of(2, p).memory_seconds == Approx(1.15 * (m6 - m2)));
  CHECK(profile_from_json(profile_to_json(p), default_profile(gpu)).memory_in_step_factor == Approx(1.15));
  CHECK(refused_with(p, gpu, "memory_in_step_factor", 0.1));
  // One depth only: no factor.
  m["in_step"] = json::array({row(6, m2 + 1.15 * (m6 - m2), 1.1)});
  CHECK(fit_profile(m, &gpu).memory_in_step_factor == 1.0);
}

TEST_CASE("calibrate keeps one process's CPU AdamW rate beside the node's (hand numbers)", "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H200");
  json m = h100_measurements();
  // One process alone: 1e8 parameters in 20 ms (5e9/s); two at once on the node: 4e9/s together.
  m["cpu_adam"] = {{"params", 100000000}, {"seconds", 0.02}, {"threads", 32}};
  m["cpu_adam_node"] = {{"processes_per_node", 2}, {"threads", 16}, {"node_params_per_second", 4e9}};
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.cpu_adam_params_per_second == Approx(4e9));
  CHECK(p.cpu_adam_params_per_second_one_process == Approx(5e9));
  const ClusterSpec c = parse_cluster("1xH200");
  CHECK(cpu_adam_seconds(p, c, 1e9, 1) == Approx(0.2));  // one process: its own rate
  CHECK(cpu_adam_seconds(p, c, 1e9, 2) == Approx(0.5));  // two: half the node's each
  CHECK(profile_from_json(profile_to_json(p), default_profile(gpu)).cpu_adam_params_per_second_one_process ==
        Approx(5e9));
  // Measured with one process on the node: one figure, no second.
  m["cpu_adam_node"]["processes_per_node"] = 1;
  m["cpu_adam_node"]["node_params_per_second"] = 4.5e9;
  const HardwareProfile q = fit_profile(m, &gpu);
  CHECK(q.cpu_adam_params_per_second == Approx(4.5e9));
  CHECK(q.cpu_adam_params_per_second_one_process == 0);
  CHECK(cpu_adam_seconds(q, c, 1e9, 1) == Approx(1e9 / 4.5e9));
}

TEST_CASE("calibrate fits the weight-gradient GEMM rate apart, per 16-bit and fp32 (hand numbers, H100)",
          "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();  // bf16 (nn) at 0.8, 0.7, 0.9: median 0.8; fp32 (nn) at 0.5
  const int64_t n = 8192;
  // Weight gradients (tn): bf16 at 0.6 and 0.64 of the peak (0.75 and 0.8 of
  // the fitted 0.8), fp16 none; fp32 at 0.35 (0.7 of its 0.5).
  for (double eff : {0.6, 0.64})
    m["gemm"].push_back({{"precision", "bf16"}, {"layout", "tn"}, {"m", n}, {"n", n}, {"k", n},
                         {"seconds", gemm_s(n, kH100Peak, eff)}});
  m["gemm"].push_back({{"precision", "fp32"}, {"layout", "tn"}, {"m", n}, {"n", n}, {"k", n},
                       {"seconds", gemm_s(n, kH100Tf32, 0.35)}});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.gemm_efficiency_bf16 == Approx(0.8));  // the tn points are not in the median
  CHECK(p.gemm_efficiency_fp32 == Approx(0.5));
  CHECK(p.weight_grad_gemm_relative == Approx(0.775));
  CHECK(p.weight_grad_gemm_relative_fp32 == Approx(0.7));
  CHECK(p.weight_grad_gemm_rel(Precision::FP16) == Approx(0.775));
  // The time model prices a weight gradient at that rate, a forward GEMM at the fitted one.
  CHECK(weight_grad_gemm_seconds(p, n, n, n, Precision::FP32) == Approx(gemm_s(n, kH100Tf32, 0.35) + 3e-6));
  CHECK(gemm_seconds(p, n, n, n, Precision::FP32) == Approx(gemm_s(n, kH100Tf32, 0.5) + 3e-6));
  // The tn points' model times use it: the 0.6 point is reproduced within its share of the median.
  const json& c = *p.calibration;
  CHECK(c["gemm"][4]["model_seconds"].get<double>() ==
        Approx(weight_grad_gemm_seconds(p, n, n, n, Precision::BF16)));
  // Saved and loaded; out of range refused.
  const HardwareProfile q = profile_from_json(profile_to_json(p), default_profile(gpu));
  CHECK(q.weight_grad_gemm_relative_fp32 == Approx(0.7));
  CHECK(refused_with(p, gpu, "weight_grad_gemm_relative", 0));
  // Without tn points: 1 and 0 (the forward rate).
  const HardwareProfile d = fit_profile(h100_measurements(), &gpu);
  CHECK(d.weight_grad_gemm_relative == 1.0);
  CHECK(d.weight_grad_gemm_relative_fp32 == 0.0);
}

TEST_CASE("attention rates per head dimension and sequence interpolate between measured points", "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  HardwareProfile p = default_profile(gpu);
  p.attention_forward_relative = 0.33, p.attention_backward_relative = 0.22;
  p.attention_forward_relative_fp32 = 0.11, p.attention_backward_relative_fp32 = 0.05;
  using R = HardwareProfile::AttentionRate;
  p.attention_rates = {R{false, 64, 1024, 0.4, 0.3}, R{false, 64, 4096, 0.6, 0.5}, R{false, 128, 1024, 0.8, 0.7},
                       R{false, 128, 4096, 1.0, 0.9}};
  // log2(2048) is halfway between 1024 and 4096; head dimension 96 halfway between 64 and 128.
  CHECK(p.attention_forward_rel(Precision::BF16, 64, 2048) == Approx(0.5));
  CHECK(p.attention_backward_rel(Precision::FP16, 64, 2048) == Approx(0.4));
  CHECK(p.attention_forward_rel(Precision::BF16, 96, 2048) == Approx(0.7));
  CHECK(p.attention_forward_rel(Precision::BF16, 80, 1024) == Approx(0.5));
  // Held at the nearest point outside them.
  CHECK(p.attention_forward_rel(Precision::BF16, 64, 512) == Approx(0.4));
  CHECK(p.attention_forward_rel(Precision::BF16, 256, 16384) == Approx(1.0));
  CHECK(p.attention_backward_rel(Precision::BF16, 32, 8192) == Approx(0.5));
  // No fp32 point: the fp32 single figures.
  CHECK(p.attention_forward_rel(Precision::FP32, 64, 2048) == Approx(0.11));
  CHECK(p.attention_backward_rel(Precision::FP32, 64, 2048) == Approx(0.05));
  // The flash time uses it: work / (GEMM rate x rate at (d, s)).
  const double work = 4.0 * 16 * 2048.0 * 2048.0 * 64 / 2;
  CHECK(flash_attention_forward_seconds(p, 16, 2048, 64, true, Precision::BF16) ==
        Approx(work / (p.gemm_flops(Precision::BF16) * 0.5) + p.kernel_overhead_seconds));
  // Saved and loaded; bad points refused with a line naming them.
  const HardwareProfile q = profile_from_json(profile_to_json(p), default_profile(gpu));
  CHECK(q.attention_rates == p.attention_rates);
  json bad = profile_to_json(p);
  bad["attention_rates"][1]["forward_relative"] = 0;
  CHECK_THROWS_AS(profile_from_json(bad, default_profile(gpu)), InputError);
  bad = profile_to_json(p);
  bad["attention_rates"][0]["precision"] = "fp8";
  CHECK_THROWS_AS(profile_from_json(bad, default_profile(gpu)), InputError);
  // A point of the wrong type: one line naming its index and key, not a JSON library message.
  auto message = [&](const json& j) {
    try {
      (void)profile_from_json(j, default_profile(gpu));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  bad = profile_to_json(p);
  bad["attention_rates"][2]["head_dim"] = "x";
  CHECK(message(bad) == "profile: attention_rates[2].head_dim must be an integer");
  bad = profile_to_json(p);
  bad["attention_rates"][0]["backward_relative"] = "fast";
  CHECK(message(bad) == "profile: attention_rates[0].backward_relative must be a number");
  // A scalar field of the wrong type is named too.
  bad = profile_to_json(p);
  bad["attention_in_step_factor"] = "fast";
  CHECK(message(bad) == "profile: 'attention_in_step_factor' has the wrong type (string)");
  bad = profile_to_json(p);
  bad["flash_attention"] = 3;
  CHECK(message(bad) == "profile: 'flash_attention' has the wrong type (number)");
}

TEST_CASE("calibrate fits the MoE layer's host time, with the shared MLP's part apart (hand numbers, H100)",
          "[calibrate][moe]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  // 1 ms + 1e-8 s per row forward, 2 ms + 2e-8 s backward (1024 and 8192 tokens, top-2: 2048 and 16384 rows);
  // with a shared gated MLP at 1024 tokens: 1.30 and 2.45 ms, i.e. +0.30 and +0.45 ms over the plain layer there.
  m["moe_host"] = {{"ep", 1}, {"unit", "layer"}, {"experts", 8}, {"expert_ffn", 512}, {"top_k", 2}, {"hidden", 512},
                   {"precision", "bf16"},
                   {"points", json::array({{{"tokens", 1024}, {"rows", 2048}, {"forward_seconds", 1e-3 + 2048e-8},
                                            {"backward_seconds", 2e-3 + 2048 * 2e-8}},
                                           {{"tokens", 8192}, {"rows", 16384}, {"forward_seconds", 1e-3 + 16384e-8},
                                            {"backward_seconds", 2e-3 + 16384 * 2e-8}}})},
                   {"shared", {{"tokens", 1024}, {"rows", 2048}, {"shared_ffn", 512},
                               {"forward_seconds", 1.3e-3 + 2048e-8}, {"backward_seconds", 2.45e-3 + 2048 * 2e-8}}}};
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.moe_host_forward_seconds == Approx(1e-3));
  CHECK(p.moe_host_forward_row_seconds == Approx(1e-8));
  CHECK(p.moe_host_backward_seconds == Approx(2e-3));
  CHECK(p.moe_host_shared_forward_seconds == Approx(0.3e-3));
  CHECK(p.moe_host_shared_backward_seconds == Approx(0.45e-3));
  CHECK((*p.calibration)["fits"].contains("moe_host_shared_forward_seconds"));
  CHECK(profile_from_json(profile_to_json(p), default_profile(gpu)).moe_host_shared_backward_seconds == Approx(0.45e-3));
  // A shared layer faster than the plain one (noise) adds nothing; without the shared point, nothing is fitted.
  m["moe_host"]["shared"]["forward_seconds"] = 0.5e-3;
  CHECK(fit_profile(m, &gpu).moe_host_shared_forward_seconds == 0);
  m["moe_host"].erase("shared");
  const HardwareProfile q = fit_profile(m, &gpu);
  CHECK(q.moe_host_shared_forward_seconds == 0);
  CHECK_FALSE((*q.calibration)["fits"].contains("moe_host_shared_forward_seconds"));
}

TEST_CASE("calibrate takes the compute slowdown beside collectives on a GPU (hand numbers)", "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  // 30 ms of compute alone; beside 20 ms and 40 ms of collectives it took 33 and 36 ms:
  // 1 + 3/20 = 1.15 and 1 + 6/30 = 1.2 (the overlap is at most the compute): median 1.175.
  m["compute_beside_comm"] = json::array(
      {{{"op", "all_reduce"}, {"compute_alone_seconds", 0.030}, {"compute_beside_seconds", 0.033},
        {"collectives_alone_seconds", 0.020}, {"slowdown", 1.15}},
       {{"op", "all_gather"}, {"compute_alone_seconds", 0.030}, {"compute_beside_seconds", 0.036},
        {"collectives_alone_seconds", 0.040}, {"slowdown", 1.2}}});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.compute_slowdown_beside_comm == Approx(1.175));
  CHECK((*p.calibration)["fits"].contains("compute_slowdown_beside_comm"));
  // Measured before the collectives' own end was: their rate is left at 1.
  CHECK(p.comm_slowdown_beside_compute == 1.0);
  CHECK_FALSE((*p.calibration)["fits"].contains("comm_slowdown_beside_compute"));
  // With it: the median of the two points' rates.
  json m2 = m;
  m2["compute_beside_comm"][0]["comm_slowdown"] = 4.0;
  m2["compute_beside_comm"][1]["comm_slowdown"] = 6.0;
  const HardwareProfile p2 = fit_profile(m2, &gpu);
  CHECK(p2.comm_slowdown_beside_compute == Approx(5.0));
  CHECK((*p2.calibration)["fits"].contains("comm_slowdown_beside_compute"));
  CHECK(profile_from_json(profile_to_json(p2), default_profile(gpu)).comm_slowdown_beside_compute == Approx(5.0));
  json bad2 = profile_to_json(p2);
  bad2["comm_slowdown_beside_compute"] = 0.5;
  CHECK_THROWS_AS(profile_from_json(bad2, default_profile(gpu)), InputError);
  // A catalog GPU without a measured figure takes the in-step default
  // (measured on H100 and H200: apply_in_step_defaults).
  CHECK(default_profile(gpu_by_name("A100-80GB-SXM")).compute_slowdown_beside_comm == Approx(1.404));
  CHECK(refused_with(p, gpu, "compute_slowdown_beside_comm", 0.5));
  // The CPU: noted, not applied.
  json cpu = {{"format", "planner-calibration"}, {"device", "cpu"}, {"ranks", 2}, {"quick", true},
              {"machine", {{"cpu", "x"}}}};
  cpu["compute_beside_comm"] = m["compute_beside_comm"];
  CHECK(fit_profile(cpu, nullptr).compute_slowdown_beside_comm == 1.0);
}

TEST_CASE("calibrate fits the NVLink efficiency from the all-reduce slope", "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  m["ranks"] = 2;
  m["nccl_communicator_bytes"] = 880'000'000;
  // Two H100s on NVSwitch, NVLink4 450 GB/s per direction: a ring all-reduce of
  // S bytes over 2 ranks moves 2 (n-1)/n S = S over the link, so from 4 KiB to
  // 256 MiB the model at full rate adds (S1 - S0) / 450e9. Measured at 0.7 of it.
  const double S0 = 4096, S1 = 268435456;
  const double t0 = 25e-6, t1 = t0 + (S1 - S0) / 450e9 / 0.7;
  m["collectives"] = json::array({{{"op", "all_reduce"}, {"backend", "nccl"}, {"group_size", 2}, {"groups", 1},
                                   {"bytes", S0}, {"seconds", t0}},
                                  {{"op", "all_reduce"}, {"backend", "nccl"}, {"group_size", 2}, {"groups", 1},
                                   {"bytes", S1}, {"seconds", t1}},
                                  {{"op", "send_recv"}, {"backend", "nccl"}, {"group_size", 2}, {"groups", 1},
                                   {"bytes", S1}, {"seconds", t1 / 2}}});
  // A reduce-scatter of S bytes over 2 ranks moves (n-1)/n S = S/2; measured at
  // 0.8 of the all-reduce's rate (0.56 of the link), from 20 us at 4 KiB.
  const double r0 = 20e-6, r1 = r0 + (S1 - S0) / 2 / (450e9 * 0.7 * 0.8);
  m["collectives"].push_back({{"op", "reduce_scatter"}, {"backend", "nccl"}, {"group_size", 2}, {"groups", 1},
                              {"bytes", S0}, {"seconds", r0}});
  m["collectives"].push_back({{"op", "reduce_scatter"}, {"backend", "nccl"}, {"group_size", 2}, {"groups", 1},
                              {"bytes", S1}, {"seconds", r1}});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.nvlink_efficiency == Approx(0.7));
  CHECK(p.reduce_scatter_relative == Approx(0.8));
  CHECK(p.all_gather_relative == 1.0);  // not measured
  CHECK(p.send_recv_relative == 1.0);   // one size: no slope
  // The model at that rate: a reduce-scatter over the two GPUs of a node
  // (cluster 2xH100-SXM) takes the measured slope between the two sizes.
  const ClusterSpec two = parse_cluster("2xH100-SXM");
  const GroupLink gl = Topology(two, p).ring({{0, 1}}, 0);
  CHECK(gl.reduce_scatter_relative == Approx(0.8));
  CHECK(reduce_scatter_seconds(S1, gl, 0) - reduce_scatter_seconds(S0, gl, 0) == Approx(r1 - r0));
  // Groups across nodes keep the all-reduce's rate (not measured there).
  const GroupLink across = Topology(parse_cluster("2x8xH100-SXM"), p).ring({{0, 8}}, 0);
  CHECK(across.nodes == 2);
  CHECK(across.reduce_scatter_relative == 1.0);
  CHECK(refused_with(p, gpu, "send_recv_relative", 0.1));
  CHECK(p.nccl_communicator_bytes == 880'000'000);
  // The launch latency: the small all-reduce less the model's hop latency and transfer.
  CHECK(p.collective_base_latency_seconds > 0);
  CHECK(p.collective_base_latency_seconds < t0);
  const json& c = *p.calibration;
  CHECK(c["collectives"][1]["error_pct"].get<double>() == Approx(0).margin(0.01));
  CHECK(c["collectives"][1]["bus_GBps"].get<double>() == Approx(S1 / t1 / 1e9));  // 2 (n-1)/n = 1
}

TEST_CASE("calibrate fits the tensor-parallel collectives' extra between GEMMs (hand numbers)", "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  m["ranks"] = 2;
  // 8 MiB: 20 us more each; 32 MiB: 50 us (two ops at each): the line through
  // them is 10 us + 30 us per 24 MiB.
  const double M = 1048576;
  m["tp_chain"] = json::array({{{"op", "all_reduce"}, {"bytes", 8 * M}, {"extra_seconds", 20e-6}},
                               {{"op", "all_gather"}, {"bytes", 8 * M}, {"extra_seconds", 20e-6}},
                               {{"op", "all_reduce"}, {"bytes", 32 * M}, {"extra_seconds", 50e-6}},
                               {{"op", "all_gather"}, {"bytes", 32 * M}, {"extra_seconds", 50e-6}}});
  HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.tp_collective_extra_seconds == Approx(10e-6));
  CHECK(p.tp_collective_extra_seconds_per_byte == Approx(30e-6 / (24 * M)));
  CHECK(p.tp_collective_extra(16 * M) == Approx(30e-6));
  // Larger at the small size than at the large one: flat at the mean.
  m["tp_chain"][2]["extra_seconds"] = m["tp_chain"][3]["extra_seconds"] = 10e-6;
  p = fit_profile(m, &gpu);
  CHECK(p.tp_collective_extra_seconds == Approx(15e-6));
  CHECK(p.tp_collective_extra_seconds_per_byte == 0);
  // The CPU: noted, not applied.
  json cpu = {{"format", "planner-calibration"}, {"device", "cpu"}, {"ranks", 2}, {"quick", true},
              {"machine", {{"cpu", "x"}}}};
  cpu["tp_chain"] = m["tp_chain"];
  CHECK(fit_profile(cpu, nullptr).tp_collective_extra_seconds == 0);
  CHECK(refused_with(p, gpu, "tp_collective_extra_seconds", -1e-6));
}

TEST_CASE("a CPU calibration uses the fastest measured rates as peaks", "[calibrate]") {
  json m = {{"format", "planner-calibration"}, {"device", "cpu"}, {"ranks", 1}, {"machine", {{"cpu", "test cpu"}}}};
  m["memory_kernels"] = json::array({{{"class", "streaming"}, {"name", "copy"}, {"bytes", 2e9}, {"seconds", 0.1}},
                                     {{"class", "streaming"}, {"name", "add"}, {"bytes", 1e9}, {"seconds", 0.1}}});
  // Two fp32 shapes: 100 and 50 GFLOP/s; the fastest is the peak.
  m["gemm"] = json::array({{{"precision", "fp32"}, {"layout", "nn"}, {"m", 256}, {"n", 256}, {"k", 256},
                            {"seconds", 2.0 * 256 * 256 * 256 / 100e9}},
                           {{"precision", "fp32"}, {"layout", "nt"}, {"m", 256}, {"n", 256}, {"k", 256},
                            {"seconds", 2.0 * 256 * 256 * 256 / 50e9}}});
  const HardwareProfile p = fit_profile(m, nullptr);
  CHECK(p.gpu == "cpu");
  CHECK(p.memory_bandwidth_Bps == Approx(20e9));
  CHECK(p.memory_efficiency == Approx(15e9 / 20e9));  // the median of 20 and 10 GB/s over the fastest
  CHECK(p.peak_fp32_flops == Approx(100e9));
  CHECK(p.gemm_efficiency_fp32 == Approx(0.75 / gemm_shape_factor(p, 256, 256, 256, 1)).epsilon(1e-9));
  CHECK(test_util::contains(error_of([&] { fit_profile(json{{"format", "x"}}, nullptr); }), "not a calibration"));
}

TEST_CASE("calibrate takes the queued kernel overhead; older measurements hold one launch-bound number",
          "[calibrate]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = h100_measurements();
  m["kernel_overhead_seconds"] = {{"kernel_overhead_seconds", 1.6e-6}, {"launch_bound_seconds", 7.5e-6}};
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.kernel_overhead_seconds == Approx(1.6e-6));
  REQUIRE(p.calibration);
  const std::string how = p.calibration->at("fits").at("kernel_overhead_seconds").at("from").get<std::string>();
  CHECK(how.find("queued") != std::string::npos);
  CHECK(how.find("7.5 us") != std::string::npos);
  m["kernel_overhead_seconds"] = 7.5e-6;  // a measurement file written before the queued figure
  CHECK(fit_profile(m, &gpu).kernel_overhead_seconds == Approx(7.5e-6));
  m["kernel_overhead_seconds"] = {{"launch_bound_seconds", 7.5e-6}};  // no queued figure: the datasheet's stays
  CHECK(fit_profile(m, &gpu).kernel_overhead_seconds == Approx(datasheet_profile(gpu).kernel_overhead_seconds));
}

TEST_CASE("calibrate fits the windowed attention kernel's rate against the full kernel's (hand numbers)",
          "[calibrate][window]") {
  const GpuSpec gpu = gpu_by_name("H100");
  json m = h100_measurements();
  // seq 16384, window 4096: 4096 * 16384 - 4096 * 4095 / 2 of 16384 * 16385 / 2 pairs.
  const double share = (4096.0 * 16384 - 4096.0 * 4095 / 2) / (16384.0 * 16385 / 2);
  // Full 40 ms forward, 100 ms backward; windowed: the share of it at 0.6 (0.5, 0.7) and 0.75 (0.7, 0.8) of the rate.
  m["attention_window"] = json::array();
  for (auto [rf, rb] : {std::pair{0.6, 0.75}, std::pair{0.5, 0.7}, std::pair{0.7, 0.8}})
    m["attention_window"].push_back({{"precision", "bf16"}, {"batch", 1}, {"heads", 32}, {"kv_heads", 8},
                                     {"seq", 16384}, {"head_dim", 128}, {"window", 4096},
                                     {"full_forward_seconds", 0.04}, {"full_backward_seconds", 0.1},
                                     {"forward_seconds", share * 0.04 / rf}, {"backward_seconds", share * 0.1 / rb}});
  const HardwareProfile p = fit_profile(m, &gpu);
  CHECK(p.attention_window_forward_relative == Approx(0.6));
  CHECK(p.attention_window_backward_relative == Approx(0.75));
  // Without the part: 0, the full kernel's rate.
  const HardwareProfile q = fit_profile(h100_measurements(), &gpu);
  CHECK(q.attention_window_forward_relative == 0);
  CHECK(q.attention_window_backward_relative == 0);
  CHECK(q.attention_window_rates.empty());
  // One point per head dimension and window: the median of its cases, here
  // (0.6, 0.75) at head_dim 128, window 4096; two cases at head_dim 256,
  // window 4096 (backward 0.3 and 0.5) give their median 0.4, and one at
  // window 1024 its own 0.2; the single figures are the median of all six.
  for (auto [rf, rb, w] : {std::tuple{0.4, 0.3, 4096}, std::tuple{0.4, 0.5, 4096}, std::tuple{0.2, 0.2, 1024}}) {
    const double sh = (double(w) * 16384 - double(w) * (w - 1) / 2) / (16384.0 * 16385 / 2);
    m["attention_window"].push_back({{"precision", "bf16"}, {"batch", 1}, {"heads", 8}, {"kv_heads", 4},
                                     {"seq", 16384}, {"head_dim", 256}, {"window", w},
                                     {"full_forward_seconds", 0.04}, {"full_backward_seconds", 0.1},
                                     {"forward_seconds", sh * 0.04 / rf}, {"backward_seconds", sh * 0.1 / rb}});
  }
  const HardwareProfile w = fit_profile(m, &gpu);
  REQUIRE(w.attention_window_rates.size() == 3);
  CHECK(w.attention_window_rates[0].head_dim == 128);
  CHECK(w.attention_window_rates[0].backward == Approx(0.75));
  CHECK(w.attention_window_rates[1].head_dim == 256);
  CHECK(w.attention_window_rates[1].seq == 1024);  // the window
  CHECK(w.attention_window_rates[1].backward == Approx(0.2));
  CHECK(w.attention_window_rates[2].seq == 4096);
  CHECK(w.attention_window_rates[2].forward == Approx(0.4));
  CHECK(w.attention_window_rates[2].backward == Approx(0.4));
  CHECK(w.attention_window_backward_relative == Approx((0.5 + 0.7) / 2));
  // Between head dimensions: linear; between windows: linear in log2 of the
  // window (2048 is halfway from 1024 to 4096); beyond: held.
  CHECK(w.attention_window_rel(true, 256, 2048) == Approx(0.3));
  CHECK(w.attention_window_rel(true, 192, 4096) == Approx((0.75 + 0.4) / 2));
  CHECK(w.attention_window_rel(true, 512, 8192) == Approx(0.4));
  CHECK(w.attention_widest_head_dim(true) == 256);
  // The table survives a profile file.
  const HardwareProfile back = profile_from_json(profile_to_json(w), datasheet_profile(gpu));
  CHECK(back.attention_window_rates == w.attention_window_rates);
  CHECK(profile_to_json(w)["attention_window_rates"][0].contains("window"));
  // The windowed kernel is 16-bit: an fp32 point is refused, with its name.
  nlohmann::json bad = profile_to_json(w);
  bad["attention_window_rates"][0]["precision"] = "fp32";
  CHECK_THROWS_WITH(profile_from_json(bad, datasheet_profile(gpu)),
                    Catch::Contains("attention_window_rates at head_dim=128 window=4096"));
}

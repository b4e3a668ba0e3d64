// Issue 11: every input gets a right answer or one clear error. Checked
// arithmetic, input limits, bounded work, physical checks, safe output files.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/memory_model.hpp"
#include "specs/plan.hpp"
#include "strategies/checked.hpp"
#include "strategies/errors.hpp"
#include "strategies/schedule.hpp"
#include "strategies/step_program.hpp"

using namespace planner;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checked products name the inputs and never wrap", "[hardening]") {
  CHECK(checked_product({1047553, 1, 4100}, "dp*tp*pp") == int64_t(1047553) * 4100);
  CHECK(checked_mul(int64_t(1) << 31, int64_t(1) << 31, "x") == int64_t(1) << 62);
  const std::string e = error_of([] { checked_mul(int64_t(1) << 40, int64_t(1) << 30, "seq*mbs"); });
  CHECK(e.find("seq*mbs") != std::string::npos);
  CHECK_THROWS_AS(checked_add(INT64_MAX, 1, "bytes"), InputError);
  CHECK(saturate_bytes(1e300) == kMaxBytes);
  CHECK(saturate_bytes(std::numeric_limits<double>::infinity()) == kMaxBytes);
  CHECK(saturate_bytes(std::nan("")) == kMaxBytes);
  CHECK(saturate_bytes(123.7) == 123);
  CHECK(saturating_add_bytes(kMaxBytes, kMaxBytes) == kMaxBytes);
}

TEST_CASE("strategy degrees and their product are range-checked", "[hardening]") {
  Strategy s = Strategy::parse("dp=1047553,pp=4100");
  const std::string e = error_of([&] { s.validate(); });
  CHECK(e.find("dp*tp*pp") != std::string::npos);
  CHECK(e.find("4294967300") != std::string::npos);  // the true product, not a wrapped one
  CHECK_THROWS_AS(Strategy::parse("mbs=65537"), InputError);
  CHECK_NOTHROW(Strategy::parse("mbs=65536"));
  CHECK_THROWS_AS(Strategy::parse("gas=1048577"), InputError);
  Strategy v = Strategy::parse("pp=1024,schedule=interleaved,vpp=2048,gas=1024");
  CHECK(error_of([&] { v.validate(); }).find("pp*vpp") != std::string::npos);
}

TEST_CASE("tokens per micro-batch and sequence are bounded before any memory is computed", "[hardening]") {
  PlanRequest r;
  r.model = "llama-2-70b";
  r.gpus = "1xH100";
  r.strategy = "mbs=32000";
  r.seq = int64_t(1) << 24;
  CHECK(error_of([&] { build_plan(r); }).find("mbs*seq") != std::string::npos);
  r.strategy = "mbs=1";
  r.seq = (int64_t(1) << 24) + 1;
  CHECK(error_of([&] { build_plan(r); }).find("seq=") != std::string::npos);
}

TEST_CASE("memory never wraps: a huge need saturates and does not fit", "[hardening]") {
  PlanRequest r;
  r.model = "llama-2-70b";
  r.gpus = "1xH100";
  r.strategy = "mbs=256";
  r.seq = int64_t(1) << 24;  // 2^32 tokens per micro-batch: the limit, allowed
  const MemoryReport m = estimate_memory(build_plan(r));
  CHECK(m.per_gpu_peak_bytes > 0);
  CHECK(m.per_gpu_peak_bytes <= kMaxBytes);
  CHECK_FALSE(m.fits());
}

TEST_CASE("a node is at most 8192 GPUs; the whole cluster at most 2^20", "[hardening]") {
  CHECK(error_of([] { parse_cluster("65537xH100"); }).find("at most 8192 per node") != std::string::npos);
  CHECK(error_of([] { parse_cluster("1x16384xH100"); }).find("at most 8192 per node") != std::string::npos);
  // A single count above the node size splits into nodes of 8 (issue 28): 16384xH100 is 2048x8xH100.
  CHECK(parse_cluster("16384xH100").nodes == 2048);
  CHECK_NOTHROW(parse_cluster("1024xH100"));
  CHECK_NOTHROW(parse_cluster("4096xH100"));
  CHECK_NOTHROW(parse_cluster("8192xH100"));
  CHECK_NOTHROW(parse_cluster("128x8192xH100"));
  CHECK_THROWS_AS(parse_cluster("8193xH100"), InputError);
  CHECK_NOTHROW(parse_cluster("12500x8xH100"));
  CHECK_THROWS_AS(parse_cluster("131073x8xH100"), InputError);
}

TEST_CASE("interleaved in-flight count is bounded work and equals the full schedule's", "[hardening][schedule]") {
  ModelSpec m = resolve_model("gpt2");
  for (int pp = 2; pp <= 4; ++pp)
    for (int vpp = 2; vpp <= 3; ++vpp)
      for (int gas = pp; gas <= pp * (vpp + 6); gas += pp) {
        Plan p;
        p.model = m;
        p.cluster = parse_cluster(fmt::format("{}xA100-80GB", pp));
        p.strategy = Strategy::parse(fmt::format("dp=1,pp={},schedule=interleaved,vpp={},gas={}", pp, vpp, gas));
        p.seq = 1024;
        p.global_batch = gas;
        const MemoryReport r = estimate_memory(p);
        const auto full = interleaved_one_f_one_b(pp, gas, vpp);
        for (int st = 0; st < pp; ++st) {
          INFO("pp=" << pp << " vpp=" << vpp << " gas=" << gas << " stage=" << st);
          CHECK(r.stages[st].inflight_microbatches == max_inflight(full[st]));
        }
        // The LM head's logits: its own chunk's micro-batches only (vpp - 1 on the last stage).
        CHECK(r.stages[pp - 1].head_inflight_microbatches == max_inflight(full[pp - 1], vpp - 1));
        CHECK(r.stages[pp - 1].head_inflight_microbatches <= r.stages[pp - 1].inflight_microbatches);
      }
}

TEST_CASE("plan.json versions are whole numbers in range", "[hardening]") {
  Plan p;
  p.model = resolve_model("gpt2");
  p.cluster = parse_cluster("1xH100");
  p.seq = 1024;
  p.global_batch = 1;
  nlohmann::json j = plan_to_json(p);
  j["version"] = uint64_t(4294967297);
  CHECK(error_of([&] { plan_from_json(j); }).find("4294967297") != std::string::npos);
  j["version"] = uint64_t(18446744073709551615ull);
  CHECK_THROWS_AS(plan_from_json(j), InputError);
  // A "format" that is not a string is not a plan file (found by fuzz_plan: a number there threw
  // nlohmann's type_error, which no caller turns into exit 2).
  j = plan_to_json(p);
  j["format"] = 94967297;
  CHECK(error_of([&] { plan_from_json(j); }).find("not a plan file") != std::string::npos);
  j["format"] = nlohmann::json::array();
  CHECK_THROWS_AS(plan_from_json(j), InputError);
}

TEST_CASE("profiles with non-physical values are rejected when loaded", "[hardening]") {
  const HardwareProfile base = default_profile(parse_cluster("1xH100").gpu);
  for (const char* bad : {R"({"peak_bf16_flops": -1e15})", R"({"memory_bandwidth_Bps": 1e400})",
                          R"({"kernel_overhead_seconds": -1})", R"({"collective_base_latency_seconds": -1e-6})",
                          R"({"gemm_efficiency": 0})", R"({"nvlink_efficiency": 1.5})",
                          R"({"cpu_adam_flops_per_param": 0})"}) {
    INFO(bad);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(bad);
    } catch (const nlohmann::json::exception&) {
      continue;  // 1e400 is not representable: the parser refuses it already
    }
    CHECK_THROWS_AS(profile_from_json(j, base), InputError);
  }
}

// Catalog entries added for issue 13: datasheet figures (dense peaks; half the
// sparse ones where the datasheet gives only those), calibration marks.
#include "catch.hpp"
#include "costmodel/cluster_spec.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;

namespace {
constexpr double TF = 1e12, GB = 1e9;
constexpr int64_t GiB = int64_t{1} << 30;
}  // namespace

TEST_CASE("catalog: added GPUs carry their datasheet figures", "[cluster][catalog]") {
  struct Want { const char* name; double mem_gib, bw_GBps, fp32, tf32, fp16, bf16; bool nvlink, predict_only; };
  for (const Want& w : {Want{"B200", 180, 8000, 75, 1125, 2250, 2250, true, false},    // 4.5 PF sparse / 2
                        Want{"H20", 96, 4000, 44, 74, 148, 148, true, false},
                        Want{"L4", 24, 300, 30.3, 60, 121, 121, false, false},         // 242 sparse / 2
                        Want{"L40", 48, 864, 90.5, 90.5, 181.05, 181.05, false, false},
                        Want{"A10", 24, 600, 31.2, 62.5, 125, 125, false, false},
                        Want{"T4", 16, 320, 8.1, 0, 65, 0, false, false},
                        Want{"A40", 48, 696, 37.4, 74.8, 149.7, 149.7, true, false},
                        Want{"RTX4090", 24, 1008, 82.6, 82.6, 165.2, 165.2, false, false},
                        Want{"MI300X", 192, 5300, 163.4, 653.7, 1307.4, 1307.4, true, true},
                        Want{"MI250X", 64, 1638.4, 47.85, 0, 191.5, 191.5, true, true},  // one GCD
                        Want{"BI-V100", 32, 1200, 37, 0, 147, 147, false, true},
                        Want{"Ascend910", 32, 1200, 16, 0, 256, 0, false, true}}) {
    INFO(w.name);
    const GpuSpec& g = gpu_by_name(w.name);
    CHECK(g.name == w.name);
    CHECK(g.memory_bytes == int64_t(w.mem_gib * double(GiB)));
    CHECK(g.memory_bandwidth_Bps == Approx(w.bw_GBps * GB));
    CHECK(g.peak_fp32 == Approx(w.fp32 * TF));
    CHECK(g.peak_tf32 == Approx(w.tf32 * TF));
    CHECK(g.peak_fp16 == Approx(w.fp16 * TF));
    CHECK(g.peak_bf16 == Approx(w.bf16 * TF));
    CHECK(g.has_nvlink == w.nvlink);
    CHECK(g.prediction_only == w.predict_only);
    CHECK(g.calibrated.empty());
    CHECK_FALSE(g.source.empty());
    CHECK(contains(calibration_note(g), "not calibrated"));
    CHECK(contains(calibration_note(g), "prediction only") == w.predict_only);
    // A cluster of it resolves and validates.
    CHECK_NOTHROW(parse_cluster(std::string("8x") + w.name).validate());
  }
}

TEST_CASE("catalog: only the GPUs validation/ measured are calibrated", "[cluster][catalog]") {
  CHECK(gpu_by_name("H100").calibrated == "validation/h100");
  CHECK(gpu_by_name("H200").calibrated == "validation/h200x2");
  CHECK(calibration_note(gpu_by_name("H100")).empty());
  int calibrated = 0;
  for (const auto& n : gpu_names()) {
    const GpuSpec& g = gpu_by_name(n);
    if (!g.calibrated.empty()) ++calibrated;
    else CHECK(contains(calibration_note(g), n + " is not calibrated"));
  }
  CHECK(calibrated == 2);
  CHECK(contains(calibration_note(gpu_by_name("A100")), "published-benchmark"));
  CHECK(contains(calibration_note(gpu_by_name("L4")), "assumed"));
  // Aliases reach the new entries; L40 and L40S, A10 and A100 stay apart.
  CHECK(gpu_by_name("nvidia-l4").name == "L4");
  CHECK(gpu_by_name("L40").name == "L40");
  CHECK(gpu_by_name("L40S").name == "L40S");
  CHECK(gpu_by_name("a10").name == "A10");
  CHECK(gpu_by_name("a100").name == "A100-80GB-SXM");
  CHECK(gpu_by_name("ascend-910").name == "Ascend910");
}

// Catalog entries added for issue 13: datasheet figures (dense peaks; half the
// sparse ones where the datasheet gives only those), calibration marks.
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "specs/cluster_spec.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;

namespace {
constexpr double TF = 1e12, GB = 1e9;
constexpr int64_t GiB = int64_t{1} << 30;
}  // namespace

TEST_CASE("catalog: added GPUs carry their datasheet figures", "[cluster][catalog]") {
  struct Want { const char* name; double mem_gib, bw_GBps, fp32, tf32, fp16, bf16; bool nvlink, predict_only; };
  // Each row hand-checked against the datasheet named beside it (per GPU;
  // TFLOP/s dense; memory in GiB as nvidia-smi reports "80 GB" parts; GB/s).
  for (const Want& w : {
           // NVIDIA HGX B200 spec (8-GPU totals / 8): 1440 GB, 64 TB/s, FP32 600 TF,
           // TF32 18 PF and FP16/BF16 36 PF with sparsity -> 1125 and 2250 dense.
           Want{"B200", 180, 8000, 75, 1125, 2250, 2250, true, false},
           // NVIDIA HGX H20 spec: 96 GB HBM3, 4.0 TB/s, FP32 44, TF32 74, BF16/FP16 148.
           Want{"H20", 96, 4000, 44, 74, 148, 148, true, false},
           // NVIDIA L4 datasheet: 24 GB, 300 GB/s, FP32 30.3, TF32 120* and
           // FP16/BF16 242* (*sparse) -> 60 and 121 dense.
           Want{"L4", 24, 300, 30.3, 60, 121, 121, false, false},
           // NVIDIA L40 datasheet: 48 GB, 864 GB/s, FP32 90.5, TF32 90.5 | 181*, BF16/FP16 181.05 | 362.1*.
           Want{"L40", 48, 864, 90.5, 90.5, 181.05, 181.05, false, false},
           // NVIDIA A10 datasheet: 24 GB, 600 GB/s, FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250*.
           Want{"A10", 24, 600, 31.2, 62.5, 125, 125, false, false},
           // NVIDIA T4 datasheet: 16 GB, 320 GB/s, FP32 8.1, mixed FP16/FP32 65; no TF32/BF16.
           Want{"T4", 16, 320, 8.1, 0, 65, 0, false, false},
           // NVIDIA A40 datasheet: 48 GB, 696 GB/s, FP32 37.4, TF32 74.8 | 149.6*,
           // BF16/FP16 149.7 | 299.4*; NVLink bridge 112.5 GB/s for pairs.
           Want{"A40", 48, 696, 37.4, 74.8, 149.7, 149.7, true, false},
           // NVIDIA Ada whitepaper, Appendix A: RTX 4090 24 GB GDDR6X, 1008 GB/s, FP32 82.6,
           // TF32 82.6, FP16/BF16 with FP32 accumulate 165.2 (330.4 sparse).
           Want{"RTX4090", 24, 1008, 82.6, 82.6, 165.2, 165.2, false, false},
           // AMD Instinct MI300X datasheet: 192 GB, 5.3 TB/s, FP32 matrix 163.4, TF32 653.7,
           // FP16/BF16 1307.4 (dense).
           Want{"MI300X", 192, 5300, 163.4, 653.7, 1307.4, 1307.4, true, true},
           // AMD Instinct MI250X datasheet, per package 128 GB, 3.2768 TB/s, FP32 matrix 95.7,
           // FP16/BF16 383: halved for one GCD (one device to software).
           Want{"MI250X", 64, 1638.4, 47.85, 0, 191.5, 191.5, true, true},
           // Iluvatar CoreX BI-V100 (Tiangai 100): 32 GB HBM2, 1.2 TB/s, FP32 37, FP16/BF16 147.
           Want{"BI-V100", 32, 1200, 37, 0, 147, 147, false, true},
           // Huawei Ascend 910 (Hot Chips 31): 32 GB HBM2, 1.2 TB/s, FP16 256; no BF16;
           // FP32 16 is the catalog's placeholder (not published), checked here so a change is seen.
           Want{"Ascend910", 32, 1200, 16, 0, 256, 0, false, true}}) {
    INFO(w.name);
    const GpuSpec& g = gpu_by_name(w.name);
    CHECK(g.name == w.name);
    // What a process can allocate: the datasheet less 1.3% (gpu_catalog.cpp), to the MiB.
    CHECK(g.memory_bytes == int64_t(w.mem_gib * double(GiB) * (1 - 0.013)) / (1 << 20) * (1 << 20));
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

TEST_CASE("catalog: peer links of the added GPUs, per direction", "[cluster][catalog]") {
  // NVLink5 1.8 TB/s total per B200 and NVLink 900 GB/s per H20 (both
  // bidirectional totals, halved); A40 NVLink bridge 112.5 GB/s bidirectional;
  // MI300X 7 Infinity Fabric links of 128 GB/s bidirectional = 448 per direction.
  CHECK(gpu_by_name("B200").nvlink_bandwidth_Bps == Approx(900 * GB));
  CHECK(gpu_by_name("H20").nvlink_bandwidth_Bps == Approx(450 * GB));
  CHECK(gpu_by_name("A40").nvlink_bandwidth_Bps == Approx(56.25 * GB));
  CHECK(gpu_by_name("MI300X").nvlink_bandwidth_Bps == Approx(448 * GB));
  // PCIe-only parts keep no peer link.
  for (const char* n : {"L4", "L40", "A10", "T4", "BI-V100", "Ascend910"}) {
    INFO(n);
    CHECK_FALSE(gpu_by_name(n).has_nvlink);
    CHECK(gpu_by_name(n).nvlink_bandwidth_Bps == 0);
  }
}

TEST_CASE("catalog: only the GPUs validation/ measured are calibrated", "[cluster][catalog]") {
  CHECK(gpu_by_name("H100").calibrated == "validation/h100/kernels");
  CHECK(gpu_by_name("H200").calibrated == "validation/h200/kernels");
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

TEST_CASE("catalog: the calibration mark survives a JSON round trip, not changed figures", "[cluster][catalog]") {
  nlohmann::json j = gpu_by_name("H100");
  GpuSpec back = j.get<GpuSpec>();
  CHECK(back.calibrated == "validation/h100/kernels");
  CHECK(back == gpu_by_name("H100"));
  // A cluster file that changes a measured figure of a catalog GPU describes a
  // GPU nobody measured.
  GpuSpec changed = nlohmann::json{{"name", "H100"}, {"peak_bf16_TFLOPS", 500}}.get<GpuSpec>();
  CHECK(changed.calibrated.empty());
  CHECK(contains(calibration_note(changed), "not calibrated"));
  // ... unless it says where it was calibrated; memory size alone changes nothing.
  CHECK(nlohmann::json{{"name", "H100"}, {"peak_bf16_TFLOPS", 500}, {"calibrated", "my-lab"}}.get<GpuSpec>().calibrated ==
        "my-lab");
  CHECK(nlohmann::json{{"name", "H100"}, {"memory", "64GiB"}}.get<GpuSpec>().calibrated == "validation/h100/kernels");
  // A GPU not in the catalog is never calibrated by default.
  CHECK(nlohmann::json{{"name", "MyGPU"}, {"memory", "24GiB"}, {"memory_GBps", 900}, {"peak_fp16_TFLOPS", 100}}
            .get<GpuSpec>()
            .calibrated.empty());
}

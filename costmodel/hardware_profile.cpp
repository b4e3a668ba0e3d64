#include "costmodel/hardware_profile.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "costmodel/plan.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

double HardwareProfile::peak_flops(Precision p) const {
  switch (p) {
    case Precision::BF16: return peak_bf16_flops > 0 ? peak_bf16_flops : peak_fp16_flops;
    case Precision::FP16: return peak_fp16_flops;
    case Precision::FP32: return allow_tf32 && peak_tf32_flops > 0 ? peak_tf32_flops : peak_fp32_flops;
  }
  return peak_fp32_flops;
}

void HardwareProfile::validate() const {
  // Every number must be finite: an infinite bandwidth or a negative latency
  // would turn into zero or negative times and an MFU above 100% (issue 11).
  auto positive = [](double v, const char* what) {
    if (!(v > 0) || !std::isfinite(v)) throw InputError(fmt::format("profile: {}={} must be positive and finite", what, v));
  };
  auto non_negative = [](double v, const char* what) {
    if (!(v >= 0) || !std::isfinite(v))
      throw InputError(fmt::format("profile: {}={} must be zero or positive and finite", what, v));
  };
  auto fraction = [](double v, const char* what) {
    if (!(v > 0 && v <= 1.0))
      throw InputError(fmt::format("profile: {}={} must be a fraction in (0, 1]", what, v));
  };
  positive(peak_fp32_flops, "peak_fp32_flops");
  // Plausibility floors (a unit mistake, not a GPU): 1 GFLOP/s and 1 MB/s.
  if (peak_fp32_flops < 1e9) throw InputError(fmt::format("profile: peak_fp32_flops={} is below 1e9 (FLOP/s, not TFLOP/s)", peak_fp32_flops));
  if (memory_bandwidth_Bps < 1e6)
    throw InputError(fmt::format("profile: memory_bandwidth_Bps={} is below 1e6 (bytes per second)", memory_bandwidth_Bps));
  non_negative(peak_tf32_flops, "peak_tf32_flops");  // 0: the GPU has none
  non_negative(peak_fp16_flops, "peak_fp16_flops");
  non_negative(peak_bf16_flops, "peak_bf16_flops");
  positive(gemm_k_half, "gemm_k_half");
  non_negative(kernel_overhead_seconds, "kernel_overhead_seconds");
  non_negative(collective_base_latency_seconds, "collective_base_latency_seconds");
  positive(cpu_adam_flops_per_param, "cpu_adam_flops_per_param");
  positive(memory_bandwidth_Bps, "memory_bandwidth_Bps");
  fraction(gemm_efficiency, "gemm_efficiency");
  fraction(memory_efficiency, "memory_efficiency");
  fraction(strided_kernel_relative, "strided_kernel_relative");
  fraction(reduction_kernel_relative, "reduction_kernel_relative");
  fraction(attention_forward_relative, "attention_forward_relative");
  fraction(attention_backward_relative, "attention_backward_relative");
  fraction(nvlink_efficiency, "nvlink_efficiency");
  fraction(pcie_efficiency, "pcie_efficiency");
  fraction(network_efficiency, "network_efficiency");
  fraction(host_copy_efficiency, "host_copy_efficiency");
  fraction(host_memory_efficiency, "host_memory_efficiency");
  positive(sm_count, "sm_count");
  positive(gemm_tile_m, "gemm_tile_m");
  positive(gemm_tile_n, "gemm_tile_n");
  positive(grad_bucket_bytes, "grad_bucket_bytes");
  if (grad_reduce_bytes_per_element != 0 && grad_reduce_bytes_per_element != 2 && grad_reduce_bytes_per_element != 4)
    throw InputError("profile: grad_reduce_bytes_per_element must be 0 (working precision), 2 or 4");
}

namespace {

// Per-architecture numbers the catalog does not carry.
//  SM counts: NVIDIA architecture whitepapers (V100 80, A100 108, GA102: RTX 3090
//  82, RTX A6000 84, H100 SXM5 / H200 132, AD102 RTX 4090 128).
//  Fused attention relative to a large GEMM: FlashAttention-2 (Dao 2023, Fig. 4-7,
//  head dim 128, causal): A100 forward ~190-230 TFLOP/s and backward ~160-190
//  against cuBLAS's 230 (reference file) -> 0.85 / 0.70; H100 SXM5 forward ~330-
//  400 and backward ~300 TFLOP/s against the 805 measured here -> 0.45 / 0.38.
//  V100 has no FlashAttention-2 (sm80+); PyTorch falls back to the memory-
//  efficient kernel at roughly half of that.
struct ArchRow {
  const char* key;  // substring of the lower-case catalog name
  int sms;
  double attn_fwd, attn_bwd;
  bool flash;
};
constexpr ArchRow kArch[] = {
    {"h200", 132, 0.45, 0.38, true}, {"h100", 132, 0.45, 0.38, true}, {"a100", 108, 0.85, 0.70, true},
    {"a6000", 84, 0.85, 0.70, true}, {"3090", 82, 0.85, 0.70, true},  {"4090", 128, 0.85, 0.70, true},
    {"a10", 72, 0.85, 0.70, true},   {"l40", 142, 0.85, 0.70, true},  {"v100", 80, 0.45, 0.40, false},
};

}  // namespace

HardwareProfile default_profile(const GpuSpec& g) {
  HardwareProfile p;
  p.gpu = g.name;
  p.peak_fp32_flops = g.peak_fp32;
  p.peak_tf32_flops = g.peak_tf32;
  p.peak_fp16_flops = g.peak_fp16;
  p.peak_bf16_flops = g.peak_bf16;
  p.memory_bandwidth_Bps = g.memory_bandwidth_Bps;
  // Large-GEMM and streaming efficiencies are the catalog's, which takes them
  // from the micro-benchmarks of the reference file.
  if (g.gemm_efficiency > 0) p.gemm_efficiency = g.gemm_efficiency;
  if (g.memory_efficiency > 0) p.memory_efficiency = g.memory_efficiency;
  const std::string lower = to_lower(g.name);
  for (const auto& row : kArch) {
    if (lower.find(row.key) == std::string::npos) continue;
    p.sm_count = row.sms;
    p.attention_forward_relative = row.attn_fwd;
    p.attention_backward_relative = row.attn_bwd;
    p.flash_attention = row.flash;
    break;
  }
  // NCCL over NVLink: 2xH200 all-reduce of 256 MB measured 300 GB/s bus
  // bandwidth against 450 GB/s per direction (reference file) = 0.67; an
  // 8xA100 sendrecv reaches 195 of 300 GB/s (nccl-tests) = 0.65.
  p.nvlink_efficiency = 0.67;
  // Pinned host-to-device copy: 55 GB/s measured on H200 (reference file) over
  // PCIe 5.0 x16's 64 GB/s = 0.86.
  p.host_copy_efficiency = 0.86;
  p.source = fmt::format("default for {}: datasheet peaks ({}), efficiencies from "
                         "/work/shared/reference/gpu-microbenchmarks.md and docs/TIME_MODEL.md",
                         g.name, g.source);
  return p;
}

#define PLANNER_PROFILE_FIELDS(X)                                                                               \
  X(gpu) X(source) X(peak_fp32_flops) X(peak_tf32_flops) X(peak_fp16_flops) X(peak_bf16_flops) X(allow_tf32) \
  X(gemm_efficiency) X(sm_count) X(gemm_tile_m) X(gemm_tile_n) X(gemm_k_half) X(attention_forward_relative)  \
  X(attention_backward_relative) X(memory_bandwidth_Bps) X(memory_efficiency) X(strided_kernel_relative) X(reduction_kernel_relative) X(kernel_overhead_seconds)      \
  X(nvlink_efficiency) X(pcie_efficiency) X(network_efficiency) X(collective_base_latency_seconds)            \
  X(host_copy_efficiency) X(host_memory_efficiency) X(cpu_adam_flops_per_param) X(flash_attention) X(dropout) \
  X(grad_bucket_bytes) X(grad_reduce_bytes_per_element) X(overlap_grad_reduce) X(overlap_param_gather)

nlohmann::json profile_to_json(const HardwareProfile& p) {
  nlohmann::json j;
  j["format"] = "planner-profile";
#define X(f) j[#f] = p.f;
  PLANNER_PROFILE_FIELDS(X)
#undef X
  return j;
}

HardwareProfile profile_from_json(const nlohmann::json& j, const HardwareProfile& base) {
  if (!j.is_object()) throw InputError("profile: expected a JSON object");
  std::vector<std::string> known{"format"};
#define X(f) known.push_back(#f);
  PLANNER_PROFILE_FIELDS(X)
#undef X
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == it.key();
    if (!ok)
      throw InputError(fmt::format("profile: unknown key '{}'; did you mean '{}'?", it.key(), nearest(it.key(), known)));
  }
  HardwareProfile p = base;
  try {
#define X(f) \
  if (j.contains(#f)) j.at(#f).get_to(p.f);
    PLANNER_PROFILE_FIELDS(X)
#undef X
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("profile: {}", e.what()));
  }
  p.validate();
  return p;
}

HardwareProfile load_profile(const std::string& path, const GpuSpec& gpu) {
  HardwareProfile base = default_profile(gpu);
  if (path.empty()) return base;
  return profile_from_json(read_json_file(path, "profile"), base);
}

void save_profile(const HardwareProfile& p, const std::string& path) {
  write_file_atomically(path, profile_to_json(p).dump(2) + "\n");
}

}  // namespace planner

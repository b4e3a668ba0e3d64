#include "costmodel/hardware_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "costmodel/model_states.hpp"
#include "specs/plan.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

double HardwareProfile::peak_flops(Precision p) const {
  switch (p) {
    case Precision::BF16:
    case Precision::FP8: return peak_bf16_flops > 0 ? peak_bf16_flops : peak_fp16_flops;
    case Precision::FP16: return peak_fp16_flops;
    case Precision::FP32: return allow_tf32 && peak_tf32_flops > 0 ? peak_tf32_flops : peak_fp32_flops;
  }
  return peak_fp32_flops;
}

double HardwareProfile::gemm_efficiency_for(Precision p) const {
  if (p == Precision::FP8 && gemm_efficiency_fp8 > 0) return gemm_efficiency_fp8;
  if (p == Precision::FP8) p = Precision::BF16;
  const double e = p == Precision::FP32 ? gemm_efficiency_fp32 : p == Precision::FP16 ? gemm_efficiency_fp16
                                                                                      : gemm_efficiency_bf16;
  return e > 0 ? e : gemm_efficiency;
}

int64_t HardwareProfile::headroom_bytes(int64_t capacity) const {
  return std::max<int64_t>(memory_headroom_bytes, int64_t(std::llround(memory_headroom * double(capacity))));
}

namespace {
// The attention tables' points: positive coordinates, relative rates in (0, 2];
// the windowed kernel's are 16-bit.
void validate_rate_tables(const std::vector<HardwareProfile::AttentionRate>& rates,
                          const std::vector<HardwareProfile::AttentionRate>& window_rates) {
  for (const auto& r : window_rates)
    if (r.fp32 || r.head_dim <= 0 || r.seq <= 0 || !(r.forward > 0 && r.forward <= 2) ||
        !(r.backward > 0 && r.backward <= 2))
      throw InputError(fmt::format("profile: attention_window_rates at head_dim={} window={}: a 16-bit point with a "
                                   "positive head_dim and window and relative rates in (0, 2] (got {} and {})",
                                   r.head_dim, r.seq, r.forward, r.backward));
  for (const auto& r : rates) {
    if (r.head_dim <= 0 || r.seq <= 0)
      throw InputError(fmt::format("profile: attention_rates head_dim={} seq={} must be positive", r.head_dim, r.seq));
    if (!(r.forward > 0 && r.forward <= 2) || !(r.backward > 0 && r.backward <= 2))
      throw InputError(fmt::format("profile: attention_rates at head_dim={} seq={}: relative rates {} and {} must be "
                                   "in (0, 2]",
                                   r.head_dim, r.seq, r.forward, r.backward));
  }
}
}  // namespace

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
  non_negative(peak_fp8_flops, "peak_fp8_flops");
  if (gemm_efficiency_fp8 != 0 && !(gemm_efficiency_fp8 > 0 && gemm_efficiency_fp8 <= 1.0))
    throw InputError(fmt::format("profile: gemm_efficiency_fp8={} must be 0 (unmeasured) or a fraction in (0, 1]",
                                 gemm_efficiency_fp8));
  positive(gemm_k_half, "gemm_k_half");
  non_negative(kernel_overhead_seconds, "kernel_overhead_seconds");
  for (const auto& [v, name] : {std::pair{moe_host_forward_seconds, "moe_host_forward_seconds"},
                                {moe_host_forward_row_seconds, "moe_host_forward_row_seconds"},
                                {moe_host_backward_seconds, "moe_host_backward_seconds"},
                                {moe_host_backward_row_seconds, "moe_host_backward_row_seconds"},
                                {moe_host_ep_forward_seconds, "moe_host_ep_forward_seconds"},
                                {moe_host_ep_forward_row_seconds, "moe_host_ep_forward_row_seconds"},
                                {moe_host_ep_backward_seconds, "moe_host_ep_backward_seconds"},
                                {moe_host_ep_backward_row_seconds, "moe_host_ep_backward_row_seconds"},
                                {moe_host_shared_forward_seconds, "moe_host_shared_forward_seconds"},
                                {moe_host_shared_backward_seconds, "moe_host_shared_backward_seconds"}})
    non_negative(v, name);
  if (moe_host_ep_size < 0 || moe_host_ep_size == 1)
    throw InputError(fmt::format("profile: moe_host_ep_size={} must be 0 (not measured) or an ep group of 2 or more ranks", moe_host_ep_size));
  non_negative(collective_base_latency_seconds, "collective_base_latency_seconds");
  positive(cpu_adam_flops_per_param, "cpu_adam_flops_per_param");
  positive(memory_bandwidth_Bps, "memory_bandwidth_Bps");
  fraction(gemm_efficiency, "gemm_efficiency");
  // 0 stands for "not measured: gemm_efficiency".
  if (gemm_efficiency_fp32 != 0) fraction(gemm_efficiency_fp32, "gemm_efficiency_fp32");
  if (gemm_efficiency_fp16 != 0) fraction(gemm_efficiency_fp16, "gemm_efficiency_fp16");
  if (gemm_efficiency_bf16 != 0) fraction(gemm_efficiency_bf16, "gemm_efficiency_bf16");
  non_negative(cpu_adam_params_per_second, "cpu_adam_params_per_second");
  non_negative(cpu_adam_params_per_second_one_process, "cpu_adam_params_per_second_one_process");
  non_negative(double(gpu_memory_bytes), "gpu_memory_bytes");
  non_negative(double(context_bytes), "context_bytes");
  non_negative(double(workspace_bytes), "workspace_bytes");
  non_negative(double(nccl_communicator_bytes), "nccl_communicator_bytes");
  non_negative(double(nccl_all_to_all_peer_bytes), "nccl_all_to_all_peer_bytes");
  non_negative(double(nccl_all_to_all_fixed_bytes), "nccl_all_to_all_fixed_bytes");
  non_negative(double(nccl_pipe_link_bytes), "nccl_pipe_link_bytes");
  non_negative(double(memory_headroom_bytes), "memory_headroom_bytes");
  if (!(memory_headroom >= 0 && memory_headroom < 1))
    throw InputError(fmt::format("profile: memory_headroom={} must be a fraction in [0, 1)", memory_headroom));
  fraction(memory_efficiency, "memory_efficiency");
  fraction(strided_kernel_relative, "strided_kernel_relative");
  fraction(reduction_kernel_relative, "reduction_kernel_relative");
  fraction(adamw_kernel_relative, "adamw_kernel_relative");
  if (!(attention_in_step_factor >= 0.5 && attention_in_step_factor <= 2))
    throw InputError(fmt::format("profile: attention_in_step_factor={} must be in [0.5, 2]", attention_in_step_factor));
  if (!(memory_in_step_factor >= 0.5 && memory_in_step_factor <= 2))
    throw InputError(fmt::format("profile: memory_in_step_factor={} must be in [0.5, 2]", memory_in_step_factor));
  fraction(attention_forward_relative, "attention_forward_relative");
  if (!(tp_comm_overlap >= 0 && tp_comm_overlap <= 1))
    throw InputError(fmt::format("profile: tp_comm_overlap={} must be a fraction in [0, 1]", tp_comm_overlap));
  fraction(attention_backward_relative, "attention_backward_relative");
  if (attention_forward_relative_fp32 != 0) fraction(attention_forward_relative_fp32, "attention_forward_relative_fp32");
  if (attention_backward_relative_fp32 != 0) fraction(attention_backward_relative_fp32, "attention_backward_relative_fp32");
  for (const auto& [v, name] : {std::pair{attention_window_forward_relative, "attention_window_forward_relative"},
                                 std::pair{attention_window_backward_relative, "attention_window_backward_relative"}})
    if (!(v >= 0 && v <= 2)) throw InputError(fmt::format("profile: {}={} must be in [0, 2] (0: not measured)", name, v));
  validate_rate_tables(attention_rates, attention_window_rates);
  if (!(compute_slowdown_beside_comm >= 1 && compute_slowdown_beside_comm <= 3))
    throw InputError(fmt::format("profile: compute_slowdown_beside_comm={} must be in [1, 3]", compute_slowdown_beside_comm));
  if (!(comm_slowdown_beside_compute >= 1 && comm_slowdown_beside_compute <= HardwareProfile::kMaxCommSlowdown))
    throw InputError(fmt::format("profile: comm_slowdown_beside_compute={} must be in [1, {}]",
                                 comm_slowdown_beside_compute, HardwareProfile::kMaxCommSlowdown));
  if (!(weight_grad_gemm_relative > 0 && weight_grad_gemm_relative <= 2))
    throw InputError(fmt::format("profile: weight_grad_gemm_relative={} must be in (0, 2]", weight_grad_gemm_relative));
  if (!(weight_grad_gemm_relative_fp32 >= 0 && weight_grad_gemm_relative_fp32 <= 2))
    throw InputError(fmt::format("profile: weight_grad_gemm_relative_fp32={} must be in [0, 2] (0: the 16-bit figure)",
                                 weight_grad_gemm_relative_fp32));
  fraction(nvlink_efficiency, "nvlink_efficiency");
  for (auto [v, name] : {std::pair{reduce_scatter_relative, "reduce_scatter_relative"},
                         {all_gather_relative, "all_gather_relative"},
                         {broadcast_relative, "broadcast_relative"},
                         {send_recv_relative, "send_recv_relative"}})
    if (!(v >= 0.2 && v <= 5)) throw InputError(fmt::format("profile: {}={} must be in [0.2, 5]", name, v));
  if (!(tp_collective_extra_seconds >= 0 && tp_collective_extra_seconds <= 1e-3))
    throw InputError(fmt::format("profile: tp_collective_extra_seconds={} must be in [0, 0.001]",
                                 tp_collective_extra_seconds));
  if (!(tp_collective_extra_seconds_per_byte >= 0 && tp_collective_extra_seconds_per_byte <= 1e-9))
    throw InputError(fmt::format("profile: tp_collective_extra_seconds_per_byte={} must be in [0, 1e-9]",
                                 tp_collective_extra_seconds_per_byte));
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
//  V100 has no FlashAttention-2 (sm80+); PyTorch's SDPA falls back to its
//  memory-efficient kernel at roughly half of that. That kernel is fused too
//  (no s^2 scores are saved), so `flash` is true: the time model prices it at
//  the V100 row's rates and the memory model saves what a fused kernel saves
//  (until this change V100 had flash = false, which priced a materialized
//  softmax and left these rates unused).
struct ArchRow {
  const char* key;  // substring of the lower-case catalog name
  int sms;
  double attn_fwd, attn_bwd;
  bool flash;
};
constexpr ArchRow kArch[] = {
    {"h200", 132, 0.45, 0.38, true}, {"h100", 132, 0.45, 0.38, true}, {"a100", 108, 0.85, 0.70, true},
    {"a6000", 84, 0.85, 0.70, true}, {"3090", 82, 0.85, 0.70, true},  {"4090", 128, 0.85, 0.70, true},
    {"a10", 72, 0.85, 0.70, true},   {"l40", 142, 0.85, 0.70, true},  {"v100", 80, 0.45, 0.40, true},
};

}  // namespace

// What a training step does to the catalog's rates, as planner calibrate
// measured it on the two GPUs it has profiles of (costmodel/profiles/H100-SXM
// and H200, the mean of the two; each also in the comment), taken for every
// GPU without its own measurements: its GEMMs in a sustained step at the
// power cap against the catalog's large-GEMM figure (0.920, 0.906), its
// streaming rate likewise (0.975, 0.943), the fused attention's and the
// layers' memory-bound kernels' in-step factors (1.139, 1.165; 1.011,
// 1.035), the strided, reduction and fused-AdamW kernel classes (0.533,
// 0.402; 0.728, 0.600; 0.773, 0.719), and the slowdowns of compute beside
// the DP/ZeRO collectives and of those collectives beside compute (1.404 and
// 2.747 on both). Without them the datasheet-only predictions of 472 held-out
// H100/H200 plans were 19% fast at the median (docs/UNCERTAINTY.md); the band
// an uncalibrated answer prints is derived with them.
void apply_in_step_defaults(HardwareProfile& p) {
  p.gemm_efficiency *= 0.913;
  p.memory_efficiency *= 0.959;
  p.attention_in_step_factor = 1.152;
  p.memory_in_step_factor = 1.023;
  p.strided_kernel_relative = 0.468;
  p.reduction_kernel_relative = 0.664;
  p.adamw_kernel_relative = 0.746;
  p.compute_slowdown_beside_comm = 1.404;
  p.comm_slowdown_beside_compute = 2.747;
}

HardwareProfile datasheet_profile(const GpuSpec& g) {
  HardwareProfile p;
  p.gpu = g.name;
  p.peak_fp32_flops = g.peak_fp32;
  p.peak_tf32_flops = g.peak_tf32;
  p.peak_fp16_flops = g.peak_fp16;
  p.peak_bf16_flops = g.peak_bf16;
  p.peak_fp8_flops = g.peak_fp8;
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
  // What the process itself takes: the memory model's measured constants
  // (costmodel/model_states.cpp) until planner calibrate measures this GPU.
  const MemoryConstants k = memory_constants(ClusterSpec{});
  p.context_bytes = int64_t(k.context_bytes);
  p.workspace_bytes = int64_t(k.static_buffer_bytes);
  p.nccl_communicator_bytes = int64_t(k.nccl_bytes_per_communicator);
  p.nccl_pipe_link_bytes = int64_t(k.nccl_bytes_per_pipe_link);
  p.source = fmt::format("default for {}: datasheet peaks ({}), efficiencies from "
                         "/work/shared/reference/gpu-microbenchmarks.md and docs/TIME_MODEL.md",
                         g.name, g.source);
  return p;
}

// Defined after the fields' list (profile_from_json).
HardwareProfile measured_overlay(const GpuSpec& g, HardwareProfile base);

// A GPU's profile for predictions: its measured one where the catalog has
// it, else the datasheet's with the in-step defaults. (planner calibrate fits
// over datasheet_profile alone: efficiencies over the datasheet.)
HardwareProfile default_profile(const GpuSpec& g) {
  HardwareProfile p = datasheet_profile(g);
  apply_in_step_defaults(p);
  return measured_overlay(g, p);
}

#define PLANNER_PROFILE_FIELDS(X)                                                                               \
  X(gpu) X(source) X(peak_fp32_flops) X(peak_tf32_flops) X(peak_fp16_flops) X(peak_bf16_flops) X(peak_fp8_flops) X(allow_tf32) \
  X(gemm_efficiency) X(gemm_efficiency_fp32) X(gemm_efficiency_fp16) X(gemm_efficiency_bf16) X(gemm_efficiency_fp8) X(weight_grad_gemm_relative) X(weight_grad_gemm_relative_fp32) X(sm_count) X(gemm_tile_m) X(gemm_tile_n) X(gemm_k_half) X(attention_forward_relative)  \
  X(attention_backward_relative) X(attention_forward_relative_fp32) X(attention_backward_relative_fp32) X(attention_window_forward_relative) X(attention_window_backward_relative) X(memory_bandwidth_Bps) X(memory_efficiency) X(strided_kernel_relative) X(reduction_kernel_relative) X(adamw_kernel_relative) X(attention_in_step_factor) X(memory_in_step_factor) X(kernel_overhead_seconds)      \
  X(moe_host_forward_seconds) X(moe_host_forward_row_seconds) X(moe_host_backward_seconds) X(moe_host_backward_row_seconds) X(moe_host_ep_size) X(moe_host_ep_forward_seconds) X(moe_host_ep_forward_row_seconds) X(moe_host_ep_backward_seconds) X(moe_host_ep_backward_row_seconds) X(moe_host_shared_forward_seconds) X(moe_host_shared_backward_seconds) \
  X(compute_slowdown_beside_comm) X(comm_slowdown_beside_compute) X(nvlink_efficiency) X(pcie_efficiency) X(network_efficiency) X(collective_base_latency_seconds) X(reduce_scatter_relative) X(all_gather_relative) X(broadcast_relative) X(send_recv_relative) X(tp_collective_extra_seconds) X(tp_collective_extra_seconds_per_byte)            \
  X(host_copy_efficiency) X(host_memory_efficiency) X(cpu_adam_flops_per_param) X(flash_attention) X(dropout) X(fused_ops) \
  X(grad_bucket_bytes) X(grad_reduce_bytes_per_element) X(overlap_grad_reduce) X(overlap_param_gather) X(tp_comm_overlap)          \
  X(cpu_adam_params_per_second) X(cpu_adam_params_per_second_one_process) X(gpu_memory_bytes) X(context_bytes) X(workspace_bytes)                      \
  X(nccl_communicator_bytes) X(nccl_pipe_link_bytes) X(nccl_all_to_all_peer_bytes) X(nccl_all_to_all_fixed_bytes) X(memory_headroom) X(memory_headroom_bytes)

namespace {

// Rate at (d, s) from the table's points of one precision family; 0 when it
// has none. No allocation: the layer model asks for it for every candidate of
// the search.
double table_rate(const std::vector<HardwareProfile::AttentionRate>& table, bool fp32, bool backward, int64_t d,
                  int64_t s) {
  // The head dimensions measured nearest below and above d (held outside them).
  int64_t below = 0, above = 0, lowest = 0, highest = 0;
  for (const auto& r : table) {
    if (r.fp32 != fp32) continue;
    if (!lowest || r.head_dim < lowest) lowest = r.head_dim;
    if (r.head_dim > highest) highest = r.head_dim;
    if (r.head_dim <= d && r.head_dim > below) below = r.head_dim;
    if (r.head_dim >= d && (!above || r.head_dim < above)) above = r.head_dim;
  }
  if (!lowest) return 0;
  if (!below) below = lowest;
  if (!above) above = highest;
  // Along the sequence at one head dimension: linear in log2(seq), held outside.
  const double x = std::log2(double(std::max<int64_t>(s, 1)));
  auto at_dim = [&](int64_t dim) {
    const HardwareProfile::AttentionRate *lo = nullptr, *hi = nullptr, *first = nullptr, *last = nullptr;
    for (const auto& r : table) {
      if (r.fp32 != fp32 || r.head_dim != dim) continue;
      if (!first || r.seq < first->seq) first = &r;
      if (!last || r.seq > last->seq) last = &r;
      if (r.seq <= s && (!lo || r.seq > lo->seq)) lo = &r;
      if (r.seq >= s && (!hi || r.seq < hi->seq)) hi = &r;
    }
    auto rate = [&](const HardwareProfile::AttentionRate* r) { return backward ? r->backward : r->forward; };
    if (!lo) return rate(first);
    if (!hi) return rate(last);
    if (lo->seq == hi->seq) return rate(lo);
    const double x0 = std::log2(double(lo->seq)), x1 = std::log2(double(hi->seq));
    return rate(lo) + (rate(hi) - rate(lo)) * (x - x0) / (x1 - x0);
  };
  const double y0 = at_dim(below);
  if (above == below) return y0;
  const double y1 = at_dim(above);
  return y0 + (y1 - y0) * double(d - below) / double(above - below);
}

}  // namespace

double HardwareProfile::attention_forward_rel(Precision p, int64_t head_dim, int64_t seq) const {
  const bool fp32 = p == Precision::FP32;
  const double r = table_rate(attention_rates, fp32, false, head_dim, seq);
  return r > 0 ? r : attention_forward_rel(p);
}

double HardwareProfile::attention_backward_rel(Precision p, int64_t head_dim, int64_t seq) const {
  const bool fp32 = p == Precision::FP32;
  const double r = table_rate(attention_rates, fp32, true, head_dim, seq);
  return r > 0 ? r : attention_backward_rel(p);
}

double HardwareProfile::attention_window_rel(bool backward, int64_t head_dim, int64_t window) const {
  const double r = table_rate(attention_window_rates, false, backward, head_dim, window);
  return r > 0 ? r : backward ? attention_window_backward_relative : attention_window_forward_relative;
}

int64_t HardwareProfile::attention_widest_head_dim(bool window) const {
  int64_t widest = 0;
  for (const auto& r : window ? attention_window_rates : attention_rates)
    if (!r.fp32) widest = std::max(widest, r.head_dim);
  return widest;
}

namespace {

// `along`: the name of the table's second coordinate (AttentionRate::seq),
// "seq" for attention_rates, "window" for attention_window_rates.
nlohmann::json rate_table_to_json(const std::vector<HardwareProfile::AttentionRate>& table, const char* along) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& r : table)
    t.push_back({{"precision", r.fp32 ? "fp32" : "16-bit"}, {"head_dim", r.head_dim}, {along, r.seq},
                 {"forward_relative", r.forward}, {"backward_relative", r.backward}});
  return t;
}

// A table of relative attention rates under `key` (attention_rates,
// attention_window_rates): each point's precision, head_dim, `along` (seq or
// window), forward_relative and backward_relative, with one line naming what
// is wrong.
std::vector<HardwareProfile::AttentionRate> rate_table_from_json(const nlohmann::json& t, const char* key,
                                                                 const char* along) {
  if (!t.is_array()) throw InputError(fmt::format("profile: '{}' must be an array", key));
  std::vector<HardwareProfile::AttentionRate> out;
  for (const auto& e : t) {
    const size_t idx = out.size();
    for (const char* k : {"precision", "head_dim", along, "forward_relative", "backward_relative"})
      if (!e.is_object() || !e.contains(k))
        throw InputError(fmt::format("profile: {}[{}] lacks '{}' (each point has precision, head_dim, {}, "
                                     "forward_relative and backward_relative)",
                                     key, idx, k, along));
    for (const char* k : {"head_dim", along})
      if (!e.at(k).is_number_integer())
        throw InputError(fmt::format("profile: {}[{}].{} must be an integer", key, idx, k));
    for (const char* k : {"forward_relative", "backward_relative"})
      if (!e.at(k).is_number()) throw InputError(fmt::format("profile: {}[{}].{} must be a number", key, idx, k));
    if (!e.at("precision").is_string())
      throw InputError(fmt::format("profile: {}[{}].precision must be \"16-bit\" or \"fp32\"", key, idx));
    HardwareProfile::AttentionRate r;
    const std::string prec = e.at("precision").get<std::string>();
    if (prec != "16-bit" && prec != "fp32")
      throw InputError(fmt::format("profile: {} precision '{}' must be 16-bit or fp32", key, prec));
    r.fp32 = prec == "fp32";
    e.at("head_dim").get_to(r.head_dim);
    e.at(along).get_to(r.seq);
    e.at("forward_relative").get_to(r.forward);
    e.at("backward_relative").get_to(r.backward);
    out.push_back(r);
  }
  return out;
}

}  // namespace

nlohmann::json profile_to_json(const HardwareProfile& p) {
  nlohmann::json j;
  j["format"] = "planner-profile";
#define X(f) j[#f] = p.f;
  PLANNER_PROFILE_FIELDS(X)
#undef X
  if (!p.attention_rates.empty()) j["attention_rates"] = rate_table_to_json(p.attention_rates, "seq");
  if (!p.attention_window_rates.empty())
    j["attention_window_rates"] = rate_table_to_json(p.attention_window_rates, "window");
  if (!p.collective_groups.empty()) j["collective_groups"] = collective_groups_to_json(p.collective_groups);
  if (p.calibration) j["calibration"] = *p.calibration;
  // Only a section a profile brought (EngineHostConstants::from_profile):
  // profiles saved before it stay as they were.
  if (p.engine_host.from_profile) j["engine_host"] = engine_host_to_json(p.engine_host);
  return j;
}

HardwareProfile profile_from_json(const nlohmann::json& j, const HardwareProfile& base) {
  if (!j.is_object()) throw InputError("profile: expected a JSON object");
  std::vector<std::string> known{"format",         "calibration",       "attention_rates", "attention_window_rates",
                                 "collective_groups", "engine_host"};
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
    // Each field's own type error names the field (not the JSON library's words).
    auto read = [&](const char* key, auto& field) {
      if (!j.contains(key)) return;
      try {
        j.at(key).get_to(field);
      } catch (const nlohmann::json::type_error&) {
        throw InputError(fmt::format("profile: '{}' has the wrong type ({})", key, j.at(key).type_name()));
      }
    };
#define X(f) read(#f, p.f);
    PLANNER_PROFILE_FIELDS(X)
#undef X
    if (j.contains("attention_rates"))
      p.attention_rates = rate_table_from_json(j.at("attention_rates"), "attention_rates", "seq");
    if (j.contains("attention_window_rates"))
      p.attention_window_rates = rate_table_from_json(j.at("attention_window_rates"), "attention_window_rates", "window");
    if (j.contains("collective_groups")) {
      p.collective_groups = collective_groups_from_json(j.at("collective_groups"));
    } else if (j.contains("nvlink_efficiency") || j.contains("pcie_efficiency") ||
               j.contains("collective_base_latency_seconds")) {
      // A profile with its own collective figures and no table (one measured
      // before the table was): its figures stand for every group size, as
      // they did, not a base's table.
      p.collective_groups.clear();
    }
    if (j.contains("engine_host")) p.engine_host = engine_host_from_json(j.at("engine_host"), p.engine_host);
    if (j.contains("calibration")) {
      if (!j.at("calibration").is_object()) throw InputError("profile: 'calibration' must be an object");
      p.calibration = std::make_shared<const nlohmann::json>(j.at("calibration"));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("profile: {}", e.what()));
  }
  p.validate();
  return p;
}

const nlohmann::json* measured_profile_json(const std::string& gpu) {
  static const std::vector<std::pair<std::string, nlohmann::json>> parsed = [] {
    std::vector<std::pair<std::string, nlohmann::json>> v;
    for (const auto& [name, text] : measured_profile_texts()) v.emplace_back(std::string(name), nlohmann::json::parse(text));
    return v;
  }();
  for (const auto& [name, j] : parsed)
    if (name == gpu) return &j;
  return nullptr;
}

HardwareProfile measured_overlay(const GpuSpec& g, HardwareProfile base) {
  // Only the catalog GPU as measured: a spec whose figures a cluster file
  // changed has lost its `calibrated` mark (cluster_spec.cpp).
  if (g.calibrated.empty()) return base;
  const nlohmann::json* j = measured_profile_json(g.name);
  if (!j) return base;
  HardwareProfile p = profile_from_json(*j, base);
  // A memory size the cluster file states is the capacity, not what the
  // catalog GPU measured (the mark survives a memory change: cluster_spec.cpp).
  if (g.memory_bytes != gpu_by_name(g.name).memory_bytes) p.gpu_memory_bytes = base.gpu_memory_bytes;
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

void apply_headroom(const std::string& text_in, HardwareProfile& p) {
  const std::string text = trim(text_in);
  const auto bad = [&] {
    return InputError(fmt::format("--headroom '{}': expected a percentage (2%), a fraction below 1 (0.02), bytes "
                                  "with a unit (1.5GiB) or 0",
                                  text_in));
  };
  if (text.empty()) throw bad();
  const bool percent = text.back() == '%';
  const std::string number = percent ? trim(text.substr(0, text.size() - 1)) : text;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == number.size() && !number.empty()) {
    if (percent) v /= 100.0;
    if (!(v >= 0 && v < 1) || !std::isfinite(v)) throw bad();
    p.memory_headroom = v;
    p.memory_headroom_bytes = 0;
    return;
  }
  if (percent) throw bad();
  try {
    p.memory_headroom_bytes = parse_bytes(text, "--headroom");
  } catch (const InputError&) {
    throw bad();
  }
  p.memory_headroom = 0;
}

}  // namespace planner

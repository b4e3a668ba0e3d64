#pragma once
// HardwareProfile: the numbers the time model needs about one GPU type and the
// software running on it. Data, not code: defaults come from the GPU catalog
// (datasheet peaks) times efficiencies from published micro-benchmarks
// (/work/shared/reference/gpu-microbenchmarks.md, Mu Li's transformers-benchmarks
// and this workplace's own measurements), saved to and loaded from JSON so a
// measured profile (planner calibrate) can replace them. Formulas and sources
// in docs/TIME_MODEL.md.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "costmodel/engines_host.hpp"
#include "specs/cluster_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

struct HardwareProfile {
  std::string gpu;     // catalog name the profile describes
  std::string source;  // where the numbers come from

  // --- GPU compute -------------------------------------------------------
  double peak_fp32_flops = 0, peak_tf32_flops = 0, peak_fp16_flops = 0, peak_bf16_flops = 0;  // dense, datasheet
  bool allow_tf32 = false;            // PyTorch >= 1.12 keeps fp32 matmuls off TF32 by default
  double gemm_efficiency = 0.7;       // large-GEMM fraction of peak (measured, 8192^3)
  // Per working precision, when measured (planner calibrate: the median over
  // transformer GEMM shapes of measured / (peak x shape factor)); 0: gemm_efficiency.
  double gemm_efficiency_fp32 = 0, gemm_efficiency_fp16 = 0, gemm_efficiency_bf16 = 0;
  // FP8 GEMMs (precision=fp8: the transformer layers' linear layers through
  // at::_scaled_mm, e4m3/e5m2 inputs, bf16 output): the dense FP8 peak (the
  // catalog's datasheet figure, twice bf16 on Hopper) and, when calibrate
  // measured FP8 GEMM points, its efficiency; 0: the bf16 efficiency (the
  // same shape model as bf16 until calibrated).
  double peak_fp8_flops = 0;
  double gemm_efficiency_fp8 = 0;
  // A weight gradient's GEMM, dW = X^T dY (the "tn" layout: both operands
  // read transposed, the reduction over the tokens), relative to the fitted
  // rate of the forward and data-gradient GEMMs: on an H100 TF32 runs it at
  // about 0.7 of their rate, bf16 and fp16 at about theirs (planner
  // calibrate's "weight grad" shapes). 16-bit inputs and, when measured, fp32
  // apart (0: the 16-bit figure).
  double weight_grad_gemm_relative = 1.0, weight_grad_gemm_relative_fp32 = 0;
  double weight_grad_gemm_rel(Precision p) const {
    return p == Precision::FP32 && weight_grad_gemm_relative_fp32 > 0 ? weight_grad_gemm_relative_fp32
                                                                       : weight_grad_gemm_relative;
  }
  int sm_count = 108;                 // streaming multiprocessors (wave quantization)
  int gemm_tile_m = 128, gemm_tile_n = 128;  // output tile of one thread block (cuBLAS/CUTLASS typical)
  double gemm_k_half = 32;            // reduction length at which the main loop runs at half speed
  // Fused (flash) attention speed relative to a large GEMM, forward and backward.
  double attention_forward_relative = 0.85, attention_backward_relative = 0.7;
  // The same for fp32 inputs, against the fp32 GEMM rate (TF32 where allowed),
  // when measured: SDPA has no flash kernel for fp32 and runs its
  // memory-efficient kernel, whose rate is not the 16-bit kernel's
  // (planner calibrate); 0: the 16-bit figures above.
  double attention_forward_relative_fp32 = 0, attention_backward_relative_fp32 = 0;
  double attention_forward_rel(Precision p) const {
    return p == Precision::FP32 && attention_forward_relative_fp32 > 0 ? attention_forward_relative_fp32
                                                                       : attention_forward_relative;
  }
  double attention_backward_rel(Precision p) const {
    return p == Precision::FP32 && attention_backward_relative_fp32 > 0 ? attention_backward_relative_fp32
                                                                        : attention_backward_relative;
  }
  // The same per head dimension and sequence length, when measured (planner
  // calibrate's attention cases: on an H100 the 16-bit forward runs at about
  // 0.5 of the GEMM rate at head dimension 64 and 0.8 at 128, and faster as
  // the sequence grows). A rate between measured points is interpolated
  // linearly in the head dimension and in log2 of the sequence length, and
  // held at the nearest point outside them. Empty (or no point of the
  // precision family): the single figures above.
  struct AttentionRate {
    bool fp32 = false;  // fp32 inputs (the memory-efficient kernel); else 16-bit (flash)
    int64_t head_dim = 0, seq = 0;
    double forward = 0, backward = 0;  // relative to the GEMM rate, as the single figures
    friend bool operator==(const AttentionRate&, const AttentionRate&) = default;
  };
  std::vector<AttentionRate> attention_rates;
  // Causal attention with a sliding window (Mistral, Gemma-2's local layers):
  // the runtime runs FlashAttention-2's kernel with its window
  // (runtime/model/attention.cpp), not the kernel the rates above were
  // measured on (cuDNN's on Hopper). Its rate on the work it does (the
  // window's attended pairs), relative to the full causal kernel's rate at
  // the same shape, forward and backward: planner calibrate's
  // attention_window part. 0: not measured, windowed layers are priced at
  // the full kernel's rate (and predict says so).
  double attention_window_forward_relative = 0, attention_window_backward_relative = 0;
  // The same per head dimension and window, when measured (calibrate's
  // attention_window cases, the median at each point; `seq` holds the window
  // here, "window" in a profile file): at head dimension 256 FlashAttention-2's
  // windowed backward ran at 0.36 of the full kernel's rate with a window of
  // 512 and 0.66 with 4096 on one H200 (validation/h200/qknorm56), the edge
  // blocks' waste shrinking as the window grows. Interpolated as
  // attention_rates are, in log2 of the window. Empty: the two single figures above.
  std::vector<AttentionRate> attention_window_rates;
  double attention_window_rel(bool backward, int64_t head_dim, int64_t window) const;
  // The widest head dimension of attention_rates (window: of
  // attention_window_rates) in 16-bit, 0 when none: a wider head is priced at
  // its rates (predict names it).
  int64_t attention_widest_head_dim(bool window) const;
  double attention_forward_rel(Precision p, int64_t head_dim, int64_t seq) const;
  double attention_backward_rel(Precision p, int64_t head_dim, int64_t seq) const;
  double memory_bandwidth_Bps = 0;    // datasheet HBM/GDDR
  double memory_efficiency = 0.8;     // achievable fraction for streaming kernels
  // Memory-bound kernel classes slower than a vectorized stream, as fractions of
  // the streaming rate (kernel times of the H100 profile, docs/TIME_MODEL_CHECKS.md sec. 10):
  // PyTorch's non-vectorized elementwise path (strided, broadcast or bf16->fp32
  // converting operands) and row/column reductions (norms, softmax, bias sums).
  double strided_kernel_relative = 0.55;
  double reduction_kernel_relative = 0.67;
  // The fused AdamW kernel's rate (28 bytes per parameter) over the streaming
  // rate: calibrate times at::_fused_adamw_ as the optimizer step calls it. 1:
  // at the streaming rate (the datasheet default).
  double adamw_kernel_relative = 1.0;
  // The fused attention (forward, backward and the backward's helper kernels)
  // as a training pass runs it, over the attention rates above (calibrate's
  // attention points, each timed back to back): calibrate's in-step part sums
  // the attention kernels of its models' sustained passes and the fit divides
  // by the layer model's attention time for the same models. 1: as the points.
  double attention_in_step_factor = 1.0;
  // The transformer layers' memory-bound kernels (norms, activations,
  // residuals, bias gradients) as a sustained training pass runs them, over
  // the rates above: planner calibrate's in-step models at two depths, the
  // difference of their memory-bound kernels' time over the layer model's
  // difference (the head and loss cancel). 1: the rates as measured alone.
  double memory_in_step_factor = 1.0;
  double kernel_overhead_seconds = 2e-6;  // gap between back-to-back kernels
  // The host's seconds in one MoE transformer layer of planner exec (attention,
  // norms and the MoE block: runtime/model/transformer.*, moe.*), fixed + per
  // routed row the rank computes: planner calibrate's moe_host part times a
  // small layer (GPU work of microseconds) alone (ep = 1) and, under mpirun,
  // with every rank in one ep group of moe_host_ep_size ranks (profiles
  // calibrated before 2026-11-27 timed the MoE block alone). The
  // time model floors each MoE layer's forward and backward at them
  // (costmodel/moe_costs.hpp moe_host_seconds). 0: not measured, no floor.
  double moe_host_forward_seconds = 0, moe_host_forward_row_seconds = 0;
  double moe_host_backward_seconds = 0, moe_host_backward_row_seconds = 0;
  int moe_host_ep_size = 0;  // 0: no ep measurement (ep > 1 then takes the ep = 1 figures, said in a note)
  double moe_host_ep_forward_seconds = 0, moe_host_ep_forward_row_seconds = 0;
  double moe_host_ep_backward_seconds = 0, moe_host_ep_backward_row_seconds = 0;
  // What a shared MLP behind Qwen2-MoE's sigmoid gate adds to those host
  // seconds per layer: calibrate's probe layer timed again with one (its
  // autograd nodes run on every rank, whatever the ep). 0: not measured, none.
  double moe_host_shared_forward_seconds = 0, moe_host_shared_backward_seconds = 0;

  // --- communication and host -----------------------------------------------
  double nvlink_efficiency = 0.67;    // NCCL bus bandwidth over the NVLink datasheet rate
  double pcie_efficiency = 0.8;       // NCCL over PCIe
  double network_efficiency = 0.9;    // NCCL over InfiniBand/Ethernet line rate
  double collective_base_latency_seconds = 8.4e-6;  // NCCL tuning.h baseLat, ring/simple
  // NCCL's transfer rate of each operation inside a node, relative to the
  // all-reduce's (the link efficiencies above come from the all-reduce):
  // planner calibrate's points of each operation, slope between its smallest
  // and largest size against the model's. On two H200s reduce-scatter and
  // all-gather ran at about 0.8 of the all-reduce's bus rate and broadcast and
  // send/recv at about 1.2. Groups that span nodes keep 1 (not measured).
  double reduce_scatter_relative = 1.0;
  double all_gather_relative = 1.0;
  double broadcast_relative = 1.0;
  double send_recv_relative = 1.0;
  // What a tensor-parallel collective costs beyond its own transfer when it
  // sits between GEMMs, as the runtime issues it (the next kernel waits for
  // it): extra = tp_collective_extra_seconds + bytes x
  // tp_collective_extra_seconds_per_byte, bytes the full activation. planner
  // calibrate's chain of GEMM, collective, GEMM, ... on every rank at once
  // against the GEMMs and the collectives apart. 0: none (the datasheet default).
  double tp_collective_extra_seconds = 0;
  double tp_collective_extra_seconds_per_byte = 0;
  // The extra for one collective over an activation of `bytes`.
  double tp_collective_extra(double bytes) const {
    return tp_collective_extra_seconds + bytes * tp_collective_extra_seconds_per_byte;
  }
  // Compute kernels that run while the GPU's DP/ZeRO collectives run beside
  // them take this factor longer for the time they overlap (NCCL's kernels
  // hold SMs and memory bandwidth): planner calibrate's GEMM and copy loop
  // with and without all-reduces and all-gathers on the communicator's
  // stream, on every rank at once. 1: no slowdown (the datasheet default).
  double compute_slowdown_beside_comm = 1.0;
  // The other side of it: while a forward or backward runs, the DP/ZeRO
  // collectives on the communicator's stream progress at 1/this of their own
  // rate (their kernels wait for SMs the compute holds), at their own rate
  // otherwise: the same calibrate loop, timing the collectives' end beside it
  // (comm_slowdown_from, costmodel/simulator.hpp). 1: no slowdown.
  double comm_slowdown_beside_compute = 1.0;
  // The collective figures per group size (planner calibrate under mpirun -np
  // N measures groups of 2, 4, ... N): each operation's bus rate over the
  // datasheet rate of the link the group's ring crosses inside a node (NVLink,
  // or PCIe where the node has none), the launch latency, and the two
  // slowdowns above for that group's collectives. A group of a size between
  // two entries takes each field linearly in log2(size); below the smallest,
  // the smallest's; above the largest, the largest's (extrapolated: every
  // answer says so, collective_extrapolation_note). Empty (profiles measured
  // before it was): the single figures above for every group size.
  struct CollectiveGroup {
    int group_size = 0;
    bool pcie = false;  // the efficiencies are of PCIe (a node without NVLink), else NVLink
    double all_reduce_efficiency = 0, reduce_scatter_efficiency = 0, all_gather_efficiency = 0,
           broadcast_efficiency = 0;
    double base_latency_seconds = 0;
    double compute_slowdown_beside_comm = 1, comm_slowdown_beside_compute = 1;
    friend bool operator==(const CollectiveGroup&, const CollectiveGroup&) = default;
  };
  std::vector<CollectiveGroup> collective_groups;  // ascending group_size, sizes distinct
  // The largest group_size measured; 0 without a table.
  int largest_measured_group() const { return collective_groups.empty() ? 0 : collective_groups.back().group_size; }
  static constexpr double kMaxCommSlowdown = 50;  // a profile above it is refused; calibrate caps at it
  double host_copy_efficiency = 0.86;   // pinned host<->device copy over PCIe rate
  double host_memory_efficiency = 0.7;  // STREAM-like fraction of the DRAM peak
  double cpu_adam_flops_per_param = 20;  // CPU Adam arithmetic per parameter (vectorised)
  // CPU AdamW of a node, parameters per second, all its processes together, as
  // the runtime's offload runs it (fp32 master and moments, 16-bit gradients
  // converted in chunks, at::_fused_adamw_), measured by planner calibrate:
  // under mpirun with every local rank at once (each with its share of the
  // cores), with one rank by that process alone using every core; the time
  // model divides it between the node's processes. 0: modelled from the
  // node's DRAM bandwidth and CPU FLOP/s.
  double cpu_adam_params_per_second = 0;
  // Where the figure above is a node's with several processes at once: one
  // process's rate alone with every core (calibrate's single-process part),
  // which a plan with one process on the node runs at. 0: the figure above.
  double cpu_adam_params_per_second_one_process = 0;

  // --- memory the process itself takes (docs/MEMORY_MODEL.md, "Overhead") ---
  // What one process can allocate on the GPU, CUDA context included
  // (planner calibrate: cudaMemGetInfo after the context plus what the caching
  // allocator could really reserve); 0: the GPU spec's memory_bytes.
  int64_t gpu_memory_bytes = 0;
  int64_t context_bytes = 0;            // outside the caching allocator: context, cuBLAS/cuDNN handles, kernels
  int64_t workspace_bytes = 0;          // inside it with no tensor alive: cuBLAS workspaces, small buffers
  int64_t nccl_communicator_bytes = 0;  // device memory NCCL takes per communicator in use
  int64_t nccl_pipe_link_bytes = 0;     // ... per pipeline link (runtime/comm/pipe_links.hpp: its own communicator)
  // ... per peer of an all-to-all communicator (the MoE ep group's): calibrate's
  // moe_host part under mpirun, the growth outside the allocator across the ep
  // communicator's set-up and the MoE block's exchanges, over (ep - 1) peers. 0:
  // not measured (an ep group is then priced as one collective communicator).
  int64_t nccl_all_to_all_peer_bytes = 0;
  // ... and the part of that communicator's buffers that does not grow with its
  // peers: fixed + (ep - 1) x per peer, through two ep sizes' measurements (one
  // calibrate measures one ep size, and sets this 0: per peer only).
  int64_t nccl_all_to_all_fixed_bytes = 0;
  // Kept free when deciding whether a plan fits: usable = capacity -
  // max(memory_headroom x capacity, memory_headroom_bytes) (--headroom).
  double memory_headroom = 0.02;
  int64_t memory_headroom_bytes = 0;

  // --- software choices that change the time ---------------------------------
  bool flash_attention = true;        // fused attention (FlashAttention/SDPA) vs materialized softmax
  bool dropout = false;               // dropout after attention scores, attention and MLP outputs
  // The runtime's fused rotary, GLU and cross-entropy kernels (runtime/kernels/
  // fused_kernels.cu, built with nvcc): one read and one write per tensor.
  // false: the chains of ATen kernels they replace, as eager model code (the
  // engines' exports) and a runtime built without nvcc run them.
  bool fused_ops = true;
  double grad_bucket_bytes = 25e6;    // PyTorch DDP bucket_cap_mb = 25
  int grad_reduce_bytes_per_element = 0;  // 0: the working precision; 4 for fp32 reduction (Megatron bf16)
  bool overlap_grad_reduce = true;    // DP reduction of buckets during the backward
  bool overlap_param_gather = false;  // ZeRO-1/2 parameter all-gather hidden under the next forward
  // Fraction of a layer's sequence-parallel all-gathers and reduce-scatters
  // pipelined with its GEMMs (chunked, as Megatron-LM's --tp-comm-overlap with
  // TransformerEngine does): 0 runs them serially, as this runtime and
  // Megatron-LM by default do; 1 is the ideal decomposition.
  double tp_comm_overlap = 0;

  // planner calibrate's measured points and how each fitted field came from
  // them (kept so a reader can check; not read by the models). Null when the
  // profile was not calibrated.
  std::shared_ptr<const nlohmann::json> calibration;

  // The engines' host work for predict --engine (costmodel/engines_host.hpp):
  // probe6's constants unless the profile's "engine_host" object (a probe
  // on the training host, scripts/engines/probe_to_profile.py) replaces them.
  EngineHostConstants engine_host;

  // Dense tensor-core peak in a working precision (fp32 uses TF32 only when
  // allowed). fp8 gives the bf16 peak: MFU of an fp8 plan is counted against
  // the bf16 peak (as torchtitan and Megatron-LM report it), so it compares
  // with its bf16 twin; gemm_flops(FP8) uses the FP8 peak.
  double peak_flops(Precision p) const;
  double gemm_efficiency_for(Precision p) const;
  // The achievable large-GEMM rate (fp8: the FP8 peak times its efficiency).
  double gemm_flops(Precision p) const {
    if (p == Precision::FP8 && peak_fp8_flops > 0) return peak_fp8_flops * gemm_efficiency_for(p);
    return peak_flops(p) * gemm_efficiency_for(p);
  }
  // GPU memory a process can use (calibrated, else the spec's), and what a
  // plan may take of it after the headroom.
  int64_t capacity_bytes(const GpuSpec& gpu) const { return gpu_memory_bytes > 0 ? gpu_memory_bytes : gpu.memory_bytes; }
  int64_t headroom_bytes(int64_t capacity) const;
  double memory_Bps() const { return memory_bandwidth_Bps * memory_efficiency; }
  void validate() const;  // throws InputError
};

// The table's figures for a group of `group_size` (HardwareProfile::
// collective_groups): interpolated in log2(size) between measured sizes, held
// at the nearest outside them. `extrapolated`: the size is above the largest
// measured. `found` is false (and the value default) when the table is empty.
struct CollectiveGroupAt {
  HardwareProfile::CollectiveGroup value;
  bool found = false, extrapolated = false;
};
CollectiveGroupAt collective_group_at(const std::vector<HardwareProfile::CollectiveGroup>& table, int group_size);
// One line for a plan whose largest collective group (dp, tp or a pipeline
// pair) is above the profile's largest measured group; empty otherwise and
// for a profile without the table.
std::string collective_extrapolation_note(const HardwareProfile& p, const Strategy& s);

// collective_groups as JSON (an array of objects, one per group size) and
// back; the reader checks every entry (InputError naming the entry and key).
nlohmann::json collective_groups_to_json(const std::vector<HardwareProfile::CollectiveGroup>& t);
std::vector<HardwareProfile::CollectiveGroup> collective_groups_from_json(const nlohmann::json& j);

// Defaults for a GPU of the catalog: the datasheet profile, overlaid, for the
// GPUs this project measured (costmodel/profiles/NAME.json, compiled in), with
// the fields planner calibrate measured there.
HardwareProfile default_profile(const GpuSpec& gpu);
// The datasheet peaks and published or assumed efficiencies only.
HardwareProfile datasheet_profile(const GpuSpec& gpu);
// What a sustained training step does to the catalog's rates, as calibrate
// measured it on H100 and H200 (their mean): the GEMM and streaming rates'
// in-step fractions, the attention's and layers' in-step factors, the
// memory-bound kernel classes and the slowdowns beside DP/ZeRO collectives.
// default_profile applies it under a GPU's measured profile (which replaces
// every one of these fields where it has one).
void apply_in_step_defaults(HardwareProfile& p);
// The compiled-in measured profile of a catalog GPU (JSON), or nullptr.
const nlohmann::json* measured_profile_json(const std::string& gpu);
// Generated from costmodel/profiles/*.json (CMakeLists.txt): {GPU name, JSON text}.
const std::vector<std::pair<std::string_view, std::string_view>>& measured_profile_texts();

nlohmann::json profile_to_json(const HardwareProfile& p);
// Keys missing from `j` keep the values of `base`; unknown keys are an InputError.
HardwareProfile profile_from_json(const nlohmann::json& j, const HardwareProfile& base);
// The plan's GPU default, overlaid with the file at `path` when not empty.
HardwareProfile load_profile(const std::string& path, const GpuSpec& gpu);
void save_profile(const HardwareProfile& p, const std::string& path);
// --headroom TEXT: a percentage ("2%"), a fraction below 1 ("0.02"), bytes
// with a unit ("1.5GiB") or "0"; sets memory_headroom and
// memory_headroom_bytes (the other one to 0). InputError otherwise.
void apply_headroom(const std::string& text, HardwareProfile& p);

}  // namespace planner

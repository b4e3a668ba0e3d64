#pragma once
// planner calibrate, the cost model's half: fits the hardware profile's fields
// to the points the runtime measured (calibration/measure.hpp). Every fitted
// value is a measured rate over a datasheet figure (or, for the class
// efficiencies, over the measured streaming rate), stated with the points it
// came from, so a reader can check it; the time model's own prediction for
// each measured point is written beside it. Nothing here looks at end-to-end
// step times (DESIGN.md: calibrate from micro-benchmarks only).
//
// Fits (docs/VALIDATION.md, "planner calibrate"):
//  gemm_efficiency_<p>   median over the transformer shapes of measured FLOP/s /
//                        (peak_<p> x the model's shape factor), leaving out
//                        shapes the model calls memory-bound; gemm_efficiency =
//                        the 16-bit one
//  attention_*_relative  median of measured attention FLOP/s (FlashAttention
//                        accounting; backward less the helper kernels the layer
//                        model prices apart) / the fitted GEMM rate
//  memory_efficiency     median streaming GB/s / datasheet bandwidth
//  strided_/reduction_kernel_relative  median of the class / median streaming
//  kernel_overhead_seconds  a tiny kernel's launch-bound time
//  host_copy_efficiency  mean pinned H2D, D2H GB/s / the GPU's PCIe link rate
//  cpu_adam_params_per_second  measured: the node's rate, every local rank at
//                        once under mpirun (cpu_adam_node), else one process
//  gpu_memory_bytes      what the probe reserved + memory outside the allocator
//  context_bytes, workspace_bytes, nccl_communicator_bytes, nccl_pipe_link_bytes  measured
//  nvlink_ or pcie_efficiency, collective_base_latency_seconds  from the
//                        largest group's all-reduce: bandwidth from the slope
//                        between the smallest and largest size, launch latency
//                        from the smallest size (NCCL only; groups inside one node)
//  collective_groups     the same per group size inside a node, each operation
//                        apart, with the slowdowns beside that size's collectives
//  network_efficiency    send/recv between ranks on different nodes (when the
//                        ranks spanned nodes): the slope over the model's
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "specs/cluster_spec.hpp"
#include "costmodel/hardware_profile.hpp"

namespace planner {

// The catalog GPU a CUDA device name is ("NVIDIA H100 80GB HBM3" -> H100-SXM):
// the longest catalog name or alias contained in the lower-cased,
// dash-separated device name. nullopt when none is.
std::optional<GpuSpec> match_gpu(const std::string& device_name);

// `measured`: the runtime's points. `gpu`: the catalog entry whose datasheet
// peaks, bandwidth and links the efficiencies divide by; null for a CPU
// calibration, where the fastest measured rate of each kind stands in for the
// peak (a CPU has no datasheet here). Throws InputError when `measured` is not
// a calibration document.
HardwareProfile fit_profile(const nlohmann::json& measured, const GpuSpec* gpu);

// The per-group-size table (HardwareProfile::collective_groups) from the
// collectives measured over NCCL on `gpu` under mpirun: for each group size,
// each operation's rate from the slope between its smallest and largest size
// over the model's at the link's datasheet rate, the launch latency from the
// smallest all-reduce, and the slowdowns measured beside that group's
// collectives (`fitted`'s single figures where a size has none). Empty when
// no NCCL all-reduce was measured. Sizes it cannot fit are noted and left out.
std::vector<HardwareProfile::CollectiveGroup> fit_collective_groups(const nlohmann::json& measured, const GpuSpec& gpu,
                                                                    const HardwareProfile& fitted,
                                                                    std::vector<std::string>& notes);

// The compute-beside-collectives points (the measurement's
// "compute_beside_comm") of group size g (0: every size) that the fit reads:
// those beside the runtime's layers' backward (payload "layers",
// calibration/measure_contention.cpp) where there are any, else the GEMM
// loop's (profiles measured before the layers were).
std::vector<nlohmann::json> contention_points(const nlohmann::json& measured, int g);

// The cluster calibrate ran on: "N x GPU", or "nodes x per-node x GPU" when its
// ranks spanned nodes (the measurement's "nodes").
ClusterSpec calibration_cluster(const nlohmann::json& measured, const GpuSpec& gpu);
// network_efficiency from send/recv between ranks on different nodes (the
// slope between the smallest and largest size over the model's at the network
// link's full rate); 0 when no such pairs were measured. `how` says from what.
double fit_network_efficiency(const nlohmann::json& measured, const GpuSpec& gpu, const HardwareProfile& fitted,
                              std::vector<std::string>& notes, std::string& how);

// The human summary calibrate prints: each fitted field, its value and source.
std::string calibration_table(const HardwareProfile& p);

}  // namespace planner

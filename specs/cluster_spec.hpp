#pragma once
// ClusterSpec: the GPUs, how they are linked, and the hosts they sit in.
//
// Spec strings: "NxTYPE" (N GPUs; above the GPU's usual node size, which N is a
// multiple of, split into nodes of that size: 64xH100 = 8x8xH100) or "NODESxNxTYPE"
// ("2xRTX3090", "8xA100-80GB", "128x8xH100"), GPU names case-insensitive with
// aliases ("3090" -> RTX3090). A JSON cluster file can say everything the
// string cannot (links, host memory, NICs).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace planner {

enum class LinkKind {
  PCIe3, PCIe4, PCIe5,
  NVLink2, NVLink3, NVLink4,   // V100, A100 (and the RTX 3090/A6000 bridge), H100/H200
  Ethernet, InfiniBand,        // inter-node
};
const char* to_string(LinkKind k);

struct Link {
  LinkKind kind = LinkKind::PCIe4;
  double bandwidth_Bps = 0;  // per direction, bytes/s, achievable peak of the link
  double latency_s = 0;      // alpha of the alpha-beta model
  friend bool operator==(const Link&, const Link&) = default;
};

// How the GPUs of one node reach each other.
enum class IntraNode {
  NVSwitch,      // every pair over NVLink at full per-GPU bandwidth (DGX/HGX)
  NVLinkPairs,   // NVLink bridges between pairs (RTX 3090, A6000, V100 PCIe); other pairs over PCIe
  PCIe,          // only PCIe, through the host bridge
};
const char* to_string(IntraNode k);

struct GpuSpec {
  std::string name;                    // canonical catalog name, e.g. "A100-80GB-SXM"
  std::vector<std::string> aliases;    // lower-case alternatives ("a100", "a100-80gb")
  int64_t memory_bytes = 0;            // memory a process can allocate (cudaMemGetInfo total where measured, else the datasheet's GiB)
  double memory_bandwidth_Bps = 0;     // datasheet HBM/GDDR bandwidth
  // Dense peak FLOP/s (no sparsity) by datasheet; 0 where the GPU lacks the type.
  double peak_fp32 = 0, peak_tf32 = 0, peak_fp16 = 0, peak_bf16 = 0;
  // Dense FP8 (e4m3/e5m2) tensor-core peak; 0: no FP8 (before Hopper).
  double peak_fp8 = 0;
  // Measured large-GEMM and memory efficiencies (fraction of peak) used as
  // default hardware profile; cited in the catalog source.
  double gemm_efficiency = 0.7;
  double memory_efficiency = 0.8;
  LinkKind nvlink = LinkKind::PCIe4;   // NVLink generation; ignored when !has_nvlink
  bool has_nvlink = false;
  double nvlink_bandwidth_Bps = 0;     // per GPU per direction, all NVLink lanes together
  LinkKind pcie = LinkKind::PCIe4;
  IntraNode default_intra = IntraNode::PCIe;  // typical node for this GPU
  int default_gpus_per_node = 8;
  std::string source;                  // datasheet citation
  // Where this project measured the GPU and fit its efficiencies (a folder of
  // validation/, e.g. "validation/h100"); empty: datasheet figures and assumed
  // or published-benchmark efficiencies only, so predictions are uncalibrated.
  std::string calibrated;
  bool prediction_only = false;        // not a CUDA device: `planner exec` cannot run on it
  bool supports_bf16() const { return peak_bf16 > 0; }
  bool supports_fp8() const { return peak_fp8 > 0; }
  friend bool operator==(const GpuSpec&, const GpuSpec&) = default;
};

struct ClusterSpec {
  std::string name;          // the spec string or file it came from
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  IntraNode intra = IntraNode::PCIe;
  Link gpu_link;             // NVLink (when intra != PCIe), per GPU per direction
  Link pcie;                 // host<->GPU link of each GPU, per direction
  Link network;              // one NIC
  int nics_per_node = 1;
  int64_t host_memory_bytes = 0;     // per node
  double host_memory_bandwidth_Bps = 0;
  int cpu_cores = 0;                 // per node
  double cpu_flops = 0;              // per node, fp32, for the CPU optimizer (offload)

  int world() const { return nodes * gpus_per_node; }
  void validate() const;     // throws InputError
  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;
};

// Catalog.
std::vector<std::string> gpu_names();        // canonical names
const GpuSpec& gpu_by_name(std::string_view name);   // case-insensitive, aliases; InputError with nearest
// "" for a calibrated GPU, else the one-line note every prediction for it
// prints ("H20 is not calibrated: ...").
std::string calibration_note(const GpuSpec& g);
// How far a predicted step time of g may be off (docs/UNCERTAINTY.md):
// measured / predicted lies in [low, high]. Uncalibrated GPUs: the spread of
// datasheet-only predictions' misses on the GPUs this project measured;
// calibrated ones: their own held-out misses. `text` says which, for notes.
struct StepTimeBand {
  double low = 1, high = 1;
  bool calibrated = false;
  std::string text;
  double mape_pct = 0;  // calibrated with held-out runs: their step-time MAPE (0: none)
  int plans = 0;        // ... over this many runs
  std::string over;     // what they are, in words ("131 plans", "7 runs of 4 plans")
};
// Which held-out record a plan's step time is judged by. Mixture-of-experts
// plans (validation/h100x4/moe28) and fine-tuning plans (LoRA/QLoRA on a
// frozen base, validation/h200/lora_lean2 and lora_gaps) ran slower than
// predicted beyond the dense plans' spread, so each has its own record:
// that record's band where the GPU has one, else the GPU's band widened to
// it and said. specs/plan.hpp band_kind(plan) picks it.
enum class BandKind { Dense, Moe, Finetune };
StepTimeBand step_time_band(const GpuSpec& g, BandKind kind = BandKind::Dense);
// Appends g's note to `notes` unless it is empty or already there (one note per
// GPU type over several clusters).
void add_calibration_note(std::vector<std::string>& notes, const GpuSpec& g);
Link default_link(LinkKind k);               // bandwidth and latency by generation
bool consumer_nvlink(const GpuSpec& g);      // NVLink bridge only (pairs)

// "2xRTX3090", "128x8xH100", "H100" (one GPU). Defaults per GPU type: node
// size, intra-node links, PCIe, NICs (400 Gb/s InfiniBand per GPU for
// H100-class HGX, 200 Gb/s for A100, 100 Gb/s otherwise), host memory.
ClusterSpec parse_cluster(std::string_view spec);
// "" unless `c` came from a spec string with one count that parse_cluster split
// into nodes ("64xH100" -> 8x8xH100): then the note that says so.
std::string cluster_notation_note(const ClusterSpec& c);
// The topology an answer assumed, for its header: "8 nodes x 8 H100-SXM
// (nvswitch 450 GB/s per GPU); 1 NIC per GPU infiniband 400 Gb/s; host RAM
// 2.00 TiB per node, 128 CPU cores".
std::string topology_line(const ClusterSpec& c);
// The host a spec string assumes for c's GPU and node size (cpu_flops,
// host_memory_bandwidth_Bps, ...): what a measured profile's host rates are
// scaled against when a cluster file states other CPU figures.
ClusterSpec default_host(const ClusterSpec& c);
// A spec string or a path to a JSON cluster file (anything ending in .json).
ClusterSpec resolve_cluster(std::string_view spec_or_path);
ClusterSpec cluster_from_json(const nlohmann::json& j);

void to_json(nlohmann::json& j, const ClusterSpec& c);
void to_json(nlohmann::json& j, const GpuSpec& g);
// A GPU object as to_json writes it; a catalog "name" starts from the catalog
// entry, so {"name": "RTX3090", "gemm_efficiency": 0.8} overrides one field.
void from_json(const nlohmann::json& j, GpuSpec& g);

}  // namespace planner

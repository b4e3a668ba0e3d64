// ClusterSpec: spec strings ("2xRTX3090", "128x8xH100"), JSON cluster files,
// per-GPU-type defaults for the hosts, validation and the JSON form stored in
// plan files (to_json writes the schema cluster_from_json reads; the round trip
// is exact).
#include "specs/cluster_spec.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "specs/node_layout.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

using nlohmann::json;

constexpr int64_t kMaxGpus = int64_t(1) << 20;  // docs/ARCHITECTURE.md, "Input limits"
// The topology model builds every GPU of one node and its links, but searches
// best paths only from one GPU (and NIC) per class of interchangeable ones and
// carries them over (costmodel/topology.cpp), so routing a collective is O(g):
// a node of 4096 GPUs predicts in 0.02 s and plans in 0.1-0.15 s (gpt2,
// llama-2-70b), one of 8192 in 0.04 s and 0.2-0.45 s (two nodes of 8192:
// 0.45 s, 0.85 s with the NICs of kMaxSharedNicRoutes) on a 2-core machine,
// Release; at 16384 the worst plan seen took 1.6 s. So a node is at most 8192
// GPUs (the largest NVLink domain announced, NVL576, fits 14 times).
constexpr int64_t kMaxGpusPerNode = 8192;
// GPUs whose PCIe switch has no NIC send across nodes through every equally
// near NIC, so a collective routes (such GPUs) x (NICs) paths per node
// (shared_nic_routes, specs/node_layout.hpp); 2^17 admits every node of up to 1024 GPUs
// and keeps a plan under a second.
constexpr int64_t kMaxSharedNicRoutes = int64_t(1) << 17;
constexpr double kMinBandwidth_Bps = 1e6;
constexpr int64_t GiB = int64_t{1} << 30;
constexpr double GB = 1e9;

bool is_nvlink(LinkKind k) { return k == LinkKind::NVLink2 || k == LinkKind::NVLink3 || k == LinkKind::NVLink4; }
bool is_pcie(LinkKind k) { return k == LinkKind::PCIe3 || k == LinkKind::PCIe4 || k == LinkKind::PCIe5; }
bool is_network(LinkKind k) { return k == LinkKind::Ethernet || k == LinkKind::InfiniBand; }

// ------------------------------------------------------------ host defaults
//
// What a typical node of each GPU type looks like (none of this is in the
// spec string):
//  * H100/H200 SXM: NVIDIA DGX H100/H200 (and HGX servers): 8 GPUs, 8x 400 Gb/s
//    InfiniBand NDR (one ConnectX-7 per GPU), 2 TiB host memory, 2x 56-core
//    Xeon (modelled as 2x64 cores).
//  * A100 (SXM and PCIe): DGX A100: 8x 200 Gb/s InfiniBand HDR (one per GPU) for
//    the SXM part, 1 TiB host memory, 2x 64-core EPYC.
//  * V100: DGX-1: 4x 100 Gb/s InfiniBand EDR for 8 GPUs, 512 GiB host memory.
//  * Other servers (L40S, H100 PCIe): one 100 Gb/s Ethernet NIC, 128 GiB of
//    host memory per GPU (assumption).
//  * Workstations: GeForce cards (RTX 3090/3090 Ti/4090) with up to 2 GPUs: 64
//    GiB of host memory, a typical 2x RTX 3090 desktop (16-core CPU, dual
//    channel DDR4/DDR5 at ~50 GB/s); larger workstations and RTX A6000
//    machines: 256 GiB. One 100 Gb/s Ethernet NIC.
//  Server memory bandwidth ~200 GB/s (8-12 DDR4/DDR5 channels per socket,
//  achievable); CPU fp32 FLOP/s = cores x 32 FLOP/cycle (two 8-wide FMA units)
//  x 2.5 GHz.
struct HostDefaults {
  LinkKind network = LinkKind::Ethernet;
  double network_Bps = 12.5 * GB;
  int nics = 1;
  int64_t host_memory = 256 * GiB;
  double host_bw = 200 * GB;
  int cores = 128;
};

bool name_is(const GpuSpec& g, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (g.name == n) return true;
  return false;
}

HostDefaults host_defaults(const GpuSpec& g, int gpus_per_node) {
  HostDefaults h;
  auto per_gpu = [&](int64_t bytes) { return std::max<int64_t>(256 * GiB, bytes * gpus_per_node); };
  if (name_is(g, {"H100-SXM", "H200"})) {
    h.network = LinkKind::InfiniBand;
    h.network_Bps = 50 * GB;  // 400 Gb/s
    h.nics = gpus_per_node;
    h.host_memory = per_gpu(256 * GiB);  // 2 TiB at 8 GPUs
  } else if (name_is(g, {"A100-80GB-SXM", "A100-40GB-SXM"})) {
    h.network = LinkKind::InfiniBand;
    h.network_Bps = 25 * GB;  // 200 Gb/s
    h.nics = gpus_per_node;
    h.host_memory = per_gpu(128 * GiB);  // 1 TiB at 8 GPUs
  } else if (name_is(g, {"A100-80GB-PCIE", "A100-40GB-PCIE"})) {
    h.host_memory = per_gpu(128 * GiB);
  } else if (name_is(g, {"V100-16GB", "V100-32GB"})) {
    h.network = LinkKind::InfiniBand;
    h.network_Bps = 12.5 * GB;  // 100 Gb/s EDR
    h.nics = std::max(1, gpus_per_node / 2);
    h.host_memory = per_gpu(64 * GiB);  // 512 GiB at 8 GPUs
  } else if (name_is(g, {"RTX3090", "RTX3090Ti", "RTX4090", "A6000"}) || g.default_gpus_per_node <= 2) {
    bool geforce = name_is(g, {"RTX3090", "RTX3090Ti", "RTX4090"});
    h.host_memory = geforce && gpus_per_node <= 2 ? 64 * GiB : 256 * GiB;
    h.host_bw = 50 * GB;
    h.cores = 16;
  } else {
    h.host_memory = per_gpu(128 * GiB);
  }
  return h;
}

Link nvlink_of(const GpuSpec& g) {
  LinkKind kind = g.has_nvlink && is_nvlink(g.nvlink) ? g.nvlink : LinkKind::NVLink3;
  return Link{kind, g.nvlink_bandwidth_Bps, default_link(kind).latency_s};
}

ClusterSpec make_cluster(const GpuSpec& gpu, int nodes, int gpus_per_node, std::string name) {
  ClusterSpec c;
  c.name = std::move(name);
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  c.gpu = gpu;
  // A lone GPU has no peers; NVLink pairs exist from 2 GPUs on (with an odd
  // count or more than 2 bridged cards, the other pairs go over PCIe).
  c.intra = gpus_per_node > 1 && gpu.has_nvlink ? gpu.default_intra : IntraNode::PCIe;
  c.pcie = default_link(gpu.pcie);
  c.gpu_link = c.intra == IntraNode::PCIe ? c.pcie : nvlink_of(gpu);
  HostDefaults h = host_defaults(gpu, gpus_per_node);
  c.network = default_link(h.network);
  c.network.bandwidth_Bps = h.network_Bps;
  c.nics_per_node = h.nics;
  c.host_memory_bytes = h.host_memory;
  c.host_memory_bandwidth_Bps = h.host_bw;
  c.cpu_cores = h.cores;
  c.cpu_flops = h.cores * 32.0 * 2.5e9;
  return c;
}

std::string spec_name(const ClusterSpec& c) {
  if (c.nodes > 1) return fmt::format("{}x{}x{}", c.nodes, c.gpus_per_node, c.gpu.name);
  return fmt::format("{}x{}", c.gpus_per_node, c.gpu.name);
}

// ------------------------------------------------------------ JSON helpers

// JSON stores human units (GB/s, TFLOP/s, us); returns the value in `unit`s
// whose product with `unit` gives back `value` bit for bit, so that
// to_json -> cluster_from_json is exact.
double in_units(double value, double unit) {
  double g = value / unit;
  if (g * unit == value) return g;
  double up = g, down = g;
  for (int i = 0; i < 8; ++i) {
    up = std::nextafter(up, INFINITY);
    down = std::nextafter(down, -INFINITY);
    if (up * unit == value) return up;
    if (down * unit == value) return down;
  }
  return g;
}

struct Obj {
  const json& j;
  std::string where;  // "cluster", "cluster.network", "gpu"

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", where, what)); }

  void only(std::initializer_list<const char*> keys) const {
    if (!j.is_object()) fail(fmt::format("expected a JSON object, got {}", json_excerpt(j)));
    std::set<std::string> allowed(keys.begin(), keys.end());
    for (const auto& [k, v] : j.items())
      if (!allowed.count(k))
        fail(fmt::format("unknown key '{}' (allowed: {})", k, fmt::join(keys, ", ")));
  }
  bool has(const char* k) const { return j.contains(k); }
  int64_t integer(const char* k, int64_t max) const {
    const json& v = j.at(k);
    if (!(v.is_number_integer() || v.is_number_unsigned()))
      fail(fmt::format("'{}' must be a positive whole number, got {}", k, json_excerpt(v)));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max))
      fail(fmt::format("'{}' = {} is too large (at most {})", k, json_excerpt(v), max));
    int64_t x = v.get<int64_t>();
    if (x <= 0) fail(fmt::format("'{}' must be positive, got {}", k, x));
    if (x > max) fail(fmt::format("'{}' = {} is too large (at most {})", k, x, max));
    return x;
  }
  double number(const char* k, bool allow_zero = false) const {
    const json& v = j.at(k);
    if (!v.is_number()) fail(fmt::format("'{}' must be a number, got {}", k, json_excerpt(v)));
    double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || (x == 0 && !allow_zero))
      fail(fmt::format("'{}' must be {}, got {}", k, allow_zero ? "zero or positive" : "positive", json_excerpt(v)));
    return x;
  }
  bool boolean(const char* k) const {
    if (!j.at(k).is_boolean()) fail(fmt::format("'{}' must be true or false, got {}", k, json_excerpt(j.at(k))));
    return j.at(k).get<bool>();
  }
  std::string text(const char* k) const {
    if (!j.at(k).is_string()) fail(fmt::format("'{}' must be a string, got {}", k, json_excerpt(j.at(k))));
    return j.at(k).get<std::string>();
  }
  int64_t bytes(const char* k) const {
    if (j.at(k).is_string()) return parse_bytes(j.at(k).get<std::string>(), where + "." + k);
    return integer(k, INT64_MAX);
  }
};

LinkKind parse_link_kind(const Obj& o, const char* key, bool (*allowed)(LinkKind), const char* options) {
  std::string s = to_lower(o.text(key));
  for (LinkKind k : {LinkKind::PCIe3, LinkKind::PCIe4, LinkKind::PCIe5, LinkKind::NVLink2, LinkKind::NVLink3,
                     LinkKind::NVLink4, LinkKind::Ethernet, LinkKind::InfiniBand})
    if (s == to_string(k) && allowed(k)) return k;
  if (s == "ib" && allowed(LinkKind::InfiniBand)) return LinkKind::InfiniBand;
  o.fail(fmt::format("'{}' must be one of {}, got '{}'", key, options, s));
}

IntraNode parse_intra(const Obj& o, const char* key) {
  std::string s = to_lower(o.text(key));
  for (char& ch : s)
    if (ch == '_') ch = '-';
  if (s == "nvswitch") return IntraNode::NVSwitch;
  if (s == "nvlink-pairs" || s == "nvlink-bridge") return IntraNode::NVLinkPairs;
  if (s == "pcie") return IntraNode::PCIe;
  o.fail(fmt::format("'{}' must be one of nvswitch, nvlink-pairs, pcie, got '{}'", key, s));
}

json link_to_json(const Link& l) {
  return json{{"kind", to_string(l.kind)}, {"GBps", in_units(l.bandwidth_Bps, GB)}, {"latency_us", in_units(l.latency_s, 1e-6)}};
}

// {"kind": ..., "GBps": ..., "latency_us": ...}, each optional, over `base`;
// a new kind without numbers takes that kind's defaults.
Link link_from_json(const json& j, const std::string& where, Link base, bool (*allowed)(LinkKind), const char* options) {
  Obj o{j, where};
  o.only({"kind", "GBps", "latency_us"});
  if (o.has("kind")) {
    LinkKind k = parse_link_kind(o, "kind", allowed, options);
    if (k != base.kind) base = default_link(k);
  }
  if (o.has("GBps")) base.bandwidth_Bps = o.number("GBps") * GB;
  if (o.has("latency_us")) base.latency_s = o.number("latency_us", true) * 1e-6;
  return base;
}

void check_gpu(const GpuSpec& g) {
  auto fail = [&](const std::string& what) { throw InputError(fmt::format("GPU '{}': {}", g.name, what)); };
  if (g.name.empty()) throw InputError("GPU: 'name' must not be empty");
  if (g.memory_bytes <= 0) fail("memory must be positive");
  if (!(g.memory_bandwidth_Bps >= kMinBandwidth_Bps) || !std::isfinite(g.memory_bandwidth_Bps))
    fail(fmt::format("memory bandwidth must be finite and at least 1 MB/s, got {} B/s", g.memory_bandwidth_Bps));
  if (std::max({g.peak_fp32, g.peak_fp16, g.peak_bf16}) < 1e9 && std::max({g.peak_fp32, g.peak_fp16, g.peak_bf16}) > 0)
    fail("peak below 1 GFLOP/s (a unit mistake?)");
  for (double p : {g.peak_fp32, g.peak_tf32, g.peak_fp16, g.peak_bf16})
    if (!(p >= 0) || !std::isfinite(p)) fail("peak FLOP/s must be zero or positive");
  if (g.peak_fp32 <= 0 && g.peak_fp16 <= 0 && g.peak_bf16 <= 0) fail("needs a peak FLOP/s (fp32, fp16 or bf16)");
  if (!(g.gemm_efficiency > 0 && g.gemm_efficiency <= 1)) fail(fmt::format("gemm_efficiency={} must be in (0, 1]", g.gemm_efficiency));
  if (!(g.memory_efficiency > 0 && g.memory_efficiency <= 1))
    fail(fmt::format("memory_efficiency={} must be in (0, 1]", g.memory_efficiency));
  if (g.has_nvlink && !(g.nvlink_bandwidth_Bps >= kMinBandwidth_Bps && std::isfinite(g.nvlink_bandwidth_Bps)))
    fail("has_nvlink needs a finite NVLink bandwidth of at least 1 MB/s");
  if (g.has_nvlink && !is_nvlink(g.nvlink)) fail("nvlink must be nvlink2, nvlink3 or nvlink4");
  if (!is_pcie(g.pcie)) fail("pcie must be pcie3, pcie4 or pcie5");
  if (g.default_gpus_per_node < 1 || g.default_gpus_per_node > kMaxGpusPerNode)
    fail(fmt::format("default_gpus_per_node must be between 1 and {}", kMaxGpusPerNode));
}

}  // namespace

// ------------------------------------------------------------ GPU JSON

void to_json(json& j, const GpuSpec& g) {
  j = json{{"name", g.name},
           {"aliases", g.aliases},
           {"memory_bytes", g.memory_bytes},
           {"memory_GBps", in_units(g.memory_bandwidth_Bps, GB)},
           {"peak_fp32_TFLOPS", in_units(g.peak_fp32, 1e12)},
           {"peak_tf32_TFLOPS", in_units(g.peak_tf32, 1e12)},
           {"peak_fp16_TFLOPS", in_units(g.peak_fp16, 1e12)},
           {"peak_bf16_TFLOPS", in_units(g.peak_bf16, 1e12)},
           {"gemm_efficiency", g.gemm_efficiency},
           {"memory_efficiency", g.memory_efficiency},
           {"has_nvlink", g.has_nvlink},
           {"nvlink", to_string(g.nvlink)},
           {"nvlink_GBps", in_units(g.nvlink_bandwidth_Bps, GB)},
           {"pcie", to_string(g.pcie)},
           {"default_intra", to_string(g.default_intra)},
           {"default_gpus_per_node", g.default_gpus_per_node},
           {"source", g.source},
           {"calibrated", g.calibrated},
           {"prediction_only", g.prediction_only}};
  // Only GPUs with FP8 carry the key (the other GPUs' JSON is what it was).
  if (g.peak_fp8 > 0) j["peak_fp8_TFLOPS"] = in_units(g.peak_fp8, 1e12);
}

void from_json(const json& j, GpuSpec& out) {
  if (j.is_string()) {
    out = gpu_by_name(j.get<std::string>());
    return;
  }
  Obj o{j, "gpu"};
  o.only({"name", "aliases", "memory", "memory_bytes", "memory_GBps", "peak_fp32_TFLOPS", "peak_tf32_TFLOPS",
          "peak_fp16_TFLOPS", "peak_bf16_TFLOPS", "peak_fp8_TFLOPS", "gemm_efficiency", "memory_efficiency", "has_nvlink", "nvlink",
          "nvlink_GBps", "pcie", "default_intra", "default_gpus_per_node", "source", "calibrated", "prediction_only"});
  if (!o.has("name")) o.fail("missing 'name' (a catalog GPU such as \"RTX3090\", or a new name with its figures)");
  std::string name = o.text("name");
  GpuSpec g;
  bool in_catalog = true;
  try {
    g = gpu_by_name(name);
  } catch (const InputError&) {
    in_catalog = false;
    g = GpuSpec{};
    g.name = name;
    g.nvlink = LinkKind::PCIe4;
    g.source = "user-defined";
    for (const char* req : {"memory_GBps", "peak_fp16_TFLOPS"})
      if (!o.has(req)) o.fail(fmt::format("'{}' is not in the catalog, so '{}' is required", name, req));
    if (!o.has("memory") && !o.has("memory_bytes"))
      o.fail(fmt::format("'{}' is not in the catalog, so 'memory' (e.g. \"24GiB\") is required", name));
  }
  if (o.has("aliases")) {
    if (!j.at("aliases").is_array()) o.fail("'aliases' must be a list of strings");
    g.aliases.clear();
    for (const auto& a : j.at("aliases")) {
      if (!a.is_string()) o.fail("'aliases' must be a list of strings");
      g.aliases.push_back(a.get<std::string>());
    }
  }
  if (o.has("memory")) g.memory_bytes = o.bytes("memory");
  if (o.has("memory_bytes")) g.memory_bytes = o.bytes("memory_bytes");
  if (o.has("memory_GBps")) g.memory_bandwidth_Bps = o.number("memory_GBps") * GB;
  if (o.has("peak_fp32_TFLOPS")) g.peak_fp32 = o.number("peak_fp32_TFLOPS", true) * 1e12;
  if (o.has("peak_tf32_TFLOPS")) g.peak_tf32 = o.number("peak_tf32_TFLOPS", true) * 1e12;
  if (o.has("peak_fp16_TFLOPS")) g.peak_fp16 = o.number("peak_fp16_TFLOPS", true) * 1e12;
  if (o.has("peak_bf16_TFLOPS")) g.peak_bf16 = o.number("peak_bf16_TFLOPS", true) * 1e12;
  if (o.has("peak_fp8_TFLOPS")) g.peak_fp8 = o.number("peak_fp8_TFLOPS", true) * 1e12;
  if (o.has("gemm_efficiency")) g.gemm_efficiency = o.number("gemm_efficiency");
  if (o.has("memory_efficiency")) g.memory_efficiency = o.number("memory_efficiency");
  if (o.has("has_nvlink")) g.has_nvlink = o.boolean("has_nvlink");
  if (o.has("nvlink")) {
    std::string s = to_lower(o.text("nvlink"));
    bool found = false;
    for (LinkKind k : {LinkKind::NVLink2, LinkKind::NVLink3, LinkKind::NVLink4, LinkKind::PCIe3, LinkKind::PCIe4, LinkKind::PCIe5})
      if (s == to_string(k)) { g.nvlink = k; found = true; }
    if (!found) o.fail(fmt::format("'nvlink' must be nvlink2, nvlink3 or nvlink4, got '{}'", s));
  }
  if (o.has("nvlink_GBps")) g.nvlink_bandwidth_Bps = o.number("nvlink_GBps", true) * GB;
  if (o.has("pcie")) g.pcie = parse_link_kind(o, "pcie", is_pcie, "pcie3, pcie4, pcie5");
  if (o.has("default_intra")) g.default_intra = parse_intra(o, "default_intra");
  if (o.has("default_gpus_per_node")) g.default_gpus_per_node = static_cast<int>(o.integer("default_gpus_per_node", kMaxGpus));
  if (o.has("source")) g.source = o.text("source");
  // A catalog GPU whose speed figures the file changes is no longer what was
  // measured: its calibration mark goes unless the file states one itself
  // (a plan written by this program repeats the catalog figures and the mark).
  if (in_catalog && !o.has("calibrated")) {
    const GpuSpec& c = gpu_by_name(name);
    if (g.memory_bandwidth_Bps != c.memory_bandwidth_Bps || g.peak_fp32 != c.peak_fp32 ||
        g.peak_tf32 != c.peak_tf32 || g.peak_fp16 != c.peak_fp16 || g.peak_bf16 != c.peak_bf16 || g.peak_fp8 != c.peak_fp8 ||
        g.gemm_efficiency != c.gemm_efficiency || g.memory_efficiency != c.memory_efficiency)
      g.calibrated.clear();
  }
  if (o.has("calibrated")) g.calibrated = o.text("calibrated");
  if (o.has("prediction_only")) g.prediction_only = o.boolean("prediction_only");
  check_gpu(g);
  out = std::move(g);
}

// ------------------------------------------------------------ spec strings

ClusterSpec parse_cluster(std::string_view spec_in) {
  const std::string spec = trim(spec_in);
  const std::string shown = clip(spec);  // an error quotes at most ~200 bytes of the argument
  const std::string usage =
      fmt::format("bad GPU spec '{}': expected NxTYPE or NODESxNxTYPE, e.g. 2xRTX3090 or 128x8xH100", shown);
  if (spec.empty()) throw InputError(usage);
  // Leading counts are the parts before an 'x' that look like numbers; the
  // rest is the GPU name (which may itself contain an x, as in RTX3090).
  std::vector<std::string> counts;
  std::string rest = spec;
  while (counts.size() < 2) {
    size_t x = rest.find_first_of("xX");
    if (x == std::string::npos) break;
    std::string head = trim(rest.substr(0, x));
    if (head.empty()) throw InputError(usage);  // "x3090"
    bool numeric = head.find_first_not_of("+-0123456789") == std::string::npos;
    if (!numeric) break;
    counts.push_back(head);
    rest = rest.substr(x + 1);
  }
  std::string type = trim(rest);
  if (type.empty()) throw InputError(usage);  // "2x"
  std::vector<int64_t> n;
  for (const auto& c : counts) {
    int64_t v = parse_int(c, fmt::format("GPU spec '{}': count", shown));
    if (v > kMaxGpus) throw InputError(fmt::format("GPU spec '{}': {} is too many (at most {} GPUs)", shown, clip(c), kMaxGpus));
    n.push_back(v);
  }
  const GpuSpec& gpu = gpu_by_name(type);
  int64_t nodes = n.size() == 2 ? n[0] : 1;
  int64_t per_node = n.empty() ? 1 : n.back();
  // "64xH100" means eight DGX nodes to the people who type it, not one
  // 64-GPU NVLink domain (issue 28): a single count above the GPU's usual node
  // size that it divides is split into nodes of that size
  // (cluster_notation_note says so). "1x64xH100" or a cluster file keeps one node.
  if (n.size() == 1 && per_node > gpu.default_gpus_per_node && per_node % gpu.default_gpus_per_node == 0) {
    nodes = per_node / gpu.default_gpus_per_node;
    per_node = gpu.default_gpus_per_node;
  }
  if (nodes * per_node > kMaxGpus)
    throw InputError(fmt::format("GPU spec '{}': {} GPUs are too many (at most {})", shown, nodes * per_node, kMaxGpus));
  ClusterSpec c = make_cluster(gpu, static_cast<int>(nodes), static_cast<int>(per_node), spec);
  c.validate();
  return c;
}

// ------------------------------------------------------------ JSON clusters

ClusterSpec cluster_from_json(const json& j) {
  Obj o{j, "cluster"};
  o.only({"name", "gpu", "nodes", "gpus_per_node", "intra", "nvlink_GBps", "gpu_link", "pcie", "network", "host_memory",
          "host_memory_GBps", "cpu_cores", "cpu_GFLOPS"});
  if (!o.has("gpu")) o.fail("missing 'gpu' (a GPU name such as \"RTX3090\", or a GPU object)");
  GpuSpec gpu;
  if (j.at("gpu").is_string()) gpu = gpu_by_name(j.at("gpu").get<std::string>());
  else if (j.at("gpu").is_object()) from_json(j.at("gpu"), gpu);
  else o.fail("'gpu' must be a GPU name or a GPU object");
  int64_t nodes = o.has("nodes") ? o.integer("nodes", kMaxGpus) : 1;
  int64_t per_node = o.has("gpus_per_node") ? o.integer("gpus_per_node", kMaxGpus) : 1;
  if (nodes * per_node > kMaxGpus)
    o.fail(fmt::format("{} GPUs are too many (at most {})", nodes * per_node, kMaxGpus));

  ClusterSpec c = make_cluster(gpu, static_cast<int>(nodes), static_cast<int>(per_node), "");
  if (o.has("pcie")) {
    if (j.at("pcie").is_string()) c.pcie = default_link(parse_link_kind(o, "pcie", is_pcie, "pcie3, pcie4, pcie5"));
    else c.pcie = link_from_json(j.at("pcie"), "cluster.pcie", c.pcie, is_pcie, "pcie3, pcie4, pcie5");
    if (c.intra == IntraNode::PCIe) c.gpu_link = c.pcie;
  }
  if (o.has("intra")) {
    c.intra = parse_intra(o, "intra");
    if (c.intra == IntraNode::PCIe) {
      c.gpu_link = c.pcie;
    } else {
      if (!gpu.has_nvlink && !o.has("nvlink_GBps") && !o.has("gpu_link"))
        o.fail(fmt::format("GPU {} has no NVLink, so intra '{}' needs 'nvlink_GBps'", gpu.name, to_string(c.intra)));
      c.gpu_link = nvlink_of(gpu);
    }
  }
  if (o.has("nvlink_GBps")) {
    if (c.intra == IntraNode::PCIe)
      o.fail("'nvlink_GBps' needs 'intra' nvlink-pairs or nvswitch (the GPUs of this node talk over PCIe)");
    c.gpu_link.bandwidth_Bps = o.number("nvlink_GBps") * GB;
  }
  if (o.has("gpu_link")) {
    bool (*any)(LinkKind) = [](LinkKind k) { return is_nvlink(k) || is_pcie(k); };
    c.gpu_link = link_from_json(j.at("gpu_link"), "cluster.gpu_link", c.gpu_link, any,
                                "nvlink2, nvlink3, nvlink4, pcie3, pcie4, pcie5");
  }
  if (o.has("network")) {
    Obj n{j.at("network"), "cluster.network"};
    n.only({"kind", "gbps", "nics_per_node", "latency_us"});
    if (n.has("kind")) {
      LinkKind k = parse_link_kind(n, "kind", is_network, "infiniband, ethernet");
      if (k != c.network.kind) c.network = default_link(k);
    }
    if (n.has("gbps")) c.network.bandwidth_Bps = n.number("gbps") * 1.25e8;  // Gb/s -> bytes/s
    if (n.has("latency_us")) c.network.latency_s = n.number("latency_us", true) * 1e-6;
    if (n.has("nics_per_node")) c.nics_per_node = static_cast<int>(n.integer("nics_per_node", 1024));
  }
  if (o.has("host_memory")) c.host_memory_bytes = o.bytes("host_memory");
  if (o.has("host_memory_GBps")) c.host_memory_bandwidth_Bps = o.number("host_memory_GBps") * GB;
  if (o.has("cpu_cores")) {
    c.cpu_cores = static_cast<int>(o.integer("cpu_cores", 1'000'000));
    c.cpu_flops = c.cpu_cores * 32.0 * 2.5e9;
  }
  if (o.has("cpu_GFLOPS")) c.cpu_flops = o.number("cpu_GFLOPS") * GB;
  c.name = o.has("name") ? o.text("name") : spec_name(c);
  c.validate();
  return c;
}

void to_json(json& j, const ClusterSpec& c) {
  json gpu;
  to_json(gpu, c.gpu);
  j = json{{"name", c.name},
           {"gpu", gpu},
           {"nodes", c.nodes},
           {"gpus_per_node", c.gpus_per_node},
           {"intra", to_string(c.intra)},
           {"gpu_link", link_to_json(c.gpu_link)},
           {"pcie", link_to_json(c.pcie)},
           {"network",
            {{"kind", to_string(c.network.kind)},
             {"gbps", in_units(c.network.bandwidth_Bps, 1.25e8)},
             {"nics_per_node", c.nics_per_node},
             {"latency_us", in_units(c.network.latency_s, 1e-6)}}},
           {"host_memory", c.host_memory_bytes},
           {"host_memory_GBps", in_units(c.host_memory_bandwidth_Bps, GB)},
           {"cpu_cores", c.cpu_cores},
           {"cpu_GFLOPS", in_units(c.cpu_flops, GB)}};
}

std::string cluster_notation_note(const ClusterSpec& c) {
  // The name of a spec string with one count ("64xH100") that parse_cluster split.
  const std::string name = trim(c.name);
  const size_t x = name.find_first_of("xX");
  if (x == std::string::npos) return "";
  const std::string head = name.substr(0, x);
  if (head.empty() || head.find_first_not_of("0123456789") != std::string::npos) return "";
  const std::string rest = name.substr(x + 1);
  const size_t x2 = rest.find_first_of("xX");
  if (x2 != std::string::npos && rest.substr(0, x2).find_first_not_of("0123456789") == std::string::npos) return "";
  if (c.nodes == 1 && c.gpus_per_node > c.gpu.default_gpus_per_node)
    return fmt::format("'{}': {} GPUs are not a multiple of the usual {} node of {}, so they are modelled as one node "
                       "of {}; give NODESxNxTYPE (e.g. {}x{}x{}) for separate nodes", name, c.gpus_per_node, c.gpu.name,
                       c.gpu.default_gpus_per_node, c.gpus_per_node,
                       (c.gpus_per_node + c.gpu.default_gpus_per_node - 1) / c.gpu.default_gpus_per_node,
                       c.gpu.default_gpus_per_node, rest);
  if (c.nodes < 2) return "";
  return fmt::format("'{}' read as {} nodes of {} GPUs ({}x{}x{}), the usual {} node; for one node of {} GPUs give "
                     "1x{}x{} or a cluster file", name, c.nodes, c.gpus_per_node, c.nodes, c.gpus_per_node,
                     rest, c.gpu.name, c.world(), c.world(), rest);
}

ClusterSpec default_host(const ClusterSpec& c) { return make_cluster(c.gpu, c.nodes, c.gpus_per_node, c.name); }

std::string topology_line(const ClusterSpec& c) {
  const std::string intra = c.gpus_per_node == 1 ? std::string("no peers in the node")
                                                 : fmt::format("{} {:.0f} GB/s per GPU", to_string(c.intra),
                                                               c.gpu_link.bandwidth_Bps / GB);
  const double nic_share = double(c.nics_per_node) / double(c.gpus_per_node);
  const std::string nics = nic_share >= 1 ? fmt::format("{:g} NIC per GPU", nic_share)
                                          : fmt::format("1 NIC per {:g} GPUs", 1.0 / nic_share);
  return fmt::format("{} node{} x {} {} ({}); {} {} {:.0f} Gb/s; host RAM {} per node, {} CPU cores",
                     c.nodes, c.nodes == 1 ? "" : "s", c.gpus_per_node, c.gpu.name, intra, nics,
                     to_string(c.network.kind), c.network.bandwidth_Bps / 1.25e8,
                     format_bytes(double(c.host_memory_bytes)), c.cpu_cores);
}

ClusterSpec resolve_cluster(std::string_view spec_or_path) {
  std::string s = trim(spec_or_path);
  const std::string shown = clip(s);
  namespace fs = std::filesystem;
  if (!to_lower(s).ends_with(".json")) return parse_cluster(s);
  std::error_code ec;
  if (!fs::is_regular_file(s, ec))
    throw InputError(fmt::format("cluster file '{}' not found (give a spec such as 2xRTX3090 or a JSON cluster file)", shown));
  std::ifstream in(s);
  if (!in) throw InputError(fmt::format("cluster file '{}' cannot be read", shown));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = parse_json_text(ss.str(), "cluster file", fmt::format("'{}'", shown));
  try {
    if (j.is_object() && !j.contains("name")) {
      j["name"] = valid_utf8(s);  // JSON output must be UTF-8
    }
    return cluster_from_json(j);
  } catch (const InputError& e) {
    throw InputError(fmt::format("cluster file '{}': {}", shown, e.what()));
  }
}

void ClusterSpec::validate() const {
  auto fail = [&](const std::string& what) {
    throw InputError(fmt::format("cluster '{}': {}", name, what));
  };
  if (nodes < 1) fail(fmt::format("nodes must be at least 1, got {}", nodes));
  if (gpus_per_node < 1) fail(fmt::format("gpus_per_node must be at least 1, got {}", gpus_per_node));
  if (gpus_per_node > kMaxGpusPerNode)
    fail(fmt::format("{} GPUs in one node are too many (at most {} per node; give NODESxNxTYPE, e.g. 128x8x{})",
                     gpus_per_node, kMaxGpusPerNode, gpu.name));
  if (static_cast<int64_t>(nodes) * gpus_per_node > kMaxGpus)
    fail(fmt::format("{} GPUs are too many (at most {})", static_cast<int64_t>(nodes) * gpus_per_node, kMaxGpus));
  check_gpu(gpu);
  auto check_link = [&](const Link& l, const char* what) {
    // At least 1 MB/s: anything slower is a unit mistake and would give step
    // times of centuries (issue 11).
    if (!(l.bandwidth_Bps >= kMinBandwidth_Bps) || !std::isfinite(l.bandwidth_Bps))
      fail(fmt::format("{} bandwidth must be finite and at least 1 MB/s, got {} B/s", what, l.bandwidth_Bps));
    if (!(l.latency_s >= 0) || l.latency_s > 1) fail(fmt::format("{} latency must be between 0 and 1 s", what));
  };
  check_link(gpu_link, "gpu_link");
  check_link(pcie, "pcie");
  check_link(network, "network");
  if (intra != IntraNode::PCIe && !is_nvlink(gpu_link.kind))
    fail(fmt::format("intra '{}' needs an NVLink gpu_link, got {}", to_string(intra), to_string(gpu_link.kind)));
  if (intra == IntraNode::PCIe && !is_pcie(gpu_link.kind))
    fail(fmt::format("intra 'pcie' needs a PCIe gpu_link, got {}", to_string(gpu_link.kind)));
  if (!is_pcie(pcie.kind)) fail(fmt::format("pcie link must be pcie3/4/5, got {}", to_string(pcie.kind)));
  if (!is_network(network.kind)) fail(fmt::format("network must be infiniband or ethernet, got {}", to_string(network.kind)));
  if (nics_per_node < 1) fail("nics_per_node must be at least 1");
  // Only traffic across nodes leaves through the NICs.
  if (const int64_t routes = shared_nic_routes(gpus_per_node, nics_per_node);
      nodes > 1 && routes > kMaxSharedNicRoutes)
    fail(fmt::format("{} NICs on a node of {} GPUs leave {} GPUs without a NIC on their PCIe switch, each spreading "
                     "over all {} NICs ({} routes per collective, at most {}): give at least {} NICs (one per PCIe "
                     "switch of two GPUs) or fewer",
                     nics_per_node, gpus_per_node, routes / nics_per_node, nics_per_node, routes, kMaxSharedNicRoutes,
                     (gpus_per_node + 1) / 2));
  if (host_memory_bytes <= 0) fail("host memory must be positive");
  if (!(host_memory_bandwidth_Bps >= kMinBandwidth_Bps) || !std::isfinite(host_memory_bandwidth_Bps))
    fail(fmt::format("host memory bandwidth must be finite and at least 1 MB/s, got {} B/s", host_memory_bandwidth_Bps));
  if (cpu_cores < 1) fail("cpu_cores must be at least 1");
  if (!(cpu_flops >= 1e6) || !std::isfinite(cpu_flops)) fail(fmt::format("cpu_flops must be finite and at least 1e6, got {}", cpu_flops));
}

}  // namespace planner

// planner calibrate's fit of the per-group-size collective table
// (HardwareProfile::collective_groups): for every group size measured under
// mpirun -np N (2, 4, ... N), each operation's bus rate, the launch latency and
// the two compute/collective slowdowns, fitted the way calibration.cpp fits
// the single figures from the largest group (so the largest group's entry
// equals them).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "costmodel/calibration.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/topology.hpp"

namespace planner {

namespace {

using nlohmann::json;
using Group = HardwareProfile::CollectiveGroup;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::vector<int>> contiguous_groups(int world, int g) {
  std::vector<std::vector<int>> gs;
  for (int s = 0; s + g <= world; s += g) {
    gs.emplace_back();
    for (int r = s; r < s + g; ++r) gs.back().push_back(r);
  }
  return gs;
}

// The smallest and largest size measured of `op` over groups of `g`.
std::pair<const json*, const json*> end_points(const json& points, const std::string& op, int g) {
  const json *lo = nullptr, *hi = nullptr;
  for (const auto& c : points) {
    if (c.value("op", "") != op || c.value("group_size", 0) != g || !c.contains("seconds")) continue;
    if (!lo || c["bytes"].get<double>() < (*lo)["bytes"].get<double>()) lo = &c;
    if (!hi || c["bytes"].get<double>() > (*hi)["bytes"].get<double>()) hi = &c;
  }
  if (lo == hi) return {nullptr, nullptr};
  return {lo, hi};
}

double model_seconds(const std::string& op, double S, const GroupLink& gl) {
  return op == "all_reduce"       ? all_reduce_seconds(S, gl, 0)
         : op == "reduce_scatter" ? reduce_scatter_seconds(S, gl, 0)
         : op == "all_gather"     ? all_gather_seconds(S, gl, 0)
                                  : broadcast_seconds(S, gl, 0);
}

// The slowdowns measured beside the collectives of groups of `g` (medians of
// the points, as the single figures), or the fitted single figures.
std::pair<double, double> slowdowns(const json& m, int g, const HardwareProfile& fitted) {
  std::vector<double> s, k;
  for (const auto& x : contention_points(m, g)) {
    const double a = x.value("slowdown", 0.0), b = x.value("comm_slowdown", 0.0);
    if (std::isfinite(a) && a > 0) s.push_back(a);
    if (std::isfinite(b) && b > 0) k.push_back(b);
  }
  return {s.empty() ? fitted.compute_slowdown_beside_comm : std::clamp(median_of(s), 1.0, 3.0),
          k.empty() ? fitted.comm_slowdown_beside_compute
                    : std::clamp(median_of(k), 1.0, HardwareProfile::kMaxCommSlowdown)};
}

}  // namespace

std::vector<json> contention_points(const json& m, int g) {
  std::vector<json> layers, loop;
  const json none = json::array();
  const json& all = m.contains("compute_beside_comm") && m["compute_beside_comm"].is_array() ? m["compute_beside_comm"] : none;
  for (const auto& x : all) {
    if (!x.is_object() || (g > 0 && x.value("group_size", 0) != g)) continue;
    const std::string payload = x.value("payload", "");
    if (payload == "layers") layers.push_back(x);
    else if (payload.empty()) loop.push_back(x);  // "layers_time" and others: a diagnosis, not fitted
  }
  return layers.empty() ? loop : layers;
}

ClusterSpec calibration_cluster(const json& m, const GpuSpec& gpu) {
  const int W = std::max(1, m.value("ranks", 1));
  const int nodes = std::max(1, m.value("nodes", 1));
  if (nodes > 1 && W % nodes == 0) return parse_cluster(fmt::format("{}x{}x{}", nodes, W / nodes, gpu.name));
  return parse_cluster(fmt::format("{}x{}", W, gpu.name));
}

double fit_network_efficiency(const json& m, const GpuSpec& gpu, const HardwareProfile& fitted,
                              std::vector<std::string>& notes, std::string& how) {
  const json points = m.value("collectives", json::array());
  const json *lo = nullptr, *hi = nullptr;
  for (const auto& c : points) {
    if (c.value("op", "") != "send_recv" || c.value("pair", "") != "across_nodes" || !c.contains("seconds")) continue;
    if (c.value("backend", "") != "nccl") continue;
    if (!lo || c["bytes"].get<double>() < (*lo)["bytes"].get<double>()) lo = &c;
    if (!hi || c["bytes"].get<double>() > (*hi)["bytes"].get<double>()) hi = &c;
  }
  if (!lo || lo == hi) return 0;
  const ClusterSpec cluster = calibration_cluster(m, gpu);
  if (cluster.nodes < 2) return 0;
  // The pairs as calibrate made them: rank i of node 0 with rank i of node 1
  // (the ranks of a node contiguous, as mpirun places them by slot).
  std::vector<std::pair<int, int>> pairs;
  const int per = cluster.gpus_per_node;
  for (int n = 0; n + 1 < cluster.nodes; n += 2)
    for (int i = 0; i < per; ++i) pairs.push_back({n * per + i, (n + 1) * per + i});
  const double S0 = (*lo)["bytes"].get<double>(), S1 = (*hi)["bytes"].get<double>();
  const double meas = (*hi)["seconds"].get<double>() - (*lo)["seconds"].get<double>();
  if (!(meas > 0)) return 0;
  // The model's slope at efficiency e, over the pairs' most loaded link: the
  // network's while it is the bottleneck (slope proportional to 1/e), a PCIe
  // link's otherwise. From e = 1, each step scales e by model / measured: one
  // step lands where the network is the bottleneck; where the model's other
  // links are slower than the measurement, e stays above 1 (noted, kept at 1).
  HardwareProfile at = fitted;
  double v = 1.0;
  for (int i = 0; i < 4 && v <= 1.0; ++i) {
    at.network_efficiency = v;
    const GroupLink gl = Topology(cluster, at).p2p(pairs, 0);
    const double mod = send_recv_seconds(S1, gl, 0) - send_recv_seconds(S0, gl, 0);
    if (!(mod > 0)) return 0;
    v *= mod / meas;
  }
  if (v > 1.0) notes.push_back(fmt::format("network_efficiency: send/recv across nodes ran at {:.3f} of the network "
                                           "link's rate ({}); kept at 1", v, to_string(cluster.network.kind)));
  how = fmt::format("send/recv between ranks on different nodes ({} pairs at once, {} nodes of {}): the model's time "
                    "from {:.0f} B to {:.0f} MiB at the network link's full rate / the measured difference",
                    pairs.size(), cluster.nodes, per, S0, S1 / double(1 << 20));
  return std::clamp(v, 1e-4, 1.0);
}

std::vector<HardwareProfile::CollectiveGroup> fit_collective_groups(const json& m, const GpuSpec& gpu,
                                                                    const HardwareProfile& fitted,
                                                                    std::vector<std::string>& notes) {
  std::vector<Group> table;
  const json points = m.value("collectives", json::array());
  const int W = m.value("ranks", 1);
  if (points.empty() || W < 2) return table;
  const ClusterSpec cluster = calibration_cluster(m, gpu);
  const bool pcie = cluster.intra == IntraNode::PCIe;
  std::set<int> sizes;
  for (const auto& c : points)
    if (c.value("op", "") == "all_reduce" && c.value("backend", "") == "nccl" && c.value("nodes", 1) == 1)
      sizes.insert(c.value("group_size", 0));  // groups inside a node: the table is of those
  // At unit link efficiency and every operation at the all-reduce's rate:
  // the model's transfer time, which the measured one divides.
  HardwareProfile unit = fitted;
  unit.collective_groups.clear();
  unit.nvlink_efficiency = unit.pcie_efficiency = unit.network_efficiency = 1.0;
  unit.reduce_scatter_relative = unit.all_gather_relative = unit.broadcast_relative = 1.0;
  const Topology at_unit(cluster, unit);
  for (const int g : sizes) {
    if (g < 2 || W % g) continue;
    const GroupLink gl = at_unit.ring(contiguous_groups(W, g), 0);
    Group e;
    e.group_size = g;
    e.pcie = pcie;
    auto efficiency = [&](const std::string& op) {
      const auto [lo, hi] = end_points(points, op, g);
      if (!lo) return 0.0;
      const double S0 = (*lo)["bytes"].get<double>(), S1 = (*hi)["bytes"].get<double>();
      const double meas = (*hi)["seconds"].get<double>() - (*lo)["seconds"].get<double>();
      const double mod = model_seconds(op, S1, gl) - model_seconds(op, S0, gl);
      if (!(meas > 0 && mod > 0)) return 0.0;
      const double v = mod / meas;
      if (v > 1.0) notes.push_back(fmt::format("collective_groups: {} over {} GPUs ran at {:.3f} of the link's "
                                               "datasheet rate; kept at 1", op, g, v));
      return std::clamp(v, 1e-3, 1.0);
    };
    e.all_reduce_efficiency = efficiency("all_reduce");
    if (e.all_reduce_efficiency <= 0) {
      notes.push_back(fmt::format("collective_groups: no all-reduce rate over {} GPUs (sizes too few or times not "
                                  "increasing): that size is left out of the table", g));
      continue;
    }
    // An operation not measured keeps the single figure's rate relative to the all-reduce's.
    auto or_relative = [&](double eff, double rel) { return eff > 0 ? eff : std::min(1.0, e.all_reduce_efficiency * rel); };
    e.reduce_scatter_efficiency = or_relative(efficiency("reduce_scatter"), fitted.reduce_scatter_relative);
    e.all_gather_efficiency = or_relative(efficiency("all_gather"), fitted.all_gather_relative);
    e.broadcast_efficiency = or_relative(efficiency("broadcast"), fitted.broadcast_relative);
    // The launch latency: the smallest all-reduce less the model's hops and
    // transfer at the rate just fitted (as collective_base_latency_seconds).
    HardwareProfile at_g = unit;
    (pcie ? at_g.pcie_efficiency : at_g.nvlink_efficiency) = e.all_reduce_efficiency;
    const GroupLink glg = Topology(cluster, at_g).ring(contiguous_groups(W, g), 0);
    const json* lo = end_points(points, "all_reduce", g).first;
    e.base_latency_seconds =
        std::max(0.0, (*lo)["seconds"].get<double>() - all_reduce_seconds((*lo)["bytes"].get<double>(), glg, 0));
    std::tie(e.compute_slowdown_beside_comm, e.comm_slowdown_beside_compute) = slowdowns(m, g, fitted);
    table.push_back(e);
  }
  return table;
}

}  // namespace planner

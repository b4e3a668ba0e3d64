#include "costmodel/topology.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "costmodel/topology_graph.hpp"
#include "specs/node_layout.hpp"

namespace planner {

namespace {

using topology_detail::Arc;
using topology_detail::ArcKind;
using Graph = topology_detail::Graph;

// Intel Xeon Scalable: three UPI links at 10.4-11.2 GT/s, ~62 GB/s per direction
// between sockets (Intel datasheets); AMD xGMI is similar.
constexpr double kSocketLink_Bps = 62e9;

// Units and the classes of sources (see Impl): a GPU's or NIC's class is its
// unit's socket, GPU count and NIC count; without PCIe switches (under 4
// GPUs) every source is its own class.
void classify_sources(Topology::Impl& t, int switches, int sockets, const std::vector<int>& sw, int nics) {
  t.unit_of.assign(size_t(t.vertices), -1);
  t.slot_of.assign(size_t(t.vertices), -1);
  t.rep.resize(size_t(t.vertices));
  for (int v = 0; v < t.vertices; ++v) t.rep[size_t(v)] = v;
  t.units.resize(size_t(switches));
  for (int s = 0; s < switches; ++s) t.units[s].sw = sw[s], t.unit_of[size_t(sw[s])] = s;
  if (switches > 0) {
    for (int i = 0; i < t.g; ++i) {
      Topology::Impl::Unit& u = t.units[size_t(i / 2)];
      t.unit_of[size_t(i)] = i / 2, t.slot_of[size_t(i)] = int(u.gpu.size());
      u.gpu.push_back(i);
    }
    for (int k = 0; k < nics; ++k) {
      const int s = k * switches / nics, v = t.nic_vertex[size_t(k)];
      Topology::Impl::Unit& u = t.units[size_t(s)];
      t.unit_of[size_t(v)] = s, t.slot_of[size_t(v)] = int(u.nic.size());
      u.nic.push_back(v);
    }
    std::map<std::array<int, 3>, std::array<int, 2>> first;  // class -> (first GPU, first NIC)
    auto cls = [&](int s) {
      return std::array<int, 3>{s * sockets / switches, int(t.units[size_t(s)].gpu.size()), int(t.units[size_t(s)].nic.size())};
    };
    for (int s = 0; s < switches; ++s) first.emplace(cls(s), std::array<int, 2>{-1, -1});
    for (int i = 0; i < t.g; ++i) {
      int& r = first[cls(i / 2)][0];
      if (r < 0) r = i;
      t.rep[size_t(i)] = r;
    }
    for (int k = 0; k < nics; ++k) {
      const int v = t.nic_vertex[size_t(k)];
      int& r = first[cls(t.unit_of[size_t(v)])][1];
      if (r < 0) r = v;
      t.rep[size_t(v)] = r;
    }
  }
}

}  // namespace

Topology::Topology(const ClusterSpec& c, const HardwareProfile& p) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.g = std::max(1, c.gpus_per_node);
  t.eff_nvlink = p.nvlink_efficiency;
  t.eff_pcie = p.pcie_efficiency;
  t.eff_net = p.network_efficiency;
  t.rel_reduce_scatter = p.reduce_scatter_relative;
  t.rel_all_gather = p.all_gather_relative;
  t.rel_broadcast = p.broadcast_relative;
  t.rel_send_recv = p.send_recv_relative;
  t.groups = p.collective_groups;
  t.intra_pcie = c.intra == IntraNode::PCIe;
  const Link nv = c.gpu_link.bandwidth_Bps > 0 ? c.gpu_link : default_link(c.gpu.nvlink);
  const Link pcie = c.pcie.bandwidth_Bps > 0 ? c.pcie : default_link(c.gpu.pcie);
  const Link net = c.network.bandwidth_Bps > 0 ? c.network : default_link(LinkKind::InfiniBand);

  for (int i = 0; i < t.g; ++i) t.add_vertex();  // GPUs 0..g-1
  // PCIe tree: DGX/HGX-style switches of two GPUs each for 4+ GPUs, two sockets
  // for 8+; small boxes hang the GPUs off the CPU's root complex.
  const int sockets = t.g >= 8 ? 2 : 1;
  const int switches = t.g >= 4 ? (t.g + 1) / 2 : 0;
  std::vector<int> cpu(sockets), sw(switches);
  for (auto& v : cpu) v = t.add_vertex();
  for (int s = 1; s < sockets; ++s) t.link(cpu[0], cpu[s], ArcKind::Socket, kSocketLink_Bps, pcie.latency_s);
  for (int s = 0; s < switches; ++s) {
    sw[s] = t.add_vertex();
    t.link(sw[s], cpu[s * sockets / switches], ArcKind::PCIe, pcie.bandwidth_Bps, pcie.latency_s);
  }
  t.gpu_cpu.resize(t.g);
  for (int i = 0; i < t.g; ++i) {
    const int up = switches > 0 ? sw[i / 2] : cpu[i * sockets / t.g];
    t.link(i, up, ArcKind::PCIe, pcie.bandwidth_Bps, pcie.latency_s);
    t.gpu_cpu[i] = switches > 0 ? cpu[(i / 2) * sockets / switches] : up;
  }
  if (c.intra == IntraNode::NVSwitch && t.g > 1) {
    const int nvs = t.add_vertex();
    for (int i = 0; i < t.g; ++i) t.link(i, nvs, ArcKind::NVLink, nv.bandwidth_Bps, nv.latency_s);
  } else if (c.intra == IntraNode::NVLinkPairs) {
    for (int i = 0; i + 1 < t.g; i += 2) t.link(i, i + 1, ArcKind::NVLink, nv.bandwidth_Bps, nv.latency_s);
  }
  t.fabric = t.add_vertex();
  const int nics = std::max(1, c.nics_per_node);
  for (int k = 0; k < nics; ++k) {
    const int nic = t.add_vertex();
    t.nic_vertex.push_back(nic);
    const int up = switches > 0 ? sw[k * switches / nics] : cpu[k * sockets / nics];
    t.link(nic, up, ArcKind::PCIe, pcie.bandwidth_Bps, pcie.latency_s);
    t.link(nic, t.fabric, ArcKind::Network, net.bandwidth_Bps, net.latency_s);
    t.nic_out_arc.push_back(int(t.arcs.size()) - 2);
    t.nic_in_arc.push_back(int(t.arcs.size()) - 1);
  }

  // Arc weights for the best paths: search_weight.
  t.graph = Graph(t.vertices);
  for (int i = 0; i < int(t.arcs.size()); ++i) {
    const Arc& a = t.arcs[i];
    boost::add_edge(a.from, a.to, boost::property<boost::edge_weight_t, double, boost::property<boost::edge_index_t, int>>(
                                      t.search_weight(a), i),
                   t.graph);
  }
  t.out.resize(size_t(t.vertices)), t.in.resize(size_t(t.vertices));
  for (int i = 0; i < int(t.arcs.size()); ++i) {
    t.out[size_t(t.arcs[i].from)].push_back({t.arcs[i].to, i});
    t.in[size_t(t.arcs[i].to)].push_back({t.arcs[i].from, i});
  }
  for (auto& o : t.out) std::sort(o.begin(), o.end());
  for (auto& o : t.in) std::sort(o.begin(), o.end());

  classify_sources(t, switches, sockets, sw, nics);
  t.pred_arc.resize(size_t(t.vertices));
  t.nearest_nics.resize(size_t(t.g));
  t.exits.resize(size_t(t.g));
}

int64_t Topology::shared_nic_routes(int gpus_per_node, int nics_per_node) {
  return planner::shared_nic_routes(gpus_per_node, nics_per_node);  // specs/node_layout.cpp
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

int Topology::gpus_per_node() const { return impl_->g; }
int Topology::vertex_count() const { return impl_->vertices; }
int Topology::arc_count() const { return int(impl_->arcs.size()); }

Topology::ArcView Topology::arc(int a) const {
  const Impl& t = *impl_;
  const Arc& x = t.arcs.at(size_t(a));
  return {x.from, x.to, x.kind == ArcKind::Network, Impl::search_weight(x), x.Bps, t.effective_Bps(x), x.latency_s};
}
const std::vector<int>& Topology::nic_vertices() const { return impl_->nic_vertex; }
int Topology::cpu_vertex(int gpu) const { return impl_->gpu_cpu.at(size_t(gpu)); }
std::vector<int> Topology::best_path(int src, int dst) const {
  std::vector<int> out;
  impl_->for_path(src, dst, [&](int a) { out.push_back(a); });
  return out;
}
std::vector<int> Topology::nearest_nics(int gpu) const { return impl_->nearest(gpu); }

}  // namespace planner

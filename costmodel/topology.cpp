#include "costmodel/topology.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <limits>

namespace planner {

namespace {

enum class ArcKind { NVLink, PCIe, Socket, Network };

struct Arc {
  int from = 0, to = 0;
  ArcKind kind = ArcKind::PCIe;
  double Bps = 0;        // raw per-direction bandwidth
  double latency_s = 0;
};

// Intel Xeon Scalable: three UPI links at 10.4-11.2 GT/s, ~62 GB/s per direction
// between sockets (Intel datasheets); AMD xGMI is similar.
constexpr double kSocketLink_Bps = 62e9;

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                    boost::property<boost::edge_weight_t, double, boost::property<boost::edge_index_t, int>>>;

struct Flow {
  int arc;
  double weight;
};

}  // namespace

struct Topology::Impl {
  int g = 1;
  double eff_nvlink = 1, eff_pcie = 1, eff_net = 1;
  std::vector<Arc> arcs;
  int vertices = 0, fabric = -1;
  std::vector<int> gpu_cpu;                   // socket vertex of each GPU
  std::vector<int> nic_vertex;
  std::vector<int> nic_out_arc, nic_in_arc;   // nic -> fabric and fabric -> nic, per NIC index
  Graph graph;
  // Best paths and nearest NICs are found when first asked for, per source:
  // a collective on a few GPUs of a large node routes from those GPUs only
  // (a node of 4096 GPUs was seconds when every source was searched).
  mutable std::vector<std::vector<int>> pred_arc;     // [src][v]: arc into v on the best path from src
  mutable std::vector<std::vector<int>> nearest_nics; // per GPU (empty: not found yet)

  int add_vertex() { return vertices++; }
  void link(int a, int b, ArcKind k, double Bps, double lat) {
    arcs.push_back({a, b, k, Bps, lat});
    arcs.push_back({b, a, k, Bps, lat});
  }
  // Least seconds per byte (NVLink before PCIe), fewest hops on ties. Each
  // vertex's arc is the one whose relaxation set its distance last: the arc
  // from its Dijkstra predecessor (there are no parallel arcs).
  const std::vector<int>& best_arcs(int src) const {
    std::vector<int>& row = pred_arc[size_t(src)];
    if (!row.empty()) return row;
    row.assign(size_t(vertices), -1);
    std::vector<Graph::edge_descriptor> via(static_cast<size_t>(vertices));
    std::vector<double> dist(static_cast<size_t>(vertices));
    std::vector<char> reached(size_t(vertices), 0);
    struct Record : boost::base_visitor<Record> {
      using event_filter = boost::on_edge_relaxed;
      Graph::edge_descriptor* via;
      char* reached;
      void operator()(Graph::edge_descriptor e, const Graph& gr) {
        via[boost::target(e, gr)] = e;
        reached[boost::target(e, gr)] = 1;
      }
    };
    Record rec;
    rec.via = via.data(), rec.reached = reached.data();
    boost::dijkstra_shortest_paths(graph, Graph::vertex_descriptor(src),
                                   boost::distance_map(dist.data()).visitor(boost::make_dijkstra_visitor(rec)));
    auto index = boost::get(boost::edge_index, graph);
    for (int v = 0; v < vertices; ++v)
      if (reached[size_t(v)] && v != src) row[size_t(v)] = index[via[size_t(v)]];
    return row;
  }
  double effective_Bps(const Arc& a) const {
    switch (a.kind) {
      case ArcKind::NVLink: return a.Bps * eff_nvlink;
      case ArcKind::Network: return a.Bps * eff_net;
      default: return a.Bps * eff_pcie;
    }
  }
  std::vector<int> path(int src, int dst) const {
    std::vector<int> out;
    const std::vector<int>& pred = best_arcs(src);
    for (int v = dst; v != src;) {
      const int a = pred[size_t(v)];
      if (a < 0) return {};
      out.push_back(a);
      v = arcs[a].from;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  void add_path(std::vector<Flow>& f, int src, int dst, double w) const {
    for (int a : path(src, dst)) f.push_back({a, w});
  }
  // NCCL uses the NICs closest to a GPU (same PCIe switch); ties share the traffic.
  const std::vector<int>& nearest(int gpu) const {
    std::vector<int>& out = nearest_nics[size_t(gpu)];
    if (!out.empty()) return out;
    size_t best = std::numeric_limits<size_t>::max();
    for (int nic : nic_vertex) best = std::min(best, path(gpu, nic).size());
    for (int k = 0; k < int(nic_vertex.size()); ++k)
      if (path(gpu, nic_vertex[k]).size() == best) out.push_back(k);
    return out;
  }
  // Out of (or into) the node through the GPU's nearest NICs, spread evenly.
  void add_exit(std::vector<Flow>& f, int gpu, double w, bool inbound) const {
    const auto& nics = nearest(gpu);  // NIC indices
    const double share = w / double(nics.size());
    for (int k : nics) {
      if (inbound) {
        f.push_back({nic_in_arc[k], share});
        add_path(f, nic_vertex[k], gpu, share);
      } else {
        add_path(f, gpu, nic_vertex[k], share);
        f.push_back({nic_out_arc[k], share});
      }
    }
  }
};

Topology::Topology(const ClusterSpec& c, const HardwareProfile& p) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.g = std::max(1, c.gpus_per_node);
  t.eff_nvlink = p.nvlink_efficiency;
  t.eff_pcie = p.pcie_efficiency;
  t.eff_net = p.network_efficiency;
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

  // Arc weights for the best paths: seconds per byte, plus a little per hop,
  // plus a lot for the network (a path never leaves the node and comes back).
  t.graph = Graph(t.vertices);
  for (int i = 0; i < int(t.arcs.size()); ++i) {
    const Arc& a = t.arcs[i];
    boost::add_edge(a.from, a.to, boost::property<boost::edge_weight_t, double, boost::property<boost::edge_index_t, int>>(
                                      1e9 / std::max(1.0, a.Bps) + 1e-3 + (a.kind == ArcKind::Network ? 1e3 : 0.0), i),
                   t.graph);
  }
  t.pred_arc.resize(size_t(t.vertices));
  t.nearest_nics.resize(size_t(t.g));
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

int Topology::gpus_per_node() const { return impl_->g; }
int Topology::vertex_count() const { return impl_->vertices; }
int Topology::arc_count() const { return int(impl_->arcs.size()); }

namespace {

struct Eval {
  double spb = 0, latency = 0;
};

Eval evaluate(const Topology::Impl& t, const std::vector<double>& load, const std::vector<Flow>& own) {
  Eval e;
  for (const Flow& f : own) {
    const Arc& a = t.arcs[f.arc];
    e.spb = std::max(e.spb, load[f.arc] / t.effective_Bps(a));
    e.latency = std::max(e.latency, a.latency_s);
  }
  return e;
}

}  // namespace

GroupLink Topology::ring(const std::vector<std::vector<int>>& groups, int rep) const {
  const Impl& t = *impl_;
  GroupLink out;
  const auto& me = groups.at(rep);
  out.size = int(me.size());
  if (me.size() < 2) return out;
  const int node = node_of(me.front());
  std::vector<double> flat(t.arcs.size(), 0.0), hier(t.arcs.size(), 0.0);
  std::vector<Flow> f_flat, f_intra, f_inter, own_flat, own_intra, own_inter;
  std::vector<int> local;
  for (int gi = 0; gi < int(groups.size()); ++gi) {
    const auto& grp = groups[gi];
    local.clear();
    int nodes = 0, last_node = -1;
    for (int r : grp) {
      if (node_of(r) != last_node) ++nodes, last_node = node_of(r);  // groups are sorted by rank
      if (node_of(r) == node) local.push_back(r % t.g);
    }
    if (local.empty()) continue;
    std::sort(local.begin(), local.end());
    f_flat.clear(), f_intra.clear(), f_inter.clear();
    const int k = int(local.size());
    // Ring inside the node: closed when the group stays in it, a chain otherwise.
    for (int i = 0; i + 1 < k; ++i) t.add_path(f_flat, local[i], local[i + 1], 1.0);
    if (nodes == 1 && k > 2) t.add_path(f_flat, local[k - 1], local[0], 1.0);
    if (k > 1) {
      for (int i = 0; i + 1 < k; ++i) t.add_path(f_intra, local[i], local[i + 1], 1.0);
      if (k > 2) t.add_path(f_intra, local[k - 1], local[0], 1.0);
    }
    if (nodes > 1) {
      for (int m : local) {
        t.add_exit(f_flat, m, 1.0 / k, false), t.add_exit(f_flat, m, 1.0 / k, true);
        t.add_exit(f_inter, m, 1.0, false), t.add_exit(f_inter, m, 1.0, true);
      }
    }
    for (const Flow& f : f_flat) flat[f.arc] += f.weight;
    for (const Flow& f : f_intra) hier[f.arc] += f.weight;
    for (const Flow& f : f_inter) hier[f.arc] += f.weight;
    if (gi == rep) {
      own_flat = f_flat, own_intra = f_intra, own_inter = f_inter;
      out.nodes = nodes;
      out.per_node = k;
    }
  }
  const Eval ef = evaluate(t, flat, own_flat), ei = evaluate(t, hier, own_intra), en = evaluate(t, hier, own_inter);
  out.seconds_per_byte = ef.spb;
  out.hop_latency_seconds = ef.latency;
  out.intra_seconds_per_byte = ei.spb;
  out.intra_latency_seconds = ei.latency;
  out.inter_seconds_per_byte = en.spb;
  out.inter_latency_seconds = en.latency;
  return out;
}

GroupLink Topology::p2p(const std::vector<std::pair<int, int>>& pairs, int rep) const {
  const Impl& t = *impl_;
  GroupLink out;
  out.size = 2;
  const auto [src0, dst0] = pairs.at(rep);
  const int node = node_of(src0);
  std::vector<double> load(t.arcs.size(), 0.0);
  std::vector<Flow> f, own;
  for (int i = 0; i < int(pairs.size()); ++i) {
    const auto [s, d] = pairs[i];
    if (node_of(s) != node && i != rep) continue;  // nodes are alike: count the flows leaving this one
    f.clear();
    if (node_of(s) == node_of(d)) {
      t.add_path(f, s % t.g, d % t.g, 1.0);
    } else {
      // The receiving node's links carry what this node's would carry inbound.
      t.add_exit(f, s % t.g, 1.0, false);
      t.add_exit(f, d % t.g, 1.0, true);
    }
    for (const Flow& x : f) load[x.arc] += x.weight;
    if (i == rep) own = f;
  }
  out.nodes = node_of(src0) == node_of(dst0) ? 1 : 2;
  const Eval e = evaluate(t, load, own);
  out.seconds_per_byte = e.spb;
  out.hop_latency_seconds = e.latency;
  out.intra_seconds_per_byte = out.inter_seconds_per_byte = e.spb;
  return out;
}

double Topology::host_copy_Bps(int gpus) const {
  const Impl& t = *impl_;
  gpus = std::clamp(gpus, 1, t.g);
  std::vector<double> load(t.arcs.size(), 0.0);
  std::vector<Flow> own;
  for (int i = 0; i < gpus; ++i) {
    std::vector<Flow> f;
    t.add_path(f, t.gpu_cpu[i], i, 1.0);
    for (const Flow& x : f) load[x.arc] += x.weight;
    if (i == 0) own = f;
  }
  double spb = 0;
  for (const Flow& x : own) spb = std::max(spb, load[x.arc] / t.arcs[x.arc].Bps);  // raw: copy efficiency applied by the caller
  return spb > 0 ? 1.0 / spb : 0;
}

}  // namespace planner

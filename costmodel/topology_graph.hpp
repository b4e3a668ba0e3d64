#pragma once
// Inside the topology model (costmodel/topology.*), shared by its two halves:
// topology.cpp builds one node's graph and finds best paths on it,
// topology_costs.cpp puts the flows of collectives on those paths.
#include <algorithm>
#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <limits>
#include <utility>
#include <vector>

#include "costmodel/topology.hpp"

namespace planner {
namespace topology_detail {

enum class ArcKind { NVLink, PCIe, Socket, Network };

struct Arc {
  int from = 0, to = 0;
  ArcKind kind = ArcKind::PCIe;
  double Bps = 0;        // raw per-direction bandwidth
  double latency_s = 0;
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                    boost::property<boost::edge_weight_t, double, boost::property<boost::edge_index_t, int>>>;

struct Flow {
  int arc;
  double weight;
};

}  // namespace topology_detail

struct Topology::Impl {
  using Arc = topology_detail::Arc;
  using ArcKind = topology_detail::ArcKind;
  using Flow = topology_detail::Flow;
  using Graph = topology_detail::Graph;

  int g = 1;
  double eff_nvlink = 1, eff_pcie = 1, eff_net = 1;
  double rel_reduce_scatter = 1, rel_all_gather = 1, rel_broadcast = 1, rel_send_recv = 1;  // inside a node
  // The profile's figures per group size (HardwareProfile::collective_groups)
  // for rings inside a node, and whether the node's GPUs talk over PCIe only.
  std::vector<HardwareProfile::CollectiveGroup> groups;
  bool intra_pcie = false;
  std::vector<Arc> arcs;
  int vertices = 0, fabric = -1;
  std::vector<int> gpu_cpu;                   // socket vertex of each GPU
  std::vector<int> nic_vertex;
  std::vector<int> nic_out_arc, nic_in_arc;   // nic -> fabric and fabric -> nic, per NIC index
  Graph graph;

  // Symmetry. A PCIe switch with its GPUs and NICs is a "unit"; two units on
  // the same socket with as many GPUs and as many NICs are interchangeable,
  // and so are two GPUs (or two NICs) of one unit: swapping them maps the
  // graph onto itself, arc for arc, with the same bandwidths and latencies.
  // So the best paths are searched only from one representative per class of
  // sources (the lowest-numbered GPU or NIC of its class) and carried over to
  // the others by that swap. A node of g GPUs has a handful of classes
  // whatever g is: routing costs O(g) instead of g searches of O(g log g).
  // Where best paths tie (a NIC reached over NVSwitch through either GPU of
  // its switch), the whole class takes its representative's choice.
  struct Unit {
    int sw = -1;               // switch vertex
    std::vector<int> gpu, nic; // GPU and NIC vertices, in index order
  };
  std::vector<Unit> units;
  std::vector<int> unit_of, slot_of;  // per vertex: its unit (-1: none) and slot in the unit's GPUs or NICs
  std::vector<int> rep;               // per vertex: the source whose search it uses (itself when none is shared)
  std::vector<std::vector<std::pair<int, int>>> out, in;  // per vertex: (head, arc) sorted by head; (tail, arc) by tail
  // Best paths and nearest NICs are found when first asked for: a search per
  // representative source, nearest NICs per GPU.
  mutable std::vector<int> scratch;                   // for_path's arcs, last first
  mutable std::vector<std::vector<int>> pred_arc;     // [src][v]: arc into v on the best path from src (representatives only)
  mutable std::vector<std::vector<int>> nearest_nics; // per GPU (empty: not found yet)
  mutable std::vector<std::array<std::vector<int>, 2>> exits;  // per GPU: exit_arcs out, in (empty: not found yet)
  struct RingLoads {  // Topology::ring's last loads
    int node = -1;
    std::vector<std::vector<int>> groups;
    std::vector<double> flat, hier;
  };
  mutable RingLoads ring_loads;
  mutable std::vector<double> p2p_load;  // Topology::p2p's, all zero between calls

  int add_vertex() { return vertices++; }
  void link(int a, int b, ArcKind k, double Bps, double lat) {
    arcs.push_back({a, b, k, Bps, lat});
    arcs.push_back({b, a, k, Bps, lat});
  }
  int arc_between(int a, int b) const {  // searched from the end with fewer arcs (NVSwitch and fabric have many)
    const auto& o = out[size_t(a)].size() <= in[size_t(b)].size() ? out[size_t(a)] : in[size_t(b)];
    const int other = &o == &out[size_t(a)] ? b : a;
    auto it = std::lower_bound(o.begin(), o.end(), std::make_pair(other, -1));
    return it != o.end() && it->first == other ? it->second : -1;
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
  // The automorphism that takes the representative r to src: swap r's unit
  // with src's (switch, GPUs and NICs slot by slot), then, inside src's unit,
  // swap the vertex r landed on with src. Both swaps are their own inverse.
  struct Swap {
    const Impl* t = nullptr;
    int ua = -1, ub = -1;  // units exchanged (-1: none)
    int x = -1, y = -1;    // then x <-> y (-1: none)
    int unit_swap(int v) const {
      const int u = t->unit_of[size_t(v)];
      if (ua < 0 || (u != ua && u != ub)) return v;
      const Unit& from = t->units[size_t(u)];
      const Unit& to = t->units[size_t(u == ua ? ub : ua)];
      if (v == from.sw) return to.sw;
      const int slot = t->slot_of[size_t(v)];
      return v < t->g ? to.gpu[size_t(slot)] : to.nic[size_t(slot)];
    }
    int forward(int v) const {  // r's view -> src's view
      v = unit_swap(v);
      return v == x ? y : v == y ? x : v;
    }
    int backward(int v) const { return unit_swap(v == x ? y : v == y ? x : v); }
  };
  Swap swap_to(int src) const {
    Swap s;
    s.t = this;
    const int r = rep[size_t(src)];
    if (r == src) return s;
    if (unit_of[size_t(r)] != unit_of[size_t(src)]) s.ua = unit_of[size_t(r)], s.ub = unit_of[size_t(src)];
    const int landed = s.unit_swap(r);
    if (landed != src) s.x = landed, s.y = src;
    return s;
  }
  // Seconds per byte, plus a little per hop, plus a lot for the network (a
  // path never leaves the node and comes back).
  static double search_weight(const Arc& a) {
    return 1e9 / std::max(1.0, a.Bps) + 1e-3 + (a.kind == ArcKind::Network ? 1e3 : 0.0);
  }
  double effective_Bps(const Arc& a) const {
    switch (a.kind) {
      case ArcKind::NVLink: return a.Bps * eff_nvlink;
      case ArcKind::Network: return a.Bps * eff_net;
      default: return a.Bps * eff_pcie;
    }
  }
  // visit(arc) for each arc of the best path from src to dst, in order (none
  // when dst cannot be reached): the representative's path, carried over.
  template <class Visit>
  void for_path(int src, int dst, Visit&& visit) const {
    const int r = rep[size_t(src)];
    const Swap s = swap_to(src);
    const std::vector<int>& pred = best_arcs(r);
    std::vector<int>& back = scratch;
    back.clear();
    for (int v = s.backward(dst); v != r;) {
      const int a = pred[size_t(v)];
      if (a < 0) return;
      back.push_back(a);
      v = arcs[size_t(a)].from;
    }
    for (auto it = back.rbegin(); it != back.rend(); ++it)
      visit(r == src ? *it : arc_between(s.forward(arcs[size_t(*it)].from), s.forward(arcs[size_t(*it)].to)));
  }
  void add_path(std::vector<Flow>& f, int src, int dst, double w) const {
    for_path(src, dst, [&](int a) { f.push_back({a, w}); });
  }
  size_t hops(int src, int dst) const {
    size_t n = 0;
    for_path(src, dst, [&](int) { ++n; });
    return n;
  }
  // NCCL uses the NICs closest to a GPU (same PCIe switch); ties share the traffic.
  const std::vector<int>& nearest(int gpu) const {
    std::vector<int>& found = nearest_nics[size_t(gpu)];
    if (!found.empty()) return found;
    const int r = rep[size_t(gpu)];
    if (r != gpu) {  // the representative's, carried over (NIC indices in increasing order, as found)
      const Swap s = swap_to(gpu);
      const int first_nic = nic_vertex.front();
      for (int k : nearest(r)) found.push_back(s.forward(nic_vertex[size_t(k)]) - first_nic);
      std::sort(found.begin(), found.end());
      return found;
    }
    size_t best = std::numeric_limits<size_t>::max();
    std::vector<size_t> n(nic_vertex.size());
    for (size_t k = 0; k < nic_vertex.size(); ++k) best = std::min(best, n[k] = hops(gpu, nic_vertex[k]));
    for (int k = 0; k < int(nic_vertex.size()); ++k)
      if (n[size_t(k)] == best) found.push_back(k);
    return found;
  }
  // The arcs out of (or into) the node from a GPU, through each of its nearest
  // NICs in turn (found once per GPU: a collective across nodes asks for
  // every member's, and a NIC-less GPU may share hundreds of NICs).
  const std::vector<int>& exit_arcs(int gpu, bool inbound) const {
    std::vector<int>& arcs_out = exits[size_t(gpu)][inbound ? 1 : 0];
    if (!arcs_out.empty()) return arcs_out;
    std::vector<Flow> f;
    for (int k : nearest(gpu)) {
      if (inbound) {
        f.push_back({nic_in_arc[size_t(k)], 1.0});
        add_path(f, nic_vertex[size_t(k)], gpu, 1.0);
      } else {
        add_path(f, gpu, nic_vertex[size_t(k)], 1.0);
        f.push_back({nic_out_arc[size_t(k)], 1.0});
      }
    }
    for (const Flow& x : f) arcs_out.push_back(x.arc);
    return arcs_out;
  }
  // Out of (or into) the node through the GPU's nearest NICs, spread evenly.
  template <class Sink>
  void add_exit(Sink&& sink, int gpu, double w, bool inbound) const {
    const double share = w / double(nearest(gpu).size());
    for (int a : exit_arcs(gpu, inbound)) sink(a, share);
  }
};

}  // namespace planner

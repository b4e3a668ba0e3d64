// The costs of collectives on one node's graph: the flows every concurrently
// running group puts on the links, and the most loaded link of one group's own.
#include <algorithm>
#include <tuple>

#include "costmodel/topology.hpp"
#include "costmodel/topology_graph.hpp"

namespace planner {

namespace {

using topology_detail::Arc;
using topology_detail::Flow;

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

// The ring flows one group puts through the links of `node`, given to the
// sinks as (arc, weight): its ring as one flat ring, its ring inside the node,
// and its traffic across nodes. Returns (nodes spanned, members on `node`).
template <class Flat, class Intra, class Inter>
std::pair<int, int> ring_flows(const Topology& topo, const Topology::Impl& t, const std::vector<int>& grp, int node,
                               std::vector<int>& local, Flat&& flat, Intra&& intra, Inter&& inter) {
  local.clear();
  int nodes = 0, last_node = -1;
  for (int r : grp) {
    if (topo.node_of(r) != last_node) ++nodes, last_node = topo.node_of(r);  // groups are sorted by rank
    if (topo.node_of(r) == node) local.push_back(r % t.g);
  }
  const int k = int(local.size());
  if (local.empty()) return {nodes, k};
  std::sort(local.begin(), local.end());
  auto path = [&](auto& sink, int a, int b) { t.for_path(a, b, [&](int arc) { sink(arc, 1.0); }); };
  // Ring inside the node: closed when the group stays in it, a chain otherwise.
  for (int i = 0; i + 1 < k; ++i) path(flat, local[i], local[i + 1]);
  if (nodes == 1 && k > 2) path(flat, local[k - 1], local[0]);
  if (k > 1) {
    for (int i = 0; i + 1 < k; ++i) path(intra, local[i], local[i + 1]);
    if (k > 2) path(intra, local[k - 1], local[0]);
  }
  if (nodes > 1) {
    for (int m : local) {
      t.add_exit(flat, m, 1.0 / k, false), t.add_exit(flat, m, 1.0 / k, true);
      t.add_exit(inter, m, 1.0, false), t.add_exit(inter, m, 1.0, true);
    }
  }
  return {nodes, k};
}

// A ring inside one node at the profile's figures for its group size
// (HardwareProfile::collective_groups), where it has them for this node's
// link: the all-reduce rate scales the ring's bytes-per-second (the graph
// priced the ring's link at the profile's single efficiency), each other
// operation keeps its rate relative to the all-reduce's, the launch latency
// is the group size's.
void apply_group_table(const Topology::Impl& t, GroupLink& out) {
  const CollectiveGroupAt at = collective_group_at(t.groups, out.size);
  if (!at.found || at.value.pcie != t.intra_pcie) return;
  const HardwareProfile::CollectiveGroup& v = at.value;
  const double single = t.intra_pcie ? t.eff_pcie : t.eff_nvlink;
  const double scale = v.all_reduce_efficiency / single;
  out.seconds_per_byte /= scale;
  out.intra_seconds_per_byte /= scale;
  out.reduce_scatter_relative = v.reduce_scatter_efficiency / v.all_reduce_efficiency;
  out.all_gather_relative = v.all_gather_efficiency / v.all_reduce_efficiency;
  out.broadcast_relative = v.broadcast_efficiency / v.all_reduce_efficiency;
  out.base_latency_seconds = v.base_latency_seconds;
}

}  // namespace

GroupLink Topology::ring(const std::vector<std::vector<int>>& groups, int rep) const {
  const Impl& t = *impl_;
  GroupLink out;
  const auto& me = groups.at(rep);
  out.size = int(me.size());
  if (me.size() < 2) return out;
  const int node = node_of(me.front());
  std::vector<int> local;
  // The links' loads from every group, kept for the next call with the same
  // groups and node: each stage of a pipeline asks for its own group in turn.
  Impl::RingLoads& c = t.ring_loads;
  if (c.node != node || c.groups != groups) {
    c.node = node;
    c.groups = groups;
    c.flat.assign(t.arcs.size(), 0.0), c.hier.assign(t.arcs.size(), 0.0);
    auto to_flat = [&](int a, double w) { c.flat[size_t(a)] += w; };
    auto to_hier = [&](int a, double w) { c.hier[size_t(a)] += w; };
    for (const auto& grp : groups) ring_flows(*this, t, grp, node, local, to_flat, to_hier, to_hier);
  }
  // The group's most loaded link and slowest hop, per view.
  Eval ef, ei, en;
  auto eval = [&](Eval& e, const std::vector<double>& load) {
    return [&t, &e, &load](int a, double) {
      const Arc& arc = t.arcs[size_t(a)];
      e.spb = std::max(e.spb, load[size_t(a)] / t.effective_Bps(arc));
      e.latency = std::max(e.latency, arc.latency_s);
    };
  };
  std::tie(out.nodes, out.per_node) =
      ring_flows(*this, t, me, node, local, eval(ef, c.flat), eval(ei, c.hier), eval(en, c.hier));
  out.seconds_per_byte = ef.spb;
  out.hop_latency_seconds = ef.latency;
  out.intra_seconds_per_byte = ei.spb;
  out.intra_latency_seconds = ei.latency;
  out.inter_seconds_per_byte = en.spb;
  out.inter_latency_seconds = en.latency;
  if (out.nodes == 1) {
    out.reduce_scatter_relative = t.rel_reduce_scatter;
    out.all_gather_relative = t.rel_all_gather;
    out.broadcast_relative = t.rel_broadcast;
    apply_group_table(t, out);
  }
  return out;
}

GroupLink Topology::p2p(const std::vector<std::pair<int, int>>& pairs, int rep) const {
  const Impl& t = *impl_;
  GroupLink out;
  out.size = 2;
  const auto [src0, dst0] = pairs.at(rep);
  const int node = node_of(src0);
  // The loads, in a buffer kept zero between calls (one call per pipeline
  // stage: clearing every arc each time was O(pp * g) on a large node).
  std::vector<double>& load = t.p2p_load;
  load.resize(t.arcs.size(), 0.0);
  std::vector<int> touched;
  std::vector<Flow> f, own;
  for (int i = 0; i < int(pairs.size()); ++i) {
    const auto [s, d] = pairs[i];
    if (node_of(s) != node && i != rep) continue;  // nodes are alike: count the flows leaving this one
    f.clear();
    if (node_of(s) == node_of(d)) {
      t.add_path(f, s % t.g, d % t.g, 1.0);
    } else {
      // The receiving node's links carry what this node's would carry inbound.
      auto push = [&f](int a, double w) { f.push_back({a, w}); };
      t.add_exit(push, s % t.g, 1.0, false);
      t.add_exit(push, d % t.g, 1.0, true);
    }
    for (const Flow& x : f) {
      if (load[x.arc] == 0.0) touched.push_back(x.arc);
      load[x.arc] += x.weight;
    }
    if (i == rep) own = f;
  }
  out.nodes = node_of(src0) == node_of(dst0) ? 1 : 2;
  const Eval e = evaluate(t, load, own);
  for (int a : touched) load[size_t(a)] = 0.0;
  out.seconds_per_byte = e.spb;
  out.hop_latency_seconds = e.latency;
  out.intra_seconds_per_byte = out.inter_seconds_per_byte = e.spb;
  if (out.nodes == 1) out.send_recv_relative = t.rel_send_recv;
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

// Best paths on one node's graph. The topology searches from one GPU (or NIC)
// per class of interchangeable ones and carries the paths over to the others
// (costmodel/topology.cpp); the reference here is what it did before: a plain
// search from every source, and the ring and point-to-point costs built on
// those paths (docs/TIME_MODEL.md, "Topology").
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <vector>

#include "catch.hpp"
#include "specs/cluster_spec.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/topology.hpp"
#include "test_util.hpp"
#include "strategies/errors.hpp"
#include "strategies/rank_grid.hpp"

using namespace planner;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Dijkstra from every source on the topology's own arcs and weights; a vertex's
// path arc is the first that reached its final distance.
struct Reference {
  const Topology& t;
  int V, g;
  std::vector<Topology::ArcView> arcs;
  std::vector<std::vector<int>> out;                      // arcs out of each vertex
  std::vector<std::vector<int>> pred;                     // [src][v]
  std::vector<std::vector<double>> dist;                  // [src][v]
  std::vector<std::vector<char>> tied;                    // [src][v]: another arc reaches v as cheaply
  std::vector<int> nic_out, nic_in;                       // per NIC: to and from the fabric

  Reference(const Topology& topo, int gpus_per_node) : t(topo), V(topo.vertex_count()), g(gpus_per_node) {
    for (int a = 0; a < t.arc_count(); ++a) arcs.push_back(t.arc(a));
    out.resize(size_t(V));
    for (int a = 0; a < int(arcs.size()); ++a) out[size_t(arcs[a].from)].push_back(a);
    pred.resize(size_t(V)), dist.resize(size_t(V)), tied.resize(size_t(V));
    for (int nic : t.nic_vertices()) {
      for (int a : out[size_t(nic)])
        if (arcs[a].network) nic_out.push_back(a);
      for (int a = 0; a < int(arcs.size()); ++a)
        if (arcs[a].network && arcs[a].to == nic) nic_in.push_back(a);
    }
  }
  void search(int src) {
    auto& d = dist[size_t(src)];
    if (!d.empty()) return;
    auto& p = pred[size_t(src)];
    d.assign(size_t(V), kInf), p.assign(size_t(V), -1);
    using Item = std::pair<double, int>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> q;
    d[size_t(src)] = 0, q.push({0.0, src});
    while (!q.empty()) {
      const auto [du, u] = q.top();
      q.pop();
      if (du > d[size_t(u)]) continue;
      for (int a : out[size_t(u)]) {
        const int v = arcs[a].to;
        const double nd = du + arcs[a].search_weight;
        if (nd < d[size_t(v)]) d[size_t(v)] = nd, p[size_t(v)] = a, q.push({nd, v});
      }
    }
    auto& tie = tied[size_t(src)];
    tie.assign(size_t(V), 0);
    for (int a = 0; a < int(arcs.size()); ++a) {
      const int u = arcs[a].from, v = arcs[a].to;
      if (v == src || a == p[size_t(v)] || d[size_t(u)] == kInf) continue;
      if (std::abs(d[size_t(u)] + arcs[a].search_weight - d[size_t(v)]) <= 1e-12 * d[size_t(v)]) tie[size_t(v)] = 1;
    }
  }
  std::vector<int> path(int src, int dst) {
    search(src);
    std::vector<int> r;
    for (int v = dst; v != src; v = arcs[pred[size_t(src)][size_t(v)]].from) r.push_back(pred[size_t(src)][size_t(v)]);
    std::reverse(r.begin(), r.end());
    return r;
  }
  bool unique(int src, int dst) {  // no other path as cheap
    search(src);
    for (int v = dst; v != src; v = arcs[pred[size_t(src)][size_t(v)]].from)
      if (tied[size_t(src)][size_t(v)]) return false;
    return true;
  }
  std::vector<int> nearest(int gpu) {  // fewest hops
    const auto& nics = t.nic_vertices();
    size_t best = std::numeric_limits<size_t>::max();
    for (int nic : nics) best = std::min(best, path(gpu, nic).size());
    std::vector<int> r;
    for (int k = 0; k < int(nics.size()); ++k)
      if (path(gpu, nics[size_t(k)]).size() == best) r.push_back(k);
    return r;
  }

  using Flows = std::vector<std::pair<int, double>>;
  void add(Flows& f, int s, int d, double w) {
    for (int a : path(s, d)) f.push_back({a, w});
  }
  void exit(Flows& f, int m, double w, bool inbound) {
    const std::vector<int> nics = nearest(m);
    const double share = w / double(nics.size());
    for (int k : nics) {
      if (inbound) {
        f.push_back({nic_in[size_t(k)], share});
        add(f, t.nic_vertices()[size_t(k)], m, share);
      } else {
        add(f, m, t.nic_vertices()[size_t(k)], share);
        f.push_back({nic_out[size_t(k)], share});
      }
    }
  }
  std::pair<double, double> eval(const std::vector<double>& load, const Flows& own) {
    double spb = 0, lat = 0;
    for (const auto& [a, w] : own) {
      spb = std::max(spb, load[size_t(a)] / arcs[a].effective_Bps);
      lat = std::max(lat, arcs[a].latency_s);
    }
    return {spb, lat};
  }
  GroupLink ring(const std::vector<std::vector<int>>& groups, int rep) {
    GroupLink out;
    const auto& me = groups[size_t(rep)];
    out.size = int(me.size());
    if (me.size() < 2) return out;
    const int node = me.front() / g;
    std::vector<double> flat(arcs.size(), 0.0), hier(arcs.size(), 0.0);
    Flows own_flat, own_intra, own_inter;
    for (int gi = 0; gi < int(groups.size()); ++gi) {
      std::vector<int> local;
      std::vector<int> spanned;
      for (int r : groups[size_t(gi)]) {
        if (std::find(spanned.begin(), spanned.end(), r / g) == spanned.end()) spanned.push_back(r / g);
        if (r / g == node) local.push_back(r % g);
      }
      if (local.empty()) continue;
      std::sort(local.begin(), local.end());
      const int k = int(local.size()), nodes = int(spanned.size());
      Flows ff, fi, fe;
      for (int i = 0; i + 1 < k; ++i) add(ff, local[i], local[i + 1], 1.0);
      if (nodes == 1 && k > 2) add(ff, local[k - 1], local[0], 1.0);
      for (int i = 0; i + 1 < k; ++i) add(fi, local[i], local[i + 1], 1.0);
      if (k > 2) add(fi, local[k - 1], local[0], 1.0);
      if (nodes > 1)
        for (int m : local) {
          exit(ff, m, 1.0 / k, false), exit(ff, m, 1.0 / k, true);
          exit(fe, m, 1.0, false), exit(fe, m, 1.0, true);
        }
      for (const auto& [a, w] : ff) flat[size_t(a)] += w;
      for (const auto& [a, w] : fi) hier[size_t(a)] += w;
      for (const auto& [a, w] : fe) hier[size_t(a)] += w;
      if (gi == rep) own_flat = ff, own_intra = fi, own_inter = fe, out.nodes = nodes, out.per_node = k;
    }
    std::tie(out.seconds_per_byte, out.hop_latency_seconds) = eval(flat, own_flat);
    std::tie(out.intra_seconds_per_byte, out.intra_latency_seconds) = eval(hier, own_intra);
    std::tie(out.inter_seconds_per_byte, out.inter_latency_seconds) = eval(hier, own_inter);
    return out;
  }
  GroupLink p2p(const std::vector<std::pair<int, int>>& pairs, int rep) {
    GroupLink out;
    out.size = 2;
    const int node = pairs[size_t(rep)].first / g;
    std::vector<double> load(arcs.size(), 0.0);
    Flows own;
    for (int i = 0; i < int(pairs.size()); ++i) {
      const auto [s, d] = pairs[size_t(i)];
      if (s / g != node && i != rep) continue;
      Flows f;
      if (s / g == d / g) {
        add(f, s % g, d % g, 1.0);
      } else {
        exit(f, s % g, 1.0, false);
        exit(f, d % g, 1.0, true);
      }
      for (const auto& [a, w] : f) load[size_t(a)] += w;
      if (i == rep) own = f;
    }
    out.nodes = pairs[size_t(rep)].first / g == pairs[size_t(rep)].second / g ? 1 : 2;
    std::tie(out.seconds_per_byte, out.hop_latency_seconds) = eval(load, own);
    out.intra_seconds_per_byte = out.inter_seconds_per_byte = out.seconds_per_byte;
    return out;
  }
  double host_copy_Bps(int gpus) {
    std::vector<double> load(arcs.size(), 0.0);
    Flows own;
    for (int i = 0; i < gpus; ++i) {
      Flows f;
      add(f, t.cpu_vertex(i), i, 1.0);
      for (const auto& [a, w] : f) load[size_t(a)] += w;
      if (i == 0) own = f;
    }
    double spb = 0;
    for (const auto& [a, w] : own) spb = std::max(spb, load[size_t(a)] / arcs[a].Bps);
    return spb > 0 ? 1.0 / spb : 0;
  }
};

void check_same(const GroupLink& a, const GroupLink& b) {
  CHECK(a.size == b.size);
  CHECK(a.nodes == b.nodes);
  CHECK(a.per_node == b.per_node);
  CHECK(a.seconds_per_byte == Approx(b.seconds_per_byte).epsilon(1e-12));
  CHECK(a.hop_latency_seconds == Approx(b.hop_latency_seconds).epsilon(1e-12));
  CHECK(a.intra_seconds_per_byte == Approx(b.intra_seconds_per_byte).epsilon(1e-12));
  CHECK(a.intra_latency_seconds == Approx(b.intra_latency_seconds).epsilon(1e-12));
  CHECK(a.inter_seconds_per_byte == Approx(b.inter_seconds_per_byte).epsilon(1e-12));
  CHECK(a.inter_latency_seconds == Approx(b.inter_latency_seconds).epsilon(1e-12));
}

using test_util::blocks;

ClusterSpec with_nics(std::string spec, int nics) {
  ClusterSpec c = resolve_cluster(spec);
  c.nics_per_node = nics;
  return c;
}

// Nodes whose best paths (between GPUs, from GPUs to their nearest NICs and
// back, from a CPU to its GPUs) are unique: NVSwitch (HGX), PCIe switches with
// one NIC (a workstation of 8 GPUs), NVLink bridges, odd counts, several nodes.
std::vector<ClusterSpec> unique_path_nodes() {
  return {resolve_cluster("8xA100-80GB"),  resolve_cluster("2x8xH100"),   resolve_cluster("8xRTX4090"),
          resolve_cluster("2x4xRTX3090"),  resolve_cluster("3x6xL40S"),   resolve_cluster("2x3xA6000"),
          resolve_cluster("1xH100"),       resolve_cluster("2x64xH100"),  resolve_cluster("2x10xV100-32GB"),
          with_nics("2x16xRTX4090", 3)};
}

// Every source, every destination: the path is connected, goes from src to
// dst, and costs what the reference search found.
void check_paths(const ClusterSpec& c) {
  INFO(c.name << " nics " << c.nics_per_node << " intra " << to_string(c.intra));
  const Topology t(c, default_profile(c.gpu));
  Reference ref(t, c.gpus_per_node);
  std::vector<int> sources;
  for (int i = 0; i < c.gpus_per_node; ++i) sources.push_back(i), sources.push_back(t.cpu_vertex(i));
  for (int nic : t.nic_vertices()) sources.push_back(nic);
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  int wrong = 0;
  for (int s : sources)
    for (int d = 0; d < t.vertex_count(); ++d) {
      const std::vector<int> p = t.best_path(s, d);
      int at = s;
      double cost = 0;
      for (int a : p) {
        const Topology::ArcView x = t.arc(a);
        if (x.from != at) ++wrong;
        at = x.to, cost += x.search_weight;
      }
      ref.search(s);
      if (at != d || std::abs(cost - ref.dist[size_t(s)][size_t(d)]) > 1e-12 * cost) ++wrong;
    }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("best paths cost what a search from every source finds", "[time][topology]") {
  for (const ClusterSpec& c : unique_path_nodes()) check_paths(c);
  // Equal-cost paths: NICs on fewer PCIe switches than there are, under NVSwitch
  // (a GPU reaches a NIC over NVLink through either GPU beside it).
  check_paths(with_nics("2x16xA100-80GB", 3));
  check_paths(with_nics("2x8xH100", 1));
  check_paths(resolve_cluster("2x9xV100-32GB"));
  ClusterSpec slow = resolve_cluster("2x8xA100-80GB");  // PCIe at 1 MB/s: paths through the fabric compete
  slow.pcie.bandwidth_Bps = 1e6;
  check_paths(slow);
}

TEST_CASE("where best paths are unique, they and every collective's cost are a search from every source's",
          "[time][topology]") {
  for (const ClusterSpec& c : unique_path_nodes()) {
    INFO(c.name << " nics " << c.nics_per_node);
    const int g = c.gpus_per_node, world = c.world();
    // Paths and link rates only: the per-group-size collective table (the
    // shipped H100 profile has one) rescales rings after the paths, which
    // the reference search does not model.
    HardwareProfile prof = default_profile(c.gpu);
    prof.collective_groups.clear();
    const Topology t(c, prof);
    Reference ref(t, g);
    // The paths the collectives use are unique, and the same.
    int compared = 0, differ = 0;
    for (int a = 0; a < g; ++a) {
      std::vector<std::pair<int, int>> used;
      for (int b = 0; b < g; ++b) used.push_back({a, b});
      for (int k : ref.nearest(a)) used.push_back({a, t.nic_vertices()[size_t(k)]}), used.push_back({t.nic_vertices()[size_t(k)], a});
      used.push_back({t.cpu_vertex(a), a});
      for (auto [s, d] : used) {
        REQUIRE(ref.unique(s, d));
        differ += t.best_path(s, d) != ref.path(s, d);
        ++compared;
      }
      CHECK(t.nearest_nics(a) == ref.nearest(a));
    }
    CHECK(differ == 0);
    CHECK(compared > g);
    for (int k = 1; k <= g; ++k) CHECK(t.host_copy_Bps(k) == Approx(ref.host_copy_Bps(k)).epsilon(1e-12));
    // TP rings: every block of a node at once.
    for (int tp = 2; tp <= g; ++tp)
      if (g % tp == 0) {
        const auto groups = blocks(g, tp);
        for (int rep = 0; rep < int(groups.size()); ++rep) check_same(t.ring(groups, rep), ref.ring(groups, rep));
      }
    // DP rings and pipeline sends as the cost model asks for them (cost_model.cpp, grid_links).
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; tp * pp <= world; ++pp) {
        if (world % (tp * pp)) continue;
        const RankGrid grid(world / (tp * pp), pp, tp);
        for (int st = 0; st < pp; ++st) {
          const int rep = grid.rank({0, st, 0}), first = rep / g * g, last = std::min(world, first + g);
          std::vector<std::vector<int>> groups;
          for (int x = first; x < std::min(last, first + pp * tp); ++x) groups.push_back(grid.dp_group(x));
          if (grid.dp() > 1) check_same(t.ring(groups, rep - first), ref.ring(groups, rep - first));
          std::vector<std::pair<int, int>> pairs;
          int rep_pair = 0;
          for (int x = first; x < last; ++x) {
            const RankCoord xc = grid.coord(x);
            if (xc.pp != st) continue;
            if (x == rep) rep_pair = int(pairs.size());
            pairs.push_back({x, grid.rank({xc.dp, (st + 1) % pp, xc.tp})});
          }
          if (pp > 1) check_same(t.p2p(pairs, rep_pair), ref.p2p(pairs, rep_pair));
        }
      }
    // Strided groups, any member as the representative.
    for (int stride = 1; stride <= 5; ++stride) {
      std::vector<std::vector<int>> groups(size_t(std::min(stride, world)));
      for (int x = 0; x < world; ++x) groups[size_t(x % int(groups.size()))].push_back(x);
      for (int rep = 0; rep < int(groups.size()); ++rep) check_same(t.ring(groups, rep), ref.ring(groups, rep));
    }
  }
}

TEST_CASE("a node of 4096 GPUs routes like a node of 8", "[time][topology]") {
  const ClusterSpec big = resolve_cluster("2x4096xH100"), small = resolve_cluster("2x8xH100");
  const HardwareProfile p = default_profile(big.gpu);
  const Topology tb(big, p), ts(small, p);
  // TP rings of 8 consecutive GPUs, every one of the node at once: the NVLink rate,
  // the same for the first and the last block.
  const auto tb8 = blocks(4096, 8);
  check_same(tb.ring(tb8, 0), ts.ring(blocks(8, 8), 0));
  check_same(tb.ring(tb8, 511), ts.ring(blocks(8, 8), 0));
  CHECK(tb.ring(blocks(4096, 4096), 0).bandwidth_Bps() == Approx(big.gpu_link.bandwidth_Bps * p.nvlink_efficiency));
  // DP groups of one GPU per node, all 4096 at once: each leaves through the NICs
  // on its own PCIe switch, as on the 8-GPU node.
  std::vector<std::vector<int>> dp_big, dp_small;
  for (int i = 0; i < 4096; ++i) dp_big.push_back({i, 4096 + i});
  for (int i = 0; i < 8; ++i) dp_small.push_back({i, 8 + i});
  check_same(tb.ring(dp_big, 0), ts.ring(dp_small, 0));
  check_same(tb.ring(dp_big, 4095), ts.ring(dp_small, 7));
  // Point to point across the nodes, every GPU at once.
  std::vector<std::pair<int, int>> pb, ps;
  for (int i = 0; i < 4096; ++i) pb.push_back({i, 4096 + i});
  for (int i = 0; i < 8; ++i) ps.push_back({i, 8 + i});
  check_same(tb.p2p(pb, 1234), ts.p2p(ps, 2));
  CHECK(tb.host_copy_Bps(4096) == Approx(ts.host_copy_Bps(8)));
}

TEST_CASE("GPUs without a NIC on their PCIe switch share every near NIC: bounded", "[time][topology][hardening]") {
  CHECK(Topology::shared_nic_routes(8, 8) == 0);       // HGX: two NICs per switch
  CHECK(Topology::shared_nic_routes(8, 4) == 0);       // one per switch
  CHECK(Topology::shared_nic_routes(8, 1) == 6 * 1);   // three switches without
  CHECK(Topology::shared_nic_routes(9, 4) == 1 * 4);   // the ninth GPU's switch has none
  CHECK(Topology::shared_nic_routes(16, 3) == 10 * 3);
  CHECK(Topology::shared_nic_routes(3, 2) == 3 * 2);   // no switches: all on the CPU
  CHECK(Topology::shared_nic_routes(1024, 256) == 512 * 256);
  // The largest count any node of up to 1024 GPUs reaches is allowed ...
  ClusterSpec c = with_nics("2x1024xH100", 256);
  CHECK_NOTHROW(c.validate());
  // ... a larger one is refused across nodes, where the NICs carry traffic,
  c = with_nics("2x4096xH100", 64);
  CHECK_THROWS_AS(c.validate(), InputError);
  // ... and allowed on one node.
  c = with_nics("1x4096xH100", 64);
  CHECK_NOTHROW(c.validate());
  CHECK_NOTHROW(resolve_cluster("2x8192xH100").validate());
}

#pragma once
// The topology graph of one node (GPUs, NVSwitch or NVLink bridges, PCIe
// switches, CPU sockets, NICs) and the fabric behind the NICs, in Boost.Graph.
// Nodes are alike, so a collective is costed by routing, on one node's graph,
// every flow that the concurrently running groups of the same kind put through
// that node, and taking the most loaded link of the group's own flows
// (docs/TIME_MODEL.md, "Topology"). The fabric is non-blocking (fat tree).
// Best paths are searched from one GPU (or NIC) per class of interchangeable
// ones and carried over to the rest by the swap that maps one onto the other:
// a handful of searches per node whatever its size, so routing a collective
// costs O(g) (a node of 8192 GPUs predicts in 0.04 s).
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "specs/cluster_spec.hpp"
#include "costmodel/hardware_profile.hpp"

namespace planner {

// What one group sees when it runs a collective.
struct GroupLink {
  int size = 1;                   // members
  int nodes = 1;                  // nodes spanned
  int per_node = 1;               // members on the examined node
  // Flat ring (NCCL rings/channels, exits spread over the members' NICs):
  // seconds to move one byte over the most loaded link of the group's ring.
  double seconds_per_byte = 0;
  double hop_latency_seconds = 0;      // the slowest hop
  // Hierarchical view: the ring among the members inside a node, and the
  // links across nodes when every member sends its share at once.
  double intra_seconds_per_byte = 0, intra_latency_seconds = 0;
  double inter_seconds_per_byte = 0, inter_latency_seconds = 0;
  // Each operation's transfer rate relative to the all-reduce's, for a group
  // inside one node (HardwareProfile::reduce_scatter_relative and the rest);
  // 1 across nodes.
  double reduce_scatter_relative = 1, all_gather_relative = 1, broadcast_relative = 1, send_recv_relative = 1;
  // The launch latency of this group's collectives where the profile
  // measured it for the group's size (collective_groups); < 0: the profile's
  // collective_base_latency_seconds, which the caller passes.
  double base_latency_seconds = -1;
  double bandwidth_Bps() const { return seconds_per_byte > 0 ? 1.0 / seconds_per_byte : 0; }
};

class Topology {
 public:
  Topology(const ClusterSpec& c, const HardwareProfile& p);
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  int gpus_per_node() const;
  int node_of(int rank) const { return rank / gpus_per_node(); }

  // `groups` run a ring collective at the same time (give at least every group
  // with a member on the node of groups[rep][0]); the result is for groups[rep].
  GroupLink ring(const std::vector<std::vector<int>>& groups, int rep) const;
  // Every (src, dst) pair sends at once; the result is for pairs[rep].
  GroupLink p2p(const std::vector<std::pair<int, int>>& pairs, int rep) const;
  // Bytes/s one GPU gets to or from host memory while `gpus` GPUs of its node copy at once.
  double host_copy_Bps(int gpus) const;

  // A GPU whose PCIe switch has no NIC sends across nodes through every
  // equally near NIC of its node (NVSwitch: all of them), so a collective
  // across nodes routes up to (such GPUs) x (NICs) paths per node:
  // ClusterSpec::validate bounds it (docs/ARCHITECTURE.md, "Input limits").
  static int64_t shared_nic_routes(int gpus_per_node, int nics_per_node);

  // Vertices and arcs, for tests and --explain.
  int vertex_count() const;
  int arc_count() const;
  // For tests: an arc (its weight in the best-path search, its bandwidth
  // times the profile's efficiency), the NIC vertices, a GPU's CPU socket,
  // the best path between two vertices as arcs (GPUs are vertices 0..g-1;
  // empty when dst is src or unreachable) and a GPU's nearest NICs (indices
  // into nic_vertices()), as ring() and p2p() use them.
  struct ArcView {
    int from = 0, to = 0;
    bool network = false;  // NIC <-> fabric
    double search_weight = 0, Bps = 0, effective_Bps = 0, latency_s = 0;
  };
  ArcView arc(int a) const;
  const std::vector<int>& nic_vertices() const;
  int cpu_vertex(int gpu) const;
  std::vector<int> best_path(int src, int dst) const;
  std::vector<int> nearest_nics(int gpu) const;

  struct Impl;  // the graph; defined in topology.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace planner

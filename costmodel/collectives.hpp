#pragma once
// Collective and point-to-point times, alpha-beta over the bottleneck of the
// group (Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
// Communication Operations in MPICH"; NCCL's ring and double-binary-tree
// algorithms). `bytes` is always the full buffer (S): an all-reduce of S bytes,
// a reduce-scatter whose input is S bytes, an all-gather whose output is S bytes.
//   ring all-reduce      2(n-1) a + 2 (n-1)/n S / B
//   reduce-scatter       (n-1) a + (n-1)/n S / B       (all-gather the same)
//   broadcast (pipelined ring)  (n-1) a + S / B
//   tree all-reduce      2 log2(n) a + 2 S / B          (NCCL double binary tree)
//   hierarchical         RS inside the node, all-reduce of S/g across nodes, AG inside
//   point-to-point       a + S / B
// plus a fixed launch latency per collective (NCCL's baseLat). docs/TIME_MODEL.md.
#include "costmodel/topology.hpp"

namespace planner {

struct AlphaBeta {
  int n = 1;                    // members
  double seconds_per_byte = 0;  // 1 / B at the bottleneck, sharing included
  double alpha_seconds = 0;     // per-step latency
  double base_seconds = 0;      // per-call launch latency
};

double ring_all_reduce_seconds(double bytes, const AlphaBeta& l);
double ring_reduce_scatter_seconds(double bytes, const AlphaBeta& l);
double ring_all_gather_seconds(double bytes, const AlphaBeta& l);
double ring_broadcast_seconds(double bytes, const AlphaBeta& l);
double tree_all_reduce_seconds(double bytes, const AlphaBeta& l);
double p2p_seconds(double bytes, const AlphaBeta& l);
// intra: the g members inside a node; inter: the N nodes, each carrying S/g.
double hierarchical_all_reduce_seconds(double bytes, const AlphaBeta& intra, const AlphaBeta& inter);

// Over a group placed on the topology (NCCL picks the fastest algorithm).
double all_reduce_seconds(double bytes, const GroupLink& g, double base_latency_s);
double reduce_scatter_seconds(double bytes, const GroupLink& g, double base_latency_s);
double all_gather_seconds(double bytes, const GroupLink& g, double base_latency_s);
double broadcast_seconds(double bytes, const GroupLink& g, double base_latency_s);
double send_recv_seconds(double bytes, const GroupLink& g, double base_latency_s);
// All-to-all of `bytes` per member (each sends bytes/n to every member): the
// mixture of experts' token dispatch and combine over the ep group.
//   all-to-all           (n-1) a + (n-1)/n S / B   (across nodes: the share
//                        bound for other nodes over the network rate)
double all_to_all_seconds(double bytes, const GroupLink& g, double base_latency_s);

}  // namespace planner

#include "costmodel/collectives.hpp"

#include <algorithm>
#include <cmath>

namespace planner {

double ring_all_reduce_seconds(double S, const AlphaBeta& l) {
  if (l.n <= 1 || S <= 0) return 0;
  const double n = l.n;
  return l.base_seconds + 2 * (n - 1) * l.alpha_seconds + 2 * (n - 1) / n * S * l.seconds_per_byte;
}

double ring_reduce_scatter_seconds(double S, const AlphaBeta& l) {
  if (l.n <= 1 || S <= 0) return 0;
  const double n = l.n;
  return l.base_seconds + (n - 1) * l.alpha_seconds + (n - 1) / n * S * l.seconds_per_byte;
}

double ring_all_gather_seconds(double S, const AlphaBeta& l) { return ring_reduce_scatter_seconds(S, l); }

double ring_broadcast_seconds(double S, const AlphaBeta& l) {
  if (l.n <= 1 || S <= 0) return 0;
  return l.base_seconds + (l.n - 1) * l.alpha_seconds + S * l.seconds_per_byte;
}

double tree_all_reduce_seconds(double S, const AlphaBeta& l) {
  if (l.n <= 1 || S <= 0) return 0;
  return l.base_seconds + 2 * std::ceil(std::log2(double(l.n))) * l.alpha_seconds + 2 * S * l.seconds_per_byte;
}

double p2p_seconds(double S, const AlphaBeta& l) {
  if (S <= 0) return 0;
  return l.base_seconds + l.alpha_seconds + S * l.seconds_per_byte;
}

double hierarchical_all_reduce_seconds(double S, const AlphaBeta& intra, const AlphaBeta& inter) {
  if (S <= 0) return 0;
  const double g = std::max(1, intra.n);
  return ring_reduce_scatter_seconds(S, intra) + ring_all_reduce_seconds(S / g, inter) +
         ring_all_gather_seconds(S, intra);
}

namespace {

// The group's own launch latency where the profile measured its size.
double base_of(const GroupLink& g, double base) { return g.base_latency_seconds >= 0 ? g.base_latency_seconds : base; }
AlphaBeta flat(const GroupLink& g, double base) {
  return {g.size, g.seconds_per_byte, g.hop_latency_seconds, base_of(g, base)};
}
// The same at an operation's own rate relative to the all-reduce's.
AlphaBeta flat_at(const GroupLink& g, double base, double relative) {
  return {g.size, g.seconds_per_byte / relative, g.hop_latency_seconds, base_of(g, base)};
}

}  // namespace

double all_reduce_seconds(double S, const GroupLink& g, double base) {
  if (g.size <= 1 || S <= 0) return 0;
  const AlphaBeta f = flat(g, base);
  double best = std::min(ring_all_reduce_seconds(S, f), tree_all_reduce_seconds(S, f));
  if (g.nodes > 1 && g.per_node > 1) {
    const AlphaBeta intra{g.per_node, g.intra_seconds_per_byte, g.intra_latency_seconds, base};
    const AlphaBeta inter{g.nodes, g.inter_seconds_per_byte, g.inter_latency_seconds, base};
    best = std::min(best, hierarchical_all_reduce_seconds(S, intra, inter));
  }
  return best;
}

double reduce_scatter_seconds(double S, const GroupLink& g, double base) {
  return ring_reduce_scatter_seconds(S, flat_at(g, base, g.reduce_scatter_relative));
}
double all_gather_seconds(double S, const GroupLink& g, double base) {
  return ring_all_gather_seconds(S, flat_at(g, base, g.all_gather_relative));
}
double broadcast_seconds(double S, const GroupLink& g, double base) {
  return ring_broadcast_seconds(S, flat_at(g, base, g.broadcast_relative));
}
double send_recv_seconds(double S, const GroupLink& g, double base) {
  return p2p_seconds(S, {2, g.seconds_per_byte / g.send_recv_relative, g.hop_latency_seconds, base});
}

}  // namespace planner

namespace planner {

// All-to-all (pairwise exchange, as NCCL's ncclSend/ncclRecv groups and
// torch.distributed.all_to_all_single run it): each of the n members sends
// S/n bytes to every other one, (n - 1) S / n leaving it, in n - 1 steps
// (Thakur et al. 2005, sec. 4.5: (n - 1) a + (n - 1)/n S / B). Inside a node
// each member's share leaves through its own link at the group's ring rate
// (the point-to-point rate relative to the all-reduce's); across nodes the
// (n - per_node)/n of S bound for other nodes crosses the network at the rate
// every member gets when all send at once, beside the (per_node - 1)/n that
// stays inside, and the slower of the two sets the time.
double all_to_all_seconds(double S, const GroupLink& g, double base) {
  if (g.size <= 1 || S <= 0) return 0;
  const double n = g.size;
  const double latency = base + (n - 1) * g.hop_latency_seconds;
  if (g.nodes <= 1 || g.inter_seconds_per_byte <= 0)
    return latency + (n - 1) / n * S * g.seconds_per_byte / g.send_recv_relative;
  const double per_node = std::max(1, g.per_node);
  const double inside = (per_node - 1) / n * S * g.intra_seconds_per_byte;
  const double across = (n - per_node) / n * S * g.inter_seconds_per_byte;
  return latency + std::max(inside, across);
}

}  // namespace planner

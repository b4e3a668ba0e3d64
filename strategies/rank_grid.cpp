#include "strategies/rank_grid.hpp"

#include <fmt/format.h>

#include "strategies/errors.hpp"

namespace planner {

RankGrid::RankGrid(int dp, int pp, int tp, int cp) : dp_(dp), pp_(pp), tp_(tp), cp_(cp) {
  if (dp < 1 || pp < 1 || tp < 1 || cp < 1)
    throw InputError(cp == 1 ? fmt::format("rank grid: dp={}, pp={}, tp={} must all be at least 1", dp, pp, tp)
                             : fmt::format("rank grid: dp={}, pp={}, tp={}, cp={} must all be at least 1", dp, pp, tp, cp));
}

RankCoord RankGrid::coord(int rank) const {
  if (rank < 0 || rank >= world()) throw InputError(fmt::format("rank grid: rank {} outside 0..{}", rank, world() - 1));
  RankCoord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.pp = (rank / (tp_ * cp_)) % pp_;
  c.dp = rank / (tp_ * cp_ * pp_);
  return c;
}

int RankGrid::rank(const RankCoord& c) const { return ((c.dp * pp_ + c.pp) * cp_ + c.cp) * tp_ + c.tp; }

std::vector<int> RankGrid::tp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp_; ++c.tp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::pp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp_; ++c.pp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::dp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp_; ++c.dp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::cp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::dp_cp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  // dp outer, cp inner: increasing rank order (cp varies faster than dp).
  for (c.dp = 0; c.dp < dp_; ++c.dp)
    for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank(c));
  return g;
}

namespace {
void check_ep(int dp, int ep) {
  if (ep < 1 || dp % ep != 0)
    throw InputError(fmt::format("rank grid: ep={} must be at least 1 and divide dp={}", ep, dp));
}
}  // namespace

std::vector<int> RankGrid::ep_group(int r, int ep) const {
  check_ep(dp_, ep);
  RankCoord c = coord(r);
  const int first = c.dp / ep * ep;  // ep consecutive dp indices, at this rank's cp index
  std::vector<int> g;
  for (c.dp = first; c.dp < first + ep; ++c.dp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::expert_dp_group(int r, int ep) const {
  check_ep(dp_, ep);
  RankCoord c = coord(r);
  std::vector<int> g;
  // dp indices equal modulo ep, at every cp index (increasing rank order:
  // dp outer, cp inner); the dp indices equal modulo ep alone when cp = 1.
  for (c.dp = c.dp % ep; c.dp < dp_; c.dp += ep)
    for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank(c));
  return g;
}

namespace {
template <class F>
std::vector<std::vector<int>> all_groups(const RankGrid& grid, F group_of) {
  std::vector<std::vector<int>> out;
  std::vector<bool> seen(grid.world(), false);
  for (int r = 0; r < grid.world(); ++r) {
    if (seen[r]) continue;
    auto g = group_of(r);
    for (int m : g) seen[m] = true;
    out.push_back(std::move(g));
  }
  return out;
}
}  // namespace

std::vector<std::vector<int>> RankGrid::all_tp_groups() const {
  return all_groups(*this, [this](int r) { return tp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_pp_groups() const {
  return all_groups(*this, [this](int r) { return pp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_dp_groups() const {
  return all_groups(*this, [this](int r) { return dp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_cp_groups() const {
  return all_groups(*this, [this](int r) { return cp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_dp_cp_groups() const {
  return all_groups(*this, [this](int r) { return dp_cp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_ep_groups(int ep) const {
  check_ep(dp_, ep);
  return all_groups(*this, [this, ep](int r) { return ep_group(r, ep); });
}
std::vector<std::vector<int>> RankGrid::all_expert_dp_groups(int ep) const {
  check_ep(dp_, ep);
  return all_groups(*this, [this, ep](int r) { return expert_dp_group(r, ep); });
}

}  // namespace planner

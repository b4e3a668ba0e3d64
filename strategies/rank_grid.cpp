#include "strategies/rank_grid.hpp"

#include <fmt/format.h>

#include "strategies/errors.hpp"

namespace planner {

RankGrid::RankGrid(int dp, int pp, int tp) : dp_(dp), pp_(pp), tp_(tp) {
  if (dp < 1 || pp < 1 || tp < 1)
    throw InputError(fmt::format("rank grid: dp={}, pp={}, tp={} must all be at least 1", dp, pp, tp));
}

RankCoord RankGrid::coord(int rank) const {
  if (rank < 0 || rank >= world()) throw InputError(fmt::format("rank grid: rank {} outside 0..{}", rank, world() - 1));
  return {rank / (tp_ * pp_), (rank / tp_) % pp_, rank % tp_};
}

int RankGrid::rank(const RankCoord& c) const { return (c.dp * pp_ + c.pp) * tp_ + c.tp; }

std::vector<int> RankGrid::tp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (int t = 0; t < tp_; ++t) g.push_back(rank({c.dp, c.pp, t}));
  return g;
}

std::vector<int> RankGrid::pp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (int p = 0; p < pp_; ++p) g.push_back(rank({c.dp, p, c.tp}));
  return g;
}

std::vector<int> RankGrid::dp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (int d = 0; d < dp_; ++d) g.push_back(rank({d, c.pp, c.tp}));
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
  const RankCoord c = coord(r);
  const int first = c.dp / ep * ep;  // ep consecutive dp indices
  std::vector<int> g;
  for (int d = first; d < first + ep; ++d) g.push_back(rank({d, c.pp, c.tp}));
  return g;
}

std::vector<int> RankGrid::expert_dp_group(int r, int ep) const {
  check_ep(dp_, ep);
  const RankCoord c = coord(r);
  std::vector<int> g;
  for (int d = c.dp % ep; d < dp_; d += ep) g.push_back(rank({d, c.pp, c.tp}));  // dp indices equal modulo ep
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
std::vector<std::vector<int>> RankGrid::all_ep_groups(int ep) const {
  check_ep(dp_, ep);
  return all_groups(*this, [this, ep](int r) { return ep_group(r, ep); });
}
std::vector<std::vector<int>> RankGrid::all_expert_dp_groups(int ep) const {
  check_ep(dp_, ep);
  return all_groups(*this, [this, ep](int r) { return expert_dp_group(r, ep); });
}

}  // namespace planner

#include "runtime/comm/pipe_links.hpp"

#include <string>

namespace planner::rt {

std::vector<std::vector<int>> pipe_link_rounds(int pp, bool ring) {
  std::vector<std::vector<int>> rounds;
  if (pp < 2) return rounds;
  const int edges = ring ? pp : pp - 1;
  if (pp == 2) {
    // Two stages: edge 0 (0 -> 1) and, in a ring, edge 1 (1 -> 0) join the same pair.
    for (int e = 0; e < edges; ++e) rounds.push_back({e});
    return rounds;
  }
  rounds.resize(2);
  for (int e = 0; e < edges; ++e) {
    if (ring && pp % 2 == 1 && e == pp - 1) rounds.push_back({e});
    else rounds[size_t(e % 2)].push_back(e);
  }
  return rounds;
}

PipeLinks make_pipe_links(const Communicator& pp, bool ring, at::Device device) {
  PipeLinks out;
  const int P = pp.size(), s = pp.rank();
  const std::vector<int>& m = pp.members();
  const auto rounds = pipe_link_rounds(P, ring);
  for (int dir = 0; dir < 2; ++dir) {  // 0: forward (s -> s+1), 1: backward (s+1 -> s)
    for (size_t r = 0; r < rounds.size(); ++r) {
      std::vector<int> group{m[size_t(s)]};
      bool sender = false, found = false;
      for (int e : rounds[r]) {
        const int a = e, b = (e + 1) % P;  // the edge's stages, a -> b going forward
        const int from = dir == 0 ? a : b, to = dir == 0 ? b : a;
        if (from != s && to != s) continue;
        group = {m[size_t(from)], m[size_t(to)]};
        sender = from == s;
        found = true;
      }
      const std::string name = std::string(dir == 0 ? "pp-fwd" : "pp-bwd") + " round " + std::to_string(r);
      auto c = make_group_communicator(group, name, device, pp.timeout());
      if (found) {
        Communicator*& slot = dir == 0 ? (sender ? out.f_out : out.f_in) : (sender ? out.b_out : out.b_in);
        slot = c.get();
      }
      out.owned.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace planner::rt

// planner calibrate under mpirun: the Communicator's collectives per group
// size, send/recv per pair class, compute beside collectives (both ways) per
// group size, tensor-parallel collectives between GEMMs, and NCCL's memory
// (calibration/measure.hpp). Groups are made as the runtime makes its dp/tp/pp
// groups: the world split into contiguous blocks of g ranks, every block
// running at once.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "calibration/measure_detail.hpp"
#include "runtime/comm/pipe_links.hpp"
#include "runtime/device.hpp"

namespace planner::rt::calib {

namespace {

using nlohmann::json;

// Group sizes a plan on W ranks can use: 2, 4, ... and W itself, each
// dividing W (every rank is in exactly one group of the size).
std::vector<int> group_sizes_of(int W) {
  std::vector<int> out;
  for (int g = 2; g <= W; g *= 2)
    if (W % g == 0) out.push_back(g);
  if (W >= 2 && (out.empty() || out.back() != W)) out.push_back(W);
  return out;
}

std::vector<std::vector<int>> blocks_of(int W, int g) {
  std::vector<std::vector<int>> groups;
  for (int s = 0; s + g <= W; s += g) {
    groups.emplace_back();
    for (int r = s; r < s + g; ++r) groups.back().push_back(r);
  }
  return groups;
}

// Nodes the group of world ranks spans (Ctx::node_of_rank; one node without it).
int nodes_spanned(const Ctx& c, const std::vector<int>& group) {
  std::vector<int> n;
  for (int r : group) n.push_back(size_t(r) < c.node_of_rank.size() ? c.node_of_rank[size_t(r)] : 0);
  std::sort(n.begin(), n.end());
  return int(std::unique(n.begin(), n.end()) - n.begin());
}

// Pairs of ranks on two different nodes, every rank in one: the ranks of
// nodes 0 and 1 paired in order, of nodes 2 and 3, ... Empty when the nodes
// are one, odd in number, or unequal.
std::vector<std::vector<int>> cross_node_pairs(const Ctx& c) {
  std::vector<std::vector<int>> by_node;
  for (int r = 0; r < c.world; ++r) {
    const int n = size_t(r) < c.node_of_rank.size() ? c.node_of_rank[size_t(r)] : 0;
    if (n >= int(by_node.size())) by_node.resize(size_t(n) + 1);
    by_node[size_t(n)].push_back(r);
  }
  std::vector<std::vector<int>> pairs;
  if (by_node.size() < 2 || by_node.size() % 2) return pairs;
  for (size_t n = 0; n + 1 < by_node.size(); n += 2) {
    if (by_node[n].size() != by_node[n + 1].size() || by_node[n].empty()) return {};
    for (size_t i = 0; i < by_node[n].size(); ++i) pairs.push_back({by_node[n][i], by_node[n + 1][i]});
  }
  return pairs;
}

// What the collectives part gathers on every rank: the points in the same
// order on every rank and this rank's seconds for each.
struct Points {
  json list = json::array();
  std::vector<double> mine;
};

// Each size of one operation over `comm`, the same number of calls on every rank.
void time_op(const Ctx& c, Communicator& comm, const std::string& o, const std::vector<int64_t>& sizes,
             const json& label, Points& out) {
  const int g = comm.size();
  for (int64_t S : sizes) {
    const int64_t n = S / 4;  // floats
    const auto fopt = at::TensorOptions().device(c.device).dtype(at::kFloat);
    at::Tensor full = at::ones({n}, fopt), part = at::ones({n / g}, fopt);
    std::function<void()> fn;
    if (o == "all_reduce") fn = [&] { comm.all_reduce(full)->wait(); };
    else if (o == "reduce_scatter") fn = [&] { comm.reduce_scatter(full, part)->wait(); };
    else if (o == "all_gather") fn = [&] { comm.all_gather(part, full)->wait(); };
    else if (o == "broadcast") fn = [&] { comm.broadcast(full, 0)->wait(); };
    else fn = [&] { (comm.rank() == 0 ? comm.send(full, 1) : comm.recv(full, 0))->wait(); };
    const int calls = S <= (1 << 20) ? 20 : S <= (16 << 20) ? 10 : 3;
    out.mine.push_back(time_fixed(c, fn, calls));
    json p = label;
    p["op"] = o, p["bytes"] = S;
    out.list.push_back(p);
  }
}

// A part measured beside the points; its failure is a note in its place.
json guarded(const std::function<json()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return json{{"failed", msg.substr(0, msg.find('\n'))}};
  }
}

// NCCL's memory per pipeline link, as the runtime makes them: pairs of ranks
// as two-stage pipelines, each with the links of the interleaved ring (four
// per rank: activations and gradients, each way), one message sent on each.
// (On the CPU the same exchange runs over MPI, with nothing to measure.) -1:
// not measured.
int64_t measure_pipe_link_bytes(const Ctx& c, std::chrono::seconds timeout) {
  const int W = c.world;
  if (W < 2 || W % 2) return -1;
  auto pp = make_communicator(blocks_of(W, 2), "calibrate-pp", c.device, timeout);
  synchronize(c.cuda);
  const int64_t before = memory_outside_allocator(c.cuda);
  int64_t link_bytes = -1;
  {
    PipeLinks links = make_pipe_links(*pp, /*ring=*/true, c.device);
    const auto fopt = at::TensorOptions().device(c.device).dtype(at::kFloat);
    std::vector<at::Tensor> bufs;
    std::vector<WorkPtr> works;
    int n = 0;
    // Both ranks take the links in one order (edge 0 then edge 1, activations
    // then gradients), so that a link's first use, which connects its two
    // ranks, finds the peer there.
    const int stage = pp->rank();
    auto op = [&](Communicator* link, bool send) {
      if (!link) return;
      bufs.push_back(at::ones({c.quick ? int64_t(1) << 10 : int64_t(4) << 20}, fopt));
      works.push_back(send ? link->send(bufs.back(), 1) : link->recv(bufs.back(), 0));
      ++n;
    };
    for (int edge = 0; edge < 2; ++edge) op(stage == edge ? links.f_out : links.f_in, stage == edge);
    for (int edge = 0; edge < 2; ++edge) op(stage == edge ? links.b_in : links.b_out, stage != edge);
    for (auto& w : works) w->wait();
    synchronize(c.cuda);
    if (n > 0 && c.cuda) link_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - before) / n;
  }
  synchronize(c.cuda);
  return link_bytes;
}

// Every point's time on its slowest rank (MPI on the CPU), into the points
// (rank 0; the other ranks only contribute).
void slowest_rank_times(const Ctx& c, Communicator& world, Points& pts, int64_t largest) {
  const int W = c.world;
  at::Tensor in = at::tensor(pts.mine, at::TensorOptions().dtype(at::kDouble));
  at::Tensor all = at::empty({int64_t(pts.mine.size()) * W}, in.options());
  world.all_gather(in, all)->wait();
  if (c.rank != 0) return;
  const double* x = all.data_ptr<double>();
  for (size_t i = 0; i < pts.mine.size(); ++i) {
    double worst = 0;
    for (int r = 0; r < W; ++r) worst = std::max(worst, x[size_t(r) * pts.mine.size() + i]);
    json& p = pts.list[i];
    p["seconds"] = worst;
    if (p["bytes"].get<int64_t>() == largest)
      say(c, p["op"].get<std::string>() + " " + p["backend"].get<std::string>() + " over " +
                 std::to_string(p["group_size"].get<int>()) + " ranks" +
                 (p.contains("pair") ? " (" + p["pair"].get<std::string>() + ")" : std::string()) + ", " +
                 fmt_num(double(largest) / 1048576.0) + " MiB: " + fmt_num(worst * 1e3) + " ms");
  }
}

const char* pair_class(int nodes) { return nodes > 1 ? "across_nodes" : "same_node"; }

}  // namespace

std::vector<int> calibrated_group_sizes(int world) { return group_sizes_of(world); }

void measure_collectives(const Ctx& c, Communicator& world, json& out) {
  const int W = c.world;
  const auto timeout = std::chrono::seconds(120);
  const std::vector<int64_t> sizes = c.quick ? std::vector<int64_t>{4096, 65536, 1 << 20}
                                             : std::vector<int64_t>{4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
  Points pts;
  int64_t nccl_bytes = -1, p2p_bytes = -1;
  json contention = json::array();  // every group size's points (rank 0's)
  std::string contention_failed;
  json tp_chain;                    // rank 0's measure_tp_chain over the smallest groups, or {failed}
  bool pairs_across_measured = false;
  for (int g : group_sizes_of(W)) {
    const auto groups = blocks_of(W, g);
    const int nodes = nodes_spanned(c, groups.front());
    const int64_t outside0 = memory_outside_allocator(c.cuda);
    auto comm = make_communicator(groups, "calibrate" + std::to_string(g), c.device, timeout);
    const bool first = nccl_bytes < 0 && c.cuda;
    const json label = {{"backend", comm->backend() == Backend::Nccl ? "nccl" : "mpi"}, {"group_size", g},
                        {"groups", int(groups.size())}, {"nodes", nodes}};
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "broadcast"}) time_op(c, *comm, op, sizes, label, pts);
    // NCCL's device memory of a communicator, as the runtime's collective
    // communicators use it: the growth outside the caching allocator once
    // every collective has run (NCCL sets up each algorithm's buffers at its
    // first use: after the first all-reduce alone, 772 MiB of the 990 MiB a
    // dp=2 run holds on an H200). Send/recv add their own buffers, apart.
    synchronize(c.cuda);
    if (first) nccl_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - outside0);
    if (g == 2) {  // pairs: send/recv between the ranks of each block
      json pl = label;
      pl["pair"] = pair_class(nodes);
      pairs_across_measured = nodes > 1;
      time_op(c, *comm, "send_recv", sizes, pl, pts);
      synchronize(c.cuda);
      if (first) p2p_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - outside0 - nccl_bytes);
    }
    // Compute beside this size's collectives, every group at once. The CPU's
    // figure (MPI, compute on the same cores) is measured, not used by the fit.
    for (auto* measure : {&measure_contention, &measure_contention_layers}) {
      json k = guarded([&] { return measure(c, *comm); });
      if (k.is_array()) contention.insert(contention.end(), k.begin(), k.end());
      else if (contention_failed.empty()) contention_failed = k.value("failed", "");
    }
    if (tp_chain.is_null()) tp_chain = guarded([&] { return measure_tp_chain(c, *comm); });
  }
  // Send/recv across nodes where the pairs above stayed inside one.
  if (!pairs_across_measured) {
    const auto pairs = cross_node_pairs(c);
    if (!pairs.empty()) {
      auto comm = make_communicator(pairs, "calibrate-across", c.device, timeout);
      const json pl = {{"backend", comm->backend() == Backend::Nccl ? "nccl" : "mpi"}, {"group_size", 2},
                       {"groups", int(pairs.size())}, {"nodes", 2}, {"pair", "across_nodes"}};
      time_op(c, *comm, "send_recv", sizes, pl, pts);
    }
  }
  const int64_t link_bytes = measure_pipe_link_bytes(c, timeout);
  slowest_rank_times(c, world, pts, sizes.back());
  if (c.rank != 0) return;
  out["collectives"] = pts.list;
  if (nccl_bytes >= 0) out["nccl_communicator_bytes"] = nccl_bytes;
  if (p2p_bytes >= 0) out["nccl_send_recv_bytes"] = p2p_bytes;
  if (link_bytes >= 0) out["nccl_pipe_link_bytes"] = link_bytes;
  if (!contention.empty()) out["compute_beside_comm"] = contention;
  else if (!contention_failed.empty()) out["compute_beside_comm"] = json{{"failed", contention_failed}};
  if (!tp_chain.is_null()) out["tp_chain"] = tp_chain;
}

}  // namespace planner::rt::calib

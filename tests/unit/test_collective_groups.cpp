// The per-group-size collective table (HardwareProfile::collective_groups):
// lookup, interpolation in log2 of the group size, extrapolation and its note,
// the JSON round trip, the time model's use of it and calibrate's fit of it,
// with hand-computed numbers.
#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/predict_detail.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/topology.hpp"
#include "specs/cluster_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/strategy.hpp"

using namespace planner;
using nlohmann::json;
using Group = HardwareProfile::CollectiveGroup;

namespace {

// Two measured sizes: 2 GPUs at 0.6 of NVLink (12 us launch, compute 1.1x
// beside the collectives, collectives 2x beside compute) and 4 GPUs at 0.8
// (20 us, 1.3x, 3x); reduce-scatter and all-gather at 0.8 of the all-reduce's
// rate, broadcast at 1.2.
std::vector<Group> two_sizes() {
  Group a{2, false, 0.6, 0.48, 0.48, 0.72, 12e-6, 1.1, 2.0};
  Group b{4, false, 0.8, 0.64, 0.64, 0.96, 20e-6, 1.3, 3.0};
  return {a, b};
}

HardwareProfile h100_with(const std::vector<Group>& t) {
  HardwareProfile p = default_profile(gpu_by_name("H100-SXM"));
  p.collective_groups = t;
  return p;
}

std::vector<std::vector<int>> blocks(int world, int g) {
  std::vector<std::vector<int>> out;
  for (int s = 0; s < world; s += g) {
    out.emplace_back();
    for (int r = s; r < s + g; ++r) out.back().push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("the collective table: measured sizes exact, log2 interpolation between, the largest held above",
          "[collective_groups]") {
  const auto t = two_sizes();
  const CollectiveGroupAt at2 = collective_group_at(t, 2), at4 = collective_group_at(t, 4);
  CHECK(at2.found);
  CHECK_FALSE(at2.extrapolated);
  CHECK(at2.value.all_reduce_efficiency == 0.6);
  CHECK(at4.value.base_latency_seconds == 20e-6);
  // 3 GPUs: log2(3) - 1 = 0.58496 of the way from 2 to 4.
  const double x = std::log2(3.0) - 1;
  const CollectiveGroupAt at3 = collective_group_at(t, 3);
  CHECK_FALSE(at3.extrapolated);
  CHECK(at3.value.group_size == 3);
  CHECK(at3.value.all_reduce_efficiency == Approx(0.6 + 0.2 * x));  // 0.71699
  CHECK(at3.value.all_reduce_efficiency == Approx(0.716993).epsilon(1e-5));
  CHECK(at3.value.base_latency_seconds == Approx(12e-6 + 8e-6 * x));
  CHECK(at3.value.comm_slowdown_beside_compute == Approx(2.0 + x));
  // Above the largest: its figures, marked extrapolated. Below the smallest: the smallest's.
  const CollectiveGroupAt at8 = collective_group_at(t, 8);
  CHECK(at8.extrapolated);
  CHECK(at8.value.all_reduce_efficiency == 0.8);
  CHECK(at8.value.compute_slowdown_beside_comm == 1.3);
  CHECK(collective_group_at(t, 1).value.all_reduce_efficiency == 0.6);
  CHECK_FALSE(collective_group_at({}, 4).found);
}

TEST_CASE("the extrapolation note names the largest measured group and the plan's", "[collective_groups]") {
  const HardwareProfile p = h100_with(two_sizes());
  Strategy s;
  s.dp = 4;
  CHECK(collective_extrapolation_note(p, s).empty());  // 4 was measured
  s.dp = 8;
  const std::string n = collective_extrapolation_note(p, s);
  CHECK(n.find("largest measured group is 4 GPUs") != std::string::npos);
  CHECK(n.find("dp group has 8") != std::string::npos);
  s.dp = 2, s.tp = 16;
  CHECK(collective_extrapolation_note(p, s).find("tp group has 16") != std::string::npos);
  // A profile without the table (every profile measured before it) says nothing.
  HardwareProfile without = default_profile(gpu_by_name("H100-SXM"));
  without.collective_groups.clear();  // the shipped H100 profile has one (calib20: 2 and 4 GPUs)
  CHECK(collective_extrapolation_note(without, s).empty());
  // The shipped H100 profile measured groups of 2 and 4: a tp group of 16 extrapolates.
  CHECK(collective_extrapolation_note(default_profile(gpu_by_name("H100-SXM")), s).find("tp group has 16") !=
        std::string::npos);
}

TEST_CASE("the collective table round-trips through JSON; profiles without it read as before", "[collective_groups]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  const HardwareProfile p = h100_with(two_sizes());
  const HardwareProfile back = profile_from_json(profile_to_json(p), default_profile(gpu));
  CHECK(back.collective_groups == p.collective_groups);
  CHECK(back.largest_measured_group() == 4);
  // A file with its own collective figures and no table: its figures stand
  // for every size, not the base's table.
  json old = {{"nvlink_efficiency", 0.7}};
  CHECK(profile_from_json(old, p).collective_groups.empty());
  CHECK(profile_from_json(json{{"gemm_efficiency", 0.7}}, p).collective_groups.size() == 2);
  // Bad entries are refused, naming the entry.
  auto refused = [&](const std::function<void(json&)>& edit) {
    json j = profile_to_json(p);
    edit(j["collective_groups"]);
    try {
      (void)profile_from_json(j, default_profile(gpu));
    } catch (const InputError&) {
      return true;
    }
    return false;
  };
  CHECK(refused([](json& t) { t[0]["all_reduce_efficiency"] = 1.5; }));
  CHECK(refused([](json& t) { t[1]["group_size"] = 2; }));  // not ascending
  CHECK(refused([](json& t) { t[0].erase("base_latency_seconds"); }));
  CHECK(refused([](json& t) { t[0]["link"] = "infiniband"; }));
  CHECK(refused([](json& t) { t[0]["comm_slowdown_beside_compute"] = 0.5; }));
  CHECK(refused([](json& t) { t[0]["extra"] = 1; }));
}

TEST_CASE("a ring inside a node runs at its group size's rate and latency; across nodes it does not",
          "[collective_groups]") {
  const HardwareProfile p = h100_with(two_sizes());
  const ClusterSpec node8 = parse_cluster("8xH100-SXM");
  const Topology topo(node8, p);
  // NVSwitch, NVLink4 450 GB/s per direction: a ring of g GPUs moves
  // 2 (g-1)/g S over each GPU's link. 4 GPUs at 0.8: from 64 to 256 MiB the
  // all-reduce adds 1.5 x (S1 - S0) / 360e9 = 0.83886 ms. (At both sizes the
  // ring beats the tree, whose fewer hops win only below a few MB.)
  const double S0 = 67108864, S1 = 268435456;
  const GroupLink g4 = topo.ring(blocks(8, 4), 0);
  CHECK(g4.base_latency_seconds == 20e-6);
  CHECK(all_reduce_seconds(S1, g4, 99) - all_reduce_seconds(S0, g4, 99) == Approx(1.5 * (S1 - S0) / 360e9));
  CHECK(all_reduce_seconds(S1, g4, 99) - all_reduce_seconds(S0, g4, 99) == Approx(838.86e-6).epsilon(1e-5));
  CHECK(g4.reduce_scatter_relative == Approx(0.8));
  CHECK(g4.broadcast_relative == Approx(1.2));
  // The launch latency is the group's, whatever the caller passes.
  const GroupLink g2 = topo.ring(blocks(8, 2), 0);
  CHECK(all_reduce_seconds(S0, g2, 0) == Approx(all_reduce_seconds(S0, g2, 1.0)));
  // 2 GPUs at 0.6: (S1 - S0) / 270e9.
  CHECK(all_reduce_seconds(S1, g2, 0) - all_reduce_seconds(S0, g2, 0) == Approx((S1 - S0) / 270e9));
  // 8 GPUs: beyond the table, at the 4-GPU rate: 1.75 x (S1 - S0) / 360e9.
  const GroupLink g8 = topo.ring(blocks(8, 8), 0);
  CHECK(all_reduce_seconds(S1, g8, 0) - all_reduce_seconds(S0, g8, 0) == Approx(1.75 * (S1 - S0) / 360e9));
  // The same profile without the table prices the ring at nvlink_efficiency.
  HardwareProfile plain = p;
  plain.collective_groups.clear();
  const GroupLink p4 = Topology(node8, plain).ring(blocks(8, 4), 0);
  CHECK(p4.base_latency_seconds < 0);
  CHECK(all_reduce_seconds(S1, p4, 0) - all_reduce_seconds(S0, p4, 0) ==
        Approx(1.5 * (S1 - S0) / (450e9 * plain.nvlink_efficiency)));
  // Across nodes: the table is of rings inside a node; the network's figures stand.
  const Topology two_nodes(parse_cluster("2x8xH100-SXM"), p);
  const GroupLink across = two_nodes.ring({{0, 8}}, 0);
  CHECK(across.nodes == 2);
  CHECK(across.base_latency_seconds < 0);
}

TEST_CASE("calibrate fits the collective table per group size from the slopes (hand numbers, 4 H100s)",
          "[collective_groups]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = {{"format", "planner-calibration"}, {"device", "cuda"}, {"ranks", 4}, {"quick", false},
            {"created", "2026-01-01T00:00:00Z"}, {"machine", {{"gpu_name", "NVIDIA H100 80GB HBM3"}}}};
  // All-reduce from 64 to 256 MiB (the ring at both sizes): over 2 GPUs at 0.6
  // of 450 GB/s the slope is (S1 - S0) / 270e9; over 4 at 0.75, 1.5 (S1 - S0)
  // / 337.5e9. All-gather over 4 at 0.6 of the link: 0.75 (S1 - S0) / 270e9.
  const double S0 = 67108864, S1 = 268435456;
  struct Row {
    const char* op;
    int g;
    double t0, slope;
  };
  // At 64 MiB: 300 us over 2 GPUs (S0 / 270e9 = 248.5 us of transfer, the
  // rest hops and launch), 350 us over 4 (298.3 us of transfer).
  const Row rows[] = {{"all_reduce", 2, 300e-6, (S1 - S0) / 270e9},
                      {"all_reduce", 4, 350e-6, 1.5 * (S1 - S0) / 337.5e9},
                      {"all_gather", 4, 220e-6, 0.75 * (S1 - S0) / 270e9}};
  m["collectives"] = json::array();
  for (const Row& r : rows)
    for (const double S : {S0, S1})
      m["collectives"].push_back({{"op", r.op}, {"backend", "nccl"}, {"group_size", r.g}, {"groups", 4 / r.g},
                                  {"bytes", S}, {"seconds", S == S0 ? r.t0 : r.t0 + r.slope}});
  m["compute_beside_comm"] = json::array(
      {{{"op", "all_reduce"}, {"group_size", 2}, {"slowdown", 1.05}, {"comm_slowdown", 1.5}},
       {{"op", "all_gather"}, {"group_size", 2}, {"slowdown", 1.15}, {"comm_slowdown", 2.5}},
       {{"op", "all_reduce"}, {"group_size", 4}, {"slowdown", 1.2}, {"comm_slowdown", 4.0}}});
  const HardwareProfile p = fit_profile(m, &gpu);
  REQUIRE(p.collective_groups.size() == 2);
  const Group& a = p.collective_groups[0];
  const Group& b = p.collective_groups[1];
  CHECK(a.group_size == 2);
  CHECK(a.all_reduce_efficiency == Approx(0.6).epsilon(1e-9));
  CHECK(b.all_reduce_efficiency == Approx(0.75).epsilon(1e-9));
  CHECK(b.all_gather_efficiency == Approx(0.6).epsilon(1e-9));
  // Not measured: the all-reduce's rate times the single figure's relative (1).
  CHECK(b.reduce_scatter_efficiency == Approx(0.75).epsilon(1e-9));
  // The largest group's entry is the single figures.
  CHECK(p.nvlink_efficiency == Approx(b.all_reduce_efficiency));
  CHECK(p.collective_base_latency_seconds == Approx(b.base_latency_seconds));
  // Slowdowns: each size's median (2 GPUs: of 1.05 and 1.15).
  CHECK(a.compute_slowdown_beside_comm == Approx(1.1));
  CHECK(a.comm_slowdown_beside_compute == Approx(2.0));
  CHECK(b.compute_slowdown_beside_comm == Approx(1.2));
  CHECK(b.comm_slowdown_beside_compute == Approx(4.0));
  // The model with the fitted table gives back each size's measured times.
  const Topology topo(parse_cluster("4xH100-SXM"), p);
  for (const Row& r : rows) {
    const GroupLink gl = topo.ring(blocks(4, r.g), 0);
    auto model = [&](double S) {
      return std::string(r.op) == "all_reduce" ? all_reduce_seconds(S, gl, p.collective_base_latency_seconds)
                                               : all_gather_seconds(S, gl, p.collective_base_latency_seconds);
    };
    CHECK(model(S1) - model(S0) == Approx(r.slope).epsilon(1e-9));
    if (std::string(r.op) == "all_reduce") CHECK(model(S0) == Approx(r.t0).epsilon(1e-6));
  }
  // Points beside the runtime's layers take the place of the GEMM loop's where
  // a size has them (4 GPUs here: median of 1.3 and 1.5, and of 5 and 7); a
  // size without them keeps the loop's; the single figures follow the layers'.
  {
    json ml = m;
    ml["compute_beside_comm"].push_back(
        {{"op", "all_reduce"}, {"payload", "layers"}, {"group_size", 4}, {"slowdown", 1.3}, {"comm_slowdown", 5.0}});
    ml["compute_beside_comm"].push_back(
        {{"op", "reduce_scatter"}, {"payload", "layers"}, {"group_size", 4}, {"slowdown", 1.5}, {"comm_slowdown", 7.0}});
    ml["compute_beside_comm"].push_back(
        {{"op", "all_reduce"}, {"payload", "layers_time"}, {"group_size", 4}, {"slowdown", 2.5}, {"comm_slowdown", 9.0}});
    CHECK(contention_points(ml, 4).size() == 2);  // not the diagnosis
    CHECK(contention_points(ml, 2).size() == 2);  // the loop's
    CHECK(contention_points(ml, 0).size() == 2);  // every size: the layers' only
    const HardwareProfile pl = fit_profile(ml, &gpu);
    REQUIRE(pl.collective_groups.size() == 2);
    CHECK(pl.collective_groups[0].compute_slowdown_beside_comm == Approx(1.1));
    CHECK(pl.collective_groups[1].compute_slowdown_beside_comm == Approx(1.4));
    CHECK(pl.collective_groups[1].comm_slowdown_beside_compute == Approx(6.0));
    CHECK(pl.compute_slowdown_beside_comm == Approx(1.4));
    CHECK(pl.comm_slowdown_beside_compute == Approx(6.0));
  }
  // The fit is stated in the profile and its table printed.
  CHECK(p.calibration->at("fits").contains("collective_groups"));
  CHECK(calibration_table(p).find("   2 GPUs (nvlink): all-reduce 0.600") != std::string::npos);
}

TEST_CASE("calibrate fits the network link from send/recv between nodes (hand numbers, 2 nodes of 2 H100s)",
          "[collective_groups]") {
  const GpuSpec gpu = gpu_by_name("H100-SXM");
  json m = {{"format", "planner-calibration"}, {"device", "cuda"}, {"ranks", 4}, {"nodes", 2},
            {"node_of_rank", {0, 0, 1, 1}}, {"quick", false}, {"created", "2026-01-01T00:00:00Z"},
            {"machine", {{"gpu_name", "NVIDIA H100 80GB HBM3"}}}};
  // Rank i of node 0 sends to rank i of node 1, both pairs at once, over TCP
  // sockets at 5 GB/s each: from 64 to 256 MiB, 192 MiB / 5e9 = 40.27 ms more.
  const double S0 = 67108864, S1 = 268435456, rate = 5e9;
  m["collectives"] = json::array();
  for (const double S : {S0, S1})
    m["collectives"].push_back({{"op", "send_recv"}, {"backend", "nccl"}, {"group_size", 2}, {"groups", 2},
                                {"nodes", 2}, {"pair", "across_nodes"}, {"bytes", S}, {"seconds", 1e-3 + S / rate}});
  const ClusterSpec cluster = calibration_cluster(m, gpu);
  CHECK(cluster.nodes == 2);
  CHECK(cluster.gpus_per_node == 2);
  const HardwareProfile p = fit_profile(m, &gpu);
  // Each node's two pairs leave through its two 400 Gb/s NICs, one pair's
  // worth on each: 5 GB/s of 50 is an efficiency of 0.1.
  CHECK(p.network_efficiency == Approx(0.1).epsilon(1e-9));
  const GroupLink gl = Topology(cluster, p).p2p({{0, 2}, {1, 3}}, 0);
  CHECK(gl.nodes == 2);
  CHECK(send_recv_seconds(S1, gl, 0) - send_recv_seconds(S0, gl, 0) == Approx((S1 - S0) / rate));
  CHECK(p.calibration->at("fits").contains("network_efficiency"));
  // No pairs across nodes: the datasheet figure stays.
  m["collectives"] = json::array();
  CHECK(fit_profile(m, &gpu).network_efficiency == datasheet_profile(gpu).network_efficiency);
}

TEST_CASE("a plan's step with the table equals the step with single figures set to its group size's entry",
          "[collective_groups]") {
  // dp=2 ZeRO-1 on 2 H100s: every collective is over the dp group of 2, so a
  // table whose 2-GPU entry differs from the single figures must predict what
  // the single figures set to that entry predict (rates, latency and both
  // slowdowns), and differ from the single figures as they were.
  PlanRequest req;
  req.model = "gpt2-xl", req.gpus = "2xH100-SXM", req.strategy = "dp=2,zero=1,mbs=4,gas=2,precision=bf16";
  const Plan plan = build_plan(req);
  HardwareProfile single = default_profile(plan.cluster.gpu);
  single.collective_groups.clear();
  const Group e{2, false, single.nvlink_efficiency * 0.5, single.nvlink_efficiency * 0.4,
                single.nvlink_efficiency * 0.45, single.nvlink_efficiency * 0.6, 3e-5, 1.25, 4.0};
  HardwareProfile table = single;
  table.collective_groups = {e};
  HardwareProfile set = single;
  set.nvlink_efficiency = e.all_reduce_efficiency;
  set.reduce_scatter_relative = 0.8, set.all_gather_relative = 0.9, set.broadcast_relative = 1.2;
  set.collective_base_latency_seconds = e.base_latency_seconds;
  set.compute_slowdown_beside_comm = e.compute_slowdown_beside_comm;
  set.comm_slowdown_beside_compute = e.comm_slowdown_beside_compute;
  const double with_table = predict(plan, table).step_seconds;
  CHECK(with_table == Approx(predict(plan, set).step_seconds).epsilon(1e-12));
  CHECK(with_table > predict(plan, single).step_seconds);
  // The same for tensor parallelism over the pair (its collectives between GEMMs).
  req.model = "gpt-neo-1.3b", req.strategy = "tp=2,sp=1,mbs=4,gas=4,precision=bf16";
  const Plan tp = build_plan(req);
  CHECK(predict(tp, table).step_seconds == Approx(predict(tp, set).step_seconds).epsilon(1e-12));
  CHECK(predict(tp, table).step_seconds > predict(tp, single).step_seconds);
}

// Communication over the topology graph: the bottleneck a group sees, with the
// other groups of its kind running at the same time, and its effect on a step.
#include "catch.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/predict_detail.hpp"
#include "costmodel/topology.hpp"
#include "test_util.hpp"

using namespace planner;

namespace {

using test_util::blocks;

}  // namespace

TEST_CASE("NVSwitch: a node's ring runs at the NVLink rate", "[time]") {
  const ClusterSpec c = resolve_cluster("8xA100-80GB");
  const HardwareProfile p = default_profile(c.gpu);
  const Topology t(c, p);
  const double nvlink = c.gpu_link.bandwidth_Bps * p.nvlink_efficiency;
  for (int tp : {2, 4, 8}) {
    const GroupLink l = t.ring(blocks(8, tp), 0);
    CHECK(l.size == tp);
    CHECK(l.nodes == 1);
    CHECK(l.bandwidth_Bps() == Approx(nvlink));
  }
  // Ring all-reduce of S over 8 GPUs: 2 (n-1)/n S / B plus latencies.
  const GroupLink l = t.ring(blocks(8, 8), 0);
  const double S = 1e9;
  CHECK(all_reduce_seconds(S, l, 0) == Approx(2.0 * 7 / 8 * S / nvlink + 14 * l.hop_latency_seconds));
}

TEST_CASE("across nodes: data-parallel groups of one GPU per node share the node's NICs", "[time]") {
  const ClusterSpec c = resolve_cluster("2x8xA100-80GB");
  const HardwareProfile p = default_profile(c.gpu);
  const Topology t(c, p);
  // tp = 8: DP groups {i, 8 + i}, all eight at once; each GPU leaves through the
  // NICs on its PCIe switch, so the slower of its PCIe link and its NIC limits it.
  std::vector<std::vector<int>> dp;
  for (int i = 0; i < 8; ++i) dp.push_back({i, 8 + i});
  const GroupLink l = t.ring(dp, 0);
  CHECK(l.nodes == 2);
  const double expect = std::min(c.pcie.bandwidth_Bps * p.pcie_efficiency, c.network.bandwidth_Bps * p.network_efficiency);
  CHECK(l.bandwidth_Bps() == Approx(expect));
  // One group of all 16 GPUs (tp = 1): NCCL's rings leave each node through every
  // GPU's PCIe link and every NIC, so the crossing is 8 links wide.
  const GroupLink all = t.ring({blocks(16, 16)}, 0);
  CHECK(all.bandwidth_Bps() == Approx(std::min(c.gpu_link.bandwidth_Bps * p.nvlink_efficiency, 8 * expect)));
  CHECK(all.bandwidth_Bps() > 4 * l.bandwidth_Bps());
}

TEST_CASE("NVLink bridge vs PCIe: the same strategy costs more without NVLink", "[time]") {
  ClusterSpec nv = resolve_cluster("2xRTX3090");
  REQUIRE(nv.intra == IntraNode::NVLinkPairs);
  ClusterSpec pcie = nv;
  pcie.intra = IntraNode::PCIe;
  pcie.gpu_link = pcie.pcie;
  const HardwareProfile p = default_profile(nv.gpu);
  const GroupLink a = Topology(nv, p).p2p({{0, 1}}, 0), b = Topology(pcie, p).p2p({{0, 1}}, 0);
  CHECK(a.bandwidth_Bps() == Approx(nv.gpu_link.bandwidth_Bps * p.nvlink_efficiency));
  CHECK(b.bandwidth_Bps() == Approx(pcie.pcie.bandwidth_Bps * p.pcie_efficiency));
  Plan plan;
  plan.model = resolve_model("gpt2-large");
  plan.seq = 1024;
  plan.strategy = Strategy::parse("dp=2,zero=1,mbs=4,gas=4");
  plan.global_batch = 32;
  plan.cluster = nv;
  const double t_nv = predict(plan, p).step_seconds;
  plan.cluster = pcie;
  const double t_pcie = predict(plan, p).step_seconds;
  CHECK(t_pcie > t_nv);
}

TEST_CASE("host copies: GPUs behind one PCIe switch share its uplink", "[time]") {
  const ClusterSpec c = resolve_cluster("8xA100-80GB");
  const Topology t(c, default_profile(c.gpu));
  CHECK(t.host_copy_Bps(1) == Approx(c.pcie.bandwidth_Bps));
  CHECK(t.host_copy_Bps(8) == Approx(c.pcie.bandwidth_Bps / 2));  // two GPUs per switch
}

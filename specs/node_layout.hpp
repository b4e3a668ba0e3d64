#pragma once
// The one fact about a node's PCIe layout that the cluster's own validation
// needs: how many paths a collective across nodes routes through shared NICs.
// The layout is the topology model's (costmodel/topology.cpp builds it: from 4
// GPUs on, PCIe switches of two GPUs, the last alone when the count is odd;
// NIC k on switch k * switches / nics; under 4 GPUs everything hangs off the
// CPU's root complex). The count lives here, beneath the cost model, because
// ClusterSpec::validate bounds it (docs/ARCHITECTURE.md, "Input limits") and
// the spec types must not depend on the cost model (the runtime reads them).
#include <cstdint>

namespace planner {

// A GPU whose PCIe switch has no NIC sends across nodes through every equally
// near NIC of its node, so a collective across nodes routes (such GPUs) x
// (NICs) paths per node; this is that product.
int64_t shared_nic_routes(int gpus_per_node, int nics_per_node);

}  // namespace planner

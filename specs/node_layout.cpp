#include "specs/node_layout.hpp"

#include <algorithm>

namespace planner {

int64_t shared_nic_routes(int gpus_per_node, int nics_per_node) {
  const int64_t g = std::max(1, gpus_per_node), nics = std::max(1, nics_per_node);
  if (g < 4) return g * nics;  // GPUs and NICs all on the CPU's root complex
  // As costmodel/topology.cpp builds the node: switches of two GPUs (the last
  // one alone when g is odd), NIC k on switch k * switches / nics.
  const int64_t switches = (g + 1) / 2;
  if (nics >= switches) return 0;
  int64_t with_nic = 0, last = -1;
  for (int64_t k = 0; k < nics; ++k)
    if (const int64_t s = k * switches / nics; s != last) with_nic += (s == switches - 1 && g % 2) ? 1 : 2, last = s;
  return (g - with_nic) * nics;
}

}  // namespace planner

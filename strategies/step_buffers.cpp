#include "strategies/step_buffers.hpp"

#include <algorithm>
#include <set>

namespace planner {

UnitBufferPeaks unit_buffer_peaks(const StepList& actions, const LayerPartition& part) {
  UnitBufferPeaks peak;
  std::set<int> gathered, gradients;
  auto layer = [&](int u) { return u > 0 && u < part.head_unit(); };
  for (const StepAction& a : actions) {
    if (!layer(a.unit)) continue;
    switch (a.op) {
      case StepOp::Gather:
        gathered.insert(a.unit);
        peak.gathered_layers = std::max(peak.gathered_layers, int(gathered.size()));
        break;
      case StepOp::Release: gathered.erase(a.unit); break;
      case StepOp::Backward:
        gradients.insert(a.unit);
        peak.gradient_layers = std::max(peak.gradient_layers, int(gradients.size()));
        break;
      case StepOp::Reduce:
        if (a.scatter) gradients.erase(a.unit);
        break;
      default: break;
    }
  }
  return peak;
}

}  // namespace planner

#include "strategies/search_space.hpp"

namespace planner {

std::vector<Strategy> enumerate_strategies(const SpaceLimits& limits) {
  std::vector<Strategy> out;
  for_each_strategy(limits, [&](const Strategy& s) { out.push_back(s); });
  return out;
}

int64_t count_strategies(const SpaceLimits& limits) {
  int64_t n = 0;
  for_each_strategy(limits, [&](const Strategy&) { ++n; });
  return n;
}

}  // namespace planner

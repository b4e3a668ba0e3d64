#include "strategies/partition.hpp"

#include <fmt/format.h>

#include "strategies/errors.hpp"

namespace planner {

std::vector<int> partition_layers(int64_t layers, int chunks) {
  if (chunks < 1) throw InputError(fmt::format("partition: {} virtual stages; need at least 1", chunks));
  if (layers < chunks)
    throw InputError(fmt::format("partition: {} layers cannot fill {} (virtual) pipeline stages", layers, chunks));
  // Even split (Megatron-LM's default). When the layers do not divide, the
  // extra layers go to the middle chunks first, because the first and the last
  // chunk already carry the embedding and the head.
  std::vector<int> out(size_t(chunks), int(layers / chunks));
  int rem = int(layers % chunks);
  std::vector<int> order;
  for (int c = 1; c + 1 < chunks; ++c) order.push_back(c);
  order.push_back(0);
  if (chunks > 1) order.push_back(chunks - 1);
  for (int i = 0; rem > 0; ++i, --rem) out[size_t(order[size_t(i) % order.size()])] += 1;
  return out;
}

LayerPartition::LayerPartition(int64_t layers, int pp, int vpp) : layers_(layers), pp_(pp), vpp_(vpp) {
  if (pp < 1 || vpp < 1) throw InputError(fmt::format("partition: pp={} and vpp={} must be at least 1", pp, vpp));
  chunk_layers_ = partition_layers(layers, pp * vpp);
  const int V = pp * vpp;
  first_unit_.assign(size_t(V) + 1, 0);
  int u = 0;
  for (int v = 0; v < V; ++v) {
    first_unit_[size_t(v)] = u;
    u += chunk_layers_[size_t(v)] + (v == 0 ? 1 : 0) + (v == V - 1 ? 1 : 0);
  }
  first_unit_[size_t(V)] = u;
}

std::pair<int, int> LayerPartition::units_of(int stage, int chunk) const {
  if (stage < 0 || stage >= pp_ || chunk < 0 || chunk >= vpp_)
    throw InputError(fmt::format("partition: no stage {} chunk {} (pp={}, vpp={})", stage, chunk, pp_, vpp_));
  const size_t v = size_t(chunk) * pp_ + stage;
  return {first_unit_[v], first_unit_[v + 1]};
}

std::vector<int> LayerPartition::stage_units(int stage) const {
  std::vector<int> out;
  for (int c = 0; c < vpp_; ++c) {
    auto [b, e] = units_of(stage, c);
    for (int u = b; u < e; ++u) out.push_back(u);
  }
  return out;
}

std::pair<int, int> LayerPartition::owner(int unit) const {
  if (unit < 0 || unit >= units()) throw InputError(fmt::format("partition: no unit {}", unit));
  const int V = pp_ * vpp_;
  for (int v = 0; v < V; ++v)
    if (unit < first_unit_[size_t(v) + 1]) return {v % pp_, v / pp_};
  return {pp_ - 1, vpp_ - 1};
}

}  // namespace planner

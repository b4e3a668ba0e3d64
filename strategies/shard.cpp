#include "strategies/shard.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "strategies/errors.hpp"

namespace planner {

Shard shard(int64_t numel, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world || numel < 0)
    throw InputError(fmt::format("shard: bad arguments numel={}, rank={}, world={}", numel, rank, world));
  // Equal chunks of ceil(numel / world), the last ones short (or empty): the
  // layout of NCCL's and MPI's reduce-scatter and all-gather over a buffer
  // padded to world * chunk, so the runtime's collectives and this function
  // agree on who owns what.
  const int64_t chunk = (numel + world - 1) / world;
  const int64_t offset = std::min(numel, rank * chunk);
  return {offset, std::min(chunk, numel - offset)};
}

int64_t padded_shard_size(int64_t numel, int world) {
  if (world < 1) throw InputError("shard: world must be at least 1");
  return (numel + world - 1) / world;
}

}  // namespace planner

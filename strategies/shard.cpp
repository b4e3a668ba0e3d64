#include "strategies/shard.hpp"

#include <fmt/format.h>

#include "strategies/errors.hpp"

namespace planner {

Shard shard(int64_t numel, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world || numel < 0)
    throw InputError(fmt::format("shard: bad arguments numel={}, rank={}, world={}", numel, rank, world));
  const int64_t base = numel / world, extra = numel % world;
  const int64_t size = base + (rank < extra ? 1 : 0);
  const int64_t offset = rank * base + (rank < extra ? rank : extra);
  return {offset, size};
}

int64_t padded_shard_size(int64_t numel, int world) {
  if (world < 1) throw InputError("shard: world must be at least 1");
  return (numel + world - 1) / world;
}

}  // namespace planner

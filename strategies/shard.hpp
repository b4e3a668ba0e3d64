#pragma once
// The one sharding function, used by the memory model (ZeRO's per-rank state)
// and by the runtime's ZeRO optimizer (which slice of each unit's flat buffer a
// rank owns). Contiguous chunks of ceil(numel / world) elements in rank order,
// the last ones shorter (or empty): exactly the chunks that reduce-scatter and
// all-gather use on a buffer padded to world * ceil(numel / world), so no
// variable-size collective is needed. Rank 0 holds the largest shard.
#include <cstdint>

namespace planner {

struct Shard {
  int64_t offset = 0;
  int64_t size = 0;
  bool operator==(const Shard&) const = default;
};

Shard shard(int64_t numel, int rank, int world);

// The padded per-rank size NCCL's reduce-scatter/all-gather need (equal
// chunks): ceil(numel / world).
int64_t padded_shard_size(int64_t numel, int world);

}  // namespace planner

#pragma once
// The one sharding function, used by the memory model (ZeRO's per-rank state)
// and by the runtime's ZeRO optimizer (which slice of the flat buffers a rank
// owns). Contiguous, balanced: the first numel % world ranks get one extra
// element, so sizes differ by at most one and the shards tile [0, numel).
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

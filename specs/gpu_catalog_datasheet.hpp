#pragma once
// The GPU catalog's datasheet-only entries: GPUs this project has not
// measured (gpu_catalog.cpp builds the rest and appends these); prediction
// only where not CUDA.
#include <cstdint>
#include <vector>

#include "specs/cluster_spec.hpp"

namespace planner {
// GPU memory a process can allocate where nobody measured it: the datasheet's
// GiB less a stated margin (gpu_catalog.cpp), rounded down to MiB.
int64_t datasheet_capacity(double gib);
void add_datasheet_gpus(std::vector<GpuSpec>& c);
}  // namespace planner

#pragma once
// The second half of the GPU catalog (gpu_catalog.cpp builds the first and
// appends these): datasheet-only entries, prediction only where not CUDA.
#include <vector>

#include "costmodel/cluster_spec.hpp"

namespace planner {
void add_datasheet_gpus(std::vector<GpuSpec>& c);
}  // namespace planner

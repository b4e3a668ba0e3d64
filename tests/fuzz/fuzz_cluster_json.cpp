// Cluster JSON files (--gpus cluster.json), through resolve_cluster.
#include "specs/cluster_spec.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  fuzz::expect_value_or_input_error([&] {
    const ClusterSpec c = resolve_cluster(path);
    if (c.world() < 1) fuzz::finding("an accepted cluster without GPUs");
  });
  return 0;
}

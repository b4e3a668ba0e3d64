// Cluster spec strings (--gpus 2xRTX3090, 128x8xH100, a list for plan).
#include "specs/cluster_spec.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec = fuzz::text_of(data, size);
  if (spec.find(".json") != std::string::npos) return 0;  // a file path: fuzz_cluster_json's job
  fuzz::expect_value_or_input_error([&] {
    const ClusterSpec c = parse_cluster(spec);
    c.validate();
    if (c.world() < 1) fuzz::finding("an accepted cluster without GPUs");
  });
  return 0;
}

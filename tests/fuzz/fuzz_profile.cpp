// Hardware profile files (--profile profile.json), through load_profile over
// the defaults of one GPU of each kind of node (datacenter, consumer).
#include "specs/cluster_spec.hpp"
#include "costmodel/hardware_profile.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  const GpuSpec& gpu = gpu_by_name(size % 2 ? "H100" : "RTX3090");
  fuzz::expect_value_or_input_error([&] {
    const HardwareProfile p = load_profile(path, gpu);
    if (!(p.gemm_flops(Precision::BF16) >= 0) || !(p.memory_Bps() > 0)) fuzz::finding("an accepted profile without speed");
  });
  return 0;
}

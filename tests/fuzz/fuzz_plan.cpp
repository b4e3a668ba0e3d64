// plan.json (--plan, export, exec), through load_plan, then the checks every
// command applies (check_compat) and the memory model, which must not report
// a negative size for an accepted plan.
#include "costmodel/compat.hpp"
#include "costmodel/memory_model.hpp"
#include "specs/plan.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  fuzz::expect_value_or_input_error([&] {
    const Plan p = load_plan(path);
    check_compat(p);
    const MemoryReport m = estimate_memory(p);
    if (m.per_gpu_peak_bytes < 0 || m.host_peak_bytes < 0) fuzz::finding("negative memory for an accepted plan");
  });
  return 0;
}

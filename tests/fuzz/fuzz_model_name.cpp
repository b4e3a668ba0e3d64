// Model preset and family names (--model NAME, max-model --family NAME).
#include "specs/model_spec.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = fuzz::text_of(data, size);
  fuzz::expect_value_or_input_error([&] {
    const ModelSpec m = model_preset(name);
    m.validate();
    if (m.total_params() <= 0) fuzz::finding("a preset with no parameters");
  });
  fuzz::expect_value_or_input_error([&] {
    for (const ModelSpec& m : model_family(name)) m.validate();
  });
  return 0;
}

// A model file given to --model: a Hugging Face config.json or the planner's
// own ModelSpec JSON (as plan files hold it), through resolve_model.
#include "specs/model_spec.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  fuzz::expect_value_or_input_error([&] {
    const ModelSpec m = resolve_model(path);
    m.validate();
    if (m.total_params() <= 0) fuzz::finding("an accepted model with no parameters");
  });
  return 0;
}

// Strategy strings (--strategy dp=2,zero=1,mbs=4). An accepted strategy must
// survive its canonical text form unchanged.
#include "strategies/strategy.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = fuzz::text_of(data, size);
  fuzz::expect_value_or_input_error([&] {
    const Strategy s = Strategy::parse(text);
    if (Strategy::parse(s.to_string()) != s) fuzz::finding("parse(to_string(s)) != s");
    s.validate();
    if (s.world() < 1 || s.global_batch() < 1) fuzz::finding("a valid strategy without GPUs or sequences");
  });
  return 0;
}

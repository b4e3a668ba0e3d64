// Strategy JSON (the "strategy" field of plan.json: an object or the text
// form). An accepted strategy must survive its JSON form unchanged.
#include <nlohmann/json.hpp>

#include "strategies/parse_util.hpp"
#include "strategies/strategy.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using namespace planner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_value_or_input_error([&] {
    const nlohmann::json j = parse_json_text(fuzz::text_of(data, size), "strategy", "input");
    const Strategy s = j.get<Strategy>();
    if (nlohmann::json(s).get<Strategy>() != s) fuzz::finding("a strategy changed through its JSON form");
    s.validate();
  });
  return 0;
}

// Regression tests for what the libFuzzer targets (tests/fuzz, scripts/fuzz.sh)
// found: each input that crashed a target, or made it throw anything but an
// InputError, is replayed here through the same loader, reduced to its cause.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "catch.hpp"
#include "specs/cluster_spec.hpp"
#include "costmodel/hardware_profile.hpp"
#include "specs/model_spec.hpp"
#include "specs/plan.hpp"
#include "strategies/parse_util.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;
using test_util::error_of;

namespace {

// Writes `text` to a file of this process under the temporary folder and
// removes it when the test is done.
struct TempJson {
  std::string path;
  explicit TempJson(const std::string& text, const std::string& stem = "input") {
    path = (std::filesystem::temp_directory_path() / fmt::format("planner-fuzz-{}-{}.json", stem, getpid())).string();
    std::ofstream(path) << text;
  }
  ~TempJson() { std::filesystem::remove(path); }
};

}  // namespace

// fuzz_cluster_json, fuzz_hf_config, fuzz_profile (first smoke run): a number
// beyond a double's range is valid JSON syntax, but nlohmann::json throws
// out_of_range.406 for it, which the loaders did not catch (only parse_error):
// "bad JSON input" from main() instead of the file's name.
TEST_CASE("fuzz finding: a JSON number beyond a double's range is an InputError naming the file", "[fuzz]") {
  {
    TempJson f(R"({"gd_ar3$bucket_bytes": 1e+370})", "profile");
    const std::string msg = error_of([&] { load_profile(f.path, gpu_by_name("H100")); });
    CHECK(contains(msg, f.path));
    CHECK(contains(msg, "1e+370"));
  }
  {
    TempJson f(R"({"nodes": 1, "gpus_per_node": 0.806467913087e4179, "gpu": "H100"})", "cluster");
    const std::string msg = error_of([&] { resolve_cluster(f.path); });
    CHECK(contains(msg, f.path));
    CHECK(contains(msg, "number overflow"));
  }
  {
    TempJson f(R"({"model_type": "gpt2", "n_layer": 1e705})", "config");
    const std::string msg = error_of([&] { resolve_model(f.path); });
    CHECK(contains(msg, f.path));
    CHECK(contains(msg, "1e705"));
  }
  {
    TempJson f(R"({"format": "planner-plan", "version": 1, "seq": -1e999})", "plan");
    CHECK(contains(error_of([&] { load_plan(f.path); }), "not valid JSON"));
  }
  CHECK(contains(error_of([] { parse_json_text("[1e400]", "strategy", "input"); }), "strategy: input is not valid JSON"));
}

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

// Issue 29: a value nested 150,000 deep in any field crashed every command
// (nlohmann's dump() recursed into the error message, and copies recurse too).
// Every JSON input is now refused past kMaxJsonDepth levels when read, naming
// the field, and json_excerpt quotes a value without recursing past its limit.
TEST_CASE("deep JSON nesting is refused when read, naming the field", "[fuzz][hardening]") {
  const std::string deep = std::string(150000, '[') + std::string(150000, ']');
  {
    const std::string msg = error_of([&] { parse_json_text(R"({"strategy": {"dp": )" + deep + "}}", "plan", "'p.json'"); });
    CHECK(contains(msg, "plan: 'p.json': field 'strategy.dp[0][0]"));
    CHECK(contains(msg, "at most 64"));
    CHECK(msg.size() < 600);
  }
  {
    TempJson f(R"({"model_type": "gpt2", "n_layer": )" + deep + "}", "config");
    const std::string msg = error_of([&] { resolve_model(f.path); });
    CHECK(contains(msg, f.path));
    CHECK(contains(msg, "'n_layer[0]"));
  }
  // At the limit: read; one level more: refused (64 arrays, then 65).
  CHECK_NOTHROW(parse_json_text(std::string(64, '[') + std::string(64, ']'), "x", "y"));
  CHECK(contains(error_of([] { parse_json_text(std::string(65, '[') + std::string(65, ']'), "x", "y"); }),
                 "nested more than 64 levels"));
  // Objects count as levels too, and the path names their keys.
  std::string objs;
  for (int i = 0; i < 70; ++i) objs += R"({"k":)";
  objs += "1" + std::string(70, '}');
  CHECK(contains(error_of([&] { parse_json_text(objs, "x", "y"); }), "field 'k.k.k.k"));
}

TEST_CASE("json_excerpt and clip quote at most ~200 bytes", "[hardening]") {
  // A value nested deeper than the parse limit can still reach an excerpt
  // when built in code: it is cut, never recursed through.
  nlohmann::json v = nlohmann::json::array();
  nlohmann::json* innermost = &v;
  for (int i = 0; i < 100000; ++i) {
    innermost->push_back(nlohmann::json::array());
    innermost = &innermost->back();
  }
  const std::string e = json_excerpt(v);
  CHECK(e.rfind("[[[[", 0) == 0);
  CHECK(e.size() <= 230);
  CHECK(contains(e, "bytes)"));
  CHECK(json_excerpt(nlohmann::json{{"a", 1}, {"b", "x"}}) == R"({"a":1,"b":"x"})");
  CHECK(json_excerpt(nlohmann::json(std::string(5000, 'z'))).size() < 230);
  CHECK(clip("short") == "short");
  const std::string big(130000, 'a');
  CHECK(clip(big) == std::string(200, 'a') + "... (130000 bytes)");
  // A cut never splits a UTF-8 character: 199 ASCII bytes, then a 2-byte one.
  CHECK(clip(std::string(199, 'a') + "\xc3\xa9" + "tail") == std::string(199, 'a') + "... (205 bytes)");
  CHECK(valid_utf8("m\xff\xfe.json") == "m??.json");
  CHECK(valid_utf8("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(valid_utf8("\xc0\xaf") == "??");  // an overlong '/'
}

// `planner exec` on the CPU, its two halves as the CLI joins them: the
// runtime's run_plan (run and measure) and the planner's make_exec_report
// (prediction beside measurement): a tiny plan end to end, the result
// document, and refusals of bad input (InputError -> exit code 2 in the CLI).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "specs/cluster_spec.hpp"
#include "specs/plan.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "costmodel/predict.hpp"
#include "planner/exec_report.hpp"
#include "runtime/exec.hpp"
#include "runtime/exec_launch.hpp"
#include "strategies/errors.hpp"

using namespace planner;
namespace fs = std::filesystem;

namespace {

fs::path temp_path() { return fs::temp_directory_path() / ("planner-rt-test-" + std::to_string(::getpid())); }

fs::path temp_dir() {
  fs::path d = temp_path();
  fs::create_directories(d);
  return d;
}

// Each test case removes the (flat) directory when it ends, with
// rt::remove_flat_dir: fs::remove_all, linked beside the CUDA build of
// LibTorch, resolves into libtorch.so and calls a null pointer (SIGSEGV on the
// GPU machine: validation/h200/window60, validation/h200/segv61).
struct RemoveTempDir {
  RemoveTempDir() = default;
  RemoveTempDir(const RemoveTempDir&) = delete;
  RemoveTempDir& operator=(const RemoveTempDir&) = delete;
  ~RemoveTempDir() { rt::remove_flat_dir(temp_path().string()); }
};

Plan tiny_plan() {
  Plan p;
  p.model.name = "tiny-gpt";
  p.model.layers = 2, p.model.hidden = 32, p.model.heads = 4, p.model.kv_heads = 4, p.model.ffn = 128;
  p.model.vocab = 128, p.model.max_positions = 64;
  p.cluster = parse_cluster("H100");
  p.strategy = Strategy::parse("dp=1,tp=1,pp=1,mbs=2,gas=2,precision=fp32,ckpt=full");
  p.seq = 32;
  p.global_batch = 4;
  return p;
}

std::string write_plan(const Plan& p, const std::string& name) {
  auto path = (temp_dir() / name).string();
  save_plan(p, path);
  return path;
}

rt::ExecOptions opts(const std::string& plan) {
  rt::ExecOptions o;
  o.plan_path = plan;
  o.steps = 2;
  o.warmup = 1;
  o.device = "cpu";
  o.progress = false;
  return o;
}

// What planner/cmd_exec.cpp does with the two halves.
int run_exec(const rt::ExecOptions& o) {
  const rt::ExecRun r = rt::run_plan(o);
  if (!r.report) return r.exit_code;
  const ExecReport rep = make_exec_report(r.config.plan, predict(r.config.plan, o.profile_path), r.run);
  if (!o.output_path.empty()) write_file_atomically(o.output_path, rep.result.dump(2));
  return 0;
}

}  // namespace

TEST_CASE("exec: a tiny plan runs on the CPU and reports measured beside predicted", "[runtime][exec]") {
  const RemoveTempDir cleanup;
  const auto plan = write_plan(tiny_plan(), "tiny.json");
  const auto out = (temp_dir() / "result.json").string();
  fs::remove(out);
  auto o = opts(plan);
  o.output_path = out;
  CHECK(run_exec(o) == 0);
  REQUIRE(fs::exists(out));
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  CHECK(j["format"] == "planner-exec-result");
  CHECK(j["version"] == 1);
  CHECK(j["plan"]["seq"] == 32);
  const auto& m = j["measurement"];
  CHECK(m["device"] == "cpu");
  CHECK(m["params"] == tiny_plan().model.total_params());
  CHECK(m["step_seconds"]["all"].size() == 2);
  CHECK(m["losses"].size() == 3);
  CHECK(m["mfu"].is_null());
  CHECK(m["tokens_per_step"] == 4 * 32);
  const auto& cat = m["memory"]["categories"];
  const int64_t n = tiny_plan().model.total_params();
  CHECK(cat["parameters"] == 4 * n);
  CHECK(cat["gradients"] == 4 * n);
  CHECK(cat["optimizer_states"] == 8 * n);
  CHECK(cat["activations"].get<int64_t>() > 0);
  CHECK(cat["logits_loss"].get<int64_t>() > 0);
  CHECK(j["comparison"]["memory.parameters"]["measured"] == 4 * n);
  CHECK(j["comparison"].contains("step_seconds"));
  CHECK(j["machine"]["libtorch"].get<std::string>().size() > 0);
  CHECK(j["prediction"].contains("step_seconds"));
}

TEST_CASE("exec: bad input is refused with InputError and writes nothing", "[runtime][exec]") {
  const RemoveTempDir cleanup;
  const auto out = (temp_dir() / "never.json").string();
  fs::remove(out);
  SECTION("missing plan file") {
    auto o = opts((temp_dir() / "no-such-plan.json").string());
    o.output_path = out;
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  SECTION("malformed plan file") {
    auto path = (temp_dir() / "broken.json").string();
    std::ofstream(path) << "{\"format\": \"planner-plan\", \"version\": 1, \"model\": ";
    auto o = opts(path);
    o.output_path = out;
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  SECTION("not a plan") {
    auto path = (temp_dir() / "other.json").string();
    std::ofstream(path) << "{\"hello\": 1}";
    CHECK_THROWS_AS(run_exec(opts(path)), InputError);
  }
  SECTION("a plan that needs more ranks than this machine has cores, before anything starts") {
    Plan p = tiny_plan();
    p.strategy = Strategy::parse("dp=1024,mbs=1,gas=1,precision=fp32");
    p.global_batch = 1024;
    auto o = opts(write_plan(p, "dp1024.json"));
    o.device = "cpu";
    o.output_path = out;
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  SECTION("--steps 0") {
    auto o = opts(write_plan(tiny_plan(), "steps0.json"));
    o.steps = 0;
    o.output_path = out;
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  SECTION("an unreadable token file") {
    auto o = opts(write_plan(tiny_plan(), "tok.json"));
    o.tokens_path = (temp_dir() / "no-such-tokens.bin").string();
    o.output_path = out;
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  SECTION("a token file with an id outside the vocabulary") {
    auto tok = (temp_dir() / "bad-tokens.bin").string();
    {
      std::ofstream f(tok, std::ios::binary);
      for (int i = 0; i < 1000; ++i) {
        uint16_t v = static_cast<uint16_t>(i % 200);  // vocab is 128
        f.write(reinterpret_cast<const char*>(&v), 2);
      }
    }
    auto o = opts(write_plan(tiny_plan(), "tok2.json"));
    o.tokens_path = tok;
    o.output_path = out;
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  SECTION("an unknown device") {
    auto o = opts(write_plan(tiny_plan(), "dev.json"));
    o.device = "tpu";
    CHECK_THROWS_AS(run_exec(o), InputError);
  }
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("exec: token files, uint16 and int32", "[runtime][exec]") {
  const RemoveTempDir cleanup;
  const auto dir = temp_dir();
  auto u16 = (dir / "t16.bin").string(), i32 = (dir / "t32.bin").string();
  {
    std::ofstream a(u16, std::ios::binary), b(i32, std::ios::binary);
    for (int i = 0; i < 500; ++i) {
      uint16_t v = static_cast<uint16_t>(i % 100);
      int32_t w = i % 100;
      a.write(reinterpret_cast<const char*>(&v), 2);
      b.write(reinterpret_cast<const char*>(&w), 4);
    }
  }
  rt::FileTokens f16(u16, rt::TokenDtype::UInt16, 100, 16, 1), f32(i32, rt::TokenDtype::Int32, 100, 16, 1);
  CHECK(f16.tokens() == 500);
  CHECK(f32.tokens() == 500);
  std::vector<int64_t> a, b;
  f16.batch(3, 1, 4, 16, a);
  f32.batch(3, 1, 4, 16, b);
  CHECK(a == b);  // same offsets from the same seed
  REQUIRE(a.size() == 4 * 17);
  for (int r = 0; r < 4; ++r)
    for (int i = 1; i < 17; ++i) CHECK(a[size_t(r * 17 + i)] == (a[size_t(r * 17 + i - 1)] + 1) % 100);
  CHECK_THROWS_AS(rt::FileTokens(u16, rt::TokenDtype::UInt16, 100, 600, 1), InputError);  // too short
  CHECK_THROWS_AS(rt::parse_token_dtype("float"), InputError);

  // Synthetic tokens are deterministic and row-independent.
  rt::SyntheticTokens s(100, 42);
  std::vector<int64_t> x, y;
  s.batch(0, 0, 4, 16, x);
  s.batch(0, 0, 2, 16, y);
  CHECK(std::vector<int64_t>(x.begin(), x.begin() + 34) == y);
}

TEST_CASE("exec: the runtime's integer environment settings are read whole or refused by name", "[runtime][exec]") {
  const char* name = "PLANNER_TEST_ENV_INTEGER";
  ::unsetenv(name);
  CHECK_FALSE(rt::env_integer(name, 0, 10, "a count").has_value());
  ::setenv(name, "", 1);
  CHECK_FALSE(rt::env_integer(name, 0, 10, "a count").has_value());
  ::setenv(name, "7", 1);
  CHECK(rt::env_integer(name, 0, 10, "a count") == 7L);
  ::setenv(name, "0", 1);
  CHECK(rt::env_integer(name, 0, 10, "a count") == 0L);
  for (const char* bad : {"11", "-1", "2x", "x", " 3", "1.5", "99999999999999999999999"}) {
    ::setenv(name, bad, 1);
    INFO(bad);
    try {
      (void)rt::env_integer(name, 0, 10, "a count");
      FAIL("accepted");
    } catch (const InputError& e) {
      const std::string what = e.what();
      CHECK(what.find(name) != std::string::npos);
      CHECK(what.find(std::string("'") + bad + "' is not a count") != std::string::npos);
    }
  }
  ::unsetenv(name);
}

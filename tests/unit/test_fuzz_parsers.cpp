// A bounded, deterministic fuzz of every text and JSON parser (issue 11):
// mutations of valid inputs and random strings must give a value or an
// InputError (one readable line), never another exception, a crash or a
// sanitizer report. Runs in well under a second; the seeds are fixed so a
// failure reproduces. The coverage-guided libFuzzer targets are in tests/fuzz
// (scripts/fuzz.sh).
#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/memory_model.hpp"
#include "specs/model_spec.hpp"
#include "specs/plan.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#include "strategies/strategy.hpp"

using namespace planner;

namespace {

const char kAlphabet[] = "0123456789xX,=.-+eE kKmMgGtTiIbB:dptzeromsvcfhaul\"{}[]\\\t\n";

std::string mutate(std::string s, std::mt19937& rng) {
  std::uniform_int_distribution<int> op(0, 4), ch(0, int(sizeof(kAlphabet)) - 2);
  const int edits = 1 + int(rng() % 4);
  for (int k = 0; k < edits; ++k) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (op(rng)) {
      case 0: s.insert(pos, 1, kAlphabet[ch(rng)]); break;
      case 1: if (pos < s.size()) s.erase(pos, 1); break;
      case 2: if (pos < s.size()) s[pos] = kAlphabet[ch(rng)]; break;
      case 3: s.insert(pos, std::to_string(rng() % 3 == 0 ? (uint64_t(1) << (rng() % 64)) : rng())); break;
      case 4: if (pos < s.size()) s.insert(pos, s.substr(pos, rng() % 8)); break;
    }
  }
  return s;
}

// Runs `f`; anything but success or InputError fails the test with the input.
void survives(const std::string& input, const std::function<void(const std::string&)>& f) {
  try {
    f(input);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    INFO(input << " -> " << msg);
    CHECK(!msg.empty());
  } catch (const nlohmann::json::exception&) {
    // main() maps JSON type errors to exit 2 with one line as well.
  } catch (const std::exception& e) {
    FAIL_CHECK("input '" << input << "' threw a non-input error: " << e.what());
  }
}

void fuzz(const std::vector<std::string>& seeds, int rounds, uint32_t seed,
          const std::function<void(const std::string&)>& f) {
  std::mt19937 rng(seed);
  for (const auto& s : seeds) survives(s, f);
  for (int i = 0; i < rounds; ++i) survives(mutate(seeds[rng() % seeds.size()], rng), f);
}

}  // namespace

TEST_CASE("fuzz: strategy, cluster, size and integer strings", "[fuzz]") {
  fuzz({"dp=2,tp=1,pp=1,zero=1,mbs=4,gas=8", "pp=4,schedule=interleaved,vpp=2,gas=8", "zero=3,offload=all,ckpt=full",
        "dp=1047553,pp=4100", "mbs=65536,sp=1,precision=fp16"},
       3000, 1, [](const std::string& s) {
         Strategy st = Strategy::parse(s);
         st.validate();
         (void)st.to_string();
       });
  fuzz({"2xRTX3090", "128x8xH100", "65537xH100", "1xA100-80GB", "4096x512xH200"}, 3000, 2,
       [](const std::string& s) { (void)parse_cluster(s).world(); });
  fuzz({"64GB", "512GiB", "1.5TB", "1e9", "9e18"}, 3000, 3,
       [](const std::string& s) {
         const int64_t v = parse_bytes(s, "size");
         CHECK(v > 0);
       });
  fuzz({"1", "9223372036854775807", "-0", "+12"}, 2000, 4, [](const std::string& s) { (void)parse_int(s, "n", true); });
}

TEST_CASE("fuzz: whole plans from model, GPU and strategy strings", "[fuzz]") {
  std::mt19937 rng(5);
  const std::vector<std::string> models{"gpt2", "llama-2-7b", "bert-base", "opt-125m"};
  const std::vector<std::string> gpus{"1xH100", "8xA100-80GB", "2x8xH100", "4xRTX3090"};
  const std::vector<std::string> strategies{"tp=2,mbs=2", "pp=2,gas=4", "zero=3,mbs=8", "pp=4,schedule=interleaved,vpp=2,gas=8"};
  for (int i = 0; i < 400; ++i) {
    PlanRequest r;
    r.model = models[rng() % models.size()];
    r.gpus = rng() % 2 ? gpus[rng() % gpus.size()] : mutate(gpus[rng() % gpus.size()], rng);
    r.strategy = mutate(strategies[rng() % strategies.size()], rng);
    if (rng() % 2) r.seq = int64_t(1) << (rng() % 26);
    if (rng() % 3 == 0) r.global_batch = int64_t(1) << (rng() % 34);
    survives(r.gpus + " " + r.strategy, [&](const std::string&) {
      const Plan p = build_plan(r);
      const MemoryReport m = estimate_memory(p);
      CHECK(m.per_gpu_peak_bytes >= 0);
      CHECK(m.host_peak_bytes >= 0);
    });
  }
}

TEST_CASE("fuzz: plan, model, Hugging Face and profile JSON", "[fuzz]") {
  Plan p;
  p.model = resolve_model("gpt2");
  p.cluster = parse_cluster("2xH100");
  p.strategy = Strategy::parse("dp=2");
  p.seq = 1024;
  p.global_batch = 2;
  const std::string plan_text = plan_to_json(p).dump();
  const std::string hf = R"({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 32000, "max_position_embeddings": 2048})";
  const HardwareProfile base = default_profile(p.cluster.gpu);
  const std::string prof = profile_to_json(base).dump();
  auto json_of = [](const std::string& s) {
    try {
      return nlohmann::json::parse(s);
    } catch (const nlohmann::json::parse_error&) {
      throw InputError("not JSON");  // the CLI's read_json_file turns this into an InputError too
    }
  };
  fuzz({plan_text}, 1500, 6, [&](const std::string& s) { check_compat(plan_from_json(json_of(s))); });
  fuzz({hf}, 1500, 7, [&](const std::string& s) { (void)model_from_hf_config(json_of(s), "fuzz").total_params(); });
  fuzz({prof}, 1500, 8, [&](const std::string& s) { (void)profile_from_json(json_of(s), base); });
  fuzz({nlohmann::json(p.model).dump()}, 1500, 9, [&](const std::string& s) {
    try {
      json_of(s).get<ModelSpec>().validate();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(e.what());  // main() maps JSON type errors to exit 2
    }
  });
  fuzz({nlohmann::json(p.cluster).dump()}, 1500, 10, [&](const std::string& s) { (void)cluster_from_json(json_of(s)); });
}

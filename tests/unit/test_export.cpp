// planner export: round trips (the exported configuration parsed back gives
// the plan's strategy), Megatron-LM flags against the released parser's list,
// and the one-line refusals where an engine cannot express a strategy.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "planner/export.hpp"
#include "test_util.hpp"

using namespace planner;

namespace {

Plan plan_of(const std::string& model, const std::string& gpus, const std::string& strategy) {
  PlanRequest req;
  req.model = model, req.gpus = gpus, req.strategy = strategy;
  return build_plan(req);
}

// DeepSpeed config -> strategy, reading the keys as DeepSpeed's parser does
// (zero_optimization.stage, offload_optimizer/offload_param, the batch keys,
// bf16/fp16, activation_checkpointing, tensor_parallel.autotp_size,
// pipeline.stages). DeepSpeed's own parser is run on the same files in
// tests/cli/export_deepspeed.sh.
Strategy from_deepspeed(const nlohmann::json& j, int world) {
  Strategy s;
  const auto& z = j.at("zero_optimization");
  s.zero = z.at("stage").get<int>();
  if (z.contains("offload_optimizer")) s.offload = Offload::Optimizer;
  if (z.contains("offload_param")) s.offload = Offload::All;
  s.mbs = j.at("train_micro_batch_size_per_gpu").get<int>();
  s.gas = j.at("gradient_accumulation_steps").get<int>();
  s.precision = j.contains("bf16") ? Precision::BF16 : j.contains("fp16") ? Precision::FP16 : Precision::FP32;
  s.ckpt = j.contains("activation_checkpointing") ? Ckpt::Full : Ckpt::None;
  s.tp = j.contains("tensor_parallel") ? j["tensor_parallel"].at("autotp_size").get<int>() : 1;
  s.pp = j.contains("pipeline") ? j["pipeline"].at("stages").get<int>() : 1;
  s.dp = world / (s.tp * s.pp);
  CHECK(j.at("train_batch_size").get<int64_t>() == int64_t(s.dp) * s.mbs * s.gas);
  return s;
}

// Megatron-LM arguments -> strategy, as Megatron derives it (dp = world /
// (tp x pp), accumulation = global batch / (micro-batch x dp)).
Strategy from_megatron(const std::vector<std::string>& args, int world) {
  std::map<std::string, std::string> a;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    a[args[i]] = value ? args[i + 1] : "";
    if (value) ++i;
  }
  auto num = [&](const char* k) { return std::stoi(a.at(k)); };
  Strategy s;
  s.tp = num("--tensor-model-parallel-size");
  s.pp = num("--pipeline-model-parallel-size");
  if (a.count("--num-virtual-stages-per-pipeline-rank"))
    s.vpp = num("--num-virtual-stages-per-pipeline-rank"), s.schedule = Schedule::Interleaved;
  s.sp = a.count("--sequence-parallel") > 0;
  s.mbs = num("--micro-batch-size");
  if (a.count("--context-parallel-size")) s.cp = num("--context-parallel-size");
  s.dp = world / (s.tp * s.pp * s.cp);
  s.gas = num("--global-batch-size") / (s.mbs * s.dp);
  if (a.count("--recompute-granularity"))
    s.ckpt = a["--recompute-granularity"] == "full" ? Ckpt::Full : Ckpt::Selective;
  if (a.count("--use-distributed-optimizer")) s.zero = 1;
  if (a.count("--data-parallel-sharding-strategy"))
    s.zero = a["--data-parallel-sharding-strategy"] == "optim_grads" ? 2 : 3;
  if (a.count("--optimizer-cpu-offload")) s.offload = Offload::Optimizer;
  s.precision = a.count("--bf16") ? Precision::BF16 : a.count("--fp16") ? Precision::FP16 : Precision::FP32;
  return s;
}

// PyTorch settings -> strategy.
Strategy from_fsdp(const nlohmann::json& j) {
  Strategy s;
  const auto& shape = j.at("device_mesh").at("shape");
  s.dp = shape[0].get<int>();
  s.tp = shape.size() > 1 ? shape[1].get<int>() : 1;
  s.zero = j.at("zero_stage").get<int>();
  const std::string dp = j.at("data_parallel");
  if (dp == "fully_shard") {
    CHECK(j["fully_shard"]["reshard_after_forward"].get<bool>() == (s.zero == 3));
    if (!j["fully_shard"]["offload_policy"].is_null()) s.offload = Offload::All;
    const auto& mp = j["fully_shard"]["mp_policy"];
    s.precision = mp.is_null() ? Precision::FP32 : mp["param_dtype"] == "bfloat16" ? Precision::BF16 : Precision::FP16;
  } else {
    CHECK(j["ddp"]["gradient_as_bucket_view"].get<bool>());
    const auto& ac = j.at("autocast");
    s.precision = ac.is_null() ? Precision::FP32 : ac["dtype"] == "bfloat16" ? Precision::BF16 : Precision::FP16;
  }
  s.sp = j.contains("tensor_parallel") && j["tensor_parallel"]["sequence_parallel"].get<bool>();
  s.mbs = j.at("micro_batch_size").get<int>();
  s.gas = j.at("gradient_accumulation_steps").get<int>();
  const std::string ac = j.at("activation_checkpointing");
  s.ckpt = ac == "full" ? Ckpt::Full : ac == "selective" ? Ckpt::Selective : Ckpt::None;
  return s;
}

// Megatron-LM core_v0.19.0's flags with their choices (tests/data, made by
// scripts/megatron_argument_names.py from that release's parser).
std::map<std::string, std::set<std::string>> megatron_flags() {
  const auto path = test_util::source_dir() / "tests" / "data" /
                    "megatron_core_v0.19.0_arguments.txt";
  std::ifstream in(path);
  REQUIRE(in);
  std::map<std::string, std::set<std::string>> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string flag, choices;
    ls >> flag >> choices;
    auto& set = out[flag];
    std::stringstream cs(choices);
    for (std::string c; std::getline(cs, c, ',');) set.insert(c);
  }
  return out;
}

struct Case {
  const char* model;
  const char* gpus;
  const char* strategy;
  bool deepspeed, megatron, fsdp;  // expressible
};

// Covers DP, ZeRO-1/2/3, offload of the optimizer and of everything, TP, SP,
// PP (1F1B and interleaved), full and selective recomputation, bf16/fp16/fp32.
const Case kCases[] = {
    {"gpt2-xl", "8xA100-80GB", "zero=0,mbs=4,gas=2", true, true, true},
    {"llama-2-7b", "8xH100", "zero=1,ckpt=full,mbs=2,gas=4", true, true, true},
    {"llama-2-7b", "8xH100", "zero=2,offload=optimizer,mbs=1,gas=8", true, false, false},
    {"llama-2-7b", "8xH100", "zero=3,offload=all,mbs=1,gas=8", true, false, true},
    {"llama-2-13b", "2x8xH100", "tp=8,pp=2,sp=1,zero=1,ckpt=selective,mbs=1,gas=8", false, true, false},
    {"llama-2-70b", "4x8xH100", "tp=4,pp=4,schedule=interleaved,vpp=5,zero=1,ckpt=full,mbs=1,gas=8", false, true,
     false},
    {"gpt2-large", "8xA100-80GB", "tp=2,zero=3,mbs=2,gas=2", false, true, true},  // AutoTP: ZeRO 0-2 only
    {"gpt2-large", "8xA100-80GB", "tp=2,zero=2,mbs=2,gas=2", true, true, true},
    {"gpt2-xl", "8xA100-80GB", "pp=2,zero=1,offload=optimizer,mbs=2,gas=4", true, true, false},
    {"gpt2-large", "8xV100-32GB", "zero=2,precision=fp16,mbs=2,gas=2", true, true, true},
    {"gpt2", "4xA100-80GB", "tp=2,sp=1,ckpt=selective,precision=fp32,mbs=8,gas=1", false, true, true},
    // Context parallelism: Megatron's --context-parallel-size; DeepSpeed and FSDP refuse.
    {"llama-2-7b", "8xH100", "tp=2,cp=2,zero=1,mbs=1,gas=4", false, true, false},
};

}  // namespace

TEST_CASE("export round trips: each configuration parses back into the plan's strategy", "[export]") {
  const auto flags = megatron_flags();
  REQUIRE(flags.count("--tensor-model-parallel-size"));
  int deepspeed = 0, megatron = 0, fsdp = 0;
  for (const Case& c : kCases) {
    const Plan p = plan_of(c.model, c.gpus, c.strategy);
    const int world = p.cluster.world();
    INFO(c.model << " on " << c.gpus << ": " << p.strategy.to_string());
    CHECK(engine_gap(p, Engine::DeepSpeed).empty() == c.deepspeed);
    // Megatron's sequence parallelism needs Transformer Engine or apex: these
    // round trips assume them (--with-te); without, sp is refused (below).
    const EngineEnv te{true};
    CHECK(engine_gap(p, Engine::Megatron, te).empty() == c.megatron);
    CHECK(engine_gap(p, Engine::Fsdp).empty() == c.fsdp);
    if (c.deepspeed) {
      const ExportResult r = export_plan(p, Engine::DeepSpeed, "ds.json");
      CHECK(from_deepspeed(nlohmann::json::parse(r.file_text), world).to_string() == p.strategy.to_string());
      CHECK(test_util::contains(r.launch, "--deepspeed_config ds.json"));
      ++deepspeed;
    }
    if (c.megatron) {
      const ExportResult r = export_plan(p, Engine::Megatron, "", "", te);
      CHECK(from_megatron(r.args, world).to_string() == p.strategy.to_string());
      for (size_t i = 0; i < r.args.size(); ++i) {
        const std::string& a = r.args[i];
        if (a.rfind("--", 0) != 0) continue;
        INFO("flag " << a);
        REQUIRE(flags.count(a) == 1);  // a flag of Megatron-LM core_v0.19.0
        const auto& choices = flags.at(a);
        if (!choices.empty() && i + 1 < r.args.size()) CHECK(choices.count(r.args[i + 1]) == 1);
      }
      CHECK(test_util::contains(r.launch, "scripts/engines/megatron_train.py"));
      ++megatron;
    }
    if (c.fsdp) {
      const ExportResult r = export_plan(p, Engine::Fsdp);
      CHECK(from_fsdp(nlohmann::json::parse(r.file_text)).to_string() == p.strategy.to_string());
      ++fsdp;
    }
  }
  CHECK(deepspeed >= 6);
  CHECK(megatron >= 6);
  CHECK(fsdp >= 5);
}

TEST_CASE("export refuses what an engine lacks, in one line naming it", "[export]") {
  using test_util::contains;
  using test_util::error_of;
  auto refusal = [](const char* model, const char* gpus, const char* strategy, Engine e) {
    return error_of([&] { export_plan(plan_of(model, gpus, strategy), e); });
  };
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "pp=2,zero=1", Engine::Fsdp), "no pipeline parallelism"));
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "zero=3,offload=all", Engine::Megatron), "parameters in host"));
  // run1 (validation/engines/h100x4): megatron-core without TE or apex asserts
  // on sequence parallelism; refused unless --with-te says they are installed.
  CHECK(contains(refusal("llama-3.2-1b", "4xH100", "tp=2,sp=1,zero=1,mbs=2,gas=4", Engine::Megatron),
                 "only with Transformer Engine or apex"));
  CHECK(contains(refusal("llama-3.2-1b", "4xH100", "tp=2,sp=1,zero=1,mbs=2,gas=4", Engine::Megatron), "--with-te"));
  CHECK(engine_gap(plan_of("llama-3.2-1b", "4xH100", "tp=2,sp=0,zero=1,mbs=2,gas=4"), Engine::Megatron).empty());
  CHECK(engine_gap(plan_of("llama-3.2-1b", "4xH100", "tp=2,sp=1,zero=1,mbs=2,gas=4"), Engine::Megatron,
                   EngineEnv{true}).empty());
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "pp=2,schedule=gpipe", Engine::Megatron), "not GPipe"));
  CHECK(contains(refusal("gpt2-large", "8xA100-80GB", "tp=2,sp=1", Engine::DeepSpeed), "sequence parallelism"));
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "ckpt=selective", Engine::DeepSpeed), "selective"));
  CHECK(contains(refusal("gpt2-large", "8xA100-80GB", "tp=2,pp=2", Engine::DeepSpeed), "AutoTP"));
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "zero=1,offload=optimizer", Engine::Fsdp), "CPUOffloadPolicy"));
  CHECK(contains(refusal("opt-1.3b", "8xA100-80GB", "zero=1", Engine::Megatron), "ReLU"));
  CHECK(contains(refusal("gpt-j-6b", "8xA100-80GB", "zero=1", Engine::Megatron), "parallel attention"));
  CHECK(contains(refusal("bert-large", "8xA100-80GB", "zero=1", Engine::Megatron), "encoders"));
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "zero=1", Engine::Ours), "--to takes"));
  // AutoTP trains with ZeRO 0-2 (DeepSpeed's AutoTP training tutorial).
  CHECK(contains(refusal("gpt2-large", "8xA100-80GB", "tp=2,zero=3,mbs=2", Engine::DeepSpeed), "stages 0-2"));
  // Every engine refusal names the search that keeps only what the engine runs.
  CHECK(contains(refusal("gpt2-xl", "8xA100-80GB", "pp=2,schedule=gpipe", Engine::Megatron),
                 "--engine megatron finds the best plan"));
  // One line each.
  CHECK_FALSE(contains(refusal("gpt2-xl", "8xA100-80GB", "pp=2,zero=1", Engine::Fsdp), "\n"));
}

TEST_CASE("megatron export: the rotary base is passed on", "[export]") {
  // Llama 3 trains with rope_theta 500000 (its config.json); Megatron's
  // default is 10000, so leaving the flag out would train another model.
  auto base_of = [](const char* model) {
    const ExportResult r = export_plan(plan_of(model, "8xH100", "zero=1"), Engine::Megatron);
    for (size_t i = 0; i + 1 < r.args.size(); ++i)
      if (r.args[i] == "--rotary-base") return r.args[i + 1];
    return std::string("(absent)");
  };
  CHECK(base_of("llama-3-8b") == "500000");
  CHECK(base_of("llama-3.1-8b") == "500000");
  CHECK(base_of("qwen2.5-7b") == "1000000");
  CHECK(base_of("llama-2-7b") == "10000");
  CHECK(base_of("gpt2-xl") == "(absent)");  // learned positions
}

TEST_CASE("megatron export: layers not divisible by the pipeline are refused", "[export]") {
  // gpt2-large has 36 layers: pp=8 splits them 4 or 5 per stage, which
  // Megatron-LM's plain --pipeline-model-parallel-size does not do.
  const Plan p = plan_of("gpt2-large", "8xA100-80GB", "pp=8,zero=1,gas=8");
  CHECK(test_util::contains(engine_gap(p, Engine::Megatron), "divisible by pp*vpp = 8"));
  CHECK(engine_gap(plan_of("gpt2-large", "4xA100-80GB", "pp=4,zero=1,gas=4"), Engine::Megatron).empty());
}

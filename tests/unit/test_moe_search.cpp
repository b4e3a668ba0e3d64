// Expert parallelism in the search and the export: ep enumerated like the
// other axes (every strategy legal, the pruned search equal to the full one),
// Mixtral-8x7B planned on 64 H100s with ep in the answer, and the Megatron
// export's MoE arguments (each one Megatron's parser defines).
#include <fstream>
#include <set>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/engines.hpp"
#include "planner/export.hpp"
#include "planner/search.hpp"
#include "strategies/search_space.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;

namespace {

SearchRequest moe_request(const std::string& gpus, int64_t seq, int64_t batch) {
  SearchRequest r;
  r.model = resolve_model("mixtral-8x7b");
  r.cluster = resolve_cluster(gpus);
  r.seq = seq;
  r.global_batch = batch;
  return r;
}

SpaceLimits limits_of(const SearchRequest& r) {
  SpaceLimits L;
  L.world = r.cluster.world();
  L.global_batch = r.global_batch;
  L.layers = r.model.layers, L.heads = r.model.heads, L.kv_heads = r.model.kv_heads, L.ffn = r.model.ffn;
  L.experts = r.model.moe.experts, L.expert_ffn = r.model.moe.expert_ffn, L.shared_ffn = r.model.moe.shared_ffn;
  L.bf16 = r.cluster.gpu.supports_bf16();
  return L;
}

}  // namespace

TEST_CASE("ep is enumerated for a mixture of experts, and every strategy is legal", "[moe][search]") {
  const SearchRequest r = moe_request("16xH100", 1024, 64);
  const auto all = enumerate_strategies(limits_of(r));
  CHECK(int64_t(all.size()) == count_strategies(limits_of(r)));
  std::set<int> eps;
  Plan plan{r.model, r.cluster, {}, r.seq, r.global_batch};
  for (const auto& s : all) {
    eps.insert(s.ep);
    plan.strategy = s;
    INFO(s.to_string());
    REQUIRE_NOTHROW(check_compat(plan));
  }
  CHECK(eps == std::set<int>{1, 2, 4, 8});  // the divisors of 8 experts that divide some dp of 16 GPUs
  // A dense model: ep = 1 only, as before.
  SearchRequest d = r;
  d.model = resolve_model("mistral-7b");
  for (const auto& s : enumerate_strategies(limits_of(d))) REQUIRE(s.ep == 1);
}

TEST_CASE("the pruned search over ep finds what simulating everything finds", "[moe][search]") {
  SearchRequest r = moe_request("16xH100", 1024, 64);
  r.top_k = 3;
  const SearchResult pruned = search_plans(r);
  r.prune = false;
  const SearchResult full = search_plans(r);
  REQUIRE(!full.plans.empty());
  REQUIRE(pruned.plans.size() == full.plans.size());
  for (size_t i = 0; i < full.plans.size(); ++i)
    CHECK(pruned.plans[i].prediction.step_seconds == Approx(full.plans[i].prediction.step_seconds));
  // Mixtral's 93 GB of bf16 weights and gradients fit 80 GB GPUs only with the
  // experts split (ep) or sharded (ZeRO-3) or tp/pp.
  for (const auto& p : full.plans) INFO(p.plan.strategy.to_string());
}

TEST_CASE("Megatron export of a MoE plan: its MoE arguments, each one Megatron defines", "[moe][export]") {
  PlanRequest req;
  req.model = "mixtral-8x7b";
  req.gpus = "8x8xH100";
  req.strategy = "tp=2,pp=2,ep=4,sp=1,zero=1,mbs=1,gas=16";
  req.seq = 4096;
  const Plan plan = build_plan(req);
  const ExportResult r = export_plan(plan, Engine::Megatron, "", "", EngineEnv{true});  // sp: with TE
  auto value = [&](const std::string& flag) {
    for (size_t i = 0; i + 1 < r.args.size(); ++i)
      if (r.args[i] == flag) return r.args[i + 1];
    return std::string("(absent)");
  };
  CHECK(value("--num-experts") == "8");
  CHECK(value("--moe-router-topk") == "2");
  CHECK(value("--moe-ffn-hidden-size") == "14336");
  CHECK(value("--expert-model-parallel-size") == "4");
  CHECK(value("--expert-tensor-parallel-size") == "2");
  CHECK(value("--moe-token-dispatcher-type") == "alltoall");
  // Every flag is one of Megatron-LM core_v0.19.0's arguments.
  std::ifstream in(test_util::examples_dir().parent_path() / "tests" / "data" / "megatron_core_v0.19.0_arguments.txt");
  std::set<std::string> known;
  for (std::string line; std::getline(in, line);) known.insert(line.substr(0, line.find(' ')));
  REQUIRE(known.size() > 100);
  for (const auto& a : r.args)
    if (a.rfind("--", 0) == 0) CHECK(known.count(a) == 1);
  // DeepSpeed and FSDP exports refuse ep > 1, naming what they lack.
  CHECK(contains(engine_gap(plan, Engine::DeepSpeed), "DeepSpeed-MoE"));
  CHECK(contains(engine_gap(plan, Engine::Fsdp), "no expert parallelism"));
  Plan no_sp = plan;
  no_sp.strategy.sp = false;
  CHECK(contains(engine_gap(no_sp, Engine::Megatron), "sequence parallelism"));
}

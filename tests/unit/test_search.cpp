// The strategy search: the space is legal, the pruning is safe (same answer as
// simulating everything), and the two questions of the issue get answers.
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/simulator.hpp"
#include "planner/bench.hpp"
#include "planner/search.hpp"
#include "strategies/search_space.hpp"
#include "strategies/step_program.hpp"

using namespace planner;

namespace {

SearchRequest request(const std::string& model, const std::string& gpus, int64_t seq, int64_t batch) {
  SearchRequest r;
  r.model = resolve_model(model);
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
  L.bf16 = r.cluster.gpu.supports_bf16();
  return L;
}

}  // namespace

TEST_CASE("every enumerated strategy passes Strategy::validate and check_compat", "[search]") {
  for (const auto& r : {request("gpt2-xl", "2xRTX3090", 1024, 32), request("llama-2-7b", "2x8xA100-80GB", 2048, 64),
                        request("bert-large", "4xV100", 512, 64)}) {
    const auto all = enumerate_strategies(limits_of(r));
    REQUIRE(!all.empty());
    CHECK(int64_t(all.size()) == count_strategies(limits_of(r)));
    Plan plan{r.model, r.cluster, {}, r.seq, r.global_batch};
    for (const auto& s : all) {
      plan.strategy = s;
      INFO(s.to_string());
      REQUIRE_NOTHROW(check_compat(plan));
    }
  }
}

TEST_CASE("the lower bound never exceeds the simulated step", "[search]") {
  const auto r = request("llama-2-7b", "2x8xA100-80GB", 2048, 64);
  CostContext ctx(r.model, r.cluster, r.seq, default_profile(r.cluster.gpu));
  TableCostModel t;
  Simulator sim;
  int n = 0;
  for_each_strategy(limits_of(r), [&](const Strategy& s) {
    if (++n % 7) return;  // every 7th, to keep the test quick
    ctx.build(s, t);
    const double lb = makespan_lower_bound(t, s.gas);
    const double step = sim.run(build_step_program(s, r.model.layers, {r.model.tied_embeddings}), t).makespan_seconds;
    INFO(s.to_string());
    REQUIRE(lb <= step * (1 + 1e-12));
  });
  CHECK(n > 1000);
}

TEST_CASE("pruning by the lower bound finds what simulating everything finds", "[search]") {
  for (auto r : {request("gpt2-xl", "2xRTX3090", 1024, 32), request("llama-2-7b", "2x8xA100-80GB", 2048, 64)}) {
    r.top_k = 5;
    const SearchResult pruned = search_plans(r);
    r.prune = false;
    const SearchResult full = search_plans(r);
    REQUIRE(pruned.plans.size() == full.plans.size());
    for (size_t i = 0; i < full.plans.size(); ++i)
      CHECK(pruned.plans[i].prediction.step_seconds == Approx(full.plans[i].prediction.step_seconds));
    CHECK(pruned.plans.front().plan.strategy == full.plans.front().plan.strategy);
    CHECK(pruned.stats.simulated < full.stats.simulated);
    CHECK(pruned.stats.enumerated == full.stats.enumerated);
  }
}

TEST_CASE("plan: gpt2-xl on 2x RTX 3090 answers, with explanations", "[search]") {
  auto r = request("gpt2-xl", "2xRTX3090", 1024, 32);
  r.explain = true;
  const SearchResult res = search_plans(r);
  REQUIRE(!res.plans.empty());
  const auto& best = res.plans.front();
  CHECK(best.prediction.memory.fits());
  CHECK(best.plan.strategy.world() == 2);
  for (size_t i = 1; i < res.plans.size(); ++i)
    CHECK(res.plans[i].prediction.step_seconds >= res.plans[i - 1].prediction.step_seconds);
  REQUIRE(res.families.size() == 5);
  for (const auto& f : res.families) CHECK(!f.reason.empty());
  // Plain DP keeps 16 bytes per parameter of 1.6B on each GPU: it cannot fit in 24 GB.
  CHECK_FALSE(res.families[0].fits);
  const auto j = search_result_json(res);
  for (const char* key : {"candidates_evaluated", "plans", "explain"}) CHECK(j.contains(key));
  for (const char* key : {"strategy", "step_seconds", "samples_per_second", "tokens_per_second", "tflops_per_gpu", "mfu",
                          "fits", "per_gpu_peak_bytes", "breakdown"})
    CHECK(j["plans"][0].contains(key));
  CHECK(!search_result_table(res, true).empty());
}

TEST_CASE("plan: llama-2-70b on 1024 H100s answers quickly", "[search]") {
  auto r = request("llama-2-70b", "128x8xH100", 4096, 1024);
  r.explain = true;
  const SearchResult res = search_plans(r);
  REQUIRE(!res.plans.empty());
  const auto& best = res.plans.front();
  CHECK(best.prediction.memory.fits());
  CHECK(best.plan.strategy.world() == 1024);
  CHECK(best.prediction.mfu > 0.2);
  CHECK(best.prediction.mfu < 0.8);
  CHECK(res.stats.enumerated > 10000);
  CHECK(res.stats.wall_seconds < 5.0);  // the target is < 1 s (see `planner bench`); this machine is shared
}

TEST_CASE("bench reports the search speed", "[search]") {
  BenchRequest b;
  b.model = "gpt2-xl";
  b.gpus = "2xRTX3090";
  b.seq = 1024;
  b.global_batch = 32;
  b.repeats = 2;
  const BenchResult r = run_bench(b);
  CHECK(r.stats.enumerated > 0);
  CHECK(r.candidates_per_second > 0);
  CHECK(!r.best_strategy.empty());
  CHECK(bench_json(r).contains("candidates_per_second"));
}

// Issue 11, item 6: properties over random valid (model, cluster, strategy)
// triples. Memory is monotone in micro-batch size, sequence and model size;
// step time is finite and positive; MFU is at most 100%; predict of each plan
// that the search returns reproduces the search's numbers. Fixed seeds.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/predict.hpp"
#include "planner/search.hpp"
#include "strategies/errors.hpp"

using namespace planner;

namespace {

struct Triple {
  std::string gpus, strategy;
  int64_t seq;
};

// A random strategy text for `world` GPUs (may be illegal for the model: the
// caller skips those that build_plan refuses).
Triple random_triple(std::mt19937& rng) {
  const std::vector<std::string> gpus{"1xA100-80GB", "4xRTX3090", "8xA100-80GB", "2x8xH100"};
  const std::vector<std::string> ckpt{"none", "selective", "full"};
  Triple t;
  t.gpus = gpus[rng() % gpus.size()];
  const int tp = 1 << (rng() % 3), pp = 1 << (rng() % 3), zero = int(rng() % 4);
  const bool interleaved = pp > 1 && rng() % 3 == 0;
  t.strategy = fmt::format("tp={},pp={},zero={},ckpt={},mbs={},gas={}{}", tp, pp, zero > 1 && pp > 1 ? 1 : zero,
                           ckpt[rng() % ckpt.size()], 1 << (rng() % 3), pp * (1 + rng() % 3),
                           interleaved ? ",schedule=interleaved,vpp=2" : "");
  t.seq = 128 << (rng() % 3);
  return t;
}

std::optional<Plan> try_plan(const std::string& model, const Triple& t, int64_t seq, const std::string& extra = "") {
  PlanRequest r;
  r.model = model;
  r.gpus = t.gpus;
  r.strategy = t.strategy + extra;
  r.seq = seq;
  try {
    return build_plan(r);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

}  // namespace

TEST_CASE("properties: memory is monotone in mbs, seq and model size; time finite; MFU <= 100%", "[properties]") {
  std::mt19937 rng(11);
  const std::vector<std::string> models{"gpt2", "gpt2-medium", "gpt2-large"};  // same family, growing
  int checked = 0;
  for (int i = 0; i < 120; ++i) {
    const Triple t = random_triple(rng);
    const size_t mi = rng() % (models.size() - 1);
    const auto small = try_plan(models[mi], t, t.seq);
    if (!small) continue;
    ++checked;
    INFO(models[mi] << " on " << t.gpus << " " << small->strategy.to_string() << " seq " << t.seq);
    const int64_t base = estimate_memory(*small).per_gpu_peak_bytes;
    CHECK(base > 0);
    // Twice the sequence (within gpt2's 1024 learned positions).
    if (const auto longer = try_plan(models[mi], t, 2 * t.seq)) CHECK(estimate_memory(*longer).per_gpu_peak_bytes >= base);
    // A larger model of the family under the same strategy.
    if (const auto bigger = try_plan(models[mi + 1], t, t.seq)) CHECK(estimate_memory(*bigger).per_gpu_peak_bytes >= base);
    // Twice the micro-batch.
    Plan wider = *small;
    wider.strategy.mbs *= 2;
    wider.global_batch = wider.strategy.global_batch();
    CHECK(estimate_memory(wider).per_gpu_peak_bytes >= base);
    // Time and utilisation are physical.
    const StepPrediction p = predict(*small);
    CHECK(std::isfinite(p.step_seconds));
    CHECK(p.step_seconds > 0);
    CHECK(p.mfu > 0);
    CHECK(p.mfu <= 1.0);
  }
  CHECK(checked >= 20);  // the generator must hit enough legal triples to mean something
}

TEST_CASE("properties: predict of each plan the search returns reproduces its numbers", "[properties]") {
  for (const auto& [model, gpus, batch] : std::vector<std::tuple<std::string, std::string, int64_t>>{
           {"gpt2", "4xRTX3090", 16}, {"gpt2-medium", "8xA100-80GB", 64}, {"llama-2-7b", "2x8xH100", 64}}) {
    SearchRequest r;
    r.model = resolve_model(model);
    r.cluster = resolve_cluster(gpus);
    r.seq = 1024;
    r.global_batch = batch;
    r.top_k = 3;
    const SearchResult res = search_plans(r);
    REQUIRE(!res.plans.empty());
    for (const RankedPlan& rp : res.plans) {
      INFO(model << " on " << gpus << ": " << rp.plan.strategy.to_string());
      const StepPrediction again = predict(rp.plan);
      CHECK(again.step_seconds == Approx(rp.prediction.step_seconds).epsilon(1e-9));
      CHECK(again.mfu == Approx(rp.prediction.mfu).epsilon(1e-9));
      CHECK(again.memory.per_gpu_peak_bytes == rp.prediction.memory.per_gpu_peak_bytes);
      CHECK(again.mfu <= 1.0);
    }
  }
}

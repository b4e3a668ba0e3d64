// The Engine (the executor of the step program) on one process, fp32, against
// the plain Trainer: the same losses and parameters after three steps for every
// ZeRO stage and offload mode that one process can run (dp = 1: the shards are
// the whole model), with accumulation and checkpointing, on several families.
#include <ATen/ATen.h>

#include "catch.hpp"
#include "equivalence.hpp"
#include "tiny_models.hpp"

using namespace planner;
using namespace planner::test;

TEST_CASE("engine: dp=1 runs equal the single-process trainer", "[engine]") {
  const char* strategies[] = {"zero=0,mbs=2,gas=2",         "zero=0,mbs=1,gas=3,ckpt=full",
                              "zero=1,offload=optimizer,mbs=2,gas=2", "zero=2,mbs=2,gas=2,ckpt=selective",
                              "zero=3,mbs=2,gas=2",         "zero=3,offload=all,mbs=1,gas=2,ckpt=full"};
  for (const ModelSpec& m : {gpt2_like(), llama_like(), bert_like()}) {
    for (const char* text : strategies) {
      Strategy s = Strategy::parse(text);
      s.precision = Precision::FP32;
      INFO(m.name << " " << text);
      const RunResult a = run_single(m, s, 16, 3);
      const RunResult b = run_engine(m, s, 16, 3, nullptr);
      for (size_t k = 0; k < a.losses.size(); ++k) CHECK(std::abs(a.losses[k] - b.losses[k]) <= 1e-5);
      CHECK(max_abs_diff(b.params, a.params) <= 1e-5);
      // The parameters moved: the comparison is not between two initial states.
      CHECK(max_abs_diff(a.params, run_single(m, s, 16, 0).params) > 1e-4);
    }
  }
}

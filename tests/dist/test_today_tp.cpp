// Today's dense decoders under tensor (and sequence) parallelism and data
// parallelism on the CPU (MPI): sliding windows (all layers, the last layer,
// the even layers), q/k/v biases, head_dim apart from hidden/heads, Qwen3's
// per-head q/k norms (replicated weights whose gradients each tp rank holds
// only for its heads), Gemma-2's sandwich norms and GeGLU. Losses and every
// parameter after three steps within 1e-5 of the single-process Trainer
// (fp32). Context parallelism with a window is refused (legality and
// TransformerModel::set_context_parallel), so it is not run here.
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

namespace {

// Each of today's decoders under every strategy of `texts` at dp x tp, sp off
// and on, equals one process.
void check_today(int dp, int tp, const std::vector<const char*>& texts) {
  std::vector<ModelSpec> models = {mistral_like(), qwen2_like(), qwen3_like(), gemma2_like(), gemma3_like()};
  for (ModelSpec& m : models)
    if (m.kv_heads % tp != 0) m.kv_heads = m.heads;  // tp = 4 splits the kv heads too
  check_grid({dp, 1, tp}, models, texts, /*with_sp=*/true);
}

}  // namespace

TEST_CASE("dist: today's dense decoders (windows, q/k norms, head_dim) under tp equal one process", "[dist][tp][window]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size == 2) check_today(1, 2, {"mbs=2,gas=2", "mbs=1,gas=2,ckpt=selective", "mbs=1,gas=2,ckpt=full"});
  if (w.size == 4) {
    check_today(1, 4, {"mbs=2,gas=2"});
    check_today(2, 2, {"zero=1,mbs=1,gas=2"});
  }
}

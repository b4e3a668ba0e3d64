// Data parallelism, ZeRO-1/2/3 and offload under mpirun (dist_np2, dist_np4),
// fp32 on the CPU: every rank runs the strategy with dp = the world size
// through the Engine and, alone, the plain single-process Trainer on the same
// global batch (dp * gas micro-batches); losses and every parameter after three
// steps must agree within 1e-5. With accumulation (gas > 1) and with
// checkpointing; tied (GPT-2-like) and untied grouped-query (LLaMA-like) models.
#include <chrono>

#include "runtime/comm/communicator.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

TEST_CASE("dist: the program's overlap options move the waits, not the results", "[dist][equivalence]") {
  // overlap_grad_reduce off: every Reduce and ToHost issued at the Sync (a
  // ZeRO-2/3 unit reduced once for the step); overlap_param_gather on: the
  // ZeRO-1/2 all-gathers waited for by the next step's forward, not at the
  // step's end. The same losses and parameters as the single-process run.
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  auto dp = rt::make_communicator(RankGrid(w.size, 1, 1).all_dp_groups(), "dp", at::Device(at::kCPU),
                                  std::chrono::seconds(120));
  const ModelSpec m = gpt2_like();
  for (const char* text : {"zero=0,mbs=2,gas=2", "zero=1,mbs=2,gas=2", "zero=1,offload=optimizer,mbs=2,gas=2",
                           "zero=2,mbs=1,gas=3", "zero=2,offload=optimizer,mbs=2,gas=2", "zero=3,mbs=2,gas=2"})
    for (int overlap = 0; overlap < 3; ++overlap) {
      Strategy s = Strategy::parse(text);
      s.dp = w.size;
      s.precision = Precision::FP32;
      rt::RunConfig c = run_config(m, s, 16);
      c.options.overlap_grad_reduce = overlap == 1;
      c.options.overlap_param_gather = overlap >= 1;
      INFO(text << " overlap_grad_reduce=" << c.options.overlap_grad_reduce
                << " overlap_param_gather=" << c.options.overlap_param_gather);
      rt::Engine e(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed), dp.get());
      CHECK(e.program().options.overlap_grad_reduce == c.options.overlap_grad_reduce);
      RunResult par;
      for (int k = 0; k < 3; ++k) par.losses.push_back(e.step(k).item<double>());
      par.params = e.full_params_fp32().to(at::kFloat);
      const RunResult one = run_single(m, s, 16, 3);
      check_close(one, par);
    }
}

TEST_CASE("dist: DP, ZeRO-1/2/3 and offload equal the single-process run", "[dist][equivalence]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;  // one rank: nothing data-parallel to compare
  auto dp = rt::make_communicator(RankGrid(w.size, 1, 1).all_dp_groups(), "dp", at::Device(at::kCPU),
                                  std::chrono::seconds(120));
  const char* strategies[] = {
      "zero=0,mbs=2,gas=2",           "zero=0,mbs=1,gas=2,ckpt=full",       "zero=1,mbs=2,gas=2",
      "zero=1,offload=optimizer,mbs=2,gas=2", "zero=2,mbs=1,gas=3,ckpt=selective", "zero=2,offload=optimizer,mbs=2,gas=2",
      "zero=3,mbs=2,gas=2",           "zero=3,offload=optimizer,mbs=1,gas=2,ckpt=full",
      "zero=3,offload=all,mbs=2,gas=2"};
  for (const ModelSpec& m : {gpt2_like(), llama_like()}) {
    for (const char* text : strategies) {
      Strategy s = Strategy::parse(text);
      s.dp = w.size;
      s.precision = Precision::FP32;
      INFO(m.name << " dp=" << s.dp << " " << text);
      const RunResult one = run_single(m, s, 16, 3);
      const RunResult par = run_engine(m, s, 16, 3, dp.get());
      check_close(one, par);
    }
  }
}

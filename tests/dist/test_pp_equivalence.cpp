// Pipeline parallelism through the Engine on the CPU (MPI), composed with data
// parallelism and ZeRO-1: GPipe, 1F1B and interleaved 1F1B (vpp = 2) with pp =
// the world (2 or 4 ranks) and dp2·pp2 (4 ranks), on untied models (LLaMA-,
// GPT-J-like) and a tied one (GPT-2-like: the last stage's copy of the word
// matrix); losses and every parameter after three steps within 1e-5 of the
// single-process Trainer on the same global batch (fp32).
#include <cstdlib>
#include <chrono>
#include <string>

#include "costmodel/activations.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/device.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

namespace {

void check_pp(int dp, int pp, const char* text) {
  const rt::WorldInfo w = rt::init_world();
  const RankGrid grid(dp, pp, 1);
  auto dpc = rt::make_communicator(grid.all_dp_groups(), "dp", at::Device(at::kCPU), std::chrono::seconds(120));
  auto ppc = rt::make_communicator(grid.all_pp_groups(), "pp", at::Device(at::kCPU), std::chrono::seconds(120));
  REQUIRE(ppc->rank() == grid.coord(w.rank).pp);
  for (const ModelSpec& base : {llama_like(), gptj_like(), gpt2_like()}) {
    for (const char* sched : {"gpipe", "1f1b", "interleaved"}) {
      Strategy s = Strategy::parse(text);
      s.dp = dp, s.pp = pp, s.precision = Precision::FP32;
      const std::string name = sched;
      s.schedule = name == "gpipe" ? Schedule::GPipe : name == "1f1b" ? Schedule::OneFOneB : Schedule::Interleaved;
      if (s.schedule == Schedule::Interleaved) {
        if (s.gas % pp != 0) continue;  // the interleaved schedule needs micro-batches % pp == 0
        s.vpp = 2;
      }
      ModelSpec m = base;
      m.layers = 2 * pp * s.vpp;
      INFO(m.name << " dp=" << dp << " pp=" << pp << " " << sched << " " << text);
      const RunResult one = run_single(m, s, 16, 3);
      const RunResult par = run_engine(m, s, 16, 3, dp > 1 ? dpc.get() : nullptr, ppc.get());
      check_close(one, par);
    }
  }
}

}  // namespace

TEST_CASE("dist: pipeline parallelism (GPipe, 1F1B, interleaved) equals the single-process run", "[dist][pp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  check_pp(1, w.size, "mbs=1,gas=4");
  check_pp(1, w.size, "mbs=2,gas=3,ckpt=full");
  if (w.size == 4) {
    check_pp(2, 2, "zero=0,mbs=1,gas=4");
    check_pp(2, 2, "zero=1,mbs=1,gas=2");
    check_pp(2, 2, "zero=1,offload=optimizer,mbs=2,gas=2");
  }
}

namespace {

// The pp group of two CPU ranks, with the counting CPU allocator on.
std::unique_ptr<rt::Communicator> pp2_counting_comm() {
  rt::enable_cpu_memory_counting();
  const RankGrid grid(1, 2, 1);
  return rt::make_communicator(grid.all_pp_groups(), "pp", at::Device(at::kCPU), std::chrono::seconds(120));
}

// The step's peak over its start on this rank (the counting CPU allocator,
// one step after a first one) for pp=2 at `strategy` with `gas` micro-batches.
int64_t pp2_step_peak(const ModelSpec& m, rt::Communicator* ppc, const std::string& strategy, int gas,
                      int64_t seq) {
  Strategy s = Strategy::parse(strategy + ",gas=" + std::to_string(gas));
  s.pp = 2;
  const rt::RunConfig c = run_config(m, s, seq);
  rt::Engine e(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed), nullptr, ppc);
  e.step(0);
  const int64_t before = rt::memory_stats(false).allocated;
  rt::reset_peak_memory(false);
  e.step(1);
  return rt::memory_stats(false).allocated_peak - before;
}

}  // namespace

TEST_CASE("dist: a pipeline stage frees what it sent once it has arrived (1F1B's peak does not grow with the micro-batches)",
          "[dist][pp]") {
  // Each stage sends one (b, s, h) tensor per micro-batch (activations on,
  // gradients back). Held to the step's end, the sent tensors of 16
  // micro-batches would add 12 of them to the peak of 4 micro-batches; freed
  // once they have arrived, 1F1B's in-flight micro-batches (at most pp) set
  // the peak whatever the count (the counting CPU allocator, one step after
  // a first one).
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 2) return;
  auto ppc = pp2_counting_comm();
  ModelSpec m = llama_like();
  m.layers = 4;
  const int64_t mbs = 2, seq = 32;
  auto peak = [&](int gas) { return pp2_step_peak(m, ppc.get(), "mbs=2,precision=fp32,schedule=1f1b", gas, seq); };
  const int64_t sent = mbs * seq * m.hidden * 4;  // one (b, s, h) fp32 tensor
  // Also with sends that the host never sees arrive before it waits for them,
  // as on a GPU whose host runs ahead: only the wait two sends later on the
  // same link frees them then (Engine::Impl::bound_sends).
  for (bool opaque : {false, true}) {
    const bool before = rt::mpi_sends_seen_done_only_when_waited(opaque);
    const int64_t few = peak(4), many = peak(16);
    rt::mpi_sends_seen_done_only_when_waited(before);
    INFO("rank " << w.rank << (opaque ? ", sends seen done only when waited" : "") << ": peak over the step's start "
                 << few << " B with 4 micro-batches, " << many << " B with 16; one sent tensor " << sent << " B");
    CHECK(many - few < 2 * sent);
  }
  // PLANNER_PP_SENDS_IN_FLIGHT=0 holds them to the step's end: the 12 more
  // micro-batches' sends (one a stage) are all in the peak.
  const bool before = rt::mpi_sends_seen_done_only_when_waited(true);
  ::setenv("PLANNER_PP_SENDS_IN_FLIGHT", "0", 1);
  const int64_t few = peak(4), many = peak(16);
  ::unsetenv("PLANNER_PP_SENDS_IN_FLIGHT");
  rt::mpi_sends_seen_done_only_when_waited(before);
  CHECK(many - few >= 12 * sent);
}

TEST_CASE("dist: a stage keeps no copy of a chunk's output once sent (GPipe's in-flight micro-batches hold only their saved tensors)",
          "[dist][pp]") {
  // Stage 0 of pp=2 under GPipe holds every micro-batch's forward until its
  // backward: its two layers' saved tensors (costmodel/activations.cpp; the
  // first layer's input is the embedding's output). The chunk's output, sent
  // on, is no local layer's input, and the Engine keeps only its gradient
  // edge (send_f). So 8 micro-batches against 2 add 6 x the layers' bytes.
  // Kept until the backward, as before send_f dropped it, the outputs added 6
  // more (b, s, h) tensors. The sends not yet arrived at the peak (freed as
  // they arrive, none freed before the step's end once the forwards are done)
  // only ever add: the upper margin.
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 2) return;
  auto ppc = pp2_counting_comm();
  ModelSpec m = llama_like();
  m.layers = 4, m.hidden = 64, m.ffn = 256;
  m.norm = NormKind::LayerNorm;  // as the tp test: ATen's CPU rms_norm saves more than the model counts
  const int64_t b = 2, seq = 32;
  auto peak = [&](int gas) { return pp2_step_peak(m, ppc.get(), "mbs=2,precision=fp32,schedule=gpipe", gas, seq); };
  const double per_mb = 2.0 * layer_activation_bytes(m, seq, b, 4, Ckpt::None).total(1, false);
  const double sbh = 4.0 * b * seq * m.hidden;  // one (b, s, h) fp32 tensor
  const int64_t two = peak(2), eight = peak(8);
  if (w.rank != 0) return;  // stage 0: no head, its peak is the micro-batches' forwards
  INFO("stage 0: peak over the step's start " << two << " B with 2 micro-batches, " << eight << " B with 8; "
                                              << per_mb << " B saved per micro-batch; one (b, s, h) " << sbh << " B");
  CHECK(double(eight - two) >= 6 * per_mb - sbh);
  CHECK(double(eight - two) <= 6 * per_mb + 4.5 * sbh);
}

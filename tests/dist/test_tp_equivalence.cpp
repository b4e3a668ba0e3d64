// Tensor parallelism (Megatron-LM) and sequence parallelism (Korthikanti et al.
// 2022) through the Engine on the CPU (MPI), alone and composed with data
// parallelism, ZeRO, offload and pipeline parallelism: losses and every
// parameter (gathered back into full tensors) after three steps within 1e-5 of
// the single-process Trainer on the same global batch (fp32).
//
// Models: a GPT-2-like (learned positions, LayerNorm, biases, tied embeddings;
// its vocabulary made 101 so that the vocabulary-parallel shards end in padding
// rows), a LLaMA-like (grouped-query attention with 4 heads and 2 kv heads,
// RMSNorm, SwiGLU, rotary, untied head), a GPT-J-like parallel block (untied,
// head bias), a BERT-like encoder (MLM head, token types) and an OPT-350m-like
// (project_in/out, position offset).
#include <chrono>
#include <string>

#include "costmodel/activations.hpp"
#include "costmodel/model_states.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/device.hpp"
#include "strategies/errors.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

namespace {

ModelSpec gpt2_odd_vocab() {
  ModelSpec m = gpt2_like();
  m.vocab = 101;  // not a multiple of tp: the last rank's rows end past the vocabulary
  return m;
}

// Every strategy of `texts` with the given degrees, sp off and on, on each model.
void check_tp(int dp, int pp, int tp, const std::vector<ModelSpec>& models, const std::vector<const char*>& texts,
              bool with_sp = true) {
  check_grid({dp, pp, tp}, models, texts, with_sp);
}

}  // namespace

TEST_CASE("dist: tensor and sequence parallelism equal the single-process run", "[dist][tp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  if (w.size == 2) {
    check_tp(1, 1, 2, {gpt2_odd_vocab(), llama_like(), gptj_like()},
             {"mbs=2,gas=2", "mbs=1,gas=3,ckpt=full", "mbs=2,gas=1,ckpt=selective"});
    check_tp(1, 1, 2, {bert_like(), opt350_like()}, {"mbs=2,gas=2"});
  }
  if (w.size == 4) {
    // dp2·tp2 with ZeRO (the replicated gradients' sum under sp meets the
    // chunks of ZeRO-2/3 and the host copies of offload).
    check_tp(2, 1, 2, {gpt2_odd_vocab(), llama_like()},
             {"zero=1,mbs=2,gas=2", "zero=2,mbs=1,gas=2", "zero=3,mbs=2,gas=1,ckpt=full",
              "zero=1,offload=optimizer,mbs=1,gas=2"});
    check_tp(1, 1, 4, {gpt2_like(), gptj_like()}, {"mbs=2,gas=2"});
    // tp2·pp2, with and without sp (the stages exchange sequence shards), the
    // interleaved schedule and a tied model (the last stage's copy of the
    // vocabulary-parallel word matrix).
    ModelSpec llama = llama_like(), gptj = gptj_like(), gpt2 = gpt2_odd_vocab();
    llama.layers = gptj.layers = 4;
    gpt2.layers = 4;
    check_tp(1, 2, 2, {llama, gptj}, {"mbs=1,gas=4,schedule=1f1b", "mbs=2,gas=2,schedule=gpipe"});
    check_tp(1, 2, 2, {gpt2}, {"mbs=2,gas=2,schedule=interleaved,vpp=2"});
  }
  if (w.size == 8) {
    check_tp(4, 1, 2, {llama_like()}, {"zero=2,mbs=1,gas=2"});
    check_tp(2, 1, 4, {gpt2_like()}, {"zero=1,mbs=1,gas=2"});
    ModelSpec llama = llama_like();
    llama.layers = 4;
    check_tp(2, 2, 2, {llama}, {"zero=1,mbs=1,gas=4,schedule=1f1b"});
  }
}

TEST_CASE("dist: tensor and sequence parallelism in bf16 and fp16 follow the single-process run", "[dist][tp]") {
  // 16-bit activations are summed in a different order across the tp ranks, so
  // only closeness: losses within 1e-3, parameters within 4e-3 (a few bf16 ulps
  // of the largest weights, the norms' 1.0) after three steps.
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 2) return;
  const GridComms c = make_grid_comms({1, 1, 2});
  for (Precision p : {Precision::BF16, Precision::FP16})
    for (int sp = 0; sp <= 1; ++sp) {
      Strategy s = Strategy::parse("tp=2,mbs=2,gas=2");
      s.precision = p, s.sp = sp == 1;
      check_equivalent(llama_like(), s, 16, c, 3, Tolerance{1e-3, 4e-3});
    }
}

TEST_CASE("dist: tensor parallelism refuses what it cannot split", "[dist][tp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 4) return;
  const GridComms c = make_grid_comms({1, 1, 4});
  Strategy s = Strategy::parse("tp=4,mbs=1,gas=1,precision=fp32");
  auto engine = [&](const ModelSpec& m, const Strategy& st) {
    const rt::RunConfig cfg = run_config(m, st, 16);
    rt::Engine e(cfg, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, cfg.options.seed), nullptr, nullptr,
                 c.tp.get());
  };
  // LLaMA-like: 2 kv heads over 4 ranks.
  CHECK_THROWS_AS(engine(llama_like(), s), InputError);
  try {
    engine(llama_like(), s);
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("key/value heads") != std::string::npos);
  }
  // Sequence parallelism needs the sequence to divide.
  s.sp = true;
  const rt::RunConfig odd = run_config(gpt2_like(), s, 18);
  CHECK_THROWS_AS(rt::Engine(odd, at::kCPU, std::make_shared<rt::SyntheticTokens>(96, 1), nullptr,
                             nullptr, c.tp.get()),
                  InputError);
}

TEST_CASE("dist: the memory model's parameters per rank are the runtime's under tp", "[dist][tp]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  const GridComms c = make_grid_comms({1, 1, w.size});
  for (const ModelSpec& m : {gpt2_odd_vocab(), llama_like(), gptj_like(), bert_like(), opt350_like()}) {
    if (m.kv_heads % w.size != 0) continue;
    INFO(m.name << " tp=" << w.size);
    const rt::TransformerModel model(m, 16, c.tp.get(), false);
    CHECK(model.store().numel() == stage_params_per_rank(m, int(m.layers), true, true, 1, w.size));
    CHECK(model.store().full_numel() == m.total_params());
  }
}

TEST_CASE("dist: the activations a forward keeps under tp and sp are the memory model's", "[dist][tp]") {
  // Bytes alive between the start of the step and the head (the counting CPU
  // allocator): the layers' saved tensors, which costmodel/activations.cpp
  // predicts per layer as replicated + split / t (sp: (replicated + split) / t;
  // Korthikanti et al. 2022, Table 2, with fused attention and no dropout),
  // plus the embedding's output (b, s, h) (a sequence shard under sp) and a few
  // small tensors (labels, masks). This holds because under sp the
  // column-parallel GEMMs keep only the sequence shard (LinearAccum gathers it
  // again in the backward).
  const rt::WorldInfo w = rt::init_world();
  if (w.size != 2 && w.size != 4) return;  // the model's 4 heads split 2 or 4 ways
  rt::enable_cpu_memory_counting();
  const GridComms c = make_grid_comms({1, 1, w.size});
  // GPT-2's family, and LLaMA's (the fused rotary and SwiGLU of
  // runtime/model/fused_ops.hpp: grouped-query at tp=2, one kv head per rank at
  // tp=4) with LayerNorm: ATen's CPU rms_norm is a composition that saves two
  // more (b, s, h) tensors per norm than the GPU's fused kernel, which the
  // model counts.
  ModelSpec llama = llama_like();
  llama.kv_heads = w.size;
  llama.norm = NormKind::LayerNorm;
  for (ModelSpec m : {gpt2_like(), llama})
  for (const char* ckpt : {"none", "full"})
    for (int sp = 0; sp <= 1; ++sp) {
      m.layers = 4, m.hidden = 64, m.ffn = 256;
      const int64_t b = 2, s = 32;
      Strategy st = Strategy::parse(std::string("mbs=2,gas=1,precision=fp32,ckpt=") + ckpt);
      st.tp = w.size, st.sp = sp == 1;
      INFO(m.name << " " << st.to_string());
      rt::Engine e(run_config(m, st, s), at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, 1), nullptr,
                   nullptr, c.tp.get());
      int64_t at_head = 0;
      e.before_head = [&] { at_head = rt::memory_stats(false).allocated; };
      const int64_t start = rt::memory_stats(false).allocated;
      e.step(0);
      const double layers = double(m.layers) * layer_activation_bytes(m, s, b, 4, st.ckpt).total(w.size, st.sp);
      const double embedding = 4.0 * b * s * m.hidden / (st.sp ? w.size : 1);
      CHECK(double(at_head - start) == Approx(layers + embedding).margin(8 << 10));
    }
}

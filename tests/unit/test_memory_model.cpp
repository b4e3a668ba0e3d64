#include "catch.hpp"
#include "costmodel/activations.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/model_states.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/errors.hpp"
#include "strategies/schedule.hpp"

using namespace planner;

namespace {

double total_state_gb(double params, int zero, int dp) {
  Strategy s;
  s.dp = dp;
  s.zero = zero;
  ModelStateBytes b = model_state_bytes(params, s, MemoryConstants{});
  return (b.gpu_params + b.gpu_grads + b.gpu_optimizer) / 1e9;
}

// A GPT-3-like shape for the activation formulas (any shape works: the test
// compares against the closed forms of Korthikanti et al. Table 2).
ModelSpec gpt_shape(int64_t layers, int64_t h, int64_t heads) {
  ModelSpec m;
  m.name = "test-gpt";
  m.layers = layers, m.hidden = h, m.heads = heads, m.kv_heads = heads, m.ffn = 4 * h;
  m.vocab = 51200, m.max_positions = 2048;
  return m;
}

}  // namespace

TEST_CASE("ZeRO paper model states: Psi=7.5B, Nd=64, K=12", "[memory]") {
  // Rajbhandari et al. 2020, Figure 1: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
  CHECK(total_state_gb(7.5e9, 0, 64) == Approx(120.0).margin(0.05));
  CHECK(total_state_gb(7.5e9, 1, 64) == Approx(31.4).margin(0.05));
  CHECK(total_state_gb(7.5e9, 2, 64) == Approx(16.6).margin(0.05));
  CHECK(total_state_gb(7.5e9, 3, 64) == Approx(1.9).margin(0.05));
  // fp32 training keeps the weights as master copy: 4 + 4 + 8 bytes.
  Strategy s;
  s.precision = Precision::FP32;
  ModelStateBytes b = model_state_bytes(1e9, s, MemoryConstants{});
  CHECK(b.gpu_params + b.gpu_grads + b.gpu_optimizer == Approx(16e9));
}

TEST_CASE("offload moves optimizer state (and parameters) to the host", "[memory]") {
  Strategy s;
  s.dp = 4, s.zero = 2, s.offload = Offload::Optimizer;
  ModelStateBytes b = model_state_bytes(1e9, s, MemoryConstants{});
  CHECK(b.gpu_optimizer == 0);
  CHECK(b.gpu_grads == Approx(2e9 / 4));  // the reduced gradient shard waits on the GPU for its copy out
  CHECK(b.gpu_params == Approx(2e9));
  // Host: optimizer shard (12), pinned gradient and parameter shards (2 + 2),
  // one fp32 conversion chunk of 256 MiB.
  CHECK(b.host_bytes == Approx((12e9 + 2e9 + 2e9) / 4 + 256.0 * (1 << 20)));
  s.zero = 3, s.offload = Offload::All;
  b = model_state_bytes(1e9, s, MemoryConstants{});
  CHECK(b.gpu_params == 0);  // the parameter shard is the pinned host copy
  CHECK(b.host_bytes == Approx((12e9 + 2e9 + 2e9) / 4 + 256.0 * (1 << 20)));
}

TEST_CASE("Megatron activation formulas (Korthikanti et al. 2022, Table 2)", "[memory]") {
  const ModelSpec m = gpt_shape(96, 12288, 96);
  const double s = 2048, b = 1, h = 12288, a = 96;
  const AttentionImpl megatron{/*flash=*/false, /*dropout=*/true};
  auto bytes = [&](Ckpt c, int t, bool sp) { return layer_activation_bytes(m, 2048, 1, 2, c, megatron).total(t, sp); };
  const double sbh = s * b * h;
  CHECK(bytes(Ckpt::None, 1, false) == Approx(sbh * (34 + 5 * a * s / h)));
  for (int t : {2, 4, 8}) {
    INFO("t=" << t);
    CHECK(bytes(Ckpt::None, t, false) == Approx(sbh * (10 + 24.0 / t + 5 * a * s / (h * t))));
    CHECK(bytes(Ckpt::None, t, true) == Approx(sbh * (34.0 / t + 5 * a * s / (h * t))));
    CHECK(bytes(Ckpt::Selective, t, false) == Approx(sbh * (10 + 24.0 / t)));
    CHECK(bytes(Ckpt::Selective, t, true) == Approx(sbh * 34.0 / t));
  }
  CHECK(bytes(Ckpt::Full, 1, false) == Approx(2 * sbh));
  CHECK(bytes(Ckpt::Full, 8, true) == Approx(2 * sbh / 8));  // SP splits the saved input too
  // With fused attention and no dropout (this project's runtime) the s^2 terms
  // vanish and only the fp32 log-sum-exp per head remains: 32sbh + 4asb.
  CHECK(layer_activation_bytes(m, 2048, 1, 2, Ckpt::None).total(1, false) == Approx(32 * sbh + 4 * a * s * b));
}

TEST_CASE("in-flight micro-batches: closed forms equal the schedules", "[memory][schedule]") {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 32; ++m) {
      auto g = gpipe(pp, m);
      auto f = one_f_one_b(pp, m);
      for (int s = 0; s < pp; ++s) {
        INFO("pp=" << pp << " m=" << m << " stage=" << s);
        CHECK(max_inflight(g[s]) == m);
        CHECK(max_inflight(f[s]) == std::min(pp - s, m));
      }
    }
  }
  // The memory model uses exactly these counts.
  ModelSpec mdl = gpt_shape(8, 1024, 16);
  Plan p;
  p.model = mdl;
  p.cluster = parse_cluster("4xA100-80GB");
  p.strategy = Strategy::parse("dp=1,pp=4,gas=8");
  p.seq = 1024;
  p.global_batch = 8;
  MemoryReport r = estimate_memory(p);
  REQUIRE(r.stages.size() == 4);
  for (int s = 0; s < 4; ++s) CHECK(r.stages[s].inflight_microbatches == 4 - s);
  p.strategy.schedule = Schedule::GPipe;
  r = estimate_memory(p);
  for (int s = 0; s < 4; ++s) CHECK(r.stages[s].inflight_microbatches == 8);
}

TEST_CASE("stage parameters: TP splits matrices, PP splits layers, tied head copied", "[memory]") {
  const ModelSpec m = gpt_shape(24, 2048, 16);
  CHECK(stage_params_per_rank(m, 24, true, true, 1, 1) == m.total_params());
  const int64_t tp2 = stage_params_per_rank(m, 24, true, true, 1, 2);
  CHECK(tp2 > m.total_params() / 2);
  CHECK(tp2 < m.total_params() / 2 + 24 * 4 * 2048 + 2 * 2048 * 2048);  // replicated: norms, row biases, positions
  const int64_t first = stage_params_per_rank(m, 12, true, false, 2, 1);
  const int64_t last = stage_params_per_rank(m, 12, false, true, 2, 1);
  CHECK(first + last == m.total_params() + m.vocab * m.hidden);  // Megatron keeps a tied copy on the last stage
}

TEST_CASE("stage parameters: vocabulary-parallel rows are ceil(vocab / tp), as the runtime declares them", "[memory]") {
  // GPT-2's vocabulary, 50257 (odd): under tp=2 each rank holds ceil(50257/2) =
  // 25129 rows of the word embedding (runtime/model/transformer.hpp, TransformerModel's
  // vocabulary-parallel split; the second rank's last row is zero padding), so
  // the embedding unit is (embedding_params - 50257 h) + 25129 h; an untied head
  // with a bias likewise 25129 (h + 1); the layer splits everything but its
  // norms and the row-parallel biases (2 norms of 2h, o and fc2 biases of h).
  ModelSpec m = gpt_shape(2, 64, 4);
  m.vocab = 50257;
  const int64_t h = m.hidden, rows = 25129;
  CHECK(stage_params_per_rank(m, 0, true, false, 1, 2) == m.embedding_params() - m.vocab * h + rows * h);
  m.tied_embeddings = false, m.lm_head_bias = true, m.final_norm = true;
  CHECK(stage_params_per_rank(m, 0, false, true, 1, 2) == 2 * h + rows * (h + 1));
  const int64_t repl = 2 * 2 * h + 2 * h;
  CHECK(stage_params_per_rank(m, 1, false, false, 1, 2) == (m.layer_params() - repl) / 2 + repl);
  // SwiGLU with biases: the down projection's bias is replicated too.
  m.mlp = MlpKind::SwiGlu, m.mlp_bias = true;
  CHECK(stage_params_per_rank(m, 1, false, false, 1, 2) == (m.layer_params() - repl) / 2 + repl);
}

TEST_CASE("layer partition is balanced and covers every layer", "[memory]") {
  const ModelSpec m = gpt_shape(30, 1024, 16);
  for (int chunks : {1, 2, 4, 7, 8, 30}) {
    auto parts = partition_layers(m, chunks);
    int sum = 0, lo = 1 << 30, hi = 0;
    for (int l : parts) sum += l, lo = std::min(lo, l), hi = std::max(hi, l);
    CHECK(sum == 30);
    CHECK(hi - lo <= 1);
    if (chunks > 2 && 30 % chunks) CHECK(parts.front() <= parts[1]);  // extras go to the middle first
  }
}

TEST_CASE("memory report: categories by hand for one GPU", "[memory]") {
  // 1 GPU, bf16, no parallelism: parameters 2P, gradients 2P, optimizer 12P.
  Plan p;
  p.model = gpt_shape(12, 768, 12);
  p.cluster = parse_cluster("1xA100-80GB");
  p.strategy = Strategy::parse("mbs=4");
  p.seq = 1024;
  p.global_batch = 4;
  MemoryReport r = estimate_memory(p);
  const double P = double(p.model.total_params());
  const auto& g = r.peak_breakdown();
  CHECK(g[int(MemCategory::Parameters)] == int64_t(2 * P));
  CHECK(g[int(MemCategory::Gradients)] == int64_t(2 * P));
  CHECK(g[int(MemCategory::OptimizerStates)] == int64_t(12 * P));
  const double sbh = 1024.0 * 4 * 768;
  // 12 layers x (32 sbh + 4 a s b) + final-norm and head inputs 2 x 2 sbh.
  CHECK(g[int(MemCategory::Activations)] == int64_t(12 * (32 * sbh + 4 * 12 * 1024 * 4) + 4 * sbh));
  // Logits as the runtime holds them: bf16 logits and their gradient (2 + 2
  // bytes per entry), which the fused cross-entropy kernel writes directly; the
  // vocabulary 51200 is already a multiple of 64, so the LM head reads its
  // matrix in place (no padded copy, no copy of its gradient).
  CHECK(g[int(MemCategory::LogitsLoss)] == int64_t(2.0 * 4096 * 51200 * 2));
  {
    // Without the fused kernels (HardwareProfile::fused_ops false: a runtime built
    // without nvcc) the chunked ATen loss holds a 256 MiB fp32 chunk and, bf16
    // at tp=1, the fp32 copy log_softmax makes of it; fp16's softmax kernel
    // converts as it reads, one chunk.
    HardwareProfile aten = default_profile(p.cluster.gpu);
    aten.fused_ops = false;
    CHECK(estimate_memory(p, Engine::Ours, &aten).peak_breakdown()[int(MemCategory::LogitsLoss)] ==
          int64_t(2.0 * 4096 * 51200 * 2 + 2 * 256.0 * (1 << 20)));
    Plan h = p;
    h.strategy = Strategy::parse("mbs=4,precision=fp16");
    CHECK(estimate_memory(h, Engine::Ours, &aten).peak_breakdown()[int(MemCategory::LogitsLoss)] ==
          int64_t(2.0 * 4096 * 51200 * 2 + 256.0 * (1 << 20)));
  }
  // Overhead: context 0.75 GiB + 64 MiB buffers + the optimizer's 256 MiB fp32
  // chunk; no fragmentation term (the runtime's expandable segments).
  CHECK(g[int(MemCategory::Overhead)] == int64_t(0.75 * (1 << 30) + 64.0 * (1 << 20) + 256.0 * (1 << 20)));
  CHECK(r.fits());
  {
    // GPT-2's 50257 pads to 50304: the padded copy of the matrix and its
    // gradient are there too.
    Plan q = p;
    q.model.vocab = 50257;
    CHECK(estimate_memory(q).peak_breakdown()[int(MemCategory::LogitsLoss)] ==
          int64_t(2.0 * 4096 * 50304 * 2 + 2.0 * 2 * 50304 * 768));
  }
  // ZeRO-3 over 8 GPUs divides all three model-state categories by 8.
  p.cluster = parse_cluster("8xA100-80GB");
  p.strategy = Strategy::parse("dp=8,zero=3,mbs=4");
  p.global_batch = 32;
  r = estimate_memory(p);
  CHECK(r.peak_breakdown()[int(MemCategory::Parameters)] == int64_t(2 * P / 8));
  CHECK(r.peak_breakdown()[int(MemCategory::OptimizerStates)] == int64_t(12 * P / 8));
}

TEST_CASE("full recomputation: the peak is the larger of the head and one recomputed layer", "[memory]") {
  Plan p;
  p.model = gpt_shape(12, 768, 12);
  p.cluster = parse_cluster("1xA100-80GB");
  p.strategy = Strategy::parse("mbs=4,ckpt=full");
  p.seq = 1024;
  p.global_batch = 4;
  const auto g = estimate_memory(p).peak_breakdown();
  const double sbh = 1024.0 * 4 * 768;
  // Stored layer inputs (2 sbh each) and the head's two inputs; one recomputed
  // layer (32 sbh + lse) with the backward's working set (the output's
  // gradient 2 sbh and, GeLU with f = 4h, 2 sbf = 8 sbh) is smaller than the
  // logits, so it adds nothing. The head's block (logits of 400 MiB) is held
  // through the forward, beside the last layer's transient tensors: fc1's and
  // GeLU's outputs (2 x 2 sbf = 16 sbh) and fc2's (2 sbh).
  CHECK(g[int(MemCategory::Activations)] == int64_t(12 * 2 * sbh + 4 * sbh + 18 * sbh));
  // With a tiny vocabulary the recomputed layer is the larger moment.
  p.model.vocab = 64;
  const auto h = estimate_memory(p).peak_breakdown();
  const double one_layer = 32 * sbh + 4.0 * 12 * 1024 * 4;
  const double working = 2 * sbh + 8 * sbh;
  CHECK(h[int(MemCategory::Activations)] ==
        int64_t(12 * 2 * sbh + 4 * sbh + one_layer + working - double(h[int(MemCategory::LogitsLoss)])));
}

TEST_CASE("memory: a stage without the head adds its first backward's working set to what it saved", "[memory]") {
  // validation/h200x2/stage74: at stage 0's peak, the first layer backward's
  // MLP holds the output's gradient (b, s, h), the gradient of SwiGLU's input
  // (b, s, 2f) and of the down projection's input (b, s, f), the activation
  // that projection saved (b, s, f) freed: e (sbh + 2 sbf) beyond the saved
  // tensors. llama-3.2-1b: h 2048, f 8192; mbs 4 x seq 2048 = 8192 tokens, bf16.
  const Plan p{resolve_model("llama-3.2-1b"), parse_cluster("2xH200"),
               Strategy::parse("pp=2,mbs=4,gas=8,schedule=1f1b,precision=bf16"), 2048, 32};
  const StageMemory first = estimate_memory(p).stages[0];
  REQUIRE(first.inflight_microbatches == 2);
  REQUIRE(first.layers == 8);
  const double saved = 2.0 * 8 * layer_activation_bytes(p.model, 2048, 4, 2, Ckpt::None).total(1, false);
  const double working = 2.0 * 8192 * (2048 + 2 * 8192);
  CHECK(double(first.gpu[int(MemCategory::Activations)]) == Approx(saved + working).epsilon(1e-12));
}

TEST_CASE("memory report says what binds when a plan misses", "[memory]") {
  Plan p;
  p.model = gpt_shape(32, 4096, 32);  // ~6.5B parameters: 16 bytes each is ~100 GB
  p.cluster = parse_cluster("1xRTX3090");
  p.strategy = Strategy::parse("mbs=1,precision=bf16");
  p.seq = 2048;
  p.global_batch = 1;
  MemoryReport r = estimate_memory(p);
  CHECK_FALSE(r.fits());
  CHECK(r.binding == MemCategory::OptimizerStates);
  CHECK(r.per_gpu_peak_bytes > r.gpu_capacity_bytes);
}

TEST_CASE("compat rules name what is wrong", "[memory][strategy]") {
  Plan p;
  p.model = gpt_shape(12, 768, 12);
  p.cluster = parse_cluster("4xA100-80GB");
  p.seq = 1024;
  auto msg = [&](const char* s) {
    p.strategy = Strategy::parse(s);
    p.global_batch = p.strategy.global_batch();
    try {
      check_compat(p);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(msg("dp=4") == "");
  CHECK(msg("dp=2").find("must equal the GPU count 4") != std::string::npos);
  p.model.heads = 6, p.model.kv_heads = 6;  // 768/6 = 128 head dim
  CHECK(msg("tp=4").find("must divide the attention heads") != std::string::npos);
  p.model.heads = 12, p.model.kv_heads = 12;
  p.model.layers = 2;
  CHECK(msg("pp=4").find("at most the layers") != std::string::npos);
  p.model.layers = 12;
  p.cluster = parse_cluster("4xV100-32GB");
  CHECK(msg("dp=4,precision=bf16").find("bfloat16") != std::string::npos);
  p.cluster = parse_cluster("4xA100-80GB");
  p.seq = 4096;
  CHECK(msg("dp=4").find("learned positions") != std::string::npos);
  p.seq = 1024;
  p.strategy = Strategy::parse("dp=4");
  p.global_batch = 7;
  CHECK_THROWS_AS(check_compat(p), InputError);
  p.strategy = Strategy::parse("dp=1,tp=4,zero=1");
  p.global_batch = 1;
  auto notes = check_compat(p);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("shards nothing") != std::string::npos);
}

TEST_CASE("ZeRO buffers mirror the executor: unit gradients and gathered units", "[memory]") {
  // 2 layers, one stage: units embedding (E), two layers (L), head (H).
  ModelSpec m = gpt_shape(2, 1024, 16);
  REQUIRE(m.tied_embeddings);
  const double L = double(m.layer_params()), E = double(m.embedding_params()), H = double(m.head_params());
  Plan p;
  p.model = m;
  p.cluster = parse_cluster("2xA100-80GB");
  p.seq = 1024;
  p.global_batch = 2;
  // Besides NCCL's own buffers (one dp communicator).
  const double nccl = memory_constants(p.cluster).nccl_bytes_per_communicator;
  auto comm = [&](const char* text) {
    p.strategy = Strategy::parse(text);
    return double(estimate_memory(p).peak_breakdown()[int(MemCategory::CommBuffers)]) - nccl;
  };
  // ZeRO-0/1 reduce in place: no buckets.
  CHECK(comm("dp=2,zero=0") == 0);
  CHECK(comm("dp=2,zero=1") == 0);
  // ZeRO-2: the embedding's and the head's own gradient buffers and two
  // layer-sized slots; ZeRO-3 the same again for the gathered parameters.
  CHECK(comm("dp=2,zero=2") == Approx(2.0 * (E + H + 2 * L)).epsilon(1e-9));
  CHECK(comm("dp=2,zero=3") == Approx(2.0 * 2 * (E + H + 2 * L)).epsilon(1e-9));
}

TEST_CASE("NCCL memory: one set per collective communicator and per pipeline link, as the runtime makes them",
          "[memory]") {
  const MemoryConstants k = memory_constants(parse_cluster("2xH200"));
  const double C = k.nccl_bytes_per_communicator, L = k.nccl_bytes_per_pipe_link;
  REQUIRE(C > 0);
  REQUIRE(L > 0);
  ModelSpec tied = gpt_shape(8, 1024, 16), untied = tied;
  REQUIRE(tied.tied_embeddings);
  untied.tied_embeddings = false;
  auto nb = [&](const ModelSpec& m, const char* text, int stage) { return nccl_bytes(m, Strategy::parse(text), stage, k); };
  CHECK(nb(tied, "dp=1", 0) == 0);
  CHECK(nb(tied, "dp=2", 0) == C);
  CHECK(nb(tied, "dp=2,tp=2", 0) == 2 * C);
  // pp=2: the pp communicator (which also carries the tied word matrix's
  // gradient) and, on each rank, the link out and the link in.
  CHECK(nb(tied, "pp=2,gas=4", 0) == C + 2 * L);
  CHECK(nb(tied, "pp=2,gas=4", 1) == C + 2 * L);
  // The interleaved ring: both neighbours are the other rank, in both directions.
  CHECK(nb(tied, "pp=2,gas=4,schedule=interleaved,vpp=2", 0) == C + 4 * L);
  // pp=4: middle stages have two neighbours; the ends of a tied model one more group.
  CHECK(nb(tied, "pp=4,gas=4", 0) == 2 * C + 2 * L);
  CHECK(nb(tied, "pp=4,gas=4", 1) == C + 4 * L);
  CHECK(nb(untied, "pp=4,gas=4", 3) == C + 2 * L);
  CHECK(nb(untied, "dp=2,tp=2,pp=2,zero=1,gas=4", 1) == 3 * C + 2 * L);
  // Mixture of experts (runtime/measure.cpp setup_comms): ep > 1 adds the ep
  // group's all-to-all (per peer where measured, else one communicator) and,
  // when dp/ep > 1, the experts' gradient group.
  ModelSpec moe = untied;
  moe.moe.experts = 8, moe.moe.top_k = 2, moe.moe.expert_ffn = 512;
  CHECK(nb(moe, "dp=4,ep=4", 0) == 2 * C);           // dp, ep (dp/ep = 1: no experts' group)
  CHECK(nb(moe, "dp=4,ep=2", 0) == 3 * C);           // dp, experts' dp of 2, ep
  CHECK(nb(moe, "dp=4", 0) == C);                    // ep = 1: the dp group only
  MemoryConstants kp = k;
  kp.nccl_bytes_per_all_to_all_peer = 100;
  CHECK(nccl_bytes(moe, Strategy::parse("dp=4,ep=4"), 0, kp) == C + 3 * 100.0);
  CHECK(nccl_bytes(moe, Strategy::parse("dp=4,ep=2"), 0, kp) == 2 * C + 100.0);
  CHECK(nccl_bytes(moe, Strategy::parse("dp=2,tp=2,ep=2"), 0, kp) == 2 * C + 100.0);
  // A fixed part beside the per-peer one (two ep sizes measured): 50 + (ep - 1) x 100.
  MemoryConstants kf = kp;
  kf.nccl_bytes_all_to_all_fixed = 50;
  CHECK(nccl_bytes(moe, Strategy::parse("dp=4,ep=4"), 0, kf) == C + 50.0 + 3 * 100.0);
  CHECK(nccl_bytes(moe, Strategy::parse("dp=4,ep=2"), 0, kf) == 2 * C + 50.0 + 100.0);
}

TEST_CASE("ep > 1 without a measured all-to-all figure: the assumption is said", "[memory][moe]") {
  Plan p;
  p.model = model_preset("mixtral-8x7b");
  p.cluster = parse_cluster("8xH100");
  p.strategy = Strategy::parse("dp=8,ep=8,zero=0,mbs=1,gas=1");
  p.seq = 1024;
  p.global_batch = 8;
  HardwareProfile prof = default_profile(p.cluster.gpu);
  auto said = [&](const MemoryReport& r) {
    for (const auto& n : r.notes)
      if (n.find("all-to-all buffers per peer") != std::string::npos) return true;
    return false;
  };
  prof.nccl_all_to_all_peer_bytes = 0;
  CHECK(said(estimate_memory(p, Engine::Ours, &prof)));
  prof.nccl_all_to_all_peer_bytes = 1 << 28;
  CHECK_FALSE(said(estimate_memory(p, Engine::Ours, &prof)));
}

TEST_CASE("memory: the LM head's logits count its own chunk's waiting micro-batches, whatever vpp", "[memory][schedule]") {
  // validation/h200x4/moe37: pp=2 interleaved at vpp=8 was predicted 22-24% over
  // its peak, the logits counted once per chunk in flight on the last stage
  // (8.3 GiB against 1.0 measured). They live only in the last chunk's passes.
  Plan p;
  p.model = resolve_model("llama-3.2-1b");
  p.cluster = parse_cluster("4xH200");
  p.seq = 2048;
  double first = -1;
  for (int vpp : {2, 4, 8}) {
    p.strategy = Strategy::parse("dp=2,pp=2,mbs=4,gas=8,schedule=interleaved,vpp=" + std::to_string(vpp));
    p.global_batch = 2 * 4 * 8;
    const MemoryReport r = estimate_memory(p);
    const StageMemory& last = r.stages[1];
    const int h = max_inflight(interleaved_one_f_one_b(2, 8, vpp)[1], vpp - 1);
    INFO("vpp " << vpp << ": head chunk in flight " << h);
    // bf16 logits of each waiting micro-batch and of the one being computed (the
    // fused cross-entropy on a GPU keeps no fp32 chunk; 128256 needs no padding).
    const double want = 2.0 * (2048.0 * 4) * 128256 * (h + 1);
    CHECK(double(last.gpu[int(MemCategory::LogitsLoss)]) == Approx(want).epsilon(1e-9));
    if (first < 0) first = want;
    CHECK(want == first);  // not growing with vpp
  }
}

TEST_CASE("memory: interleaved stages hold the layers of the chunks in flight, not the mean chunk", "[memory][pp]") {
  // By hand (stage 0: micro-batch, chunk): F(0,c0) F(1,c0) F(0,c1) B(0,c1) F(1,c1) B(1,c1) B(0,c0) B(1,c0)
  // with chunks of 5 and 4 layers: 5, 10, 14 (the peak), 10, 14, 10, 5, 0.
  const StepList hand = parse_step_lists("0F0 0F1 0F0.c1 0B0.c1 0F1.c1 0B1.c1 0B0 0B1")[0];
  CHECK(max_inflight(hand) == 3);
  CHECK(max_inflight_weighted(hand, {5, 4}) == 14);
  CHECK(max_inflight_weighted(hand, {4, 5}) == 13);
  // Weights of 1 are max_inflight; a weight on one chunk only, that chunk's count.
  for (int vpp : {2, 4}) {
    const auto sched = interleaved_one_f_one_b(4, 8, vpp);
    for (int st = 0; st < 4; ++st) {
      CHECK(max_inflight_weighted(sched[st], std::vector<double>(vpp, 1.0)) == max_inflight(sched[st]));
      std::vector<double> only_last(vpp, 0.0);
      only_last.back() = 1;
      CHECK(max_inflight_weighted(sched[st], only_last) == max_inflight(sched[st], vpp - 1));
    }
  }
  // qwen2.5-7b at pp 4, vpp 2: 28 layers in 8 chunks of 3 and 4. The
  // activations are the weighted count's layers, not inflight x 3.5.
  Plan p;
  p.model = resolve_model("qwen2.5-7b");
  p.cluster = parse_cluster("4xH200");
  p.seq = 4096;
  p.strategy = Strategy::parse("pp=4,vpp=2,schedule=interleaved,zero=1,mbs=1,gas=8");
  p.global_batch = 8;
  const MemoryReport r = estimate_memory(p);
  const LayerPartition part(p.model.layers, 4, 2);
  for (int st = 0; st < 4; ++st) {
    const auto sched = interleaved_one_f_one_b(4, 8, 2);
    const std::vector<double> w = {double(part.chunk_layers()[size_t(st)]), double(part.chunk_layers()[size_t(4 + st)])};
    INFO("stage " << st << ": chunks of " << w[0] << " and " << w[1] << " layers");
    CHECK(r.stages[size_t(st)].inflight_layers == max_inflight_weighted(sched[size_t(st)], w));
  }
  CHECK(r.stages[1].inflight_layers > r.stages[1].inflight_microbatches * 3.5);
}

TEST_CASE("memory: under full recomputation the last layer's forward adds to the head's block", "[memory]") {
  // llama-3.2-1b (h 2048, SwiGLU f 8192) at tp 2 without sp, mbs 8 x seq
  // 8192 = 65,536 tokens: the forward's transient tensors at the down
  // projection are its gate/up output (65536 x 2 x 4096), the activation
  // (65536 x 4096) and the down output (65536 x 2048), bf16: 1024 + 512 +
  // 256 MiB, as the allocator's record of validation/h200x2/tploss84 has them.
  const ModelSpec m = resolve_model("llama-3.2-1b");
  CHECK(layer_forward_working_bytes(m, 8192, 8, 2).total(2, false) == double((1024 + 512 + 256) << 20));
  ModelSpec gelu = m;
  gelu.mlp = MlpKind::Gelu;
  CHECK(layer_forward_working_bytes(gelu, 8192, 8, 2).total(2, false) == double((512 + 512 + 256) << 20));
  // The plan: the head's block is held while the layers run forward, so the
  // peak carries one layer's forward working set beside the logits. With a
  // vocabulary too small for the block (logits under 128 MiB) the larger
  // moment is the first backward's, less the logits gone by then.
  Plan p;
  p.model = m;
  p.cluster = parse_cluster("2xH200");
  p.seq = 8192;
  p.global_batch = 8;
  p.strategy = Strategy::parse("tp=2,sp=0,zero=1,ckpt=full,mbs=8,gas=1");
  const MemoryReport block = estimate_memory(p);
  p.model.vocab = 256;
  const MemoryReport no_block = estimate_memory(p);
  const double fws = layer_forward_working_bytes(m, 8192, 8, 2).total(2, false);
  const double bws = layer_backward_working_bytes(m, 8192, 8, 2).total(2, false) +
                     layer_activation_bytes(m, 8192, 8, 2, Ckpt::None, AttentionImpl{}).total(2, false);
  const double small_logits = double(no_block.stages[0].gpu[int(MemCategory::LogitsLoss)]);
  const double act = double(block.stages[0].gpu[int(MemCategory::Activations)]);
  const double act_small = double(no_block.stages[0].gpu[int(MemCategory::Activations)]);
  INFO("forward " << fws << " B, backward " << bws << " B, small logits " << small_logits << " B");
  CHECK(act - act_small == Approx(fws - (bws - small_logits)).epsilon(1e-9));
}

TEST_CASE("the runtime's head block: an LM head, pp 1 or 1F1B, logits of 128 MiB or more", "[memory]") {
  const ModelSpec m = resolve_model("llama-3.2-1b");
  const double mib128 = double(int64_t(128) << 20);
  CHECK(runtime_reserves_head_block(m, Strategy::parse("mbs=1"), mib128));
  CHECK_FALSE(runtime_reserves_head_block(m, Strategy::parse("mbs=1"), mib128 - 1));
  CHECK(runtime_reserves_head_block(m, Strategy::parse("pp=2,schedule=1f1b"), mib128));
  CHECK_FALSE(runtime_reserves_head_block(m, Strategy::parse("pp=2,schedule=gpipe"), mib128));
  CHECK_FALSE(runtime_reserves_head_block(m, Strategy::parse("pp=2,vpp=2,schedule=interleaved"), mib128));
  ModelSpec bert = m;
  bert.mlm_head = true;
  CHECK_FALSE(runtime_reserves_head_block(bert, Strategy::parse("mbs=1"), mib128));
}

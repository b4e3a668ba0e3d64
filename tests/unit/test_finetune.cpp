// LoRA / QLoRA: the choice (strategies/finetune.hpp), its memory and its time.
#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/finetune.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/op_costs.hpp"
#include "costmodel/predict.hpp"
#include "specs/flops.hpp"
#include "costmodel/collectives.hpp"
#include "strategies/errors.hpp"
#include "strategies/strategy.hpp"

#include <vector>
#include <nlohmann/json.hpp>

using namespace planner;

TEST_CASE("finetune: full training keeps the canonical text and JSON", "[finetune]") {
  const Strategy s = Strategy::parse("dp=2,zero=1,mbs=4,gas=8");
  CHECK(s.finetune.mode == FinetuneMode::Full);
  CHECK(s.to_string() == "dp=2,tp=1,pp=1,zero=1,offload=none,ckpt=none,mbs=4,gas=8,schedule=1f1b,vpp=1,precision=bf16,sp=0");
  const nlohmann::json j = s;
  CHECK(!j.contains("finetune"));
  CHECK(Strategy::parse("finetune=full") == Strategy{});
}

TEST_CASE("finetune: lora and qlora parse, print and round-trip", "[finetune]") {
  const Strategy s = Strategy::parse("finetune=lora,lora_r=8,lora_alpha=16,lora_targets=q+v");
  CHECK(s.finetune.mode == FinetuneMode::Lora);
  CHECK(s.finetune.r == 8);
  CHECK(s.finetune.alpha == 16);
  CHECK(s.finetune.targets == (kLoraQ | kLoraV));
  CHECK(s.finetune.scale() == 2.0);
  CHECK(s.to_string().ends_with(",sp=0,finetune=lora,lora_r=8,lora_alpha=16,lora_targets=q+v"));
  CHECK(Strategy::parse(s.to_string()) == s);
  nlohmann::json j = s;
  CHECK(j["finetune"] == "lora");
  CHECK(j.get<Strategy>() == s);
  // Defaults: r 16, alpha 32, every linear layer of the blocks.
  const Strategy q = Strategy::parse("finetune=qlora");
  CHECK(q.finetune.quantized_base());
  CHECK(q.to_string().ends_with(",finetune=qlora,lora_r=16,lora_alpha=32,lora_targets=qkv+o+mlp"));
  CHECK(Strategy::parse("finetune=lora,lora_targets=all").finetune.targets == unsigned(kLoraAll));
  CHECK(Strategy::parse("finetune=lora,lora_targets=q+k+v").finetune.targets == (kLoraQ | kLoraK | kLoraV));
}

TEST_CASE("finetune: bad choices are refused with one line", "[finetune]") {
  auto msg = [](const char* text) {
    try {
      Strategy::parse(text).validate();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(msg("finetune=dora").find("finetune='dora' is not one of full|lora|qlora") != std::string::npos);
  CHECK(msg("lora_r=16").find("need finetune=lora or finetune=qlora") != std::string::npos);
  CHECK(msg("finetune=lora,lora_r=0") != "");
  CHECK(msg("finetune=lora,lora_r=5000") != "");
  CHECK(msg("finetune=lora,lora_targets=emb").find("'emb' is not one of") != std::string::npos);
  CHECK(msg("finetune=lora,lora_targets=") != "");
  // ZeRO-2/3 shard the adapters (the base stays replicated); tp is not executed.
  CHECK(msg("dp=2,zero=2,finetune=lora") == "");
  CHECK(msg("dp=2,zero=3,finetune=qlora") == "");
  CHECK(msg("tp=2,finetune=lora") == "");
  CHECK(msg("tp=2,sp=1,finetune=lora").find("finetune=lora with sp=1 is not executed") != std::string::npos);
  CHECK(msg("dp=2,zero=1,offload=optimizer,finetune=qlora").find("offload=optimizer with finetune=qlora") !=
        std::string::npos);
  CHECK(msg("dp=2,zero=1,finetune=qlora") == "");
  for (std::string m : {msg("finetune=dora"), msg("lora_r=16")}) CHECK(m.find('\n') == std::string::npos);
  // JSON objects follow the same rules.
  CHECK_THROWS_AS(nlohmann::json({{"lora_r", 8}}).get<Strategy>(), InputError);
}

TEST_CASE("finetune: NF4 with double quantization costs 4.127 bits per parameter", "[finetune]") {
  // Dettmers et al. 2023, sec. 3: 32/64 = 0.5 bits of absmax per parameter
  // before, 8/64 + 32/(64*256) = 0.127 after double quantization.
  CHECK(kNf4BitsPerParam == Approx(4.127).epsilon(1e-3));
  CHECK(kNf4BitsPerParam - 4.0 == Approx(0.126953125));
}

// ---------------------------------------------------------------- memory

namespace {
Plan ft_plan(const char* model, const char* gpus, const std::string& strategy, int64_t seq) {
  PlanRequest req;
  req.model = model;
  req.gpus = gpus;
  req.strategy = strategy;
  req.seq = seq;
  return build_plan(req);
}
}  // namespace

TEST_CASE("finetune: adapter counts match PEFT's for LLaMA-7B at r=64 on every linear layer", "[finetune]") {
  // LLaMA-7B (h 4096, ffn 11008, 32 layers), r = 64 on q, k, v, o, gate, up,
  // down, the QLoRA paper's setting: per layer 64 * (4 (4096 + 4096) + 3 (4096
  // + 11008)) = 1,249,280 * 4 = 4,997,120; 32 layers: 159,907,840, the
  // "trainable params" PEFT prints for it.
  const ModelSpec m = model_preset("llama-2-7b");
  Finetune f;
  f.mode = FinetuneMode::Qlora;
  f.r = 64;
  CHECK(adapter_params_per_layer(m, f, 1) * m.layers == 159'907'840);
  // Original LoRA's q and v only, r = 16: 2 * 16 * 8192 = 262,144 per layer.
  f.r = 16;
  f.targets = kLoraQ | kLoraV;
  CHECK(adapter_params_per_layer(m, f, 1) == 262'144);
  // TP 2: q's B is split (16 * (4096 + 2048)); o's A is split (16 * (2048 + 4096)).
  f.targets = kLoraQ | kLoraO;
  CHECK(adapter_params_per_layer(m, f, 2) == 2 * 16 * (4096 + 2048));
  CHECK(matrix_params_per_layer(m, 1) == 4 * 4096 * 4096 + 3 * 4096 * 11008);
  // The runtime's fused gate+up (2 x 11008 rows of 4096) is the largest matrix it dequantises.
  CHECK(largest_matrix_per_rank(m, 1) == 2 * 11008 * 4096);
  CHECK(largest_matrix_per_rank(m, 2) == 11008 * 4096);
}

TEST_CASE("finetune: QLoRA model states of LLaMA-2-7B by hand", "[finetune]") {
  const Plan p = ft_plan("llama-2-7b", "1xH100", "finetune=qlora,lora_r=64,mbs=1,gas=1", 512);
  const MemoryReport r = estimate_memory(p);
  const MemBreakdown& g = r.peak_breakdown();
  // Base: 32 * 202,375,168 = 6,476,005,376 matrix weights at 4.126953125 bits
  // = 3,340,771,328 bytes; the other 262,410,240 (embedding, head, norms) in
  // bf16; one dequantised gate+up matrix (2 x 11008 x 4096) in bf16, written
  // by the runtime's kernel with no temporaries; adapters in bf16.
  const double base = 3'340'771'328.0 + 2.0 * 262'410'240 + 2.0 * 2 * 11008 * 4096;
  const double adapters = 159'907'840.0;
  CHECK(double(g[int(MemCategory::Parameters)]) == Approx(base + 2 * adapters).epsilon(1e-12));
  // ATen's path (no kernel) adds its slice temporaries: 6 bytes for each of 2^24 weights.
  CHECK(nf4_dequant_buffer_bytes(p.model, p.strategy, false) ==
        Approx(nf4_dequant_buffer_bytes(p.model, p.strategy, true) + 6.0 * 16'777'216));
  CHECK(double(g[int(MemCategory::Gradients)]) == Approx(2 * adapters).epsilon(1e-12));
  CHECK(double(g[int(MemCategory::OptimizerStates)]) == Approx(12 * adapters).epsilon(1e-12));
  // LoRA: the base in bf16 (6,738,415,616 parameters), no dequantisation buffer.
  const Plan l = ft_plan("llama-2-7b", "1xH100", "finetune=lora,lora_r=64,mbs=1,gas=1", 512);
  CHECK(double(estimate_memory(l).peak_breakdown()[int(MemCategory::Parameters)]) ==
        Approx(2.0 * 6'738'415'616 + 2 * adapters).epsilon(1e-12));
  // ZeRO-1 over dp = 2 shards the adapters' optimizer states only.
  const Plan z = ft_plan("llama-2-7b", "2xH100", "finetune=lora,lora_r=64,zero=1,mbs=1,gas=1", 512);
  const MemoryReport rz = estimate_memory(z);  // the breakdown is the report's: keep it alive
  const MemBreakdown& gz = rz.peak_breakdown();
  CHECK(double(gz[int(MemCategory::OptimizerStates)]) == Approx(6 * adapters).epsilon(1e-12));
  CHECK(double(gz[int(MemCategory::Parameters)]) == Approx(2.0 * 6'738'415'616 + 2 * adapters).epsilon(1e-12));
}

TEST_CASE("finetune: activations a frozen base keeps, per matrix", "[finetune]") {
  const ModelSpec m = model_preset("llama-2-7b");
  const int64_t s = 512;
  const AttentionImpl flash{};
  const double full = layer_activation_bytes(m, s, 1, 2, Ckpt::None, flash).total(1, false);
  Finetune f;
  f.mode = FinetuneMode::Lora;
  // Every linear layer adapted: each input is kept for its A's gradient, as in
  // full training; the seven adapters add X A, 2 * 512 * 16 bytes each.
  CHECK(finetune_layer_activation_bytes(m, s, 1, 2, Ckpt::None, flash, 1, false, f) ==
        Approx(full + 7 * 2.0 * 512 * 16));
  // q and v only: the MLP's input (2 * 512 * 4096) and down's input (SwiGLU's
  // product, 2 * 512 * 11008) were kept only for weight gradients: dropped.
  // The attention output stays (the fused kernel's backward reads it).
  f.targets = kLoraQ | kLoraV;
  CHECK(finetune_layer_activation_bytes(m, s, 1, 2, Ckpt::None, flash, 1, false, f) ==
        Approx(full - 2.0 * 512 * 4096 - 2.0 * 512 * 11008 + 2 * 2.0 * 512 * 16));
  // Full recomputation keeps only the layer input, as in full training.
  CHECK(finetune_layer_activation_bytes(m, s, 1, 2, Ckpt::Full, flash, 1, false, f) ==
        layer_activation_bytes(m, s, 1, 2, Ckpt::Full, flash).total(1, false));
}

// ---------------------------------------------------------------- time
TEST_CASE("finetune: a frozen layer's backward drops the weight-gradient GEMMs", "[finetune]") {
  const ModelSpec m = model_preset("llama-2-7b");
  const HardwareProfile p = default_profile(resolve_cluster("1xH100").gpu);
  const LayerShape shape{2048, 1, 1, false, Precision::BF16, Ckpt::None};
  const PassTimes full = transformer_layer_times(p, m, shape, GroupLink{});
  Finetune f;
  f.mode = FinetuneMode::Lora;
  f.r = 16;
  f.targets = kLoraQ;
  PassTimes lora = full;
  apply_finetune_layer_times(p, m, shape, f, lora);
  const Precision bf = Precision::BF16;
  const int64_t T = 2048;
  // The four weight gradients of full training's layer (fused qkv, o, gate+up, down).
  const double wgrad = weight_grad_gemm_seconds(p, 4096, 3 * 4096, T, bf) + weight_grad_gemm_seconds(p, 4096, 4096, T, bf) +
                       weight_grad_gemm_seconds(p, 4096, 2 * 11008, T, bf) + weight_grad_gemm_seconds(p, 11008, 4096, T, bf);
  // q's adapter: forward X A (T x 16, k 4096) and (X A) B (T x 4096, k 16),
  // the latter accumulating into q's columns of the base output (reading
  // them: 2 T 4096 bytes more at the memory rate);
  // backward dZ (T x 16, k 4096), dX (T x 4096, k 16), dB (16 x 4096), dA (4096 x 16).
  const double fwd =
      gemm_seconds(p, T, 16, 4096, bf) + gemm_seconds(p, T, 4096, 16, bf) + 2.0 * T * 4096 / p.memory_Bps();
  const double bwd = gemm_seconds(p, T, 16, 4096, bf) + gemm_seconds(p, T, 4096, 16, bf) +
                     weight_grad_gemm_seconds(p, 16, 4096, T, bf) + weight_grad_gemm_seconds(p, 4096, 16, T, bf);
  CHECK(lora.forward.gemm_seconds == Approx(full.forward.gemm_seconds + fwd));
  CHECK(lora.backward.gemm_seconds == Approx(full.backward.gemm_seconds - wgrad + bwd));
  // The base's GEMM work is about 2/3 of full training's (forward + dX, no dW).
  const double base_share = (full.forward.gemm_seconds + full.backward.gemm_seconds - wgrad) /
                            (full.forward.gemm_seconds + full.backward.gemm_seconds);
  CHECK(base_share > 0.6);
  CHECK(base_share < 0.72);
  // The adapters' memory-bound passes: no add in the forward (the GEMM
  // accumulates); in the backward dZ's and dB's scale (2 bytes each way) and
  // one add of the adapters' dX into the base's (3 x 2 T 4096 bytes).
  const double bwd_mem = 2.0 * 2 * (double(T) * 16 + 16.0 * 4096) / p.memory_Bps() + 2 * p.kernel_overhead_seconds +
                         3.0 * 2 * T * 4096 / p.memory_Bps() + p.kernel_overhead_seconds;
  CHECK(lora.forward.memory_seconds == Approx(full.forward.memory_seconds));
  CHECK(lora.backward.memory_seconds - full.backward.memory_seconds ==
        Approx(p.memory_in_step_factor * bwd_mem).epsilon(1e-9));
  // q and k: k's dX accumulates into q's (its GEMM reads it), one add for both.
  Finetune qk = f;
  qk.targets = kLoraQ | kLoraK;
  PassTimes both = full;
  apply_finetune_layer_times(p, m, shape, qk, both);
  const double k_bwd = gemm_seconds(p, T, 16, 4096, bf) + gemm_seconds(p, T, 4096, 16, bf) +
                       weight_grad_gemm_seconds(p, 16, 4096, T, bf) + weight_grad_gemm_seconds(p, 4096, 16, T, bf) +
                       2.0 * T * 4096 / p.memory_Bps();
  CHECK(both.backward.gemm_seconds == Approx(lora.backward.gemm_seconds + k_bwd));
  CHECK(both.backward.memory_seconds - lora.backward.memory_seconds ==
        Approx(p.memory_in_step_factor * (2.0 * 2 * (double(T) * 16 + 16.0 * 4096) / p.memory_Bps() +
                                          2 * p.kernel_overhead_seconds))
            .epsilon(1e-9));
  // QLoRA adds the dequantisation of the seven matrices, forward and backward.
  // The runtime's kernel (the profile's fused_ops): one a matrix, reading the
  // codes (0.5 bytes a weight), the 8-bit constant of each 64 weights and the
  // fp32 scale of each 16,384, writing bf16 (2), at the streaming rate.
  const std::vector<int64_t> matrices{4096 * 4096, 4096 * 4096, 4096 * 4096, 4096 * 4096,
                                      4096 * 11008, 4096 * 11008, 4096 * 11008};
  f.mode = FinetuneMode::Qlora;
  PassTimes q = full;
  apply_finetune_layer_times(p, m, shape, f, q);
  MemoryOps deq;
  for (int64_t n : matrices) deq.add(MemKernel::Streaming, double(n) * (0.5 + 2 + 1.0 / 64 + 4.0 / 16384), 1);
  REQUIRE(p.fused_ops);
  CHECK(q.forward.memory_seconds - lora.forward.memory_seconds ==
        Approx(p.memory_in_step_factor * deq.seconds(p)).epsilon(1e-9));
  CHECK(q.backward.memory_seconds - lora.backward.memory_seconds ==
        Approx(p.memory_in_step_factor * deq.seconds(p)).epsilon(1e-9));
  // ATen's path: 14.5 bytes a weight (codes to int32: 0.5 + 2; the gather:
  // 2 + 4; the scale multiply into bf16: 4 + 2), strided kernels, three per
  // slice of 2^24 weights.
  HardwareProfile pa = p;
  pa.fused_ops = false;
  Finetune fl = f;
  fl.mode = FinetuneMode::Lora;
  PassTimes la = full, qa = full;
  apply_finetune_layer_times(pa, m, shape, fl, la);
  apply_finetune_layer_times(pa, m, shape, f, qa);
  MemoryOps deqa;
  for (int64_t n : matrices)
    deqa.add(MemKernel::Strided, double(n) * 14.5, n > (1 << 24) ? 9 : 3);  // 45,088,768 weights: 3 slices
  CHECK(qa.forward.memory_seconds - la.forward.memory_seconds ==
        Approx(pa.memory_in_step_factor * deqa.seconds(pa)).epsilon(1e-9));
}

TEST_CASE("finetune: predicted step, FLOPs and gradient traffic", "[finetune]") {
  const Plan full = ft_plan("llama-2-7b", "2xH100", "mbs=1,gas=4", 2048);
  const Plan lora = ft_plan("llama-2-7b", "2xH100", "mbs=1,gas=4,finetune=lora,lora_r=64", 2048);
  const HardwareProfile p = default_profile(full.cluster.gpu);
  const StepPrediction pf = predict(full), pl = predict(lora);
  CHECK(pl.step_seconds < pf.step_seconds);
  // FLOPs: full training's less 2 per frozen matrix weight per token, plus 6 per adapter weight.
  const double tokens = double(lora.global_batch) * 2048;
  CHECK(pl.model_flops_per_step ==
        Approx(pf.model_flops_per_step - 2 * tokens * double(matmul_params(full.model)) + 6 * tokens * 159'907'840.0));
  // The data-parallel all-reduce carries only the adapters' gradients.
  const TableCostModel cf = build_cost_model(full, p), cl = build_cost_model(lora, p);
  CHECK(cl.unit(1).all_reduce_seconds < cf.unit(1).all_reduce_seconds / 20);
  CHECK(cl.unit(0).all_reduce_seconds <= cl.unit(1).all_reduce_seconds);
  CHECK(cl.unit(0).backward_seconds == 0);
}

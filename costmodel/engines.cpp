#include "costmodel/engines.hpp"

#include <fmt/format.h>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

const char* to_string(Engine e) {
  switch (e) {
    case Engine::Ours: return "ours";
    case Engine::DeepSpeed: return "deepspeed";
    case Engine::Megatron: return "megatron";
    case Engine::Fsdp: return "fsdp";
  }
  return "?";
}

Engine parse_engine(std::string_view text) {
  const std::string t = to_lower(trim(text));
  if (t == "ours") return Engine::Ours;
  if (t == "deepspeed") return Engine::DeepSpeed;
  if (t == "megatron" || t == "megatron-lm") return Engine::Megatron;
  if (t == "fsdp" || t == "fsdp2" || t == "pytorch") return Engine::Fsdp;
  throw InputError(fmt::format("--engine: unknown engine '{}' (choose ours, deepspeed, megatron or fsdp)", text));
}

const char* engine_version(Engine e) {
  switch (e) {
    case Engine::Ours: return "planner runtime";
    case Engine::DeepSpeed: return "DeepSpeed 0.19.8";
    case Engine::Megatron: return "Megatron-LM core_v0.19.0 (5be9626)";
    case Engine::Fsdp: return "PyTorch 2.13 (DDP, ZeroRedundancyOptimizer, FSDP2 fully_shard)";
  }
  return "?";
}

int64_t megatron_padded_vocab(int64_t vocab, int tp) {
  const int64_t multiple = 128 * int64_t(tp);
  return (vocab + multiple - 1) / multiple * multiple;
}

namespace {

// DeepSpeed 0.19.8: its ZeRO engine runs any data-parallel strategy; tensor
// parallelism comes from AutoTP ("tensor_parallel": {"autotp_size"}), which
// shards a whole Hugging Face model, with ZeRO 0-2: DeepSpeed's AutoTP
// training tutorial (deepspeed.ai/tutorials/autotp-training) lists stages 0,
// 1 and 2, and DeepSpeedExamples PR #1004 (2026) runs its teacher at ZeRO-0
// because "AutoTP+ZeRO-3 not supported", though a comment in
// runtime/engine.py's _configure_tensor_parallel_states says otherwise;
// pipelines from its PipelineModule, whose only schedule is its TrainSchedule
// (1F1B), with ZeRO 0-1 (runtime/pipe/engine.py asserts it).
std::string deepspeed_gap(const Strategy& s) {
  if (s.cp > 1)
    return "DeepSpeed has no ring (Megatron-style) context parallelism: its Ulysses sequence parallelism splits "
           "attention heads with all-to-alls, a different scheme this export does not write; use --to megatron";
  if (s.sp && s.tp > 1)
    return "DeepSpeed has no Megatron-style sequence parallelism (its Ulysses splits attention heads instead); "
           "use --to megatron or sp=0";
  if (s.ckpt == Ckpt::Selective)
    return "DeepSpeed's activation checkpointing recomputes whole layers; it has no selective (attention-only) "
           "recomputation";
  if (s.tp > 1 && s.zero == 3)
    return "DeepSpeed's automatic tensor parallelism (AutoTP) trains with ZeRO stages 0-2, not 3 (its AutoTP "
           "training tutorial); use zero<=2, or --to fsdp / --to megatron for tp>1 with sharded parameters";
  if (s.pp > 1 && s.schedule != Schedule::OneFOneB)
    return fmt::format("DeepSpeed's pipeline engine runs only its own 1F1B schedule (TrainSchedule), not {}",
                       to_string(s.schedule));
  if (s.pp > 1 && s.tp > 1)
    return "DeepSpeed's automatic tensor parallelism (AutoTP) shards a whole model, not the stages of its pipeline "
           "engine; use --to megatron for tp>1 with pp>1";
  return "";
}

// Megatron-LM core_v0.19.0, pretrain_gpt.py: GPT-style decoders whose layer
// options exist as arguments (megatron/training/arguments.py).
std::string megatron_model_gap(const ModelSpec& m) {
  if (m.arch == Arch::Encoder) return "this export targets Megatron-LM's GPT model (pretrain_gpt.py), not encoders";
  if (m.mlp == MlpKind::Relu)
    return "Megatron-LM's GPT layer has no plain ReLU MLP (only GeLU, SwiGLU and squared ReLU)";
  if (m.parallel_block) return "Megatron-LM's GPT layer has no parallel attention+MLP block (GPT-J style)";
  if (m.word_embed_dim > 0 && m.word_embed_dim != m.hidden)
    return "Megatron-LM has no projection between a narrower embedding and the hidden size (OPT-350m)";
  if (m.lm_head_bias) return "Megatron-LM's output layer has no bias";
  if (m.embed_norm || !m.final_norm) return "Megatron-LM's GPT model has no embedding norm and always a final norm";
  const bool all = m.qkv_bias && m.out_bias && m.mlp_bias, none = !m.qkv_bias && !m.out_bias && !m.mlp_bias,
             qkv_only = m.qkv_bias && !m.out_bias && !m.mlp_bias;
  if (!all && !none && !qkv_only)
    return "Megatron-LM sets biases for all linear layers, none, or only QKV (--disable-bias-linear, "
           "--add-qkv-bias); this model mixes them otherwise";
  return "";
}

std::string megatron_gap(const Plan& p, const EngineEnv& env) {
  const Strategy& s = p.strategy;
  if (auto g = megatron_model_gap(p.model); !g.empty()) return g;
  // megatron-core 0.19's local layer spec (no TE, no apex) builds torch's
  // norms, which assert "sequence parallel not supported by torch LayerNorm"
  // (megatron/core/transformer/torch_norm.py); run1 of validation/engines/h100x4
  // failed so. With Transformer Engine or apex installed it runs.
  if (s.sp && s.tp > 1 && !env.transformer_engine)
    return "Megatron-core runs sequence parallelism only with Transformer Engine or apex installed (its local "
           "layer spec asserts \"sequence parallel not supported by torch LayerNorm\"); pass --with-te where "
           "they are, or use sp=0";
  if (s.pp > 1 && s.schedule == Schedule::GPipe)
    return "Megatron-LM runs 1F1B or interleaved 1F1B pipelines, not GPipe";
  const int64_t chunks = int64_t(s.pp) * s.vpp;
  if (p.model.layers % chunks != 0)
    return fmt::format("Megatron-LM needs the layers ({}) divisible by pp*vpp = {}; this plan splits them unevenly",
                       p.model.layers, chunks);
  if (s.offload == Offload::All)
    return "Megatron-LM cannot keep parameters in host memory; it offloads only the optimizer "
           "(--optimizer-cpu-offload): use offload=optimizer";
  if (s.offload == Offload::Optimizer && s.zero != 1)
    return "Megatron-LM offloads the optimizer of its distributed optimizer (zero=1); offload with Megatron-FSDP "
           "(zero=2/3) is not a documented combination";
  return "";
}

// PyTorch 2.13: DDP (zero=0), DDP with ZeroRedundancyOptimizer (zero=1),
// FSDP2 fully_shard (zero=2/3), DTensor tensor and sequence parallelism.
std::string fsdp_gap(const Strategy& s) {
  if (s.cp > 1)
    return "this FSDP export writes no context parallelism (torch.distributed.tensor.experimental.context_parallel "
           "is an experimental API it does not use); use --to megatron";
  if (s.pp > 1)
    return "PyTorch FSDP has no pipeline parallelism (torch.distributed.pipelining is a separate API this export "
           "does not write); use --to megatron or --to deepspeed";
  if (s.offload == Offload::Optimizer)
    return "FSDP2 cannot offload only the optimizer: CPUOffloadPolicy moves parameters, gradients and optimizer "
           "state together (offload=all with zero=3)";
  return "";
}

}  // namespace

// Expert parallelism: Megatron-LM's --expert-model-parallel-size (with
// sequence parallelism when tp > 1: arguments.py asserts it); DeepSpeed-MoE
// sets ep_size in the model's code (deepspeed.moe.layer.MoE), which a
// config-only export cannot; PyTorch FSDP has none. With ep = 1 the experts
// are ordinary parameters of the user's model to every engine.
std::string expert_parallel_gap(const Plan& plan, Engine engine) {
  const Strategy& s = plan.strategy;
  if (s.ep <= 1) return "";
  // FP8 (Transformer Engine in Megatron-LM, torchao float8 in FSDP, DeepSpeed
  // through TE): their fp8 weight caches and recipes are not in their memory
  // rules here, nor in the exports' flags.
  if (engine != Engine::Ours && plan.strategy.precision == Precision::FP8)
    return "precision=fp8 is modelled for this runtime only (the exports write no FP8 recipe); use bf16";
  switch (engine) {
    case Engine::Ours: return "";
    case Engine::Megatron:
      return s.tp > 1 && !s.sp ? "Megatron-LM needs sequence parallelism (sp=1) for expert parallelism with tp>1" : "";
    case Engine::DeepSpeed:
      return "DeepSpeed-MoE sets expert parallelism in the model's code (deepspeed.moe.layer.MoE(ep_size=...)), "
             "which this config export cannot write; use ep=1 or --to megatron";
    case Engine::Fsdp:
      return "PyTorch FSDP has no expert parallelism; use ep=1 or --to megatron";
  }
  return "";
}

std::string engine_memory_note(Engine engine, const EngineEnv& env) {
  if (engine == Engine::DeepSpeed)
    return "DeepSpeed: its ZeRO buffers are counted at the moments DeepSpeed 0.19.8 allocates them (read from its "
           "source); held out on 2 H100s (validation/engines/x2/run4), the peak less the CUDA context and NCCL's memory "
           "came within 0.3% of torch's max_memory_allocated for ZeRO-1/2; ZeRO-3, with the "
           "stage3_max_live_parameters its coordinator keeps gathered counted since, within 0.8% on five plans "
           "held out on 2 H200s (validation/engines/x2/run5)";
  if (engine == Engine::Megatron && !env.transformer_engine)
    return "Megatron without Transformer Engine: megatron-core's local attention keeps the s x s attention "
           "probabilities (softmax output, dropout mask and output: 5 bytes per score and head) and one s x s "
           "score buffer, counted here; --with-te counts its fused attention instead (validation/engines/README.md)";
  return "";
}

std::string engine_gap(const Plan& plan, Engine engine, const EngineEnv& env) {
  if (std::string g = expert_parallel_gap(plan, engine); !g.empty()) return g;
  // Their memory rules (engines_memory.*) are full training's; a LoRA plan's
  // configuration is a PEFT LoraConfig (planner/export_peft.cpp).
  if (engine != Engine::Ours && plan.strategy.finetune.frozen_base())
    return fmt::format("finetune={} is not modelled for this engine (planner export --to peft writes a PEFT LoraConfig)",
                       to_string(plan.strategy.finetune.mode));
  // FP8 (Transformer Engine in Megatron-LM, torchao float8 in FSDP, DeepSpeed
  // through TE): their fp8 weight caches and recipes are not in their memory
  // rules here, nor in the exports' flags.
  if (engine != Engine::Ours && plan.strategy.precision == Precision::FP8)
    return "precision=fp8 is modelled for this runtime only (the exports write no FP8 recipe); use bf16";
  switch (engine) {
    case Engine::Ours: return "";
    case Engine::DeepSpeed: return deepspeed_gap(plan.strategy);
    case Engine::Megatron: return megatron_gap(plan, env);
    case Engine::Fsdp: return fsdp_gap(plan.strategy);
  }
  return "";
}

}  // namespace planner

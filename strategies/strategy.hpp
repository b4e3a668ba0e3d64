#pragma once
// The Strategy value: how one training step is parallelised. Immutable input to
// the memory model, the simulator and the runtime.
//
// Text form (keys in any order, unnamed keys take the defaults below):
//   dp=2,tp=1,pp=1,zero=2,offload=none,ckpt=full,mbs=4,gas=8,precision=bf16
//   (precision=fp32|fp16|bf16|fp8; fp8 only where the GPU has FP8 tensor cores),
//   schedule=1f1b|gpipe|interleaved, vpp=2 (virtual stages per rank, interleaved),
//   sp=0|1 (Megatron sequence parallelism; needs tp>1 to do anything),
//   cp=2 (context parallelism: the sequence split over cp ranks, attention
//   exchanging K/V around a ring; Megatron-LM --context-parallel-size),
//   ep=2 (expert parallelism: a mixture of experts' routed experts split over
//   ep ranks of the data-parallel group, Megatron's --expert-model-parallel-size),
//   finetune=full|lora|qlora with lora_r, lora_alpha, lora_targets
//   (strategies/finetune.hpp; full training prints no finetune key).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "strategies/finetune.hpp"

namespace planner {

enum class Offload { None, Optimizer, All };      // All = optimizer and parameters (ZeRO-Infinity/Offload)
enum class Ckpt { None, Selective, Full };        // Korthikanti et al. 2022
enum class Schedule { GPipe, OneFOneB, Interleaved };
// FP8: bf16 training whose transformer-layer linear GEMMs (qkv, o, mlp) run
// in FP8 with per-tensor dynamic scaling (Micikevicius et al. 2022, "FP8
// formats for deep learning"; torchtitan's float8 tensorwise recipe); every
// other tensor, master weights and optimizer states as under bf16.
enum class Precision { FP32, FP16, BF16, FP8 };

const char* to_string(Offload o);
const char* to_string(Ckpt c);
const char* to_string(Schedule s);
const char* to_string(Precision p);

// Bytes of one parameter/activation element in the working precision (fp8:
// 2, its activations and weights are bf16; only GEMM operands are cast).
int bytes_per_element(Precision p);
// The precision of everything but the FP8 linear GEMMs: bf16 for fp8, else p.
Precision working_precision(Precision p);

// Input limits (docs/ARCHITECTURE.md, "Input limits"): every degree (dp, tp,
// pp, vpp, gas) and their product dp*tp*pp at most 2^20; mbs at most 2^16.
constexpr int kMaxDegree = 1 << 20;
constexpr int kMaxMbs = 1 << 16;

struct Strategy {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int zero = 0;  // ZeRO stage 0..3 (Rajbhandari et al. 2020)
  Offload offload = Offload::None;
  Ckpt ckpt = Ckpt::None;
  int mbs = 1;   // micro-batch size (sequences)
  int gas = 1;   // micro-batches per step per data-parallel rank
  Schedule schedule = Schedule::OneFOneB;
  int vpp = 1;   // virtual pipeline stages per rank (interleaved only)
  Precision precision = Precision::BF16;
  bool sp = false;  // sequence parallelism (Megatron-3)
  int cp = 1;       // context parallelism: ranks that split one sequence (Megatron-LM context parallel)
  int ep = 1;       // expert parallelism: divides dp; the text form and JSON carry it only when it is not 1
  Finetune finetune{};  // full training (default), LoRA or QLoRA on a frozen base

  // Valid once validate() passed (dp*tp*pp*cp <= 2^20).
  int world() const { return dp * tp * pp * cp; }
  // The ranks over which gradients are reduced and ZeRO shards: every rank
  // that holds the same parameters (Megatron reduces over its dp-cp group).
  int dp_cp() const { return dp * cp; }
  int64_t global_batch() const { return int64_t(dp) * mbs * gas; }

  // Internal rules only (offload needs ZeRO, vpp needs interleaved, ranges).
  // Rules that need the model or the GPUs live in costmodel/compat.hpp.
  // Throws InputError naming the rule.
  void validate() const;

  // Canonical text form with every key, e.g.
  // "dp=2,tp=1,pp=1,zero=2,offload=none,ckpt=full,mbs=4,gas=8,schedule=1f1b,vpp=1,precision=bf16,sp=0";
  // cp only where it is above 1 ("dp=2,tp=1,pp=1,cp=2,zero=2,..."), followed by
  // ",ep=N" when ep is not 1, so the text of every plan with neither is what it always was.
  std::string to_string() const;

  // Parses the text form. `given` (optional) receives the keys that were
  // written explicitly, so a caller can derive the missing ones (gas from a
  // global batch, dp from the GPU count). Throws InputError.
  static Strategy parse(std::string_view text, std::vector<std::string>* given = nullptr);

  bool operator==(const Strategy&) const = default;
};

void to_json(nlohmann::json& j, const Strategy& s);
void from_json(const nlohmann::json& j, Strategy& s);

}  // namespace planner

#pragma once
// What a step trains: every weight (full training, the default), or low-rank
// adapters on a frozen base (LoRA, Hu et al. 2021, "LoRA: Low-Rank Adaptation
// of Large Language Models"), or such adapters on a base stored in 4-bit
// NormalFloat with double quantization (QLoRA, Dettmers et al. 2023, sec. 3).
//
// Text form, inside Strategy's key=value list (commas separate keys there, so
// the targets are joined with '+'):
//   finetune=lora,lora_r=16,lora_alpha=32,lora_targets=qkv+o+mlp
//   finetune=qlora                      (r, alpha and targets take the defaults)
// Full training prints nothing, so a full-training strategy's text is unchanged.
#include <cstdint>
#include <string>
#include <string_view>

namespace planner {

enum class FinetuneMode { Full, Lora, Qlora };
const char* to_string(FinetuneMode f);  // "full", "lora", "qlora"

// The linear layers of a transformer layer that carry an adapter. The
// embedding and the LM head stay frozen without one (PEFT's and QLoRA's usual
// choice: QLoRA puts adapters on every linear layer of the blocks, sec. 4).
enum LoraTarget : unsigned {
  kLoraQ = 1u << 0,
  kLoraK = 1u << 1,
  kLoraV = 1u << 2,
  kLoraO = 1u << 3,    // attention output projection
  kLoraMlp = 1u << 4,  // every MLP matrix (gate, up, down)
  kLoraAll = (1u << 5) - 1,
};

struct Finetune {
  FinetuneMode mode = FinetuneMode::Full;
  int r = 16;                     // adapter rank (QLoRA's experiments: 8-64; PEFT's default 8)
  int alpha = 32;                 // scale alpha / r on the adapter's output (Hu et al. sec. 4.1)
  unsigned targets = kLoraAll;    // LoraTarget bits

  bool frozen_base() const { return mode != FinetuneMode::Full; }
  bool quantized_base() const { return mode == FinetuneMode::Qlora; }
  bool targets_any(unsigned bits) const { return (targets & bits) != 0; }
  double scale() const { return double(alpha) / double(r); }

  // ",finetune=lora,lora_r=16,lora_alpha=32,lora_targets=qkv+o+mlp", or "" for full training.
  std::string text_suffix() const;
  bool operator==(const Finetune&) const = default;
};

// Keys of the text form that belong to fine-tuning.
bool is_finetune_key(std::string_view key);
// Sets one of them (InputError naming the key and the choices).
void set_finetune_key(Finetune& f, const std::string& key, const std::string& value);
// "qkv+o+mlp", "q+v", ...
std::string targets_to_string(unsigned targets);
unsigned parse_lora_targets(const std::string& text);
// The rules of the choice alone: lora_* keys need finetune=lora|qlora, r in
// [1, 4096], alpha >= 1, at least one target. `given_lora_keys` is whether any
// lora_* key was written. Throws InputError.
void validate_finetune(const Finetune& f, bool given_lora_keys);

// 4-bit NormalFloat with double quantization (Dettmers et al. 2023, sec. 3,
// "Double Quantization"): 4 bits per weight, one 8-bit absmax per block of 64
// weights and one fp32 constant per block of 256 absmaxes:
//   4 + 8/64 + 32/(64*256) = 4.127 bits per parameter.
constexpr int kNf4BlockSize = 64;
constexpr int kNf4AbsmaxBlockSize = 256;
// The runtime dequantises an NF4 matrix in slices of this many weights
// (runtime/model/lora.cpp); each slice's temporaries are 6 bytes per weight
// (int32 indices, one per byte of two codes; the fp32 levels).
constexpr long long kNf4DequantSlice = 1LL << 24;
constexpr double kNf4DequantTempBytesPerWeight = 6.0;
constexpr double kNf4BitsPerParam = 4.0 + 8.0 / kNf4BlockSize + 32.0 / (double(kNf4BlockSize) * kNf4AbsmaxBlockSize);

}  // namespace planner

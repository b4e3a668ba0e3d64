#pragma once
// LoRA and QLoRA on the runtime's TransformerModel.
//
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
// sec. 4.1): a frozen weight W (out x in) gets h = x W^T + (x A^T) B^T * alpha/r
// with A (r x in) and B (out x r) trained; PEFT's layout (lora_A.weight,
// lora_B.weight). Each of q, k, v (in the fused QKV matrix) and gate, up (in
// the fused gate+up matrix) has its own adapter, as PEFT puts one on each of
// q_proj, k_proj, v_proj, gate_proj and up_proj.
//
// QLoRA (Dettmers et al. 2023, sec. 3): the frozen layer matrices are stored
// in 4-bit NormalFloat (NF4), blockwise over 64 weights with an absmax
// constant per block, the constants themselves double-quantized (8-bit floats
// per block of 256 after subtracting their mean); each matrix is dequantised
// to the compute precision right before its forward GEMM and again before its
// backward's input-gradient GEMM, never kept (bitsandbytes' MatMul4Bit does
// the same).
//
// The base stays in the model's ParamStore (norms, embedding, head; and, for
// LoRA, the matrices) with requires_grad off: no gradient, no optimizer state.
// Tensor parallelism is not supported here (the constructor refuses tp > 1).
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/model/transformer.hpp"
#include "strategies/finetune.hpp"

namespace planner::rt {

// The 16 NF4 levels: quantiles of N(0, 1) normalised to [-1, 1], with an exact
// zero (Dettmers et al. 2023, sec. 3 and appendix E, the values bitsandbytes uses).
const std::array<float, 16>& nf4_levels();

struct Nf4Tensor {
  std::vector<int64_t> shape;
  int64_t numel = 0;
  at::Tensor codes;          // (numel) uint8, one 4-bit code per weight (kept unpacked; 2 per byte when packed)
  at::Tensor absmax_codes;   // (blocks) float8_e4m3fn: (absmax - mean) / scale of its 256-block
  at::Tensor absmax_scale;   // (ceil(blocks / 256)) fp32
  float absmax_mean = 0;     // mean of the fp32 absmax constants
  // Storage at the paper's packing, in bits: 4 per weight, 8 per block of 64,
  // 32 per block of 256 constants (plus one mean).
  double packed_bits() const;
};

// Blockwise NF4 with double quantization of the absmax constants. `w`: any
// float tensor; its numel a multiple of 64 is not required (the last block is short).
Nf4Tensor nf4_quantize(const at::Tensor& w);
at::Tensor nf4_dequantize(const Nf4Tensor& q, at::ScalarType dtype);
// The fp32 absmax constants after double quantization (for error bounds).
at::Tensor nf4_absmax(const Nf4Tensor& q);

class LoraAdapters {
 public:
  // `model` materialized; `f` lora or qlora. Freezes every base tensor, makes
  // the adapters (A: Kaiming-uniform as PEFT, B: zeros) in fp32 on the model's
  // device, quantizes the layer matrices for QLoRA and sets model.linear_hook.
  LoraAdapters(TransformerModel& model, const Finetune& f, uint64_t seed);
  ~LoraAdapters();
  LoraAdapters(const LoraAdapters&) = delete;
  LoraAdapters& operator=(const LoraAdapters&) = delete;

  // The trained tensors: for each adapter A then B.
  std::vector<at::Tensor> parameters() const;
  int64_t numel() const;
  // The fp32 weight the adapted model computes with, W (dequantised for
  // QLoRA) + alpha/r * B A over the matrix's adapted rows: for a dense reference.
  at::Tensor merged_weight(int w) const;
  // The weight ids of the layer matrices (qkv, o, fc1, fc2 of every layer).
  std::vector<int> matrix_ids() const;

 private:
  struct Part {
    int64_t row0 = 0, rows = 0;  // rows of the fused matrix this adapter covers
    at::Tensor A, B;             // (r, in), (rows, r); undefined: no adapter on this part
  };
  struct Matrix {
    std::vector<Part> parts;
    std::unique_ptr<Nf4Tensor> nf4;  // QLoRA: the stored base
  };
  at::Tensor forward(const at::Tensor& x, int w, int b) const;

  TransformerModel& model_;
  Finetune f_;
  std::map<int, Matrix> matrices_;
};

}  // namespace planner::rt

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
// The adapters are tensors of their own ParamStore (store()): the Engine
// (runtime/engine.hpp) lays them out in its units, one layer's adapters in
// that layer's unit, as it lays out a model's parameters for full training.
// Tensor parallelism (without sp): each adapter splits as its matrix (B of a
// column-parallel matrix by rows, A of a row-parallel one by columns; the
// other factor whole on every rank, its gradient equal on every rank);
// sequence parallelism is refused (the constructors; strategy legality).
//
// model.linear_hook: LoRA sets it and is its only user; one hook, no chain.
// A linear layer asks the hook first; an undefined result means "not an
// adapted matrix, compute as usual". Under tp (not sp) the hook is asked too
// (transformer.cpp: col_linear, row_linear): a column-parallel layer's x is
// the full input (after enter_tp), a row-parallel layer's result this rank's
// partial sum, whose bias the hook adds on tp rank 0 only. Another feature hooking the linears must
// compose with this one inside forward() below, not install a second hook.
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
  at::Tensor codes;          // (ceil(numel / 2)) uint8: two 4-bit codes per byte, weight 2i low nibble, 2i+1 high
  at::Tensor absmax_codes;   // (blocks) float8_e4m3fn: (absmax - mean) / scale of its 256-block
  at::Tensor absmax_scale;   // (ceil(blocks / 256)) fp32
  float absmax_mean = 0;     // mean of the fp32 absmax constants
  at::Tensor pairs;          // (256, 2) fp32: the two levels of each code byte (a lookup table, not storage)
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
  // For the Engine: `model` not materialized. Declares the adapters in
  // store() (group = their layer's unit; the caller allocates and binds them,
  // and draws their values with init_tensor), freezes the model's tensors and
  // sets model.linear_hook. For QLoRA the caller hands each layer matrix's
  // values to quantize() and then leaves the model's tensor unbound.
  // `tp`: the model's tensor-parallel group (null without tp).
  LoraAdapters(TransformerModel& model, const Finetune& f, Communicator* tp);
  ParamStore& store() { return store_; }
  // A's initial values (PEFT: Kaiming-uniform with a = sqrt(5), bound
  // 1/sqrt(in)) drawn from the default generator, or B's (zeros).
  void init_tensor(const ParamInfo& i, at::Tensor t) const;
  // Whether id is a layer matrix of the model (qkv, o, fc1, fc2).
  bool is_matrix(int id) const { return matrices_.count(id) > 0; }
  // QLoRA: stores `values` (matrix w's) as NF4; the forward reads only that.
  void quantize(int w, const at::Tensor& values);
  // Device bytes of the NF4 storage (packed codes, absmax codes and scales).
  int64_t nf4_bytes() const;
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
    int a = -1, b = -1;          // store_ ids of A (r, in) and B (rows, r); -1: no adapter on this part
  };
  struct Matrix {
    std::vector<Part> parts;
    std::unique_ptr<Nf4Tensor> nf4;  // QLoRA: the stored base
    bool row = false;                // row-parallel under tp (o, MLP down): its output is a partial sum
  };
  at::Tensor forward(const at::Tensor& x, int w, int b) const;
  void declare();  // the adapters into store_, the base frozen, the hook set

  TransformerModel& model_;
  Finetune f_;
  Communicator* tp_ = nullptr;  // null unless the model is tensor-parallel
  int tp_rank_ = 0;
  ParamStore store_;
  std::map<int, Matrix> matrices_;
};

}  // namespace planner::rt

#pragma once
// The transformer in LibTorch, built from a ModelSpec: a GPT-style decoder (causal
// LM) or a BERT-style encoder with an MLM head. Written functionally over ATen
// ops (no torch::nn modules), so that every parameter is a view into ONE flat
// buffer in the working precision and every gradient a view into ONE flat
// gradient buffer (llm.c's layout). The Engine's optimizer and ZeRO (engine.hpp)
// work on those flat buffers with whole-buffer operations.
//
// Parameters: exactly the tensors that ModelSpec's layer_params(),
// embedding_params() and head_params() count (tests/runtime checks this for each
// family). q, k, v are one fused (h + 2*kv_dim, h) matrix and SwiGLU's gate and up
// one (2*ffn, h) matrix: the same number of parameters as separate matrices,
// fewer and larger GEMMs.
//
// Layout of the flat buffer: every tensor with two or more dimensions (the
// matrices and embeddings, which take weight decay) first, then the vectors
// (biases and norm weights, no weight decay), so weight decay applies to one
// contiguous range [0, decay_numel()).
//
// Block structure:
//  - decoder: pre-norm, x = x + attn(norm1(x)); x = x + mlp(norm2(x)); GPT-J's
//    parallel block: x = x + attn(n) + mlp(n) with n = norm1(x); a final norm when
//    the spec says so. Attention is causal at::scaled_dot_product_attention (the
//    flash kernel on the GPU, the CPU flash kernel on the CPU); grouped-query
//    attention through its enable_gqa flag; a sliding window on the layers
//    spec.layer_windowed() names (runtime/model/attention.hpp). Rotary
//    positions are GPT-NeoX style (rotate-half over the whole head dimension,
//    base spec.rotary_base()). GELU is the tanh approximation (GPT-2's
//    gelu_new). Today's decoders: q is heads x head_dim wide (head_dim may
//    differ from hidden/heads), Qwen3's per-head q/k norms before the
//    rotation, Gemma-2's sandwich norms (x = x + norm(attn(norm1(x))), the
//    same around the MLP), GeGLU (gelu_gate).
//  - encoder: post-norm (BERT), x = norm1(x + attn(x)); x = norm2(x + mlp(x)),
//    bidirectional attention, exact GELU; MLM head = dense + GELU + LayerNorm, then
//    the tied word embedding with a vocabulary bias. The pooler's parameters exist
//    (the count includes them) but the MLM loss does not use them.
//  - no dropout (dropout 0 in every configuration the planner executes).
//
// Linear layers: y = x w^T + b through LinearAccum (model.cpp), whose backward
// adds dW and db straight into the flat gradient buffer (an in-place GEMM with
// beta = 1, Megatron-LM's gradient-accumulation fusion) rather than
// materialising them for autograd to add. The LM head's GEMM runs on a copy of
// the (vocab, width) matrix padded with zero rows to a multiple of 64 (GPT-2's
// 50257 otherwise sends cuBLAS to unaligned kernels several times slower): the
// parameter count is unchanged; the copy (padded_vocab x width) lives while the
// head's forward or backward runs.
//
// Loss: the logits (tokens, padded vocab) are produced in the working precision; a
// chunked cross-entropy (ChunkedCrossEntropy in model.cpp) computes, row chunk by
// row chunk in fp32, the loss and already the gradient of the logits, which it
// keeps in the working precision for the backward pass. Logits memory is
// therefore 2 x tokens x padded_vocab x bytes(working precision) at the peak (the
// logits and their gradient), plus one fp32 chunk of about 256 MB and the padded
// head-weight copy, instead of the 12 bytes per logit of cross_entropy on an fp32
// copy (formula and measurements in runtime/README.md).
//
// Tensor parallelism (the constructor's tp and sp; runtime/model/tensor_parallel.hpp): each rank
// holds its part of the split parameters; the head computes this rank's
// vocabulary columns (padded_vocab() of them) and the cross-entropy is
// vocabulary-parallel.
#include <ATen/ATen.h>

#include <array>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "specs/model_spec.hpp"
#include "runtime/model/tensor_parallel.hpp"
#include "strategies/strategy.hpp"

namespace planner::rt {

class ContextParallel;  // runtime/model/context_parallel.hpp
class MoeBlock;         // runtime/model/moe.hpp

enum class Init { Normal, OutputNormal, Zeros, Ones };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;  // this rank's (its tp part; the full shape without tp)
  int64_t numel = 0;
  int64_t offset = 0;    // into the flat buffers
  bool decay = false;    // weight decay (tensors with >= 2 dimensions)
  Init init = Init::Normal;
  int group = 0;         // 0 = embedding, 1..layers = transformer layer, layers + 1 = head
  // Tensor parallelism (runtime/model/tensor_parallel.hpp): how the tensor is split over the tp
  // group, its full shape, and where it sits in the single-process layout.
  TpSplit split;
  std::vector<int64_t> full_shape;
  int64_t full_numel = 0, full_offset = 0;
  // Mixture of experts (runtime/model/moe.hpp): a stacked experts tensor
  // (dim 0: experts), split over the ep group in contiguous blocks (ep > 1:
  // this rank holds block ep_rank, after its tp split).
  bool expert = false;
  int ep = 1, ep_rank = 0;
};

// One flat parameter buffer and one flat gradient buffer, each parameter a leaf
// tensor that aliases its slice of the first and whose .grad aliases its slice of
// the second (autograd accumulates into an existing .grad in place, so gradients
// of several micro-batches add up in the flat buffer).
class ParamStore {
 public:
  // `shape` is the full shape; with tp > 1 and a split the tensor declared is
  // this rank's part of it (tp_local_shape()).
  // `ep` > 0 marks a stacked experts tensor (ep > 1: split over ep, block ep_rank).
  int add(std::string name, std::vector<int64_t> shape, Init init, int group, const TpSplit& split = {}, int tp = 1,
          int ep = 0, int ep_rank = 0);
  // Assigns the offsets, of the local tensors and of the full ones in the
  // single-process layout (done by add(); cheap, the list is short).
  void layout();
  // Orders the tensors (decayed first), allocates params and grads (zeroed) on
  // `device` in `dtype`, and makes the views.
  void materialize(at::Device device, at::ScalarType dtype);

  const at::Tensor& get(int id) const { return tensors_.at(static_cast<size_t>(id)); }
  // For runtimes that own the buffers (runtime/engine.hpp): leaves with no
  // storage yet, then bound to slices of buffers the engine allocates (and
  // re-bound when ZeRO-3 gathers a unit again). No flat buffers are allocated.
  void make_leaves(at::Device device, at::ScalarType dtype);
  void bind(int id, const at::Tensor& data);
  void bind_grad(int id, const at::Tensor& grad);
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int64_t numel() const { return numel_; }
  int64_t full_numel() const { return full_numel_; }  // the single-process model's numel()
  int64_t decay_numel() const { return decay_numel_; }
  int64_t group_numel(int group) const;
  bool materialized() const { return params.defined(); }

  at::Tensor params;  // (numel) working precision
  at::Tensor grads;   // (numel) working precision

 private:
  std::vector<ParamInfo> infos_;
  std::vector<at::Tensor> tensors_;
  int64_t numel_ = 0, decay_numel_ = 0, full_numel_ = 0;
};

struct LayerIds {
  int norm1_w = -1, norm1_b = -1, norm2_w = -1, norm2_b = -1;
  int qkv_w = -1, qkv_b = -1, o_w = -1, o_b = -1;
  int fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;  // fc1 = gate+up for SwiGLU
  int post1_w = -1, post1_b = -1, post2_w = -1, post2_b = -1;  // Gemma-2's sandwich norms (sandwich_norm)
  int q_norm_w = -1, q_norm_b = -1, k_norm_w = -1, k_norm_b = -1;  // Qwen3's per-head q/k norms (qk_norm)
};

class TransformerModel {
 public:
  // Declares the parameters. Throws InputError when a learned position table is
  // shorter than `seq` or the spec is invalid.
  //
  // `tp` (null or of size 1: no tensor parallelism): this rank's tensor-parallel
  // group (Megatron-LM, Shoeybi et al. 2019). The model then declares this
  // rank's parts (runtime/model/tensor_parallel.hpp): qkv column-parallel by heads (q heads
  // [r nh/tp, (r+1) nh/tp) and kv heads [r kv/tp, ...) of each of q, k, v, so
  // grouped-query attention keeps its grouping), the attention output
  // row-parallel by the same heads, fc1 column-parallel (SwiGLU's gate and up
  // each split: rank r holds [gate_r; up_r]), fc2 row-parallel, the word
  // embedding, an untied LM head, its bias and BERT's MLM bias
  // vocabulary-parallel (ceil(vocab/tp) rows each, the last ranks' rows past
  // the vocabulary zero and masked); everything else replicated (norms,
  // position tables, the biases of the row-parallel layers, projections,
  // pooler, MLM transform). Needs heads, kv heads and ffn divisible by tp.
  // `sp` (Korthikanti et al. 2022): between the tensor-parallel regions the
  // activations are sequence shards (b, s/tp, h) (norms, residuals, position
  // embeddings on shards); needs seq divisible by tp. The replicated
  // parameters' gradients are then partial per rank: the runtime sums them over
  // the tp group (runtime/engine.cpp, sync()).
  // `ep` (null or of size 1: none): the expert-parallel group of a mixture of
  // experts (runtime/model/moe.hpp); this rank then holds experts/ep experts.
  TransformerModel(const ModelSpec& spec, int64_t seq, Communicator* tp = nullptr, bool sp = false,
                   Communicator* ep = nullptr);

  // Allocates the flat buffers on `device` in `dtype` and initialises them
  // deterministically from `seed` (GPT-2's scheme: N(0, 0.02) for matrices and
  // embeddings, N(0, 0.02 / sqrt(2 * layers)) for the attention-output and MLP-output
  // projections, zero biases, unit norm weights), drawing in declaration order
  // from LibTorch's default generator of the device after at::manual_seed(seed).
  // Returns the initial values in fp32 (a flat tensor on `device`): the params
  // buffer itself for fp32, a separate tensor for bf16/fp16 that the optimizer
  // adopts as its master copy.
  at::Tensor materialize(at::Device device, at::ScalarType dtype, uint64_t seed);
  // Draws tensor i's initial values into t (the scheme above). Called in
  // declaration order after at::manual_seed(seed), it gives the values
  // materialize() gives, wherever the tensors live.
  void init_tensor(const ParamInfo& i, at::Tensor t) const;
  // The device-side helpers (rotary tables, the empty bias) without parameters.
  void prepare(at::Device device, at::ScalarType dtype);

  // Mean cross-entropy over the labelled tokens (label != -100) as an fp32 scalar.
  // ids, labels: (b, s) int64. `grad_hint`: the factor the loss will be multiplied
  // by before backward (1/gas x fp16's loss scale), used to keep the logits'
  // gradient in range (the result does not depend on it).
  at::Tensor loss(const at::Tensor& ids, const at::Tensor& labels, Ckpt ckpt, double grad_hint = 1.0);

  // One transformer layer; `selective` recomputes the attention core in the
  // backward instead of keeping what it saves.
  at::Tensor layer(int64_t i, const at::Tensor& x, bool selective) const;
  // Layer i, with full recomputation under Ckpt::Full (when grad mode is on).
  at::Tensor block(int64_t i, const at::Tensor& x, Ckpt ckpt) const;
  // Final norm, LM head and chunked cross-entropy: the head unit.
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& labels, double grad_hint) const;
  at::Tensor embed(const at::Tensor& ids) const;          // (b, s) -> (b, s, h); sp: (b, s/tp, h)
  // (b, s, h) -> (b, s, padded_vocab()); the columns past vocab hold -inf.
  // Under tp the columns are this rank's vocabulary range (vocab_begin() on).
  at::Tensor logits(const at::Tensor& x) const;
  // This rank's vocabulary rows rounded up to a multiple of 64: the width of the
  // LM head's GEMM (all of the vocabulary without tp).
  int64_t padded_vocab() const { return (vocab_rows() + 63) / 64 * 64; }
  // Rows of the vocabulary-parallel matrices on each rank: ceil(vocab / tp).
  int64_t vocab_rows() const { return (spec_.vocab + tp_size_ - 1) / tp_size_; }
  int64_t vocab_begin() const { return int64_t(tp_rank_) * vocab_rows(); }
  // Of those rows, the ones inside the vocabulary (the rest are padding).
  int64_t vocab_valid() const { return std::clamp<int64_t>(spec_.vocab - vocab_begin(), 0, vocab_rows()); }
  int tp_size() const { return tp_size_; }
  bool sequence_parallel() const { return sp_; }

  const ModelSpec& spec() const { return spec_; }
  int64_t seq() const { return seq_; }
  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }

  // Called (when set) after the last layer's forward and before the head: the
  // trainer reads the allocator there to split activations from logits memory.
  std::function<void()> before_head;
  // LoRA/QLoRA (runtime/model/lora.hpp) or precision=fp8's linears
  // (runtime/model/fp8_linear.hpp), one at a time: when set, the layers' linear
  // layers ask it first; an undefined result means "not hooked, compute as
  // usual". Under tp it gets this rank's part: a column-parallel layer's input
  // (under sp this rank's sequence shard, which the hook gathers), a
  // row-parallel layer's input columns with the bias id (the hook adds the
  // bias on tp rank 0 only; under sp the bias is -1 and row_out adds it).
  std::function<at::Tensor(const at::Tensor& x, int w, int b)> linear_hook;
  const LayerIds& layer_ids(int64_t i) const { return layers_.at(size_t(i)); }
  // Mixture of experts: the factor the loss is multiplied by before backward
  // (the auxiliary loss's gradient scale; loss() sets it, the Engine before each forward).
  double moe_grad_scale = 1.0;
  const MoeBlock* moe() const { return moe_.get(); }
  MoeBlock* moe() { return moe_.get(); }
  // Rows per fp32 chunk of the cross-entropy (0 = about 256 MB of fp32 per chunk).
  int64_t loss_chunk_rows = 0;
  // The LM head writes its logits into one tensor the model keeps (made at
  // the first head, reused by every later one) instead of a new one each
  // micro-batch: the Engine sets it under GPipe, where every micro-batch's
  // logit gradient waits for the backward (runtime/engine.cpp
  // keeps_head_logits). Nothing else reads the logits after the loss's
  // forward (ChunkedCrossEntropy keeps their gradient only).
  bool keep_head_logits = false;

  // Context parallelism (after prepare()): the model then runs on this cp
  // rank's two chunks of the sequence (positions from cp), and attention is
  // ring attention over the cp group. `cp` outlives the model's use.
  void set_context_parallel(const ContextParallel* cp);

 private:
  at::Tensor norm(const at::Tensor& x, int w, int b) const;
  // The norm kind's epsilon: LayerNorm 1e-5, RMSNorm 1e-6 (every norm of the model).
  double norm_eps() const { return spec_.norm == NormKind::LayerNorm ? 1e-5 : 1e-6; }
  // {x + y, norm(x + y)}: the residual add and the norm after it, fused on CUDA.
  std::array<at::Tensor, 2> add_norm(const at::Tensor& x, const at::Tensor& y, int w, int b) const;
  at::Tensor post_norm(const at::Tensor& x, int w, int b) const;  // norm(), or x when w < 0
  at::Tensor head_norm(const at::Tensor& x, int w, int b) const;  // over the last dim, head_dim wide
  at::Tensor head_norm_weight(int w) const;  // a q/k norm's weight or bias as this rank uses it (undefined for -1)
  at::Tensor linear(const at::Tensor& x, int w, int b, int64_t padded_rows = 0, int64_t valid_rows = -1) const;
  // A column-parallel layer: under sp x is this rank's sequence shard and the
  // GEMM gathers the sequence itself (LinearAccum); linear() otherwise.
  at::Tensor col_linear(const at::Tensor& x, int w, int b, int64_t padded_rows = 0, int64_t valid_rows = -1,
                        at::Tensor* out_slot = nullptr) const;
  // Into a column-parallel region (copy-to-tp without sp; under sp the
  // column-parallel GEMMs gather the sequence) and out of a row-parallel one
  // (summed over the tp ranks; sp: this rank's sequence shard); identities
  // without tp.
  at::Tensor enter_tp(const at::Tensor& x) const;
  at::Tensor leave_tp(const at::Tensor& x) const;
  // leave_tp(), then under sp the row-parallel layer's bias; without sp its
  // bias is already inside the GEMM (row_linear), and without tp `y` is
  // returned as it is.
  at::Tensor row_out(const at::Tensor& y, int bias) const;
  // A row-parallel GEMM's partial output. Without sp under tp its bias is
  // added in the GEMM on tensor-parallel rank 0 only (the all-reduce then
  // carries it once; every rank accumulates its gradient); under sp row_out
  // adds it to the reduce-scattered shard; without tp it is an ordinary linear.
  at::Tensor row_linear(const at::Tensor& x, int w, int b) const;
  bool bias_in_row_gemm() const { return tp_ != nullptr && !sp_; }
  at::Tensor attention(int64_t i, const at::Tensor& xn, bool selective) const;
  at::Tensor mlp(int64_t i, const at::Tensor& xn) const;
  at::Tensor p(int id) const { return store_.get(id); }
  at::Tensor popt(int id) const { return id >= 0 ? store_.get(id) : at::Tensor(); }

  ModelSpec spec_;
  int64_t seq_;
  const ContextParallel* cp_ = nullptr;  // null without context parallelism
  Communicator* tp_ = nullptr;  // null without tensor parallelism
  int tp_size_ = 1, tp_rank_ = 0;
  bool sp_ = false;
  ParamStore store_;
  std::shared_ptr<MoeBlock> moe_;  // mixture of experts (null for a dense model)
  std::vector<LayerIds> layers_;
  int wte_ = -1, wpe_ = -1, wtt_ = -1, emb_norm_w_ = -1, emb_norm_b_ = -1, proj_in_ = -1;
  int final_norm_w_ = -1, final_norm_b_ = -1, proj_out_ = -1, head_w_ = -1, head_b_ = -1;
  int pool_w_ = -1, pool_b_ = -1, mlm_w_ = -1, mlm_b_ = -1, mlm_norm_w_ = -1, mlm_norm_b_ = -1, mlm_bias_ = -1;
  at::Tensor no_bias_;               // (0): "no bias" for LinearAccum
  mutable at::Tensor head_logits_;   // keep_head_logits: the logits' tensor
  at::Tensor rope_cos_, rope_sin_;  // (s, 1, head_dim) in the working precision
};

// Parameters the model declares, without allocating anything.
int64_t count_model_params(const ModelSpec& spec, int64_t seq);

}  // namespace planner::rt

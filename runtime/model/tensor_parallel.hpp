#pragma once
// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) and sequence
// parallelism (Korthikanti et al. 2022) for the TransformerModel
// (runtime/model/transformer.hpp): how a parameter is split over the tp group, and the
// communication of the split layers as autograd functions.
//
// Splits (TpSplit): a parameter is replicated, or split along one dimension
// whose full length is made of fused pieces (q, k, v of the fused qkv matrix;
// gate and up of SwiGLU's fc1); every piece is cut into tp equal ranges of
// ceil(len / tp) and rank r keeps range r of each piece, concatenated. So rank
// r's qkv rows are [q heads of r; k heads of r; v heads of r], its fc1 rows
// [gate_r; up_r]. Only the vocabulary may not divide (the model requires heads,
// kv heads and ffn to be multiples of tp): the last ranks' ranges then end in
// rows past the vocabulary, kept at zero (the model masks their logits to
// -inf, so they get no gradient and AdamW leaves them at zero).
//
// Communication (each an autograd function; every collective is waited for
// right after it is issued: on the GPU that is a stream wait, not a host sync):
//   copy_to_tp      forward identity, backward all-reduce (before a
//                   column-parallel layer without sp: Megatron's f);
//   reduce_from_tp  forward all-reduce, backward identity (after a
//                   row-parallel layer without sp: Megatron's g);
//   scatter_seq     forward reduce-scatter along the sequence, backward
//                   all-gather (after a row-parallel layer with sp);
//   gather_seq      forward all-gather along the sequence, backward
//                   reduce-scatter (the input of a region whose gradient is
//                   partial over tp, with sp: the MoE layer's experts,
//                   runtime/model/moe.hpp);
//   gather_seq_whole forward all-gather along the sequence, backward this
//                   rank's shard of the gradient, which is whole and equal on
//                   every tp rank (the MoE router's logits with sp).
// Before a column-parallel layer with sp the all-gather along the sequence is
// part of the layer's GEMM function (LinearAccum in model.cpp, as Megatron-LM's
// sequence-parallel linear): it keeps only the sequence shard for its backward
// and gathers it again there for the weight gradient (overlapping the input
// gradient's GEMM), whose input gradient it reduce-scatters (overlapping the
// weight gradient's GEMM); the gathered input is never kept, as Korthikanti et
// al. 2022 (sec. 4.2.2) count it.
// Activations are (b, s, h). The "sequence shard" of rank r is the r-th of tp
// equal runs of the flattened b * s tokens, kept as a (b, s/tp, h) tensor: the
// Communicator works on flat chunks in rank order, so the all-gather writes
// the full (b, s, h) tensor and the reduce-scatter reads it with no transpose
// copy. Everything done on shards (norms, residual additions, biases) is
// token by token, so which tokens a rank holds does not matter, except for the
// learned position embedding: the model looks up each token's own position
// (TransformerModel::embed). For b = 1 the run is positions [r s/tp, (r+1)
// s/tp), Megatron-LM's split; for b > 1 it is whole sequences (b a multiple of
// tp) or parts of them. (Splitting dim 1 of (b, s, h) instead needed a copy
// through a (tp, b, s/tp, h) buffer for every collective: 10 copies of a full
// activation per layer and micro-batch.)
// copy_to_tp and reduce_from_tp reduce in place, as Megatron-LM does: forward
// on the row-parallel GEMM's fresh output (marked dirty), backward on the
// column-parallel GEMMs' input gradient, which no other consumer holds (a
// residual's gradient never reaches copy_to_tp: it feeds GEMMs only). Until
// this, each copied a full activation first (on two H200s 0.0137 s of a
// 0.71 s GPT-Neo-1.3B tp=2 step, 832 copies; validation/archive/h200x2-3d/run6).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace planner::rt {

struct TpSplit {
  int dim = -1;                // -1: replicated on every tp rank
  std::vector<int64_t> parts;  // full lengths of the fused pieces along `dim`
  bool split() const { return dim >= 0; }
};

// The shape rank r keeps of a tensor of shape `full` (the same on every rank).
std::vector<int64_t> tp_local_shape(const std::vector<int64_t>& full, const TpSplit& s, int tp);
// Rank r's part of the full tensor (contiguous; rows past a piece's end zero).
at::Tensor tp_slice(const at::Tensor& full, const TpSplit& s, int rank, int tp);
// The full tensor from every rank's part, `gathered` (tp, local shape...) in
// rank order (an all-gather of the local tensors).
at::Tensor tp_assemble(const at::Tensor& gathered, const TpSplit& s, const std::vector<int64_t>& full_shape);

// The autograd functions above; `tp` null (or of size 1) makes each the identity.
at::Tensor copy_to_tp(const at::Tensor& x, Communicator* tp);
at::Tensor reduce_from_tp(const at::Tensor& x, Communicator* tp);
at::Tensor scatter_seq(const at::Tensor& x, Communicator* tp);  // (b, s, ...) -> this rank's (b, s/tp, ...), summed
at::Tensor gather_seq(const at::Tensor& x, Communicator* tp);        // (b, s/tp, ...) -> (b, s, ...)
at::Tensor gather_seq_whole(const at::Tensor& x, Communicator* tp);  // (b, s/tp, ...) -> (b, s, ...)

// One row chunk of the vocabulary-parallel cross-entropy (Megatron-LM's; the
// chunked loss in model.cpp calls it): logits (c, local columns) are this
// rank's columns, vocabulary ids [begin, begin + valid) (the rest -inf);
// target (c, 1), labelled (c) bool. Per chunk one all-gather of the row maxima
// (the Communicator only sums; their maximum is taken here) and one all-reduce
// of the sums of exp(z - max) and of the target's z - max (only its owner
// contributes). Adds the chunk's loss over its labelled rows to `loss_sum` and
// returns softmax - onehot over the local columns in `acc` (the onehot on
// labelled rows only).
at::Tensor vocab_parallel_grad(const at::Tensor& logits, const at::Tensor& labelled, const at::Tensor& target,
                               at::ScalarType acc, Communicator& tp, int64_t begin, int64_t valid,
                               at::Tensor& loss_sum);

// The sequence collectives themselves (no autograd). *_start issues the
// collective; wait() makes the caller wait for it (the GPU's current stream)
// and returns the result.
struct PendingSeq {
  WorkPtr work;
  std::function<at::Tensor()> result;
  at::Tensor wait() {
    work->wait();
    return result();
  }
};
PendingSeq all_gather_seq_start(const at::Tensor& x, Communicator& c);      // (b, s/tp, ...) -> (b, s, ...)
PendingSeq reduce_scatter_seq_start(const at::Tensor& x, Communicator& c);  // (b, s, ...) -> (b, s/tp, ...)
at::Tensor all_gather_seq(const at::Tensor& x, Communicator& c);
at::Tensor reduce_scatter_seq(const at::Tensor& x, Communicator& c);
// This rank's sequence shard of x (b, s, ...) -> (b, s/tp, ...), no communication: the
// rank-th of tp equal runs of the flattened b * s tokens (a copy).
at::Tensor seq_shard(const at::Tensor& x, Communicator& c);

}  // namespace planner::rt

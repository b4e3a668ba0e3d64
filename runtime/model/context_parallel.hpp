#pragma once
// Context parallelism (cp > 1) in the runtime: ring attention over the cp
// ranks of a sequence (Liu et al. 2023, "Ring Attention with Blockwise
// Transformers"; the scheme Megatron-LM runs through Transformer Engine's
// p2p context parallelism).
//
// The sequence is cut into 2*cp chunks of c = seq/(2 cp) tokens; cp rank i
// holds chunks i and 2cp-1-i (causal load balancing: every rank gets the same
// share of the causal mask's work; Megatron-LM megatron/core/utils.py,
// get_batch_on_this_cp_rank). Its tokens are those 2c, in that order, and
// every layer runs on them as on a sequence of 2c tokens, except attention:
//
// Forward, cp steps. Step j computes attention of the rank's queries against
// the K/V of rank (i - j) mod cp, while that K/V moves one rank on around the
// ring (send to i+1, receive from i-1). Step 0 is the rank's own K/V: causal
// over the 2c local tokens (the order i, 2cp-1-i keeps the mask causal). A
// K/V from an earlier rank (src < i): every query attends its first chunk
// only (its second chunk lies after both of ours). From a later rank
// (src > i): only the second query chunk attends, all of that K/V. Each block
// is one call of ATen's flash kernel returning the log-sum-exp
// (_scaled_dot_product_flash_attention on CUDA, ..._for_cpu on the CPU), and
// the blocks merge exactly: lse = logaddexp(lse_a, lse_b),
// out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse).
//
// Backward: the flash backward of each block with the final output and
// log-sum-exp gives that block's dQ, dK, dV. K/V travel the ring again; the
// dK/dV accumulated for a K/V chunk (fp32) travel one step behind it, and one
// last step returns them to their owner (cp - 1 K/V steps, cp dK/dV steps).
// Grouped-query attention passes only the kv heads and expands them per block.
//
// costmodel/cp_costs.hpp prices exactly this exchange.
#include <ATen/ATen.h>

#include <cstdint>

#include "runtime/comm/communicator.hpp"

namespace planner::rt {

class ContextParallel {
 public:
  // `cp`: the context-parallel group (rank = cp index, RankGrid::cp_group
  // order); `seq`: the whole sequence, a multiple of 2 * cp->size().
  ContextParallel(Communicator* cp, int64_t seq);

  int size() const { return size_; }
  int rank() const { return rank_; }
  int64_t chunk() const { return chunk_; }        // c = seq / (2 cp)
  int64_t local_seq() const { return 2 * chunk_; }

  // The rank's 2c token positions in the sequence (int64, on `device`).
  at::Tensor positions(at::Device device) const;
  // x's chunks i and 2cp-1-i along `dim` (a sequence of seq tokens there).
  at::Tensor shard(const at::Tensor& x, int64_t dim = 1) const;

  // Causal attention of q (b, heads, 2c, d) against k, v (b, kv_heads, 2c, d)
  // of the whole ring, differentiable (the backward runs the ring too).
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const;

  // The implementation (the autograd function calls these).
  std::pair<at::Tensor, at::Tensor> ring_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const;
  std::vector<at::Tensor> ring_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse) const;

 private:
  // Sends `out` to the next rank of the ring and receives `in` from the
  // previous one (even ranks send first, odd ranks receive first, so that
  // NCCL's in-order point-to-point on one stream cannot deadlock).
  std::vector<WorkPtr> exchange(const std::vector<at::Tensor>& out, const std::vector<at::Tensor>& in) const;

  Communicator* comm_;
  int size_ = 1, rank_ = 0;
  int64_t chunk_ = 0;
};

}  // namespace planner::rt

#pragma once
// Context parallelism (cp > 1) in the time and memory models: ring attention
// as Megatron-LM runs it through Transformer Engine's p2p context parallelism
// (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; Megatron-LM
// docs, context_parallel.rst), and as this project's runtime runs it
// (runtime/model/context_parallel.hpp). Formulas in docs/TIME_MODEL.md
// ("Context parallelism") and docs/MEMORY_MODEL.md.
//
// Each rank holds 2 of the sequence's 2*cp chunks (i and 2cp-1-i: causal load
// balancing), seq/cp tokens. A layer's attention is cp blocks: its own K/V
// (causal over the two chunks) and cp - 1 blocks of K/V that arrive around the
// ring; each block is (seq/cp) x (seq/2cp) pairs of full attention, the work
// of one causal attention over seq/cp tokens. While a block computes, the
// next K/V chunk travels (send to rank+1, receive from rank-1). The backward
// passes K/V around again with the dK/dV accumulated so far (fp32), and one
// last step returns dK/dV to their owner.
#include <cstdint>

#include "costmodel/hardware_profile.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/topology.hpp"
#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// Bytes of one rank's K and V for one layer: 2 x mbs x seq/cp tokens x
// kv_heads/tp x head_dim x elem_bytes (grouped-query attention sends only its
// kv heads).
double cp_kv_chunk_bytes(const ModelSpec& m, int64_t seq, const Strategy& s, int elem_bytes);

struct CpRingSeconds {
  double forward = 0;   // KVF: exposed ring time of one layer's forward
  double backward = 0;  // KVB: of its backward (and, under ckpt=full, of the forward ring it reruns)
};

// A layer's attention on a cp rank: cp blocks, each with the work of the
// causal attention over the rank's seq/cp tokens that `layer` holds.
void scale_attention_for_cp(PassTimes& layer, int cp);

// `block`: one layer's times for the rank's seq/cp tokens (one block of
// attention, before scale_attention_for_cp). The ring time that the blocks do
// not hide, per pass:
//   forward  = (cp - 1) max(0, t_kv - t_block_fwd / k)
//   backward = (cp - 1) max(0, t_kv + t_dkv - t_block_bwd / k) + t_dkv
//              (+ forward under ckpt=full, whose backward reruns the layer's forward)
// t_kv: send_recv_seconds of cp_kv_chunk_bytes over `cp_link`; t_dkv: the same in fp32.
// k: the profile's comm_slowdown_beside_compute (the exchange runs k times
// slower while the block computes beside it: t_block / k of it is done by
// the block's end; what is left runs alone). 1: the exchange at its own rate.
CpRingSeconds cp_ring_seconds(const PassTimes& block, const ModelSpec& m, int64_t seq, const Strategy& s,
                              const GroupLink& cp_link, double base_latency_s, double comm_slowdown = 1.0);

// Device memory traffic (bytes read + written) of the ring's elementwise work
// in one layer on one rank, beyond the attention kernels themselves, as
// runtime/model/context_parallel.cpp does it: q, k, v and the output made
// contiguous, K/V and query halves made contiguous for a block, each block's output merged
// into the fp32 running output (out = out a + o b), the fp32 dQ accumulated,
// dK/dV converted to fp32, dK/dV added to the
// travelling sums, and the conversions at either end. Blocks from an earlier
// and from a later rank differ; the cp - 1 ring steps are priced at their mean.
// Counted in docs/TIME_MODEL.md ("Context parallelism"); cp21's kernel profile
// (validation/h100x4/cp21/kernels) is why: 45 ms a step of such kernels that
// the model did not price.
struct CpRingBytes {
  double forward = 0, backward = 0;                // on ATen's non-vectorized path (MemKernel::Strided)
  double forward_stream = 0, backward_stream = 0;  // streaming (fills, casts, contiguous fp32 sums)
  double forward_kernels = 0, backward_kernels = 0;
};
CpRingBytes cp_ring_memory_bytes(const ModelSpec& m, int64_t seq, const Strategy& s);

// Adds cp_ring_memory_bytes at the profile's strided and streaming rates to a layer's
// times (the forward's to the recomputation too under ckpt=full).
void add_cp_ring_memory(PassTimes& layer, const HardwareProfile& p, const ModelSpec& m, int64_t seq,
                        const Strategy& s);

// Device bytes the ring holds while a layer's attention runs: two K/V chunk
// buffers (the one computed on, the one arriving) and, in the backward, two
// fp32 dK/dV buffers (the one accumulated, the one travelling). 0 for cp = 1.
double cp_ring_buffer_bytes(const ModelSpec& m, int64_t seq, const Strategy& s);

}  // namespace planner

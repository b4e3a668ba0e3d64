#pragma once
// Model states (parameters, gradients, optimizer states) per GPU under ZeRO
// and offload, and the constants of the memory model that are not formulas.
#include <cstdint>

#include "specs/cluster_spec.hpp"
#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// Memory the framework needs beyond the formulas. Defaults are the values
// measured by the runtime on the device (see docs/MEMORY_MODEL.md, "Memory
// model constants"); a hardware profile may override them.
struct MemoryConstants {
  double context_bytes = 0;                  // CUDA context, handles and kernels, outside the allocator
  double static_buffer_bytes = 0;            // cuBLAS workspaces and small buffers inside the allocator
  double optimizer_work_bytes = 0;           // the optimizer's fp32 gradient chunk (16-bit training)
  double loss_chunk_bytes = 0;               // the cross-entropy's fp32 chunk
  double nccl_bytes_per_communicator = 0;    // NCCL channel buffers of a communicator used for collectives
  double nccl_bytes_per_pipe_link = 0;       // NCCL buffers of one pipeline send/receive link
  double nccl_bytes_per_all_to_all_peer = 0; // NCCL buffers per peer of the MoE ep communicator; 0: one
  double nccl_bytes_all_to_all_fixed = 0;    // ... and its buffers that do not grow with the peers
                                             // collective communicator's for the whole group
  double fragmentation = 0;                  // caching-allocator slack, fraction of the dynamic memory
  double bucket_bytes = 0;                   // one gradient-reduction bucket
  double reduce_buckets = 0;                 // buckets alive at once
  double zero3_prefetch_layers = 0;          // gathered layers alive under ZeRO-3 (current + prefetched)
  double host_bytes_per_process = 0;         // host memory of one training process without offload
};
MemoryConstants memory_constants(const ClusterSpec& c);

// Bytes per parameter: working copy, gradient, optimizer state K. Mixed
// precision keeps fp32 master weights and two fp32 Adam moments (K = 12, ZeRO
// paper sec. 3.1); fp32 training uses the weights themselves as master (K = 8).
struct StateBytesPerParam {
  double param = 0, grad = 0, optimizer = 0;
};
StateBytesPerParam state_bytes_per_param(Precision p);

struct ModelStateBytes {
  double gpu_params = 0, gpu_grads = 0, gpu_optimizer = 0;
  double host_bytes = 0;  // offloaded state kept in host memory by this rank
};

// Model states of one rank holding `params` parameters (after TP/PP), with the
// ZeRO stage partitioning over dp ranks (Rajbhandari et al. 2020, Figure 1):
//   stage 0: (2 + 2 + K) P      stage 1: (2 + 2) P + K P / Nd
//   stage 2: 2 P + (2 + K) P / Nd   stage 3: (2 + 2 + K) P / Nd
// offload=optimizer moves the optimizer shard and an fp32 gradient copy to
// the host (ZeRO-Offload, Ren et al. 2021); offload=all also the parameter
// shard (ZeRO-Infinity, Rajbhandari et al. 2021), leaving on the GPU only the
// gathered layers (counted as communication buffers).
ModelStateBytes model_state_bytes(double params, const Strategy& s, const MemoryConstants& k);

// Parameters one rank of a pipeline stage holds: its layers, the embedding on
// the first stage, the head on the last (with a copy of a tied embedding when
// pp > 1, as Megatron-LM keeps), matrices divided by tp, norms and row-parallel
// biases replicated.
int64_t stage_params_per_rank(const ModelSpec& m, int layers, bool has_embedding, bool has_head, int pp, int tp);

// Rows of a vocabulary-parallel tensor on each rank, ceil(vocab / tp), and the
// columns of each rank's LM-head GEMM: those rows padded to a multiple of 64
// (runtime/model/transformer.hpp: TransformerModel::vocab_rows() and padded_vocab()).
int64_t vocab_rows_per_rank(const ModelSpec& m, int tp);
int64_t padded_vocab_columns(const ModelSpec& m, int tp);
// Whether those rows need padding: only then does the runtime make a padded
// copy of the LM head's matrix (and of its gradient) for the GEMM.
bool lm_head_padded(const ModelSpec& m, int tp);

}  // namespace planner

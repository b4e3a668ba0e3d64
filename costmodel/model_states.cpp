#include "costmodel/model_states.hpp"

#include <algorithm>

namespace planner {

MemoryConstants memory_constants(const ClusterSpec& /*c*/) {
  MemoryConstants k;
  // Measured by the runtime on an H100 80GB (CUDA 13.0, LibTorch 2.11,
  // validation/archive/h100/*.exec.json, memory.outside_allocator): 0.749 GiB outside
  // the caching allocator (context with lazy module loading, cuBLAS/cuDNN
  // handles), and about 64 MiB of workspaces and small buffers inside it.
  k.context_bytes = 0.75 * (1 << 30);
  k.static_buffer_bytes = 64.0 * (1 << 20);
  // The runtime's buffers (runtime/engine.hpp, runtime/model/transformer.hpp): the
  // optimizer converts gradients to fp32 2^26 elements at a time, the
  // cross-entropy works on fp32 chunks of about 256 MiB.
  k.optimizer_work_bytes = 4.0 * (1 << 26);
  k.loss_chunk_bytes = 256.0 * (1 << 20);
  // NCCL allocates per-channel buffers for each communicator (NCCL_BUFFSIZE 4 MiB
  // times channels, peers and protocols), connecting lazily at first use.
  // Measured by the runtime as the growth of device memory outside the caching
  // allocator from before the first communicator to the end of the timed steps,
  // on two NVLink-connected H200s (NCCL 2.28), validation/archive/h200x2-3d/run1:
  //  - a communicator used for collectives: 990 MiB (the dp communicator of a
  //    dp=2 ZeRO-1 run: all-reduce and all-gather; 840 MiB right after its
  //    first all-reduce, validation/archive/h200x2/run1);
  //  - a pipeline link (runtime/comm/pipe_links.hpp: a two-rank communicator
  //    carrying sends one way): 168 MiB, from the pp=2 1F1B run's 2316 MiB =
  //    two collective communicators (pp, and the tied embedding's then
  //    separate group) + two links on each rank.
  //  A later measurement replaced the link figure: planner calibrate under
  //  mpirun -np 2 makes the links of a two-stage ring as the runtime does and
  //  measures 389 MiB per link (validation/archive/h200x2/calib-links), as the
  //  difference between the interleaved (four links) and GPipe (two) runs of
  //  one model gives (validation/archive/h200x2/heldout2, heldout-a-rerun).
  k.nccl_bytes_per_communicator = 990.0 * (1 << 20);
  k.nccl_bytes_per_pipe_link = 389.0 * (1 << 20);
  // Reserved but unallocated memory of PyTorch's caching allocator with its
  // default segments (the other engines'; planner's runtime uses expandable
  // segments), as a fraction of the memory that comes and goes within a step
  // (activations and logits): measured 0.29 GiB of 21.2 GiB (gpt2-xl) and 0.42
  // of 27.7 GiB (gpt-neo-1.3b) on H100, validation/h100/. With full
  // checkpointing it reached 1.9-2.2 GiB of 14 (TinyLlama,
  // validation/archive/h200x2/alloc).
  k.fragmentation = 0.015;
  // Gradient buckets as in PyTorch DDP (bucket_cap_mb = 25), two in flight.
  k.bucket_bytes = 25.0 * (1 << 20);
  k.reduce_buckets = 2;
  // ZeRO-3: the layer being computed and the one prefetched.
  k.zero3_prefetch_layers = 2;
  // A PyTorch training process without offload: about 3 GiB of host memory
  // (framework, CUDA host allocations, data loader).
  k.host_bytes_per_process = 3.0 * (1 << 30);
  return k;
}

StateBytesPerParam state_bytes_per_param(Precision p) {
  if (p == Precision::FP32) return {4, 4, 8};
  return {2, 2, 12};
}

ModelStateBytes model_state_bytes(double P, const Strategy& s, const MemoryConstants& /*k*/) {
  const StateBytesPerParam b = state_bytes_per_param(s.precision);
  const double nd = s.dp_cp();  // ZeRO shards over every rank holding the same parameters (dp-cp)
  ModelStateBytes out;
  const double params_full = b.param * P, grads_full = b.grad * P, opt_full = b.optimizer * P;
  switch (s.zero) {
    case 0: out = {params_full, grads_full, opt_full, 0}; break;
    case 1: out = {params_full, grads_full, opt_full / nd, 0}; break;
    case 2: out = {params_full, grads_full / nd, opt_full / nd, 0}; break;
    default: out = {params_full / nd, grads_full / nd, opt_full / nd, 0}; break;
  }
  if (s.offload != Offload::None) {
    // The optimizer shard lives on the host (ZeRO-Offload, Ren et al. 2021)
    // together with, as the runtime keeps them (runtime/engine.hpp), pinned
    // copies of the gradient shard and of the updated parameter shard in the
    // working precision (2 + 2 bytes; 4 + 4 in fp32, whose master is then a
    // separate 4 bytes) and one fp32 conversion chunk of at most 256 MiB. The
    // GPU keeps its gradients (the whole model for ZeRO-0/1, the shard for
    // ZeRO-2/3) until they are copied out.
    const double shard = P / nd;
    const double extra = s.precision == Precision::FP32 ? 12.0 : 4.0;
    out.host_bytes += out.gpu_optimizer + extra * shard;
    if (s.precision != Precision::FP32) out.host_bytes += std::min(4.0 * shard, 256.0 * (1 << 20));
    out.gpu_optimizer = 0;
  }
  if (s.offload == Offload::All) {
    // The parameter shard is the pinned working-precision copy counted above;
    // only gathered units stay on the GPU (communication buffers).
    out.gpu_params = 0;
  }
  return out;
}

int64_t stage_params_per_rank(const ModelSpec& m, int layers, bool has_embedding, bool has_head, int pp, int tp) {
  // As the runtime declares them (runtime/model/transformer.hpp, TransformerModel's tp
  // splits; Shoeybi et al. 2019). Replicated in a layer: its norms and the
  // biases of the row-parallel GEMMs (attention output and second MLP
  // projection, SwiGLU's down projection included); the rest is split evenly
  // (the runtime requires heads, kv heads and ffn to be multiples of tp).
  const int64_t h = m.hidden;
  int64_t layer_repl = (m.parallel_block ? 1 : 2) * m.norm_params();
  if (m.out_bias) layer_repl += h;
  if (m.mlp_bias) layer_repl += h;
  const int64_t layer = (m.layer_params() - layer_repl) / tp + layer_repl;

  // Vocabulary-parallel tensors (word embedding, untied LM head and its bias,
  // BERT's MLM bias) hold ceil(vocab / tp) rows on every rank: the last ranks'
  // rows past the vocabulary are zero padding the runtime allocates all the same.
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : h;
  const int64_t rows = vocab_rows_per_rank(m, tp);
  const int64_t word = m.vocab * width;
  int64_t total = int64_t(layers) * layer;
  if (has_embedding) total += (m.embedding_params() - word) + rows * width;
  if (has_head) {
    int64_t head = m.head_params();
    auto vocab_parallel = [&](bool present, int64_t cols) {
      if (present) head += (rows - m.vocab) * cols;  // vocab * cols -> rows * cols
    };
    vocab_parallel(!m.tied_embeddings, width);
    vocab_parallel(m.lm_head_bias, 1);
    vocab_parallel(m.mlm_head, 1);
    if (m.tied_embeddings && pp > 1) head += rows * width;  // the last stage keeps its own copy of the tied embedding
    total += head;
  }
  return total;
}

int64_t vocab_rows_per_rank(const ModelSpec& m, int tp) {
  const int64_t t = std::max(1, tp);
  return (m.vocab + t - 1) / t;
}

int64_t padded_vocab_columns(const ModelSpec& m, int tp) { return (vocab_rows_per_rank(m, tp) + 63) / 64 * 64; }

bool lm_head_padded(const ModelSpec& m, int tp) { return padded_vocab_columns(m, tp) > vocab_rows_per_rank(m, tp); }

}  // namespace planner

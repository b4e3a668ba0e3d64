#pragma once
// What DeepSpeed, Megatron-LM and PyTorch DDP/FSDP2 allocate for a strategy,
// where it differs from this project's runtime (costmodel/model_states.hpp).
// Every difference cites the engine's source or documentation at the version
// of costmodel/engines.hpp; docs/MEMORY_MODEL.md ("Engines") has the table.
//
// Bytes per parameter held by one rank (P after TP/PP), d = dp, 16-bit training:
//
//   engine      zero=0     zero=1          zero=2           zero=3
//   ours        2+2+12     2+2+12/d        2+(2+12)/d       (2+2+12)/d
//   deepspeed   2+2+16     2+2+16/d        2+(2+16)/d       (2+2+16)/d
//   megatron    2+4+12     2+4+12/d        2+(4+12)/d       (2+4+12)/d
//   fsdp        6+4+8      6+4+8/d         2+(4+4+8)/d      (4+4+8)/d
//
// DeepSpeed keeps an fp32 copy of the gradient partition for the step (its
// estimate_zero2_model_states_mem_needs counts 18 = 2 + 4 + 4 + 8 per sharded
// parameter); Megatron-LM accumulates and reduces gradients in fp32 main_grad
// buffers (docs/user-guide/features/dist_optimizer.md: 18 or 6 + 12/d bytes
// for bf16); PyTorch keeps fp32 parameters that are their own master copy, DDP
// under autocast caches 16-bit weight copies (2), FSDP2 all-gathers 16-bit
// parameters from fp32 shards.
#include <cstdint>
#include <vector>

#include "costmodel/engines.hpp"
#include "costmodel/model_states.hpp"

namespace planner {

// DeepSpeed's bucket sizes in elements, its defaults (deepspeed/runtime/zero/
// config.py: reduce_bucket_size and allgather_bucket_size 5e8,
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters and
// stage3_max_reuse_distance 1e9, which the export leaves as they are;
// runtime/engine.py MEMORY_OPT_ALLREDUCE_SIZE 5e8 for ZeRO-0), and
// overlap_comm as the export writes it (true: two reduce buffers,
// stage_1_and_2.py setup_buckets).
struct DeepSpeedBuckets {
  double reduce_elements = 5e8;
  double allgather_elements = 5e8;
  double prefetch_elements = 5e7;
  double allreduce_elements = 5e8;
  double max_live_elements = 1e9;
  bool overlap_comm = true;
};

// Model states of one rank holding `params` parameters under `engine`
// (Engine::Ours gives model_state_bytes).
ModelStateBytes engine_model_state_bytes(double params, const Strategy& s, Engine engine);

// Parameters of the largest unit gathered at once under ZeRO-3/FSDP: a
// transformer layer or the word embedding, divided by tp.
double gather_unit_params(const ModelSpec& m, int tp);

// DeepSpeed ZeRO-3 gathers module by module; its estimator
// (estimate_zero3_model_states_mem_needs) charges 4 bytes per parameter of the
// largest module (its 16-bit weight and gradient). The largest module here:
// the word embedding, the fused QKV or the widest MLP matrix, divided by tp.
double deepspeed_largest_module_params(const ModelSpec& m, int tp);

// DeepSpeed ZeRO-3: parameter elements held gathered (whole, 16-bit) by a
// rank of `params` parameters from the forward to the loss's backward, every
// step after the first: stage3_max_live_parameters, or all of them when fewer
// (engines_memory.cpp has the derivation).
double deepspeed_zero3_live_params(double params);

// Communication buffers of one rank under `engine` (not Ours): reduce and
// gather buckets, gathered units; `pp_buffers` (pipeline send/receive) is
// added as it is.
double engine_comm_bytes(const ModelSpec& m, const Strategy& s, Engine engine, double stage_params, double pp_buffers);

// The moments of a DeepSpeed or FSDP2 step (docs/MEMORY_MODEL.md, "Engines":
// the peak is the largest moment, not the sum of each category's largest
// value). What is alive whatever the moment comes in `live`; each moment adds
// what the engine holds then, read from its source at the versions of
// costmodel/engines.hpp.
struct EngineStepLive {
  double params = 0;       // P: parameters held by the rank (after TP/PP)
  double activations = 0;  // the saved activations of every micro-batch in flight
  double loss_peak = 0;    // the loss's working set at its backward (the logits' fp32 copies)
  double loss_grad = 0;    // what the loss leaves for the head's backward (the logits' gradient)
  double fixed_comm = 0;   // NCCL's buffers, pipeline send/receive: alive throughout
};
// One moment: bytes by category (the caller adds the same overhead to each).
struct EngineMoment {
  const char* name = "";
  double params = 0, grads = 0, optimizer = 0, activations = 0, logits = 0, comm = 0;
  double total() const { return params + grads + optimizer + activations + logits + comm; }
};
// Whether the engine's step is priced by its moments: DeepSpeed ZeRO-1/2/3
// and FSDP2 (zero=2/3), without offload. Otherwise (ZeRO-0, DDP, offload,
// Megatron, ours) the categories' largest values are added.
bool engine_has_moments(const Strategy& s, Engine engine);
// The moments of the step on one rank (empty when !engine_has_moments).
std::vector<EngineMoment> engine_moments(const ModelSpec& m, const Strategy& s, Engine engine, const EngineStepLive& live);

}  // namespace planner

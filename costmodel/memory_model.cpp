#include "costmodel/memory_model.hpp"

#include "costmodel/cp_costs.hpp"

#include "strategies/checked.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <nlohmann/json.hpp>

#include "costmodel/activations.hpp"
#include "costmodel/engines_memory.hpp"
#include "costmodel/finetune.hpp"
#include "costmodel/fp8_costs.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/moe_costs.hpp"
#include "strategies/schedule.hpp"
#include "strategies/step_buffers.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/step_program.hpp"

namespace planner {

std::vector<int> partition_layers(const ModelSpec& m, int chunks) {
  return planner::partition_layers(m.layers, chunks);  // strategies/partition.hpp: the one layout
}

namespace {

// ZeRO-2/3 unit buffers on a stage (bytes), as the runtime's executor keeps
// them (runtime/engine.cpp, BufferPool): the embedding and the head each have
// their own; the layers share a pool of layer-sized slots, one per layer unit
// that holds a buffer at once, as the stage's list of the step program says
// (unit_buffer_peaks: gathered parameters from Gather to Release under ZeRO-3,
// a unit's gradient from its backward to its Reduce), and two from the pool's
// first use (runtime/engine.cpp acquire: the slot a unit just gave back may
// still be read by its collective, so the next unit takes the other one).
// Read off the program of at most two micro-batches: ZeRO-2/3 need pp = 1
// (Strategy::validate), where every micro-batch runs the same actions, so
// two hold every moment of a longer step (a micro-batch and the step from one
// to the next). Per shape, once per thread.
double zero_buffer_bytes(const ModelSpec& m, const Strategy& s, bool emb, bool head, int layers, int e) {
  if (s.zero < 2) return 0;
  Strategy x = s;
  x.gas = std::min(s.gas, 2);
  using Key = std::tuple<int, int, int64_t, bool, int>;
  thread_local std::map<Key, UnitBufferPeaks> known;
  const Key key{x.zero, x.gas, int64_t(m.layers), m.tied_embeddings, int(x.offload)};
  auto it = known.find(key);
  if (it == known.end()) {
    const StepProgram prog = build_step_program(x, m.layers, StepOptions{m.tied_embeddings});
    it = known.emplace(key, unit_buffer_peaks(prog.stages[0], prog.partition)).first;
  }
  // A stage with a layer unit gets at least the pool's two slots.
  auto slots = [&](int peak) { return layers > 0 ? std::max(2, peak) : 0; };
  // The largest layer: a MoE layer's non-expert and local-expert parameters (costmodel/moe_costs.hpp).
  // Fine-tuning: the units hold the adapters only (runtime/engine.hpp); the
  // embedding and head units are empty.
  const bool ft = s.finetune.frozen_base();
  const double L = ft ? double(adapter_params_per_layer(m, s.finetune, s.tp))
                      : double(stage_params_per_rank(m, 1, false, false, s.pp, s.tp) + moe_extra_layer_params_per_rank(m, s));
  const double E = emb && !ft ? double(stage_params_per_rank(m, 0, true, false, s.pp, s.tp)) : 0;
  const double H = head && !ft ? double(stage_params_per_rank(m, 0, false, true, s.pp, s.tp)) : 0;
  const double grads = E + H + slots(it->second.gradient_layers) * L;
  const double gathered = s.zero == 3 ? E + H + slots(it->second.gathered_layers) * L : 0.0;
  return double(e) * (grads + gathered);
}

}  // namespace

// NCCL's own buffers on a rank of `stage`, as the runtime makes its
// communicators (runtime/measure.cpp, runtime/engine.cpp): one per group used
// for collectives (dp-cp, tp, pp, the cp ring; the first and last stage of a tied model with
// pp > 2 one more for the word matrix's gradient), and the pipeline's
// send/receive links (runtime/comm/pipe_links.hpp), one per neighbour and
// direction of travel: two on the first and the last stage, four on the
// others and on every stage of the interleaved schedule's ring. Mixture of
// experts with ep > 1 (runtime/measure.cpp setup_comms): the experts'
// gradient group (dp/ep ranks, when more than one) is one more collective
// communicator, and the ep group's all-to-all holds a fixed part and buffers
// per peer (the profile's nccl_all_to_all_fixed_bytes + (ep - 1) x
// nccl_all_to_all_peer_bytes; without them, one communicator's).
double nccl_bytes(const ModelSpec& m, const Strategy& s, int stage, const MemoryConstants& k) {
  const bool ends = stage == 0 || stage == s.pp - 1;
  const bool ep = s.ep > 1 && m.moe.enabled();
  const int collectives = (s.dp_cp() > 1) + (s.tp > 1) + (s.pp > 1) + (s.cp > 1) +
                          (m.tied_embeddings && s.pp > 2 && ends) + (ep && s.dp / s.ep > 1);
  const bool ring = s.schedule == Schedule::Interleaved && s.vpp > 1;
  const int links = s.pp < 2 ? 0 : (ring || !ends) ? 4 : 2;
  const double all_to_all = !ep                                   ? 0.0
                            : k.nccl_bytes_per_all_to_all_peer > 0
                                ? k.nccl_bytes_all_to_all_fixed + (s.ep - 1) * k.nccl_bytes_per_all_to_all_peer
                                                                   : k.nccl_bytes_per_communicator;
  return collectives * k.nccl_bytes_per_communicator + links * k.nccl_bytes_per_pipe_link + all_to_all;
}

namespace {

// Activations of micro-batches in flight on `stage`, in units of one chunk of
// one micro-batch: read off the step's compute schedule (max_inflight of
// schedule.hpp's list, the first pass of the step program), not restated.
// The peak of 1F1B and interleaved 1F1B comes in the warm-up and the steady
// state keeps it, so their schedules are built with at most pp resp.
// pp(vpp + 2) micro-batches (a multiple of pp, as gas is): bounded work for
// any gas. GPipe holds all of its micro-batches, so its list is built whole.
// Per shape, once per thread: the search asks for few shapes many times.
// tests/unit/test_memory_model.cpp and test_hardening.cpp check the counts
// against the full schedules and the closed forms (GPipe m, 1F1B
// min(pp - stage, m); Narayanan et al. 2021, sec. 2.2).
// `chunk` >= 0: that chunk's passes only (the last stage's last chunk holds
// the LM head's logits, the first stage's chunk 0 the embedding): under the
// interleaved schedule fewer than the stage's chunks in flight, which count
// every virtual stage (validation/h200x4/moe37: logits counted vpp times).
// The shape whose schedule the counts are read off: gas bounded as above.
Strategy counting_shape(const Strategy& s) {
  Strategy x = s;
  if (s.schedule == Schedule::OneFOneB) x.gas = std::min(s.gas, s.pp);
  if (s.schedule == Schedule::Interleaved) x.gas = std::min(s.gas, s.pp * (s.vpp + 2));
  return x;
}

int inflight(const Strategy& s, int stage, int chunk = -1) {
  if (s.vpp <= 1) chunk = -1;  // one chunk a stage: the stage's count, cached once
  const Strategy x = counting_shape(s);
  thread_local std::map<std::tuple<int, int, int, int, int>, std::vector<int>> peaks;
  const auto key = std::make_tuple(int(x.schedule), x.pp, x.vpp, x.gas, chunk);
  auto it = peaks.find(key);
  if (it == peaks.end()) {
    std::vector<int> per_stage;
    for (const StepList& list : compute_schedule(x)) per_stage.push_back(max_inflight(list, chunk));
    it = peaks.emplace(key, std::move(per_stage)).first;
  }
  return it->second[size_t(stage)];
}

// The layers whose activations a stage holds at its peak: the largest sum,
// over the (micro-batch, chunk) passes in flight, of each chunk's layers on
// this stage (`chunk_layers`, the partition's, virtual stage c * pp + stage).
// Without interleaving, inflight() x the stage's layers. Interleaved chunks
// differ by a layer when pp * vpp does not divide the layers, and the
// warm-up holds more of a stage's first chunks than of its last: the mean
// chunk under-counted stages 1 and 2 of qwen2.5-7b at pp 4, vpp 2 by about
// one chunk (validation/h200x4/pp79).
double inflight_layers(const Strategy& s, int stage, const std::vector<int>& chunk_layers) {
  std::vector<double> w(size_t(std::max(1, s.vpp)));
  for (int c = 0; c < int(w.size()); ++c) w[size_t(c)] = chunk_layers.at(size_t(c) * s.pp + stage);
  if (s.vpp <= 1) return inflight(s, stage) * w[0];
  const Strategy x = counting_shape(s);
  thread_local std::map<std::tuple<int, int, int, int, int, std::vector<double>>, double> peaks;
  const auto key = std::make_tuple(int(x.schedule), x.pp, x.vpp, x.gas, stage, w);
  auto it = peaks.find(key);
  if (it == peaks.end())
    it = peaks.emplace(key, max_inflight_weighted(compute_schedule(x)[size_t(stage)], w)).first;
  return it->second;
}

}  // namespace

namespace {

// What every stage of one estimate shares.
struct MemoryInputs {
  const ModelSpec& m;  // Megatron: over its padded vocabulary
  const Strategy& s;
  Engine engine;
  bool megatron;
  int64_t seq;  // tokens of one sequence on a rank: seq/cp (context parallelism)
  MemoryConstants k;
  int e;                         // bytes per element of the working precision
  std::vector<int> chunk_layers;  // layers of each chunk (virtual stage)
  AttentionImpl impl;
  double layer_act;  // one layer's saved activations of one micro-batch on one rank
  double sbh;        // seq * mbs * hidden
  int64_t plan_seq;  // the whole sequence (the cp ring's K/V chunks are sized from it)
  bool fused_kernels;  // the runtime's CUDA kernels (HardwareProfile::fused_ops): the one-kernel cross-entropy, the FP8 casts
  bool local_attention;  // Megatron without Transformer Engine: megatron-core's unfused DotProductAttention
  double sp_split() const { return s.sp ? s.tp : 1; }
};

// The constants, with what the process itself takes from the profile
// (measured by planner calibrate on the GPU, else the constants' own).
MemoryConstants constants_of(const ClusterSpec& c, const HardwareProfile& profile) {
  MemoryConstants k = memory_constants(c);
  k.context_bytes = double(profile.context_bytes);
  k.static_buffer_bytes = double(profile.workspace_bytes);
  k.nccl_bytes_per_communicator = double(profile.nccl_communicator_bytes);
  if (profile.nccl_pipe_link_bytes > 0) k.nccl_bytes_per_pipe_link = double(profile.nccl_pipe_link_bytes);
  k.nccl_bytes_per_all_to_all_peer = double(profile.nccl_all_to_all_peer_bytes);
  k.nccl_bytes_all_to_all_fixed = double(profile.nccl_all_to_all_fixed_bytes);
  return k;
}

// The stage's layers, ends and parameters.
StageMemory stage_layout(const MemoryInputs& in, int st) {
  const Strategy& s = in.s;
  StageMemory sm;
  sm.stage = st;
  sm.has_embedding = st == 0;
  sm.has_head = st == s.pp - 1;
  int layers = 0;
  for (int v = 0; v < s.vpp; ++v) layers += in.chunk_layers[v * s.pp + st];
  int first = 0;
  for (int i = 0; i < st; ++i) first += in.chunk_layers[i];
  sm.first_layer = first;  // for vpp > 1 the stage's layers are not contiguous; this is chunk 0's
  sm.last_layer = first + in.chunk_layers[st];
  sm.layers = layers;
  sm.params = stage_params_per_rank(in.m, layers, sm.has_embedding, sm.has_head, s.pp, s.tp);
  return sm;
}

// Activations: each in-flight chunk of a micro-batch holds its layers'
// saved tensors (inflight_layers).
double activation_bytes(const MemoryInputs& in, const StageMemory& sm) {
  const Strategy& s = in.s;
  double act = sm.inflight_layers * in.layer_act;
  if (sm.has_head) act += 2.0 * in.e * in.sbh / in.sp_split();  // final-norm input and LM-head input
  if (in.megatron && sm.has_embedding) {
    // Megatron's embedding dropout mask (sbh bytes) and the token ids (8sb)
    // of each micro-batch in flight (theoretical_memory_usage.py counts both).
    act += sm.embedding_inflight_microbatches * (in.sbh / in.sp_split() + 8.0 * double(in.seq) * s.mbs);
  }
  return act;
}

// Whether this runtime, on a GPU, holds the head's block while the head's
// chunk runs (specs/runtime_gap.hpp runtime_reserves_head_block), on a dense
// model (a MoE layer's forward working set is not layer_forward_working_bytes).
bool holds_head_block(const MemoryInputs& in, const StageMemory& sm) {
  const Strategy& s = in.s;
  const double logits = double(in.seq) * s.mbs * double(padded_vocab_columns(in.m, s.tp)) * in.e;
  return in.engine == Engine::Ours && sm.has_head && in.fused_kernels && !in.m.moe.enabled() &&
         runtime_reserves_head_block(in.m, s, logits);
}

// The logits and the loss on the last stage (0 elsewhere).
double logits_bytes(const MemoryInputs& in, const StageMemory& sm) {
  if (!sm.has_head) return 0;
  const ModelSpec& m = in.m;
  const Strategy& s = in.s;
  // The loss as the runtime computes it (runtime/model/transformer.hpp): logits over the
  // vocabulary padded to a multiple of 64 (vocab-parallel under TP) in the
  // working precision; a chunked fp32 cross-entropy turns them into their
  // gradient during the forward, so each micro-batch waiting for its backward
  // keeps e bytes per logit, and the one being computed holds its logits and
  // their gradient, one fp32 chunk of at most 256 MiB and, where the rank's
  // rows need padding, a padded copy of the output matrix with its gradient
  // (runtime/model/transformer.cpp LinearAccum; a vocabulary that is already a multiple
  // of 64, such as Llama's 32000 and 128256, is read in place and its
  // gradient added into the flat buffer, with no copy). Measured on H100
  // (validation/h100/): gpt-neo-1.3b seq 2048 mbs 8, 3.63 GiB against 3.71
  // GiB from this formula. Under TP each rank's GEMM covers its
  // ceil(vocab / tp) rows, padded to 64.
  const double vp = double(padded_vocab_columns(m, s.tp));
  const double width = double(m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden);
  const double tokens = double(in.seq) * s.mbs;
  if (in.engine == Engine::DeepSpeed || in.engine == Engine::Fsdp) {
    // The eager loss of the model code these engines run (scripts/engines/
    // torch_model.py lm_loss, as Hugging Face's causal-LM loss):
    // F.cross_entropy over logits.float(), over the whole vocabulary on each
    // rank (the FSDP export's TP output layer gathers its logits, Replicate()).
    // log_softmax saves its fp32 output (4 bytes per logit) until the
    // backward, where the incoming and the outgoing fp32 gradients join it:
    // 12 bytes per logit at the peak. Measured on one H200 with
    // torch_model.py --probe (validation/engines/act): 4.000 bytes per logit
    // saved and 8.00 above it in the backward (llama-3.2-1b at mbs 1, 2, 4,
    // llama-3.2-3b at mbs 1, 2, gpt2-xl at mbs 4).
    const double lg = tokens * double(m.vocab);
    return 4.0 * lg * std::max(0, sm.head_inflight_microbatches - 1) + 12.0 * lg;
  }
  if (in.megatron) {
    // Megatron's vocab-parallel cross-entropy (megatron/core/tensor_parallel/
    // cross_entropy.py) turns the logits to fp32 and saves their exponentials
    // for the backward: 4 bytes per logit for every micro-batch waiting, and
    // the 16-bit logits beside them while one is computed
    // (theoretical_memory_usage.py: 4sbh(1 + V/h) with the LM-head input).
    const double lg = tokens * double(m.vocab) / s.tp;
    return 4.0 * lg * sm.head_inflight_microbatches + in.e * lg;
  }
  // The fp32 chunk: under bf16 logits (bf16 and fp8 plans) without TP,
  // log_softmax first converts the chunk to fp32 in a separate copy, so two
  // chunks live at once (runtime ChunkedCrossEntropy; fp16's softmax kernel
  // converts itself, and the vocabulary-parallel path works on its own copy).
  // Measured: the loss's peak 266-384 MiB above one chunk in every tp=1 bf16
  // run of validation/h100/ft23, ft23b, window23 and h100x4/heldout23, 16-32 MiB
  // under tp=2.
  // Without TP the runtime's fused cross-entropy kernel (runtime/model/fused_ops.hpp)
  // writes the gradient straight from the logits: no chunk at all.
  const bool bf16_copy = s.tp == 1 && (s.precision == Precision::BF16 || s.precision == Precision::FP8);
  const double chunk = s.tp == 1 && in.fused_kernels ? 0.0
                       : std::min(in.k.loss_chunk_bytes, 4.0 * tokens * vp) * (bf16_copy ? 2 : 1);
  // Gemma-2's soft-capped logits (runtime soft_cap) live beside the head's
  // logits and their gradient while the loss is formed: one more.
  const double softcap = m.logit_softcap > 0 ? in.e * tokens * vp : 0.0;
  return in.e * tokens * vp * (sm.head_inflight_microbatches + 1) + chunk + softcap +
         (lm_head_padded(m, s.tp) ? 2.0 * in.e * vp * width : 0.0);
}

// What the loss leaves for the head's backward in the engines' eager code
// (logits_bytes): the logits' gradient in the working precision (the fp32
// copies are freed by then), beside the 4 bytes per logit of each other
// micro-batch waiting.
double eager_loss_grad_bytes(const MemoryInputs& in, const StageMemory& sm) {
  if (!sm.has_head) return 0;
  const double lg = double(in.seq) * in.s.mbs * double(in.m.vocab);
  return in.e * lg + 4.0 * lg * std::max(0, sm.head_inflight_microbatches - 1);
}

// Communication buffers alive throughout the step: pipeline send/receive,
// NCCL's own and the cp ring's.
double fixed_comm_bytes(const MemoryInputs& in, const StageMemory& sm) {
  const Strategy& s = in.s;
  // Pipeline send/receive: one activation and one gradient, double-buffered
  // (the runtime leaves two of a link's sends unwaited: runtime/engine_detail.hpp
  // bound_sends).
  const double pp_buffers = s.pp > 1 ? 2.0 * 2.0 * in.e * in.sbh / in.sp_split() : 0.0;
  // cp: the ring's K/V (and dK/dV) chunk buffers while a layer's attention runs.
  const double nccl = nccl_bytes(in.m, s, sm.stage, in.k) + cp_ring_buffer_bytes(in.m, in.plan_seq, s);
  return pp_buffers + nccl;
}

// Communication buffers: the fixed ones and the engine's reduction buffers.
double comm_bytes(const MemoryInputs& in, const StageMemory& sm) {
  const Strategy& s = in.s;
  const double fixed = fixed_comm_bytes(in, sm);
  if (in.engine != Engine::Ours) return engine_comm_bytes(in.m, s, in.engine, double(sm.params), 0.0) + fixed;
  // Buffers as the runtime's executor holds them (runtime/engine.hpp):
  // ZeRO-0/1 reduce in place on the flat gradient buffer (no buckets);
  // ZeRO-2/3 keep unit gradient buffers (and ZeRO-3 gathered units) in a
  // fixed pool (zero_buffer_bytes).
  return zero_buffer_bytes(in.m, s, sm.has_embedding, sm.has_head, sm.layers, in.e) + fixed;
}

// DeepSpeed and FSDP2: the peak is the largest of the step's moments
// (engine_moments), each with the same overhead; the stage's breakdown
// becomes that moment's.
void apply_engine_moments(const MemoryInputs& in, StageMemory& sm, double act, double logits) {
  const double moe = double(moe_dispatch_buffer_bytes(in.m, in.s, in.seq));
  const EngineStepLive live{double(sm.params), act, logits, eager_loss_grad_bytes(in, sm),
                            fixed_comm_bytes(in, sm) + moe};
  const int64_t overhead = sm.gpu[int(MemCategory::Overhead)];
  int64_t best = -1;
  for (const EngineMoment& mo : engine_moments(in.m, in.s, in.engine, live)) {
    MemBreakdown g{};
    g[int(MemCategory::Parameters)] = saturate_bytes(mo.params);
    g[int(MemCategory::Gradients)] = saturate_bytes(mo.grads);
    g[int(MemCategory::OptimizerStates)] = saturate_bytes(mo.optimizer);
    g[int(MemCategory::Activations)] = saturate_bytes(mo.activations);
    g[int(MemCategory::LogitsLoss)] = saturate_bytes(mo.logits);
    g[int(MemCategory::CommBuffers)] = saturate_bytes(mo.comm);
    g[int(MemCategory::Overhead)] = overhead;
    int64_t total = 0;
    for (auto v : g) total = saturating_add_bytes(total, v);
    sm.moments.emplace_back(mo.name, total);
    if (total > best) best = total, sm.gpu = g, sm.peak_moment = mo.name;
  }
}

// The process itself, the optimizer's work chunk and the allocator's slack
// over the `dynamic` bytes (activations and logits).
double overhead_bytes(const MemoryInputs& in, const StageMemory& sm, double dynamic) {
  const Strategy& s = in.s;
  // The optimizer converts 16-bit gradients to fp32 in one reused chunk.
  // The other engines' optimizers work on their fp32 partitions in place.
  const double work = s.precision == Precision::FP32 || s.offload != Offload::None || in.engine != Engine::Ours
                          ? 0.0
                          : std::min(in.k.optimizer_work_bytes,
                                     4.0 * trainable_params_per_rank(in.m, s, double(sm.params), sm.layers) /
                                         (s.zero >= 1 ? s.dp_cp() : 1));
  // Fragmentation of the caching allocator: PyTorch's default segments keep
  // a fraction of the memory that comes and goes (the other engines); this
  // runtime uses expandable segments (runtime/device.hpp), which keep
  // 0.13-0.16 GiB reserved and unused, already within what calibrate
  // measures as workspace with no tensor alive (validation/archive/h200x2/
  // alloc), with the head's block reserved first (runtime/engine.cpp
  // head_reserve_block_bytes; under GPipe the logits kept in one tensor,
  // keeps_head_logits; under interleaving a reserve up to about one logits
  // tensor remains, not modelled: docs/MEMORY_MODEL.md).
  const double frag = in.engine == Engine::Ours ? 0.0 : in.k.fragmentation * dynamic;
  // Megatron's local DotProductAttention takes the output buffer of its
  // baddbmm from the global memory buffer ("mpu"): one [b x heads/tp, s, s]
  // tensor in the working precision, kept for the whole run.
  const double local_attention_buffer =
      in.local_attention ? double(in.e) * s.mbs * (double(in.m.heads) / s.tp) * double(in.seq) * double(in.seq)
                         : 0.0;
  return in.k.context_bytes + in.k.static_buffer_bytes + work + frag + local_attention_buffer +
         fp8_linear_transient_bytes(in.m, in.s, in.seq, in.fused_kernels);
}

StageMemory estimate_stage(const MemoryInputs& in, int st) {
  const Strategy& s = in.s;
  StageMemory sm = stage_layout(in, st);
  // Mixture of experts: the stage's MoE layers corrected, their local
  // experts' states sharded over the expert-data-parallel group (dp/ep x cp:
  // expert_data_parallel keeps cp, and the states shard over dp_cp()).
  const MoeStageParams moe = moe_stage_params(in.m, s, st, in.chunk_layers, sm.params);
  sm.params = moe.dense + moe.experts;
  auto states = [&](double P, const Strategy& x) {
    return in.engine == Engine::Ours ? model_state_bytes(P, x, in.k) : engine_model_state_bytes(P, x, in.engine);
  };
  ModelStateBytes ms = states(double(moe.dense), s);
  if (moe.experts > 0) add_model_states(ms, states(double(moe.experts), expert_data_parallel(s)));
  // LoRA/QLoRA: a frozen base, the adapters' gradients and states (ep = 1 under fine-tuning).
  if (s.finetune.frozen_base())
    ms = finetune_model_state_bytes(in.m, s, in.k, double(sm.params), sm.layers, in.fused_kernels);
  auto& g = sm.gpu;
  g[int(MemCategory::Parameters)] = saturate_bytes(ms.gpu_params);
  g[int(MemCategory::Gradients)] = saturate_bytes(ms.gpu_grads);
  g[int(MemCategory::OptimizerStates)] = saturate_bytes(ms.gpu_optimizer);

  sm.inflight_microbatches = inflight(s, st);
  sm.inflight_layers = inflight_layers(s, st, in.chunk_layers);
  sm.head_inflight_microbatches = sm.has_head ? inflight(s, st, s.vpp - 1) : 0;
  sm.embedding_inflight_microbatches = sm.has_embedding ? inflight(s, st, 0) : 0;
  double act = activation_bytes(in, sm);
  const double logits = logits_bytes(in, sm);
  if (sm.has_head) g[int(MemCategory::LogitsLoss)] = saturate_bytes(logits);
  // The first backward of a layer holds its working set beside everything
  // saved (layer_backward_working_bytes; this runtime, dense MLPs: a MoE
  // layer's experts are not counted); under full recomputation also the one
  // layer it re-materialises (Korthikanti et al. sec. 5). The logits are gone
  // by then, so the step's peak is the larger of the two moments: on a stage
  // without the head, always this one (stage 0 of pipeline plans ran 0.6-0.7
  // GiB over without it, validation/h200x2/pp71 and stage74).
  double backward = in.engine == Engine::Ours && !in.m.moe.enabled()
                        ? layer_backward_working_bytes(in.m, in.seq, s.mbs, in.e).total(s.tp, s.sp)
                        : 0.0;
  if (s.ckpt == Ckpt::Full)
    backward += s.finetune.frozen_base()
                    ? finetune_layer_activation_bytes(in.m, in.seq, s.mbs, in.e, Ckpt::None, in.impl, s.tp, s.sp,
                                                      s.finetune)
                    : layer_activation_bytes(in.m, in.seq, s.mbs, in.e, Ckpt::None, in.impl).total(s.tp, s.sp);
  // This runtime holds the head's block (its logits, their gradient and its
  // input: runtime/engine.cpp head_reserve_block_bytes) from the start of the
  // head's chunk to the head, so under full recomputation the last layer's
  // forward working set (layer_forward_working_bytes) comes on top of the
  // logits: a third moment (validation/h200x2/tploss84: llama-3.2-1b tp2 at
  // 65,536 tokens, 2.0 GiB over the model without it).
  const double forward = s.ckpt == Ckpt::Full && holds_head_block(in, sm)
                             ? layer_forward_working_bytes(in.m, in.seq, s.mbs, in.e).total(s.tp, s.sp)
                             : 0.0;
  act += std::max({0.0, backward - logits, forward});
  g[int(MemCategory::Activations)] = saturate_bytes(act);
  // + the all-to-all send/receive buffers of a MoE layer
  g[int(MemCategory::CommBuffers)] = saturate_bytes(comm_bytes(in, sm) + moe_dispatch_buffer_bytes(in.m, s, in.seq));
  g[int(MemCategory::Overhead)] = saturate_bytes(overhead_bytes(in, sm, act + g[int(MemCategory::LogitsLoss)]));
  if (engine_has_moments(s, in.engine)) apply_engine_moments(in, sm, act, logits);

  for (auto v : g) sm.gpu_peak_bytes = saturating_add_bytes(sm.gpu_peak_bytes, v);
  sm.host_bytes = saturate_bytes(ms.host_bytes);
  return sm;
}

// The peak stage, the host's need and what binds.
void summarize(MemoryReport& r, const ClusterSpec& c, const MemoryConstants& k) {
  for (const auto& sm : r.stages)
    if (sm.gpu_peak_bytes > r.stages[r.peak_stage].gpu_peak_bytes) r.peak_stage = sm.stage;
  r.per_gpu_peak_bytes = r.stages[r.peak_stage].gpu_peak_bytes;
  r.gpu_fits = r.per_gpu_peak_bytes <= r.gpu_usable_bytes();

  // Host: every GPU of a node runs one process; the fullest node holds
  // gpus_per_node ranks of the stages with the most offloaded state.
  int64_t max_rank_host = 0;
  for (const auto& sm : r.stages) max_rank_host = std::max(max_rank_host, sm.host_bytes);
  r.host_peak_bytes = saturate_bytes(double(c.gpus_per_node) * (double(max_rank_host) + k.host_bytes_per_process));
  r.host_fits = r.host_peak_bytes <= r.host_capacity_bytes;

  const MemBreakdown& peak = r.stages[r.peak_stage].gpu;
  int best = 0;
  for (int i = 1; i < kMemCategories; ++i)
    if (peak[i] > peak[best]) best = i;
  r.binding = static_cast<MemCategory>(best);
}

}  // namespace

MemoryReport estimate_memory(const Plan& plan, Engine engine, const HardwareProfile* profile_in, const EngineEnv& env) {
  std::optional<HardwareProfile> own;
  if (!profile_in) own = default_profile(plan.cluster.gpu);
  const HardwareProfile& profile = profile_in ? *profile_in : *own;
  const bool megatron = engine == Engine::Megatron;
  // Megatron-LM builds its embedding and output layer over a padded vocabulary.
  ModelSpec padded = plan.model;
  if (megatron) padded.vocab = megatron_padded_vocab(padded.vocab, plan.strategy.tp);
  const ClusterSpec& c = plan.cluster;
  const Strategy& s = plan.strategy;
  const int e = bytes_per_element(s.precision);
  // The attention kernel and dropout are the profile's (the runtime: fused
  // attention, no dropout; the DeepSpeed and FSDP exports run the user's model
  // code, assumed to match the profile too). Megatron's GPT keeps its default
  // --hidden-dropout and --attention-dropout of 0.1 (arguments.py), which the
  // export leaves as they are: two one-byte masks per layer, whatever the
  // profile says; its attention backend is fused/flash (--attention-backend auto)
  // with Transformer Engine. Without it (megatron-core's local layer spec,
  // transformer/dot_product_attention.py) the scores are materialised:
  // softmax (in bf16: --attention-softmax-in-fp32 is off by default) saves its
  // output, attention dropout its mask and output, which the bmm with V
  // saves: 5 bytes per score, Korthikanti et al.'s 5as/h term.
  const bool local_attention = megatron && !env.transformer_engine;
  AttentionImpl impl{};
  impl.flash = megatron ? !local_attention : profile.flash_attention;
  impl.dropout = megatron || profile.dropout;
  impl.fused_ops = engine == Engine::Ours;  // the same saved tensors with or without the kernels
  // Context parallelism: a rank holds the activations and logits of its
  // seq/cp tokens (its two chunks of the sequence).
  const int64_t seq = plan.seq / s.cp;
  const bool ft = s.finetune.frozen_base();  // LoRA/QLoRA: costmodel/finetune.hpp
  double layer_act = ft ? finetune_layer_activation_bytes(padded, seq, s.mbs, e, s.ckpt, impl, s.tp, s.sp, s.finetune)
                        : layer_activation_bytes(padded, seq, s.mbs, e, s.ckpt, impl).total(s.tp, s.sp);
  // Ring attention is not recomputed under ckpt=selective: it keeps its fp32
  // log-sum-exp per head and token, as flash without recomputation does.
  if (s.cp > 1 && s.ckpt == Ckpt::Selective) layer_act += 4.0 * double(padded.heads) * double(seq) * s.mbs / s.tp;
  // The ring keeps its output (b, heads, s/cp, d) for its backward, and the
  // output projection keeps its own (b, s/cp, heads x d) copy of it
  // (runtime/model/transformer.cpp attention: o.transpose(1, 2).reshape),
  // where flash attention's output is already in the projection's layout and
  // one tensor serves both: one more tensor of the attention's width per
  // layer, unless the whole layer is recomputed. Measured on two H200s
  // without recomputation: 2.54 GiB over on qwen2.5-1.5b at cp 2 (seq 65536;
  // one such tensor a layer is 2.63 GiB, validation/h200x2/cp47) and 5.07
  // GiB over on llama-3.2-3b at cp 2 (seq 32768, mbs 2: 5.25 GiB; rank46).
  if (s.cp > 1 && s.ckpt != Ckpt::Full) layer_act += double(e) * double(seq) * s.mbs * double(padded.q_dim()) / s.tp;
  const MemoryInputs in{padded,   s, engine, megatron, seq, constants_of(c, profile), e,
                        partition_layers(padded, s.pp * s.vpp), impl, layer_act,
                        double(seq) * s.mbs * padded.hidden, plan.seq, profile.fused_ops, local_attention};

  MemoryReport r;
  r.engine = engine;
  r.gpu_capacity_bytes = profile.capacity_bytes(c.gpu);
  r.gpu_headroom_bytes = profile.headroom_bytes(r.gpu_capacity_bytes);
  r.capacity_source = profile.gpu_memory_bytes > 0 ? "profile (measured by planner calibrate)" : "GPU spec (" + c.gpu.name + ")";
  r.host_capacity_bytes = c.host_memory_bytes;
  for (int st = 0; st < s.pp; ++st) r.stages.push_back(estimate_stage(in, st));
  summarize(r, c, in.k);
  if (const StageMemory& peak = r.stages[r.peak_stage]; !peak.moments.empty()) {
    std::string list;
    for (const auto& [name, bytes] : peak.moments)
      list += fmt::format("{}{} {:.2f} GiB", list.empty() ? "" : ", ", name, double(bytes) / double(1LL << 30));
    r.notes.push_back(fmt::format("{}: the peak is the largest of the step's moments, each counting what the engine "
                                  "holds then (docs/MEMORY_MODEL.md): {}; here the {}",
                                  to_string(engine), list, peak.peak_moment));
  }
  // The ep group's NCCL buffers without the profile's per-peer figure (nccl_bytes): an assumption, said.
  if (engine == Engine::Ours && s.ep > 1 && padded.moe.enabled() && profile.nccl_all_to_all_peer_bytes <= 0)
    r.notes.push_back("mixture of experts: this profile has no measurement of NCCL's all-to-all buffers per peer "
                      "(mpirun -np N planner calibrate --only moe_host); the ep group's communicator is counted as "
                      "one collective communicator's, which under-counts it for ep > 2 (validation/h100x4/moe_comm)");
  // Not modelled, said: estimate_stage counts the first backward's working
  // set of dense layers only.
  if (engine == Engine::Ours && padded.moe.enabled())
    r.notes.push_back("mixture of experts: the working set of a MoE layer's first backward (its experts' gradient "
                      "GEMMs' inputs and outputs) is not counted, a dense layer's is (docs/MEMORY_MODEL.md); the held-out "
                      "MoE sets' peak MAPE was 0.4-2.8% (worst +5.4%) without it (README)");
  return r;
}

nlohmann::json memory_report_json(const MemoryReport& r) {
  nlohmann::json j;
  j["engine"] = to_string(r.engine);
  j["fits"] = r.fits();
  j["gpu_fits"] = r.gpu_fits;
  j["host_fits"] = r.host_fits;
  j["per_gpu_peak_bytes"] = r.per_gpu_peak_bytes;
  j["gpu_capacity_bytes"] = r.gpu_capacity_bytes;
  j["gpu_headroom_bytes"] = r.gpu_headroom_bytes;
  j["gpu_usable_bytes"] = r.gpu_usable_bytes();
  j["capacity_source"] = r.capacity_source;
  j["host_peak_bytes"] = r.host_peak_bytes;
  j["host_capacity_bytes"] = r.host_capacity_bytes;
  j["peak_stage"] = r.peak_stage;
  j["binding"] = to_string(r.binding);
  if (!r.stages.empty() && !r.stages[r.peak_stage].peak_moment.empty())
    j["peak_moment"] = r.stages[r.peak_stage].peak_moment;
  nlohmann::json bd = nlohmann::json::object();
  for (int i = 0; i < kMemCategories; ++i) bd[to_string(MemCategory(i))] = r.peak_breakdown()[i];
  j["breakdown"] = bd;
  j["stages"] = nlohmann::json::array();
  for (const auto& sm : r.stages) {
    nlohmann::json st;
    st["stage"] = sm.stage;
    st["layers"] = sm.layers;
    st["has_embedding"] = sm.has_embedding;
    st["has_head"] = sm.has_head;
    st["params_per_rank"] = sm.params;
    st["inflight_microbatches"] = sm.inflight_microbatches;
    st["inflight_layers"] = sm.inflight_layers;
    if (sm.has_head) st["head_inflight_microbatches"] = sm.head_inflight_microbatches;
    st["gpu_peak_bytes"] = sm.gpu_peak_bytes;
    st["host_bytes"] = sm.host_bytes;
    if (!sm.moments.empty()) {
      st["peak_moment"] = sm.peak_moment;
      nlohmann::json mo = nlohmann::json::object();
      for (const auto& [name, bytes] : sm.moments) mo[name] = bytes;
      st["moments"] = mo;
    }
    nlohmann::json b = nlohmann::json::object();
    for (int i = 0; i < kMemCategories; ++i) b[to_string(MemCategory(i))] = sm.gpu[i];
    st["breakdown"] = b;
    j["stages"].push_back(st);
  }
  j["notes"] = r.notes;
  return j;
}

}  // namespace planner

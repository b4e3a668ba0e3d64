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
#include "costmodel/model_states.hpp"
#include "strategies/schedule.hpp"

namespace planner {

std::vector<int> partition_layers(const ModelSpec& m, int chunks) {
  return planner::partition_layers(m.layers, chunks);  // strategies/partition.hpp: the one layout
}

namespace {

// ZeRO-2/3 unit buffers on a stage (bytes), as the runtime's executor keeps
// them (runtime/engine.cpp, BufferPool): the embedding and the head each have
// their own, the layers share two layer-sized slots (the unit computing and the
// one prefetched or still reducing); gradients under ZeRO-2/3, gathered
// parameters too under ZeRO-3.
double zero_buffer_bytes(const ModelSpec& m, const Strategy& s, bool emb, bool head, int layers, int e) {
  if (s.zero < 2) return 0;
  const double L = double(stage_params_per_rank(m, 1, false, false, s.pp, s.tp));
  const double E = emb ? double(stage_params_per_rank(m, 0, true, false, s.pp, s.tp)) : 0;
  const double H = head ? double(stage_params_per_rank(m, 0, false, true, s.pp, s.tp)) : 0;
  const double set = E + H + std::min(2, layers) * L;
  return double(e) * set * (s.zero == 3 ? 2 : 1);
}

}  // namespace

// NCCL's own buffers on a rank of `stage`, as the runtime makes its
// communicators (runtime/measure.cpp, runtime/engine.cpp): one per group used
// for collectives (dp-cp, tp, pp, the cp ring; the first and last stage of a tied model with
// pp > 2 one more for the word matrix's gradient), and the pipeline's
// send/receive links (runtime/comm/pipe_links.hpp), one per neighbour and
// direction of travel: two on the first and the last stage, four on the
// others and on every stage of the interleaved schedule's ring.
double nccl_bytes(const ModelSpec& m, const Strategy& s, int stage, const MemoryConstants& k) {
  const bool ends = stage == 0 || stage == s.pp - 1;
  const int collectives = (s.dp_cp() > 1) + (s.tp > 1) + (s.pp > 1) + (s.cp > 1) + (m.tied_embeddings && s.pp > 2 && ends);
  const bool ring = s.schedule == Schedule::Interleaved && s.vpp > 1;
  const int links = s.pp < 2 ? 0 : (ring || !ends) ? 4 : 2;
  return collectives * k.nccl_bytes_per_communicator + links * k.nccl_bytes_per_pipe_link;
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
int inflight(const Strategy& s, int stage) {
  Strategy x = s;
  if (s.schedule == Schedule::OneFOneB) x.gas = std::min(s.gas, s.pp);
  if (s.schedule == Schedule::Interleaved) x.gas = std::min(s.gas, s.pp * (s.vpp + 2));
  thread_local std::map<std::tuple<int, int, int, int>, std::vector<int>> peaks;
  const auto key = std::make_tuple(int(x.schedule), x.pp, x.vpp, x.gas);
  auto it = peaks.find(key);
  if (it == peaks.end()) {
    std::vector<int> per_stage;
    for (const StepList& list : compute_schedule(x)) per_stage.push_back(max_inflight(list));
    it = peaks.emplace(key, std::move(per_stage)).first;
  }
  return it->second[size_t(stage)];
}

}  // namespace

MemoryReport estimate_memory(const Plan& plan, Engine engine, const HardwareProfile* profile_in) {
  std::optional<HardwareProfile> own;
  if (!profile_in) own = default_profile(plan.cluster.gpu);
  const HardwareProfile& profile = profile_in ? *profile_in : *own;
  const bool megatron = engine == Engine::Megatron;
  // Megatron-LM builds its embedding and output layer over a padded vocabulary.
  ModelSpec padded = plan.model;
  if (megatron) padded.vocab = megatron_padded_vocab(padded.vocab, plan.strategy.tp);
  const ModelSpec& m = padded;
  const ClusterSpec& c = plan.cluster;
  const Strategy& s = plan.strategy;
  MemoryConstants k = memory_constants(c);
  // What the process itself takes, from the profile (measured by planner
  // calibrate on the GPU, else the constants above).
  k.context_bytes = double(profile.context_bytes);
  k.static_buffer_bytes = double(profile.workspace_bytes);
  k.nccl_bytes_per_communicator = double(profile.nccl_communicator_bytes);
  if (profile.nccl_pipe_link_bytes > 0) k.nccl_bytes_per_pipe_link = double(profile.nccl_pipe_link_bytes);
  const int e = bytes_per_element(s.precision);
  const int chunks = s.pp * s.vpp;
  const std::vector<int> chunk_layers = partition_layers(m, chunks);
  // The attention kernel and dropout are the profile's (the runtime: fused
  // attention, no dropout; the DeepSpeed and FSDP exports run the user's model
  // code, assumed to match the profile too). Megatron's GPT keeps its default
  // --hidden-dropout and --attention-dropout of 0.1 (arguments.py), which the
  // export leaves as they are: two one-byte masks per layer, whatever the
  // profile says; its attention backend is fused/flash (--attention-backend auto).
  AttentionImpl impl{};
  impl.flash = megatron || profile.flash_attention;
  impl.dropout = megatron || profile.dropout;
  // Context parallelism: a rank holds the activations and logits of its
  // seq/cp tokens (its two chunks of the sequence).
  const int64_t seq = plan.seq / s.cp;
  const LayerActivationBytes per_layer = layer_activation_bytes(m, seq, s.mbs, e, s.ckpt, impl);
  double layer_act = per_layer.total(s.tp, s.sp);
  // Ring attention is not recomputed under ckpt=selective: it keeps its fp32
  // log-sum-exp per head and token, as flash without recomputation does.
  if (s.cp > 1 && s.ckpt == Ckpt::Selective) layer_act += 4.0 * double(m.heads) * double(seq) * s.mbs / s.tp;
  const double sbh = double(seq) * s.mbs * m.hidden;

  MemoryReport r;
  r.engine = engine;
  r.gpu_capacity_bytes = profile.capacity_bytes(c.gpu);
  r.gpu_headroom_bytes = profile.headroom_bytes(r.gpu_capacity_bytes);
  r.capacity_source = profile.gpu_memory_bytes > 0 ? "profile (measured by planner calibrate)" : "GPU spec (" + c.gpu.name + ")";
  r.host_capacity_bytes = c.host_memory_bytes;
  for (int st = 0; st < s.pp; ++st) {
    StageMemory sm;
    sm.stage = st;
    sm.has_embedding = st == 0;
    sm.has_head = st == s.pp - 1;
    int layers = 0;
    for (int v = 0; v < s.vpp; ++v) layers += chunk_layers[v * s.pp + st];
    int first = 0;
    for (int i = 0; i < st; ++i) first += chunk_layers[i];
    sm.first_layer = first;  // for vpp > 1 the stage's layers are not contiguous; this is chunk 0's
    sm.last_layer = first + chunk_layers[st];
    sm.layers = layers;
    sm.params = stage_params_per_rank(m, layers, sm.has_embedding, sm.has_head, s.pp, s.tp);
    const ModelStateBytes ms = engine == Engine::Ours ? model_state_bytes(double(sm.params), s, k)
                                                      : engine_model_state_bytes(double(sm.params), s, engine);

    auto& g = sm.gpu;
    g[int(MemCategory::Parameters)] = saturate_bytes(ms.gpu_params);
    g[int(MemCategory::Gradients)] = saturate_bytes(ms.gpu_grads);
    g[int(MemCategory::OptimizerStates)] = saturate_bytes(ms.gpu_optimizer);

    // Activations: each in-flight chunk of a micro-batch holds its layers'
    // saved tensors. A stage's chunks have equal layers up to one; use the mean.
    sm.inflight_microbatches = inflight(s, st);
    double act = sm.inflight_microbatches * layer_act * (double(layers) / s.vpp);
    if (sm.has_head) act += 2.0 * e * sbh / (s.sp ? s.tp : 1);  // final-norm input and LM-head input
    if (megatron && sm.has_embedding) {
      // Megatron's embedding dropout mask (sbh bytes) and the token ids (8sb)
      // of each micro-batch in flight (theoretical_memory_usage.py counts both).
      act += sm.inflight_microbatches * (sbh / (s.sp ? s.tp : 1) + 8.0 * seq * s.mbs);
    }

    double logits = 0;
    if (sm.has_head) {
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
      const double tokens = double(seq) * s.mbs;
      if (megatron) {
        // Megatron's vocab-parallel cross-entropy (megatron/core/tensor_parallel/
        // cross_entropy.py) turns the logits to fp32 and saves their exponentials
        // for the backward: 4 bytes per logit for every micro-batch waiting, and
        // the 16-bit logits beside them while one is computed
        // (theoretical_memory_usage.py: 4sbh(1 + V/h) with the LM-head input).
        const double lg = tokens * double(m.vocab) / s.tp;
        logits = 4.0 * lg * sm.inflight_microbatches + e * lg;
      } else {
        logits = e * tokens * vp * (sm.inflight_microbatches + 1) + std::min(k.loss_chunk_bytes, 4.0 * tokens * vp) +
                 (lm_head_padded(m, s.tp) ? 2.0 * e * vp * width : 0.0);
      }
      g[int(MemCategory::LogitsLoss)] = saturate_bytes(logits);
    }
    // Full recomputation re-materialises one layer during its backward
    // (Korthikanti et al. sec. 5); the logits are gone by then, so the step's
    // peak is the larger of the two moments.
    if (s.ckpt == Ckpt::Full) {
      const double one_layer = layer_activation_bytes(m, seq, s.mbs, e, Ckpt::None, impl).total(s.tp, s.sp);
      act += std::max(0.0, one_layer - logits);
    }
    g[int(MemCategory::Activations)] = saturate_bytes(act);

    // Pipeline send/receive: one activation and one gradient, double-buffered.
    const double pp_buffers = s.pp > 1 ? 2.0 * 2.0 * e * sbh / (s.sp ? s.tp : 1) : 0.0;
    // cp: the ring's K/V (and dK/dV) chunk buffers while a layer's attention runs.
    const double nccl = nccl_bytes(m, s, sm.stage, k) + cp_ring_buffer_bytes(m, plan.seq, s);
    double comm;
    if (engine != Engine::Ours) {
      comm = engine_comm_bytes(m, s, engine, double(sm.params), pp_buffers) + nccl;
    } else {
      // Buffers as the runtime's executor holds them (runtime/engine.hpp):
      // ZeRO-0/1 reduce in place on the flat gradient buffer (no buckets);
      // ZeRO-2/3 keep unit gradient buffers (and ZeRO-3 gathered units) in a
      // fixed pool (zero_buffer_bytes).
      comm = zero_buffer_bytes(m, s, sm.has_embedding, sm.has_head, layers, e) + pp_buffers + nccl;
    }
    g[int(MemCategory::CommBuffers)] = saturate_bytes(comm);

    const double dynamic = act + g[int(MemCategory::LogitsLoss)];
    // The optimizer converts 16-bit gradients to fp32 in one reused chunk.
    // The other engines' optimizers work on their fp32 partitions in place.
    const double work = s.precision == Precision::FP32 || s.offload != Offload::None || engine != Engine::Ours
                            ? 0.0
                            : std::min(k.optimizer_work_bytes, 4.0 * double(sm.params) / (s.zero >= 1 ? s.dp_cp() : 1));
    // Fragmentation of the caching allocator: PyTorch's default segments keep
    // a fraction of the memory that comes and goes (the other engines); this
    // runtime uses expandable segments (runtime/device.hpp), which keep
    // 0.13-0.16 GiB reserved and unused whatever the plan, already within what
    // calibrate measures as workspace with no tensor alive
    // (validation/archive/h200x2/alloc).
    const double frag = engine == Engine::Ours ? 0.0 : k.fragmentation * dynamic;
    g[int(MemCategory::Overhead)] = saturate_bytes(k.context_bytes + k.static_buffer_bytes + work + frag);

    for (auto v : g) sm.gpu_peak_bytes = saturating_add_bytes(sm.gpu_peak_bytes, v);
    sm.host_bytes = saturate_bytes(ms.host_bytes);
    r.stages.push_back(sm);
  }

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
    st["gpu_peak_bytes"] = sm.gpu_peak_bytes;
    st["host_bytes"] = sm.host_bytes;
    nlohmann::json b = nlohmann::json::object();
    for (int i = 0; i < kMemCategories; ++i) b[to_string(MemCategory(i))] = sm.gpu[i];
    st["breakdown"] = b;
    j["stages"].push_back(st);
  }
  j["notes"] = r.notes;
  return j;
}

}  // namespace planner

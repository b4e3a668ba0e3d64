#include "costmodel/compat.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "costmodel/finetune.hpp"
#include "costmodel/long_run.hpp"
#include "strategies/checked.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#include "strategies/step_program.hpp"

namespace planner {

// Context parallelism's rules (cp > 1). Megatron-LM splits each sequence into
// 2*cp chunks and gives rank i chunks i and 2*cp-1-i, so that every rank holds
// the same share of the causal mask's work (megatron/core/utils.py,
// get_batch_on_this_cp_rank): seq must divide by 2*cp. The ring attention of
// this runtime (runtime/model/context_parallel.hpp) is causal only, and under
// sequence parallelism each rank's seq/cp tokens are split again over tp.
std::string context_parallel_problem(const Plan& plan) {
  const Strategy& s = plan.strategy;
  if (s.cp == 1) return "";
  if (plan.seq % (2 * int64_t(s.cp)) != 0)
    return fmt::format("strategy: cp={} splits the sequence into 2*cp = {} chunks (causal load balancing): seq={} is "
                       "not a multiple of {}", s.cp, 2 * s.cp, plan.seq, 2 * s.cp);
  if (plan.model.arch != Arch::Decoder)
    return fmt::format("strategy: cp={} needs a causal decoder: context parallelism of a bidirectional encoder ({}) "
                       "is not modelled", s.cp, plan.model.name);
  if (plan.model.windowed_layers(plan.seq) > 0)
    return fmt::format("strategy: cp={} with sliding-window attention ({}) is not modelled (the ring passes every "
                       "K/V chunk; a window would skip some)", s.cp, plan.model.name);
  if (s.sp && s.tp > 1 && (plan.seq / s.cp) % s.tp != 0)
    return fmt::format("strategy: sp=1 splits each context-parallel rank's seq/cp = {} tokens over the tp ranks: "
                       "not a multiple of tp={}", plan.seq / s.cp, s.tp);
  if (s.finetune.frozen_base())
    return fmt::format("strategy: finetune={} with cp={} is not modelled (adapters under ring attention are neither "
                       "priced nor run together); use cp=1", planner::to_string(s.finetune.mode), s.cp);
  if (s.precision == Precision::FP32)
    return fmt::format("strategy: cp={} with precision=fp32 is not run: ring attention calls the flash kernels, which "
                       "take bf16 or fp16 on GPUs", s.cp);
  if (s.sp && s.tp > 1 && plan.model.pos == PosEmbed::Learned)
    return "strategy: cp>1 with sp=1 and learned positions is not run by this runtime (the position rows of a "
           "sequence-parallel shard of two context chunks); use sp=0 or a rotary model";
  return "";
}

// Expert parallelism's model rules: ep splits routed experts, so it needs a
// mixture of experts whose expert count it divides, and tp splits each
// expert's inner width as it splits the dense MLP's (expert tensor
// parallelism = tp, Megatron-core's default).
void check_moe_compat(const ModelSpec& m, const Strategy& s) {
  if (!m.moe.enabled()) {
    if (s.ep > 1)
      throw InputError(fmt::format("strategy: ep={} needs a mixture-of-experts model ({} has no experts)", s.ep, m.name));
    return;
  }
  if (m.moe.experts % s.ep != 0)
    throw InputError(fmt::format("strategy: ep={} must divide the experts ({})", s.ep, m.moe.experts));
  if (m.moe.expert_ffn % s.tp != 0)
    throw InputError(fmt::format("strategy: tp={} must divide the experts' FFN width ({})", s.tp, m.moe.expert_ffn));
  if (m.moe.shared_ffn % s.tp != 0)
    throw InputError(fmt::format("strategy: tp={} must divide the shared experts' FFN width ({})", s.tp, m.moe.shared_ffn));
}

std::vector<std::string> check_compat(const Plan& plan, const PlanUse& use) {
  const ModelSpec& m = plan.model;
  const ClusterSpec& c = plan.cluster;
  const Strategy& s = plan.strategy;
  s.validate();
  std::vector<std::string> notes;
  if (s.world() != c.world())
    throw InputError(s.cp == 1 ? fmt::format("strategy: dp*tp*pp = {}*{}*{} = {} must equal the GPU count {}", s.dp,
                                             s.tp, s.pp, s.world(), c.world())
                               : fmt::format("strategy: dp*tp*pp*cp = {}*{}*{}*{} = {} must equal the GPU count {}",
                                             s.dp, s.tp, s.pp, s.cp, s.world(), c.world()));
  if (std::string cp = context_parallel_problem(plan); !cp.empty()) throw InputError(cp);
  if (m.heads % s.tp != 0)
    throw InputError(fmt::format("strategy: tp={} must divide the attention heads ({})", s.tp, m.heads));
  if (m.kv_heads % s.tp != 0)
    throw InputError(fmt::format("strategy: tp={} must divide the key/value heads ({})", s.tp, m.kv_heads));
  if (m.ffn % s.tp != 0)
    throw InputError(fmt::format("strategy: tp={} must divide the FFN width ({})", s.tp, m.ffn));
  check_moe_compat(m, s);
  if (s.pp * s.vpp > m.layers)
    throw InputError(s.vpp > 1 ? fmt::format("strategy: pp*vpp = {} must be at most the layers ({})", s.pp * s.vpp, m.layers)
                               : fmt::format("strategy: pp={} must be at most the layers ({})", s.pp, m.layers));
  if (s.precision == Precision::BF16 && !c.gpu.supports_bf16())
    throw InputError(fmt::format("strategy: precision=bf16 needs a GPU with bfloat16 ({} has none; use fp16)", c.gpu.name));
  if (s.precision == Precision::FP16 && c.gpu.peak_fp16 <= 0)
    throw InputError(fmt::format("strategy: precision=fp16 is not supported on {}", c.gpu.name));
  if (s.precision == Precision::FP8) {
    if (!c.gpu.supports_fp8())
      throw InputError(fmt::format("strategy: precision=fp8 needs FP8 tensor cores (Hopper or later); {} has none "
                                   "(use bf16)", c.gpu.name));
    if (m.moe.experts > 0)
      throw InputError(fmt::format("strategy: precision=fp8 with a mixture of experts ({}) is not modelled (the "
                                   "experts' GEMMs stay bf16 in this runtime); use bf16", m.name));
    if (s.finetune.frozen_base())
      throw InputError(fmt::format("strategy: precision=fp8 with finetune={} is not modelled (the adapters and the "
                                   "frozen base are not cast to fp8); use bf16", planner::to_string(s.finetune.mode)));
  }
  if (plan.seq < 1 || plan.seq > kMaxSeq)
    throw InputError(fmt::format("seq={} must be between 1 and {} (2^24)", plan.seq, kMaxSeq));
  if (const int64_t tokens = checked_mul(plan.seq, s.mbs, "seq*mbs"); tokens > kMaxMicroBatchTokens)
    throw InputError(fmt::format("mbs*seq = {}*{} = {} tokens per micro-batch is more than {} (2^32)", s.mbs, plan.seq,
                                 tokens, kMaxMicroBatchTokens));
  if (plan.global_batch < 1 || plan.global_batch > kMaxGlobalBatch)
    throw InputError(fmt::format("global batch {} must be between 1 and {} (2^32)", plan.global_batch, kMaxGlobalBatch));
  // The runtime's own rules (runtime/model.cpp, runtime/data.cpp), here so
  // that plan, predict, memory and export refuse what exec would refuse.
  if (s.sp && s.tp > 1 && s.cp == 1 && plan.seq % s.tp != 0)
    throw InputError(fmt::format("strategy: sp=1 splits the sequence over the tp ranks: seq={} is not a multiple of "
                                 "tp={}", plan.seq, s.tp));
  if (m.pos == PosEmbed::Rotary && m.head_dim() % 2 != 0)
    throw InputError(fmt::format("model {}: rotary positions need an even head dimension (hidden/heads = {}/{} = {})",
                                 m.name, m.hidden, m.heads, m.head_dim()));
  if (m.vocab < 2) throw InputError(fmt::format("model {}: vocab={} (training tokens need at least 2)", m.name, m.vocab));
  if (m.pos == PosEmbed::Learned && m.max_positions > 0 && plan.seq > m.max_positions)
    throw InputError(fmt::format("seq={} exceeds the {} learned positions of {}", plan.seq, m.max_positions, m.name));
  if (plan.global_batch != s.global_batch())
    throw InputError(fmt::format("global batch {} must equal dp*mbs*gas = {}*{}*{} = {}", plan.global_batch, s.dp,
                                 s.mbs, s.gas, s.global_batch()));
  if (UseCheck u = check_use(plan, use); u.broken != UseLimit::None) throw InputError(u.message);
  if (s.zero >= 1 && s.dp_cp() == 1)
    notes.push_back(fmt::format("zero={} with dp=1 shards nothing (ZeRO partitions over data-parallel ranks)", s.zero));
  if (s.sp && s.tp == 1) notes.push_back("sp=1 with tp=1 does nothing (sequence parallelism splits over TP ranks)");
  if (std::string n = cluster_notation_note(c); !n.empty()) notes.push_back(std::move(n));
  if (s.cp > 1)
    notes.push_back(fmt::format("cp={}: attention passes K/V around a ring of {} ranks (send/recv per step, "
                                "overlapped with the blocks), priced as cuDNN's blocks with the kv heads as they are (planner exec "
                                "falls back to FlashAttention-2 blocks, slower and not priced, where cuDNN's self-check "
                                "fails, and says so); Ulysses-style all-to-all context parallelism is not modelled",
                                s.cp, s.cp));
  if (s.precision == Precision::FP8)
    notes.push_back(fmt::format("precision=fp8: the layers' qkv, o and MLP GEMMs in FP8 (per-tensor dynamic scaling; "
                                "{} FP8 peak {:.0f} TFLOP/s), embedding, head, norms and attention in bf16; MFU is "
                                "counted against the bf16 peak", c.gpu.name, c.gpu.peak_fp8 / 1e12));
  if (s.tp > c.gpus_per_node)
    notes.push_back(fmt::format("tp={} spans nodes ({} GPUs per node): its all-reduces cross the network", s.tp,
                                c.gpus_per_node));
  return notes;
}

UseCheck check_use(const Plan& plan, const PlanUse& use) {
  const Strategy& s = plan.strategy;
  const int64_t chunks = simulated_chunks(s);
  // A Chrome trace holds a few events per micro-batch chunk of every stage
  // and about 1 KB of JSON per event while it is built, and a traced step is
  // simulated in full: refuse large ones before simulating rather than run
  // out of memory (issue 11).
  if (use.trace && chunks > kMaxTraceChunks)
    return {UseLimit::Trace,
            fmt::format("--trace: pp*vpp*gas = {} micro-batch chunks would make a trace of at least {} events; "
                        "the limit is {} chunks (trace a step with fewer micro-batches, e.g. a smaller gas)",
                        chunks, 2 * chunks, kMaxTraceChunks)};
  // Simulated in full up to kMaxSimulatedChunks, extrapolated from a few
  // short simulations beyond (costmodel/long_run.hpp), unless the pipeline
  // is so deep that even those exceed the limit.
  if (use.simulate && !simulation_affordable(s))
    return {UseLimit::Simulation,
            fmt::format("strategy: pp*vpp*gas = {}*{}*{} = {} micro-batch chunks per step is more than the "
                        "simulator's limit of {}, {}; use a larger mbs or a smaller global batch",
                        s.pp, s.vpp, s.gas, chunks, kMaxSimulatedChunks,
                        s.schedule == Schedule::GPipe
                            ? "and GPipe steps are not extrapolated (all forwards, then all backwards; 1f1b is)"
                            : fmt::format("and a pipeline of pp*vpp = {} stages is too deep to extrapolate its "
                                          "steady state within it", int64_t(s.pp) * s.vpp))};
  // With the way out: the search that keeps only what this engine runs.
  if (const std::string gap = engine_gap(plan, use.engine, use.engine_env); !gap.empty())
    return {UseLimit::Engine,
            fmt::format("engine {}: {}; planner plan --model {} --gpus {} --seq {} --global-batch {} --engine {}{} "
                        "finds the best plan {} can run",
                        to_string(use.engine), gap, plan.model.name, plan.cluster.name, plan.seq, plan.global_batch,
                        to_string(use.engine), use.engine_env.transformer_engine ? " --with-te" : "",
                        engine_version(use.engine))};
  return {};
}

int64_t default_seq(const ModelSpec& m) {
  const int64_t trained = m.default_seq > 0 ? m.default_seq : 1024;
  return std::min(trained, kDefaultSeqCap);
}

int64_t pretrain_batch(int64_t seq, int64_t multiple_of) {
  multiple_of = std::max<int64_t>(1, multiple_of);
  const double want = double(kPretrainTokensPerStep) / double(std::max<int64_t>(1, seq)) / double(multiple_of);
  const int64_t k = std::max<int64_t>(1, std::llround(want));
  return std::min(k * multiple_of, std::max(multiple_of, kMaxGlobalBatch / multiple_of * multiple_of));
}

std::vector<std::string> assumed_defaults(const Plan& p, const GivenInputs& given) {
  // What every answer models: "fine-tuning" here is full training.
  std::vector<std::string> out{finetune_assumed(p.strategy)};
  const ClusterSpec& c = p.cluster;
  if (p.model.moe.enabled()) {
    const MoeSpec& e = p.model.moe;
    out.push_back(fmt::format("token imbalance {:g} ({}; --moe-imbalance to change), {} routing", e.imbalance,
                              e.imbalance == 1.0 ? "every expert gets tokens*top_k/experts"
                                                 : "the busiest expert gets that many times the balanced load",
                              e.capacity_factor > 0 ? fmt::format("capacity factor {:g}", e.capacity_factor)
                                                    : std::string("dropless")));
  }
  if (!given.seq) {
    const int64_t trained = p.model.default_seq > 0 ? p.model.default_seq : 0;
    out.push_back(trained > p.seq ? fmt::format("seq {} (the model allows {}; --seq to change)", p.seq, trained)
                                  : fmt::format("seq {} (the model's training length; --seq to change)", p.seq));
  }
  if (!given.global_batch)
    out.push_back(fmt::format("global batch {} = {} tokens per step ({}; --global-batch to change)", p.global_batch,
                              format_count(double(p.global_batch) * double(p.seq)),
                              given.global_batch_rule.empty() ? "dp*mbs*gas" : given.global_batch_rule));
  // Cluster files state their hosts; spec strings take the GPU's typical node.
  const bool from_string = !to_lower(c.name).ends_with(".json");
  if (from_string && !given.host_memory)
    out.push_back(fmt::format("host RAM {} per node (typical {} server; --host-memory to change)",
                              format_bytes(double(c.host_memory_bytes)), c.gpu.name));
  if (from_string && consumer_nvlink(c.gpu) && c.intra == IntraNode::NVLinkPairs)
    out.push_back(fmt::format("an NVLink bridge between pairs of {} (a cluster file with \"intra\": \"pcie\" for "
                              "none)", c.gpu.name));
  if (from_string) {
    // The GPU name as typed, when it is an alias ("A100" is the 80 GB SXM part).
    std::string typed = c.name;
    while (true) {
      const size_t x = typed.find_first_of("xX");
      if (x == std::string::npos || typed.substr(0, x).find_first_not_of("0123456789") != std::string::npos) break;
      typed = typed.substr(x + 1);
    }
    if (!typed.empty() && to_lower(typed) != to_lower(c.gpu.name))
      out.push_back(fmt::format("{} = {}", typed, c.gpu.name));
  }
  return out;
}

std::string assumed_line(const std::vector<std::string>& assumed) {
  if (assumed.empty()) return "";
  std::string out = "assumed: ";
  for (size_t i = 0; i < assumed.size(); ++i) out += (i ? "; " : "") + assumed[i];
  return out + "\n";
}

Plan build_plan(const PlanRequest& req, std::vector<std::string>* notes, const PlanUse& use) {
  Plan p;
  p.model = resolve_model(req.model);
  p.cluster = resolve_cluster(req.gpus);
  if (req.host_memory_bytes) p.cluster.host_memory_bytes = *req.host_memory_bytes;
  std::vector<std::string> given;
  p.strategy = req.strategy.empty() ? Strategy{} : Strategy::parse(req.strategy, &given);
  auto has = [&](const char* k) { return std::find(given.begin(), given.end(), k) != given.end(); };
  Strategy& s = p.strategy;
  const int64_t world = p.cluster.world();
  if (!has("dp")) {
    const int64_t tp_pp = checked_product({s.tp, s.pp, s.cp}, "strategy: tp*pp*cp");
    if (world % tp_pp != 0)
      throw InputError(s.cp == 1 ? fmt::format("strategy: tp*pp = {} does not divide the GPU count {}", tp_pp, world)
                                 : fmt::format("strategy: tp*pp*cp = {} does not divide the GPU count {}", tp_pp, world));
    s.dp = static_cast<int>(world / tp_pp);
  }
  p.seq = req.seq ? *req.seq : default_seq(p.model);
  if (req.global_batch) {
    const int64_t per_step = checked_mul(s.dp, s.mbs, "dp*mbs");
    if (!has("gas")) {
      if (*req.global_batch % per_step != 0)
        throw InputError(fmt::format("global batch {} is not a multiple of dp*mbs = {}", *req.global_batch, per_step));
      if (*req.global_batch / per_step > kMaxDegree)
        throw InputError(fmt::format("global batch {} needs {} micro-batches per step (gas), more than {}", *req.global_batch,
                                     *req.global_batch / per_step, kMaxDegree));
      s.gas = static_cast<int>(*req.global_batch / per_step);
    }
    p.global_batch = *req.global_batch;
  } else {
    p.global_batch = s.global_batch();
  }
  auto n = check_compat(p, use);
  if (notes) *notes = std::move(n);
  return p;
}

}  // namespace planner

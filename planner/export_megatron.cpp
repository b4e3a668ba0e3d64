// Megatron-LM (core_v0.19.0, commit 5be9626) arguments for pretrain_gpt.py.
// Every flag is one that release's parser defines (megatron/training/
// arguments.py and the config dataclasses it turns into arguments); the list
// checked against is tests/data/megatron_core_v0.19.0_arguments.txt.
#include <fmt/format.h>

#include <cmath>

#include "planner/export.hpp"

namespace planner {

namespace {

struct Args {
  std::vector<std::string> v;
  void flag(const char* f) { v.emplace_back(f); }
  template <typename T>
  void opt(const char* f, const T& value) {
    v.emplace_back(f);
    v.push_back(fmt::format("{}", value));
  }
};

}  // namespace

ExportResult export_megatron(const Plan& plan, const std::string& file) {
  const Strategy& s = plan.strategy;
  const ModelSpec& m = plan.model;
  const ClusterSpec& c = plan.cluster;
  ExportResult r;
  r.engine = Engine::Megatron;
  r.file = file;
  Args a;
  // Model shape (megatron_model_gap has refused what these cannot say).
  a.opt("--num-layers", m.layers);
  a.opt("--hidden-size", m.hidden);
  a.opt("--num-attention-heads", m.heads);
  a.opt("--ffn-hidden-size", m.ffn);
  if (m.kv_heads != m.heads) {
    a.flag("--group-query-attention");
    a.opt("--num-query-groups", m.kv_heads);
  }
  a.opt("--seq-length", plan.seq);
  a.opt("--max-position-embeddings", m.pos == PosEmbed::Learned && m.max_positions > 0
                                         ? std::max<int64_t>(m.max_positions, plan.seq)
                                         : std::max<int64_t>(m.default_seq, plan.seq));
  a.opt("--position-embedding-type", m.pos == PosEmbed::Rotary ? "rope" : "learned_absolute");
  // Megatron reads the base as a whole number (type=int); Llama 3: 500000.
  if (m.pos == PosEmbed::Rotary) a.opt("--rotary-base", std::llround(m.rotary_base()));
  a.opt("--normalization", m.norm == NormKind::RmsNorm ? "RMSNorm" : "LayerNorm");
  if (m.mlp == MlpKind::SwiGlu) a.flag("--swiglu");
  if (!m.mlp_bias) a.flag("--disable-bias-linear");
  if (!m.mlp_bias && m.qkv_bias) a.flag("--add-qkv-bias");
  if (!m.tied_embeddings) a.flag("--untie-embeddings-and-output-weights");
  // Synthetic tokens over the model's vocabulary, so the line runs as it is.
  a.opt("--tokenizer-type", "NullTokenizer");
  a.opt("--vocab-size", m.vocab);
  a.flag("--mock-data");
  // Parallelism.
  a.opt("--tensor-model-parallel-size", s.tp);
  a.opt("--pipeline-model-parallel-size", s.pp);
  if (s.pp > 1 && s.schedule == Schedule::Interleaved) a.opt("--num-virtual-stages-per-pipeline-rank", s.vpp);
  if (s.sp && s.tp > 1) a.flag("--sequence-parallel");
  // Context parallelism: Megatron's ring attention (Transformer Engine's
  // p2p communication type, the default) over cp ranks.
  if (s.cp > 1) a.opt("--context-parallel-size", s.cp);
  if (m.moe.enabled()) {
    // Mixture of experts (megatron/core/transformer/moe/): the experts split
    // over ep ranks of the dp group and each by tp, as the cost model has it;
    // the all-to-all dispatcher and grouped GEMMs; the auxiliary
    // load-balancing loss (Megatron's default coefficient 0 would leave the
    // router unbalanced, which the balanced prediction does not assume).
    a.opt("--num-experts", m.moe.experts);
    a.opt("--moe-router-topk", m.moe.top_k);
    a.opt("--moe-ffn-hidden-size", m.moe.expert_ffn);
    a.opt("--expert-model-parallel-size", s.ep);
    a.opt("--expert-tensor-parallel-size", s.tp);
    if (m.moe.shared_ffn > 0) a.opt("--moe-shared-expert-intermediate-size", m.moe.shared_ffn);
    if (m.moe.shared_gate) a.flag("--moe-shared-expert-gate");
    if (m.moe.dense_layers > 0)
      a.opt("--moe-layer-freq", fmt::format("([0]*{}+[1]*{})", m.moe.dense_layers, m.moe_layers()));
    if (m.moe.capacity_factor > 0) a.opt("--moe-expert-capacity-factor", m.moe.capacity_factor);
    a.opt("--moe-token-dispatcher-type", "alltoall");
    a.flag("--moe-grouped-gemm");
    a.opt("--moe-router-load-balancing-type", "aux_loss");
    a.opt("--moe-aux-loss-coeff", "1e-2");
  }
  a.opt("--micro-batch-size", s.mbs);
  a.opt("--global-batch-size", plan.global_batch);  // Megatron derives the accumulation: global / (mbs x dp)
  // Recomputation (Korthikanti et al. 2022, as Megatron implements it).
  if (s.ckpt == Ckpt::Selective) a.opt("--recompute-granularity", "selective");  // the attention core
  if (s.ckpt == Ckpt::Full) {
    a.opt("--recompute-granularity", "full");
    a.opt("--recompute-method", "uniform");
    a.opt("--recompute-num-layers", 1);
  }
  // ZeRO: 1 = the distributed optimizer; 2/3 = Megatron-FSDP sharding.
  if (s.zero == 1) a.flag("--use-distributed-optimizer");
  if (s.zero >= 2) {
    a.flag("--use-megatron-fsdp");
    a.opt("--data-parallel-sharding-strategy", s.zero == 2 ? "optim_grads" : "optim_grads_params");
    a.opt("--ckpt-format", "fsdp_dtensor");  // required by Megatron-FSDP (arguments.py)
  }
  if (s.offload == Offload::Optimizer) {  // megatron/core/optimizer/cpu_offloading/README.md
    a.flag("--optimizer-cpu-offload");
    a.opt("--optimizer-offload-fraction", "1.0");
    a.flag("--use-precision-aware-optimizer");
  }
  if (s.precision == Precision::BF16) a.flag("--bf16");
  if (s.precision == Precision::FP16) a.flag("--fp16");
  // The runtime's optimizer settings (Megatron's adam is AdamW).
  a.opt("--optimizer", "adam");
  a.opt("--lr", "3.0e-4");
  a.opt("--min-lr", "3.0e-5");
  a.opt("--lr-decay-style", "cosine");
  a.opt("--weight-decay", "0.1");
  a.opt("--adam-beta1", "0.9");
  a.opt("--adam-beta2", "0.95");
  a.opt("--clip-grad", "1.0");
  a.opt("--train-iters", 100);
  a.opt("--log-interval", 1);

  r.args = a.v;
  r.config = {{"args", r.args}};
  for (size_t i = 0; i < a.v.size(); ++i) {
    const bool value_follows = i + 1 < a.v.size() && a.v[i + 1].rfind("--", 0) != 0;
    r.file_text += a.v[i] + (value_follows ? " " + a.v[i + 1] : "") + "\n";
    if (value_follows) ++i;
  }
  std::string inline_args;
  for (const auto& x : a.v) inline_args += " " + x;
  // Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1; TP/SP overlap wants it.
  const std::string env = s.tp > 1 && s.zero < 2 ? "CUDA_DEVICE_MAX_CONNECTIONS=1 " : "";
  const std::string args_text = file.empty() ? inline_args : fmt::format(" $(cat {})", file);
  r.launch = fmt::format("{}{} scripts/engines/megatron_train.py{}", env, torchrun_prefix(c), args_text);
  if (r.file.empty()) r.file = default_export_file(Engine::Megatron);
  r.notes.push_back("scripts/engines/megatron_train.py (this repository) trains with megatron-core 0.19's GPTModel, "
                    "its pipeline schedules, DistributedDataParallel and optimizer on synthetic tokens; a Megatron-LM "
                    "checkout at core_v0.19.0 takes the same arguments with pretrain_gpt.py in its place");
  r.notes.push_back("--mock-data trains on synthetic tokens: replace it with --data-path and your tokenizer");
  r.notes.push_back("dropout stays at Megatron's default 0.1 (its masks are in --engine megatron's memory); "
                    "add --hidden-dropout 0 --attention-dropout 0 to train without");
  return r;
}

}  // namespace planner

#pragma once
// Rules that tie a Strategy to a model and a cluster (the Strategy's own rules
// are in Strategy::validate). Also builds a Plan from command-line pieces.
#include <optional>
#include <string>
#include <vector>

#include "costmodel/engines.hpp"
#include "specs/plan.hpp"

namespace planner {

// Input limits (docs/ARCHITECTURE.md, "Input limits").
constexpr int64_t kMaxSeq = int64_t(1) << 24;                // tokens per sequence
constexpr int64_t kMaxMicroBatchTokens = int64_t(1) << 32;   // mbs * seq
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 32;        // sequences per step

// What is done with a plan beyond estimating its memory. Each use adds the
// limits of its own work to the rules that every plan obeys.
struct PlanUse {
  Engine engine = Engine::Ours;  // the engine that runs it: what it lacks (engine_gap) is a refusal
  EngineEnv engine_env;          // what is installed beside it (--with-te)
  bool simulate = false;         // its step is simulated (predict, plan, exec): pp*vpp*gas bounded
  bool trace = false;            // and traced (--trace): bounded further
};

// The one place that decides whether a (model, cluster, strategy) triple is
// legal; every command goes through it, so the same triple is refused with
// the same message everywhere (memory, predict, plan's winners, export, exec,
// max-model's candidates). Throws InputError naming the rule broken, in this
// order: the strategy's own rules (Strategy::validate), dp*tp*pp equals the
// GPU count, tp divides heads, kv-heads and the FFN width, pp (times vpp) at
// most the layers, bf16 and fp16 only on GPUs that have them, the sequence,
// tokens per micro-batch and global batch in range, the sequence fits a
// learned position table, the global batch equals dp*mbs*gas; then the
// limits of `use` (check_use). Returns notes for legal but pointless choices
// (zero>=1 with dp=1 shards nothing, sp with tp=1).
std::vector<std::string> check_compat(const Plan& plan, const PlanUse& use = {});
// Context parallelism's rules (cp > 1): seq a multiple of 2*cp (Megatron's
// causal load balancing, chunks i and 2cp-1-i per rank:
// megatron/core/utils.py get_batch_on_this_cp_rank), a causal decoder without
// sliding windows, and the runtime's rules under sp. The message, or "" when
// the plan obeys them (check_compat throws it; the search skips the plan).
std::string context_parallel_problem(const Plan& plan);
// The mixture-of-experts rules of check_compat (ep divides the experts, tp
// their widths; ep > 1 only for a mixture of experts). Throws InputError.
void check_moe_compat(const ModelSpec& m, const Strategy& s);

// The limits of a use alone, without throwing (the search's inner loop
// checks its candidates, legal by construction, this way): which one the
// plan breaks and check_compat's message for it.
enum class UseLimit { None, Simulation, Trace, Engine };
struct UseCheck {
  UseLimit broken = UseLimit::None;
  std::string message;
};
UseCheck check_use(const Plan& plan, const PlanUse& use);

struct PlanRequest {
  std::string model;                       // preset name or config.json path
  std::string gpus;                        // cluster spec string or JSON file
  std::string strategy;                    // text form; dp and gas may be left out
  std::optional<int64_t> seq;              // default: default_seq(model)
  std::optional<int64_t> global_batch;     // default: dp * mbs * gas
  std::optional<int64_t> host_memory_bytes;
};

// Defaults a user would choose (issue 28). The sequence length: the model's
// training length, at most 4096 (a model that allows 131,072 positions is not
// trained at that length by default; --seq asks for it).
constexpr int64_t kDefaultSeqCap = 4096;
int64_t default_seq(const ModelSpec& m);
// Tokens per step a pretraining question (--tokens, compare) assumes when no
// --global-batch is given: about 2M (GPT-3 used 0.5M-3.2M by size, Brown et
// al. 2020, Table 2.1; Llama 2 4M, Touvron et al. 2023, section 2.2).
constexpr int64_t kPretrainTokensPerStep = int64_t(1) << 21;
// The multiple of `multiple_of` (>= 1) nearest kPretrainTokensPerStep / seq
// sequences, at least one multiple.
int64_t pretrain_batch(int64_t seq, int64_t multiple_of);

// Which inputs the user gave; assumed_defaults lists the defaults that shaped
// a plan built without them, one short phrase each, for the `assumed:` line
// and the `assumed` array of --json.
struct GivenInputs {
  bool seq = false, global_batch = false, host_memory = false;
  std::string global_batch_rule;  // how the default batch was chosen, e.g. "dp*mbs*gas"
};
std::vector<std::string> assumed_defaults(const Plan& p, const GivenInputs& given);
// One line "assumed: a; b; c\n", or "" when nothing was assumed.
std::string assumed_line(const std::vector<std::string>& assumed);

// Resolves names, fills what the strategy leaves out (dp = GPUs / (tp*pp), gas
// = global_batch / (dp*mbs)), and checks the result with check_compat(plan, use).
Plan build_plan(const PlanRequest& req, std::vector<std::string>* notes = nullptr, const PlanUse& use = {});

}  // namespace planner

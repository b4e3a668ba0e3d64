#pragma once
// Rules that tie a Strategy to a model and a cluster (the Strategy's own rules
// are in Strategy::validate). Also builds a Plan from command-line pieces.
#include <optional>
#include <string>
#include <vector>

#include "costmodel/plan.hpp"

namespace planner {

// Input limits (docs/ARCHITECTURE.md, "Input limits").
constexpr int64_t kMaxSeq = int64_t(1) << 24;                // tokens per sequence
constexpr int64_t kMaxMicroBatchTokens = int64_t(1) << 32;   // mbs * seq
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 32;        // sequences per step

// Throws InputError naming the rule broken: dp*tp*pp must equal the GPU count,
// tp divides heads, kv-heads and the FFN width, pp (times vpp) at most the
// layers, bf16 only on GPUs that have it, the global batch equals dp*mbs*gas,
// the sequence fits a learned position table. Returns notes for legal but
// pointless choices (zero>=1 with dp=1 shards nothing, sp with tp=1).
std::vector<std::string> check_compat(const Plan& plan);

struct PlanRequest {
  std::string model;                       // preset name or config.json path
  std::string gpus;                        // cluster spec string or JSON file
  std::string strategy;                    // text form; dp and gas may be left out
  std::optional<int64_t> seq;              // default: the model's training length
  std::optional<int64_t> global_batch;     // default: dp * mbs * gas
  std::optional<int64_t> host_memory_bytes;
};

// Resolves names, fills what the strategy leaves out (dp = GPUs / (tp*pp), gas
// = global_batch / (dp*mbs)), and checks the result with check_compat.
Plan build_plan(const PlanRequest& req, std::vector<std::string>* notes = nullptr);

}  // namespace planner

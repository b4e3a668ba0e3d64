#pragma once
// Human-readable tables for the planner's commands.
#include <string>
#include <vector>

#include "costmodel/memory_model.hpp"
#include "costmodel/compat.hpp"
#include "specs/plan.hpp"

namespace planner {

// One line: why a plan does not fit ("GPU peak 30.1 GiB exceeds 24.0 GiB by
// 6.1 GiB (stage 0); largest category: optimizer_states 15.0 GiB"), or "fits".
std::string why_not_fits(const MemoryReport& r);

// The per-stage breakdown by category, the peak, the host total and the verdict.
std::string memory_table(const Plan& plan, const MemoryReport& r);

// Header lines describing the plan (model, cluster, seq, batch; the topology
// assumed: nodes x GPUs, intra-node link, NICs per GPU, host RAM; strategy).
std::string plan_header(const Plan& plan);

// What the user gave of the inputs that have defaults (--seq,
// --global-batch, --host-memory, or a --plan file, which gives all).
struct PlanOptions;
GivenInputs given_inputs(const PlanOptions& o);

}  // namespace planner

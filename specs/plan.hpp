#pragma once
// The plan file (plan.json): everything needed to predict or execute one
// training configuration. Written by `planner plan -o`, read by every command's
// --plan and by `planner exec`. Schema in docs/FORMATS.md ("Plan file").
//
//   {"format": "planner-plan", "version": 1,
//    "model": {...ModelSpec...}, "cluster": {...ClusterSpec...},
//    "strategy": {...Strategy...}, "seq": 1024, "global_batch": 32}
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "specs/cluster_spec.hpp"
#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner {

constexpr int kPlanFormatVersion = 1;

struct Plan {
  ModelSpec model;
  ClusterSpec cluster;
  Strategy strategy;
  int64_t seq = 0;           // tokens per sequence
  int64_t global_batch = 0;  // sequences per optimizer step = dp * mbs * gas
};

nlohmann::json plan_to_json(const Plan& p);
// The held-out record a plan's step time is judged by (step_time_band): a
// mixture of experts first, then fine-tuning, else dense.
BandKind band_kind(const ModelSpec& m, const Finetune& f);
inline BandKind band_kind(const Plan& p) { return band_kind(p.model, p.strategy.finetune); }

Plan plan_from_json(const nlohmann::json& j);   // InputError naming the bad field
Plan load_plan(const std::string& path);        // InputError for a missing or malformed file
// Writes atomically (temporary file, then rename), so a failure leaves nothing half-written.
void save_plan(const Plan& p, const std::string& path);
// `path` "-" is stdout; an existing FIFO or /dev/null is written in place; any
// other existing non-regular file is refused (InputError); otherwise an O_EXCL
// mkstemp temporary beside the target, renamed over it. A failed write is a
// std::runtime_error (exit 1). Details in specs/output_file.cpp.
void write_file_atomically(const std::string& path, const std::string& text);
// Writes to stdout and flushes; std::runtime_error when that fails (/dev/full, closed pipe).
void write_stdout_checked(const std::string& text);
nlohmann::json read_json_file(const std::string& path, const std::string& what);  // InputError on failure
// "2026-11-22T04:03:12Z": now, UTC, for the "created" of written documents.
std::string utc_timestamp();

}  // namespace planner

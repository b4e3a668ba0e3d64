// `planner exec`, the runtime's half: load and check the plan, start the ranks
// (or run inside a launch), run and measure. Predicting and comparing is the
// planner's half (planner/exec_report.cpp). No LibTorch here (the run itself is
// runtime/measure.cpp), and no fmt: LibTorch ships its own fmt headers, which
// shadow the system's in this library's include path.
#include "runtime/exec.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/exec_launch.hpp"
#include "runtime/measure.hpp"
#include "runtime/model/attention_block.hpp"
#include "runtime/model/fp8_linear.hpp"
#include "runtime/model/fused_ops.hpp"
#include "runtime/model/moe.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner::rt {

namespace {

using nlohmann::json;

json num_or_null(double v, bool ok = true) { return ok && std::isfinite(v) ? json(v) : json(nullptr); }

json categories_json(const MemBreakdown& c) {
  json cats = json::object();
  for (int i = 0; i < kMemCategories; ++i) cats[to_string(MemCategory(i))] = c[size_t(i)];
  return cats;
}

json memory_json(const MeasuredMemory& m) {
  return {{"categories", categories_json(m.categories())},
          {"total_bytes", m.total},
          {"phases",
           {{"after_model_allocated", m.after_model_allocated},
            {"after_model_reserved", m.after_model_reserved},
            {"after_optimizer_allocated", m.after_optimizer_allocated},
            {"after_optimizer_reserved", m.after_optimizer_reserved},
            {"step_start_allocated", m.step_start_allocated},
            {"before_head_allocated", m.before_head_allocated},
            {"peak_fwd_bwd_allocated", m.peak_fwd_bwd_allocated},
            {"peak_step_allocated", m.peak_step_allocated},
            {"peak_step_reserved", m.peak_step_reserved}}},
          {"overhead_parts",
           {{"outside_allocator", m.outside_allocator},
            {"reserved_unallocated", m.peak_step_reserved - m.peak_step_allocated},
            {"optimizer_work", m.optimizer_work},
            {"other", m.overhead - m.outside_allocator - (m.peak_step_reserved - m.peak_step_allocated) -
                          m.optimizer_work}}},
          {"device_total_bytes", m.device_total}};
}

json ranks_json(const Measurement& r) {
  json a = json::array();
  for (const auto& x : r.ranks)
    a.push_back({{"rank", x.rank},
                 {"median_step_seconds", x.median_s},
                 {"peak_bytes", x.peak_bytes},
                 {"comm_bytes", x.comm_bytes},
                 {"host_peak_bytes", x.host_peak_bytes},
                 {"categories", categories_json(x.categories)}});
  return a;
}

json actions_json(const Measurement& r) {
  json a = json::object();
  for (const auto& [k, v] : r.action_seconds) a[k] = v;
  return a;
}

// The measured timeline of the last timed step (--trace): the action list of
// each pipeline stage, each rank's stage and, per rank, a flat list start0,
// end0, start1, end1, ... in seconds (one pair per action of its stage).
json timeline_json(const Measurement& r) {
  if (r.trace_spans.empty()) return nullptr;
  json ranks = json::array();
  for (const auto& sp : r.trace_spans) {
    json flat = json::array();
    for (const auto& [a, b] : sp) flat.push_back(a), flat.push_back(b);
    ranks.push_back(flat);
  }
  return {{"stage_actions", r.trace_actions}, {"rank_stage", r.trace_rank_stage}, {"ranks", ranks}};
}

// The compute kernels beside the collectives (KernelProfile::beside): per
// class, their time inside the collectives' union and the slowdown of the
// launches matched by name against the same kernels alone (null: none matched).
json beside_json(const BesideComm& b) {
  json r = {{"collectives_busy_seconds", b.comm_busy_seconds}, {"compute_beside_seconds", b.compute_beside_seconds()}};
  auto slow = [&](int c) { return b.slowdown(c) > 0 ? json(b.slowdown(c)) : json(nullptr); };
  r["slowdown"] = slow(-1);
  int c = 0;
  for (const char* n : {"gemm", "attention", "memory_bound"}) {
    r[n] = {{"beside_seconds", b.beside_seconds[size_t(c)]},
            {"matched_seconds", b.matched_seconds[size_t(c)]},
            {"slowdown", slow(c)}};
    ++c;
  }
  return r;
}

// --kernels: one step's forward and backward kernels by op class, and the
// longest 40 kernels by name.
json kernels_json(const KernelProfile& k) {
  if (!k.recorded) return nullptr;
  json top = json::array();
  for (size_t i = 0; i < k.kernels.size() && i < 40; ++i) {
    const auto& x = k.kernels[i];
    top.push_back({{"name", x.name}, {"class", to_string(x.cls)}, {"count", x.count}, {"seconds", x.seconds}});
  }
  return {{"by_class",
           {{"gemm_seconds", k.gemm_seconds},
            {"attention_seconds", k.attention_seconds},
            {"memory_bound_seconds", k.memory_seconds},
            {"host_copy_seconds", k.host_copy_seconds},
            {"communication_seconds", k.comm_seconds}}},
          {"busy_seconds", k.busy_seconds()},
          {"idle_seconds", k.idle_seconds()},
          {"span_seconds", k.span_seconds},
          {"launches", k.launches},
          {"distinct_kernels", k.kernels.size()},
          {"beside_collectives", beside_json(k.beside)},
          {"top", top}};
}

json measurement_json(const Measurement& r) {
  return {{"device", r.device},
          {"precision", r.precision},
          {"steps", r.steps},
          {"warmup", r.warmup},
          {"params", r.params},
          {"samples_per_step", r.samples_per_step},
          {"tokens_per_step", r.tokens_per_step},
          {"step_seconds",
           {{"median", r.median_s},
            {"mean", r.mean_s},
            {"min", r.min_s},
            {"max", r.max_s},
            {"p10", r.p10_s},
            {"p90", r.p90_s},
            {"all", r.step_seconds}}},
          {"samples_per_second", r.samples_per_second},
          {"tokens_per_second", r.tokens_per_second},
          {"model_flops_per_step", r.model_flops_per_step},
          {"hardware_flops_per_step", r.hardware_flops_per_step},
          {"model_tflops", r.model_tflops},
          {"hardware_tflops", r.hardware_tflops},
          {"mfu", num_or_null(r.mfu, r.mfu >= 0)},
          {"peak_flops", r.peak_flops},
          {"losses", r.losses},
          {"loss_first", r.losses.empty() ? json(nullptr) : json(r.losses.front())},
          {"loss_last", r.losses.empty() ? json(nullptr) : json(r.losses.back())},
          {"final_loss_scale", r.final_loss_scale},
          {"skipped_steps", r.skipped_steps},
          {"moe_imbalance", num_or_null(r.moe_imbalance, r.moe_imbalance > 0)},
          {"moe_imbalance_largest", num_or_null(r.moe_imbalance_largest, r.moe_imbalance_largest > 0)},
          {"moe_routing", r.moe_routing.empty() ? json(nullptr) : json(r.moe_routing)},
          {"init_seconds", r.init_seconds},
          {"data", r.data},
          {"world", r.world},
          {"ranks", ranks_json(r)},
          {"host_state_bytes", r.host_state_bytes},
          {"host_peak_bytes", r.host_peak_bytes},
          {"cpu_adam_seconds", num_or_null(r.cpu_adam_seconds, r.cpu_adam_seconds > 0)},
          {"cpu_adam_params_per_second", num_or_null(r.cpu_adam_params_per_second, r.cpu_adam_seconds > 0)},
          {"host_copy_gbps", num_or_null(r.host_copy_gbps, r.host_copy_gbps > 0)},
          {"cpu_steal_fraction", num_or_null(r.cpu_steal_fraction, r.cpu_steal_fraction >= 0)},
          {"action_seconds", actions_json(r)},
          {"timeline", timeline_json(r)},
          {"kernels", kernels_json(r.kernels)},
          {"memory", memory_json(r.memory)},
          {"notes", r.notes}};
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Everything about a plan and the options that can be refused before any rank
// starts: bad input exits 2 with one line and writes nothing. (The output
// paths are checked for writability by the planner's half, planner/cmd_exec.cpp.)
void check_runnable(const ExecOptions& o, const Plan& plan) {
  const Strategy& s = plan.strategy;
  const std::string where = "plan '" + clip(o.plan_path) + "'";
  if (plan.global_batch != s.global_batch())
    throw InputError(where + ": global_batch " + std::to_string(plan.global_batch) +
                     " is not dp * mbs * gas = " + std::to_string(s.global_batch()));
  if (plan.model.vocab < 2)
    throw InputError(where + ": model.vocab " + std::to_string(plan.model.vocab) +
                     " cannot be trained on (next-token prediction needs at least 2 tokens)");
  // The runtime's own limits (specs/runtime_gap.hpp): MoE, precision=fp8, sp's split.
  if (const std::string gap = runtime_gap(plan.model, s, plan.seq); !gap.empty()) throw InputError(where + ": " + gap);
  if (s.precision == Precision::FP8) {
    const bool cuda = o.device == "cuda" || o.device == "gpu" || (o.device == "auto" && cuda_available());
    if (!fp8_gemm_available(cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU)))
      throw InputError(where + ": precision=fp8 needs at::_scaled_mm, which this LibTorch does not run on the " +
                       (cuda ? "GPU (FP8 needs compute capability 8.9 or later)" : "CPU") + "; use precision=bf16");
  }
  // An environment variable the run reads is checked here too: an unknown
  // PLANNER_CP_ATTENTION, PLANNER_MOE_* or PLANNER_FUSED_KERNELS would otherwise be ignored (every plan: a misspelt
  // value is an error whatever the plan's cp).
  if (o.moe_routing == MoeRouting::Balanced && !plan.model.moe.enabled())
    throw InputError(where + ": --moe-routing balanced needs a mixture-of-experts model; '" + clip(plan.model.name) +
                     "' is dense");
  cp_attention_from_env();
  moe_gemm_from_env();
  fused_kernels_from_env();
  // The token file's type, size and shape (the ids are checked as they are read).
  if (!o.tokens_path.empty()) FileTokens(o.tokens_path, parse_token_dtype(o.tokens_dtype), plan.model.vocab, plan.seq, 0);
}

// Refuses, before anything starts, a plan that cannot run here; otherwise
// starts `mpirun -np N` with this same command line and returns 0, or throws
// the failing rank's one line (runtime/exec_launch.hpp).
int launch_ranks(const ExecOptions& o, const Plan& plan) {
  const int world = plan.strategy.world();
  const bool cuda = o.device == "cuda" || o.device == "gpu" || (o.device == "auto" && cuda_available());
  if (cuda) {
    const int gpus = cuda_device_count();
    if (world > gpus)
      throw InputError("the plan needs " + std::to_string(world) + " GPUs (dp*tp*pp) but this machine has " +
                       std::to_string(gpus) + "; start it across nodes with mpirun/srun and a hostfile");
  }
  if (!cuda) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (world > cores && !o.oversubscribe)
      throw InputError("the plan needs " + std::to_string(world) + " ranks but this machine has " +
                       std::to_string(cores) + " cores; pass --oversubscribe to run them anyway");
  }
  // This process's own command line, re-run once per rank.
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
  if (args.empty()) throw std::runtime_error("exec: cannot read this process's command line to start the ranks");
  args[0] = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> cmd = {"mpirun", "-np", std::to_string(world), "--bind-to", "none"};
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  if (o.oversubscribe) cmd.push_back("--oversubscribe");
  cmd.insert(cmd.end(), args.begin(), args.end());
  std::string banner;
  if (o.progress) {
    std::string line;
    for (const auto& a : cmd) line += (line.empty() ? "" : " ") + a;
    banner = "exec: started " + std::to_string(world) + " ranks: " + clip(line, 400);
  }
  return run_ranks(cmd, world, banner);
}

}  // namespace

ExecRun run_plan(const ExecOptions& o, Plan plan) {
  check_run_options(o);
  RunOptions ro = o;  // the run's own options, without the command's files
  ro.trace = !o.trace_path.empty();
  ExecRun r;
  r.config = make_run_config(std::move(plan), std::move(ro));
  const RunConfig& cfg = r.config;
  check_runnable(o, cfg.plan);
  if (cfg.strategy().world() > 1 && !launched_by_mpi()) {
    // This process only starts the ranks; rank 0 of them reports.
    r.exit_code = launch_ranks(o, cfg.plan);
    r.report = false;
    return r;
  }
  const Measurement m = run_training(cfg);
  r.report = m.root;
  r.run = {{"created", utc_now()},
           {"options",
            {{"steps", o.steps},
             {"warmup", o.warmup},
             {"device", o.device},
             {"seed", o.seed},
             {"lr", o.optim.lr},
             {"tokens_path", o.tokens_path},
             {"kernels", o.kernels},
             {"moe_routing", to_string(o.moe_routing)},
             {"tokens_dtype", o.tokens_path.empty() ? json(nullptr) : json(o.tokens_dtype)}}},
           {"measurement", measurement_json(m)},
           {"machine", machine_json(m.machine)}};
  return r;
}

ExecRun run_plan(const ExecOptions& o) {
  if (o.plan_path.empty()) throw InputError("exec: no plan file given");
  check_run_options(o);
  return run_plan(o, load_plan(o.plan_path));
}

}  // namespace planner::rt

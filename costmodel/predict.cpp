// predict(): the step simulator over the analytic cost model, plus the memory model.
#include "costmodel/predict.hpp"

#include "strategies/parse_util.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "costmodel/compat.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/finetune.hpp"
#include "costmodel/moe_costs.hpp"
#include "specs/flops.hpp"
#include "costmodel/long_run.hpp"
#include "costmodel/predict_detail.hpp"
#include "costmodel/trace.hpp"
#include "strategies/errors.hpp"

namespace planner {

void fill_prediction(const Plan& plan, const HardwareProfile& profile, const SimResult& sim, StepPrediction& p) {
  const double world = plan.strategy.world();
  const int64_t tokens = plan.global_batch * plan.seq;
  p.step_seconds = sim.makespan_seconds;
  p.model_flops_per_step = model_flops(plan.model, plan.seq, tokens);
  p.hardware_flops_per_step = hardware_flops(plan.model, plan.seq, tokens, plan.strategy.ckpt);
  // LoRA/QLoRA: no weight gradients of the frozen base, the adapters' own (costmodel/finetune.hpp).
  const double ft_flops = finetune_flops_adjustment(plan.model, plan.strategy.finetune, tokens);
  p.model_flops_per_step += ft_flops;
  p.hardware_flops_per_step += ft_flops;
  p.samples_per_second = double(plan.global_batch) / p.step_seconds;
  p.tokens_per_second = double(tokens) / p.step_seconds;
  p.tflops_per_gpu = p.model_flops_per_step / p.step_seconds / world / 1e12;
  p.hw_tflops_per_gpu = p.hardware_flops_per_step / p.step_seconds / world / 1e12;
  p.mfu = p.model_flops_per_step / p.step_seconds / world / profile.peak_flops(plan.strategy.precision);
  const StageTime& c = sim.stages.at(sim.critical_stage);
  p.compute_seconds = c.compute_seconds;
  p.contention_seconds = c.contention_seconds;
  p.exposed_comm_seconds = c.tp_comm_seconds + c.exposed_comm_seconds;
  p.bubble_seconds = c.bubble_seconds;
  p.optimizer_seconds = c.optimizer_seconds;
  p.offload_seconds = c.offload_seconds;
  check_physical(plan, profile, p);
}

void check_physical(const Plan& plan, const HardwareProfile& profile, const StepPrediction& p) {
  // A time that is not finite and positive, or more work per second than the
  // GPUs' stated peak, is no answer: refuse it and say which inputs led there.
  if (!std::isfinite(p.step_seconds) || !(p.step_seconds > 0))
    throw InputError(fmt::format("predict: step time {} s is not a finite positive time; check the cluster ({}) and "
                                 "profile values (bandwidths, efficiencies, latencies)",
                                 p.step_seconds, plan.cluster.name));
  // fp8: MFU is counted against the bf16 peak, and the FP8 GEMMs may run up
  // to the FP8 peak: the bound is their ratio.
  const Precision pr = plan.strategy.precision;
  const double limit = pr == Precision::FP8 && profile.peak_fp8_flops > profile.peak_flops(pr)
                           ? profile.peak_fp8_flops / profile.peak_flops(pr)
                           : 1.0;
  if (!std::isfinite(p.mfu) || p.mfu > limit)
    throw InputError(fmt::format(
        "predict: MFU {:.1f}% is above 100% of the {} peak of the profile ({:.0f} TFLOP/s) at seq={}: the model-FLOPs "
        "count (6N + 12*layers*hidden*seq, non-causal attention) exceeds the work the cost model times; refused",
        100.0 * p.mfu, to_string(plan.strategy.precision), profile.peak_flops(plan.strategy.precision) / 1e12,
        plan.seq));
}

StepPrediction predict(const Plan& plan, const HardwareProfile& profile, SimResult* sim_out, bool record_trace) {
  PlanUse use;
  use.simulate = true;
  use.trace = record_trace;
  check_compat(plan, use);  // every caller checked already; a plan that reaches here unchecked is refused too
  CostContext ctx(plan.model, plan.cluster, plan.seq, profile);
  TableCostModel cost;
  ctx.build(plan.strategy, cost);
  SimOptions opt;
  opt.record_trace = record_trace;
  StepOptions so;
  so.tied_embeddings = plan.model.tied_embeddings;
  so.overlap_grad_reduce = profile.overlap_grad_reduce;
  so.overlap_param_gather = profile.overlap_param_gather;
  std::optional<StepProgram> program;
  auto program_for = [&](int microbatches) -> const StepProgram& {
    Strategy s = plan.strategy;
    s.gas = microbatches;
    return program.emplace(build_step_program(s, plan.model.layers, so));
  };
  Simulator simulator;
  const SimResult sim = simulate_step(plan.strategy, cost, program_for, simulator, opt);
  if (sim.deadlock)
    throw std::runtime_error(fmt::format("predict: the {} schedule deadlocked in the simulator (a bug)",
                                         to_string(plan.strategy.schedule)));
  StepPrediction p;
  fill_prediction(plan, profile, sim, p);
  p.compute_by_class = double(plan.strategy.gas) * ctx.stage_op_times(plan.strategy, sim.critical_stage);
  p.compute_by_class_rank0 = sim.critical_stage == 0
                                 ? p.compute_by_class
                                 : double(plan.strategy.gas) * ctx.stage_op_times(plan.strategy, 0);
  // Stage 0's passes as the simulator ran them: kernels, the slowdown beside
  // DP/ZeRO collectives, and under tp the collectives waited for inside them.
  const StageTime& s0 = sim.stages.at(0);
  p.rank0_fb_seconds = s0.compute_seconds + (plan.strategy.tp > 1 ? s0.tp_comm_seconds : 0.0);
  p.memory = estimate_memory(plan, Engine::Ours, &profile);
  // A group larger than any the profile measured (collective_groups): said
  // in every answer that carries this prediction.
  if (std::string n = collective_extrapolation_note(profile, plan.strategy); !n.empty()) p.memory.notes.push_back(n);
  // Windowed layers without a measured windowed kernel: priced at the full kernel's rate.
  if (plan.model.windowed_layers(plan.seq) > 0 && profile.flash_attention &&
      !(profile.attention_window_forward_relative > 0 && profile.attention_window_backward_relative > 0))
    p.memory.notes.push_back(fmt::format(
        "sliding window: the {} windowed layers' attention is priced at the full causal kernel's rate on the "
        "window's work; this profile has no measurement of the windowed kernel (planner calibrate --only "
        "attention_window)",
        plan.model.windowed_layers(plan.seq)));
  // A head wider than the profile measured attention at: priced at the widest measured head's rates.
  for (const bool window : {false, true}) {
    const int64_t widest = profile.attention_widest_head_dim(window), d = plan.model.head_dim();
    if (!profile.flash_attention || widest == 0 || d <= widest || plan.strategy.precision == Precision::FP32) continue;
    if (window && plan.model.windowed_layers(plan.seq) == 0) continue;
    p.memory.notes.push_back(fmt::format(
        "attention: head_dim {} is wider than this profile's {}measured heads (up to {}); priced at head_dim {}'s "
        "rates (planner calibrate --only attention,attention_window measures 256)",
        d, window ? "windowed-kernel " : "", widest, widest));
  }
  // MoE in this runtime: the host's part (many small kernels; at ep > 1 one sync per layer forward).
  if (plan.model.moe.enabled()) {
    const MoeHostSeconds h = moe_host_seconds(profile, plan.strategy.ep, 1.0, plan.model.moe.shared_ffn > 0);
    if (!h.measured)
      p.memory.notes.push_back(
          "mixture of experts: planner exec's MoE layers are partly host-bound on GPUs (many small kernels, and at "
          "ep > 1 each layer's forward waits for the routed counts that size its all-to-all, and the GPU idles "
          "while the host catches up); this "
          "profile has no measurement of that host time (planner calibrate --only moe_host), so the prediction "
          "prices the kernels and the exchanges only: read it as a lower bound (validation/h100x4/moe_fix)");
    else
      p.memory.notes.push_back(
          std::string("mixture of experts: each MoE layer's forward and backward take at least the host's time in "
                      "planner exec's MoE layer (the profile's moe_host fields; at ep > 1 the forward waits on the "
                      "host for the routed counts); not priced: the routing's imbalance beyond --moe-imbalance, and "
                      "with ep > 1 each layer's wait for the slowest rank of the ep group; MoE steps have missed "
                      "their predictions by more than dense ones (the band says by how much)") +
          (h.ep_unmeasured ? "; ep > 1: the profile measured that host time with one GPU only, without the "
                             "all-to-all's host work (calibrate under mpirun measures it)"
                           : "") +
          (plan.model.moe.shared_ffn > 0 && !(profile.moe_host_shared_forward_seconds > 0)
               ? "; the shared MLP's host work is not in that figure (calibrate's moe_host part measures it since "
                 "2026-11-28)"
               : ""));
  }
  if (sim_out) *sim_out = sim;
  return p;
}

StepPrediction predict(const Plan& plan, const std::string& profile_path) {
  return predict(plan, load_profile(profile_path, plan.cluster.gpu));
}

StepPrediction predict_with_trace(const Plan& plan, const std::string& profile_path, const std::string& trace_path) {
  return predict_with_trace(plan, load_profile(profile_path, plan.cluster.gpu), trace_path);
}

StepPrediction predict_with_trace(const Plan& plan, const HardwareProfile& profile, const std::string& trace_path) {
  if (trace_path.empty()) return predict(plan, profile);
  SimResult sim;  // predict refuses a trace above kMaxTraceChunks before simulating (check_use)
  StepPrediction p = predict(plan, profile, &sim, true);
  write_chrome_trace(sim, fmt::format("{} on {}: {}", plan.model.name, plan.cluster.name, plan.strategy.to_string()),
                     trace_path);
  return p;
}

std::string check_profile_gpu(const HardwareProfile& profile, const GpuSpec& gpu, bool any) {
  if (profile.gpu.empty() || to_lower(profile.gpu) == to_lower(gpu.name)) return "";
  const std::string where = to_lower(profile.gpu) == "cpu" ? "the CPU" : profile.gpu;
  if (!any)
    throw InputError(fmt::format("--profile was measured on {}, not on {}: its rates and memory would be taken for "
                                 "the {}'s (give --profile-any to apply it anyway)", where, gpu.name, gpu.name));
  return fmt::format("profile measured on {} applied to {} (--profile-any): times and memory use its rates, not the "
                     "{}'s", where, gpu.name, gpu.name);
}

nlohmann::json prediction_json(const StepPrediction& p) {
  nlohmann::json j;
  j["step_seconds"] = p.step_seconds;
  j["samples_per_second"] = p.samples_per_second;
  j["tokens_per_second"] = p.tokens_per_second;
  j["model_flops_per_step"] = p.model_flops_per_step;
  j["hardware_flops_per_step"] = p.hardware_flops_per_step;
  j["tflops_per_gpu"] = p.tflops_per_gpu;
  j["hw_tflops_per_gpu"] = p.hw_tflops_per_gpu;
  j["mfu"] = p.mfu;
  j["fits"] = p.memory.fits();
  j["per_gpu_peak_bytes"] = p.memory.per_gpu_peak_bytes;
  j["breakdown"] = {{"compute_seconds", p.compute_seconds},
                    {"contention_seconds", p.contention_seconds},
                    {"exposed_comm_seconds", p.exposed_comm_seconds},
                    {"bubble_seconds", p.bubble_seconds},
                    {"optimizer_seconds", p.optimizer_seconds},
                    {"offload_seconds", p.offload_seconds},
                    {"compute_by_class",
                     {{"gemm_seconds", p.compute_by_class.gemm_seconds},
                      {"attention_seconds", p.compute_by_class.attention_seconds},
                      {"memory_bound_seconds", p.compute_by_class.memory_seconds},
                      {"tp_comm_seconds", p.compute_by_class.tp_comm_seconds}}}};
  j["memory"] = memory_report_json(p.memory);
  return j;
}

}  // namespace planner

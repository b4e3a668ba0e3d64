#include "runtime/measure.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "costmodel/flops.hpp"
#include "runtime/trainer.hpp"
#include "strategies/errors.hpp"

namespace planner::rt {

namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

Measurement run_training(const Plan& plan, const RunOptions& opt) {
  const Strategy& st = plan.strategy;
  if (st.dp != 1 || st.tp != 1 || st.pp != 1)
    throw InputError("exec runs one-device plans only (dp = tp = pp = 1); this plan has dp=" + std::to_string(st.dp) +
                     ", tp=" + std::to_string(st.tp) + ", pp=" + std::to_string(st.pp));
  if (st.zero != 0 || st.offload != Offload::None)
    throw InputError("exec does not run ZeRO or offload yet (zero=" + std::to_string(st.zero) + ", offload=" +
                     to_string(st.offload) + "); use zero=0, offload=none");
  if (opt.steps < 1) throw InputError("--steps must be at least 1, got " + std::to_string(opt.steps));
  if (opt.warmup < 0) throw InputError("--warmup must not be negative, got " + std::to_string(opt.warmup));
  if (plan.seq <= 0) throw InputError("plan: seq must be positive");

  bool cuda;
  if (opt.device == "auto") cuda = cuda_available();
  else if (opt.device == "cuda" || opt.device == "gpu") {
    if (!cuda_available()) throw InputError("--device cuda: no CUDA GPU is visible to this LibTorch build");
    cuda = true;
  } else if (opt.device == "cpu") cuda = false;
  else throw InputError("--device '" + opt.device + "' is not one of auto|cuda|cpu");

  Measurement r;
  r.precision = to_string(st.precision);
  r.steps = opt.steps;
  r.warmup = opt.warmup;
  r.samples_per_step = int64_t(st.mbs) * st.gas;
  r.tokens_per_step = r.samples_per_step * plan.seq;

  // Token source first: a bad token file is bad input, found before any work.
  std::shared_ptr<TokenSource> tokens;
  if (!opt.tokens_path.empty())
    tokens = std::make_shared<FileTokens>(opt.tokens_path, parse_token_dtype(opt.tokens_dtype), plan.model.vocab,
                                          plan.seq, opt.seed);
  else
    tokens = std::make_shared<SyntheticTokens>(plan.model.vocab, opt.seed);
  r.data = tokens->describe();

  if (!cuda) enable_cpu_memory_counting();
  const at::Device device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  if (cuda) {
    // Initialise the CUDA context and the caching allocator before reading them.
    at::zeros({1}, at::TensorOptions().device(device));
    synchronize(true);
    // TF32 for fp32 matmuls (the fp32 plans then run at the tf32 tensor-core rate).
    at::globalContext().setFloat32MatmulPrecision("high");
  }
  r.machine = machine_info(cuda);
  r.device = r.machine.device;
  if (cuda && !plan.cluster.gpu.name.empty() && !r.machine.gpu_name.empty()) {
    std::string a = plan.cluster.gpu.name, b = r.machine.gpu_name;
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    const std::string head = a.substr(0, a.find('-'));
    if (b.find(head) == std::string::npos)
      r.notes.push_back("the plan is for " + plan.cluster.gpu.name + " but this GPU is " + r.machine.gpu_name +
                        "; MFU uses the plan's peak");
  }

  TrainConfig cfg;
  cfg.precision = st.precision;
  cfg.ckpt = st.ckpt;
  cfg.mbs = st.mbs;
  cfg.gas = st.gas;
  cfg.seq = plan.seq;
  cfg.seed = opt.seed;
  cfg.lr = opt.lr;

  auto finish_memory = [&](MeasuredMemory& m) {
    m.total = m.peak_step_reserved + m.outside_allocator;
    const int64_t known = m.parameters + m.gradients + m.optimizer_states + m.activations + m.logits_loss;
    m.overhead = std::max<int64_t>(0, m.total - known);
  };

  try {
    const auto t0 = std::chrono::steady_clock::now();
    reset_peak_memory(cuda);
    const MemStats before = memory_stats(cuda);
    Trainer trainer(plan.model, cfg, device, tokens);
    synchronize(cuda);
    r.init_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.params = trainer.model().store().numel();

    MeasuredMemory& mm = r.memory;
    mm.parameters = trainer.param_bytes();
    mm.gradients = trainer.grad_bytes();
    mm.optimizer_states = trainer.optimizer_state_bytes();
    mm.optimizer_work = trainer.optimizer_work_bytes();
    // Phases. The trainer allocates the model (params, grads) and the optimizer
    // state together; "after model" counts the first two, "after optimizer" all.
    const MemStats built = memory_stats(cuda);
    mm.after_optimizer_allocated = built.allocated - before.allocated;
    mm.after_optimizer_reserved = built.reserved;
    mm.after_model_allocated = mm.parameters + mm.gradients;
    mm.after_model_reserved = built.reserved;

    // Hooks that read the allocator inside the step (host-side bookkeeping, no sync).
    bool timing = false;
    int64_t before_head = 0, peak_fb = 0;
    trainer.model().before_head = [&] {
      if (timing) before_head = std::max(before_head, memory_stats(cuda).allocated - before.allocated);
    };
    trainer.after_backward = [&] {
      if (timing) peak_fb = std::max(peak_fb, memory_stats(cuda).allocated_peak - before.allocated);
    };

    IntervalTimer timer(cuda);
    std::vector<at::Tensor> losses;
    int64_t step_start = 0, peak_alloc = 0, peak_res = 0;
    const int total = opt.warmup + opt.steps;
    for (int s = 0; s < total; ++s) {
      timing = s >= opt.warmup;
      if (timing) {
        if (s == opt.warmup) synchronize(cuda);
        reset_peak_memory(cuda);
        step_start = std::max(step_start, memory_stats(cuda).allocated - before.allocated);
        timer.start();
      }
      at::Tensor loss = trainer.step(s);
      if (timing) {
        timer.stop();
        const MemStats ms = memory_stats(cuda);
        peak_alloc = std::max(peak_alloc, ms.allocated_peak - before.allocated);
        peak_res = std::max(peak_res, ms.reserved_peak);
      }
      losses.push_back(loss);
      if (opt.progress && (!timing || cuda == false)) {
        // Warm-up steps (and CPU steps) print as they finish; timed GPU steps print
        // at the end, so that printing forces no synchronisation inside the timing.
        std::fprintf(stderr, "exec: %s step %d/%d loss %.4f\n", timing ? "timed" : "warm-up", s + 1, total,
                     loss.item<double>());
      }
    }
    r.step_seconds = timer.seconds();
    for (auto& l : losses) r.losses.push_back(l.item<double>());
    if (opt.progress && cuda)
      for (int s = opt.warmup; s < total; ++s)
        std::fprintf(stderr, "exec: timed step %d/%d loss %.4f %.4f s\n", s + 1, total,
                     r.losses[static_cast<size_t>(s)], r.step_seconds[static_cast<size_t>(s - opt.warmup)]);

    mm.step_start_allocated = step_start;
    mm.before_head_allocated = before_head;
    mm.peak_fwd_bwd_allocated = peak_fb;
    mm.peak_step_allocated = peak_alloc;
    mm.peak_step_reserved = cuda ? peak_res : peak_alloc;
    mm.outside_allocator = memory_outside_allocator(cuda);
    mm.device_total = device_total_memory(cuda);
    mm.activations = std::max<int64_t>(0, before_head - step_start);
    mm.logits_loss = std::max<int64_t>(0, peak_fb - before_head);
    finish_memory(mm);
    r.final_loss_scale = trainer.loss_scale();
    r.skipped_steps = trainer.skipped_steps();
  } catch (const c10::OutOfMemoryError& e) {
    std::string msg = e.what_without_backtrace();
    throw std::runtime_error("CUDA out of memory while running the plan (" + msg.substr(0, msg.find('\n')) +
                             "); the memory model predicts what `planner memory` prints for this plan");
  }

  // Timing statistics and throughput.
  const auto& t = r.step_seconds;
  r.median_s = quantile(t, 0.5);
  r.p10_s = quantile(t, 0.1);
  r.p90_s = quantile(t, 0.9);
  r.min_s = *std::min_element(t.begin(), t.end());
  r.max_s = *std::max_element(t.begin(), t.end());
  double sum = 0;
  for (double x : t) sum += x;
  r.mean_s = sum / static_cast<double>(t.size());
  r.samples_per_second = static_cast<double>(r.samples_per_step) / r.median_s;
  r.tokens_per_second = static_cast<double>(r.tokens_per_step) / r.median_s;
  r.model_flops_per_step = model_flops(plan.model, plan.seq, r.tokens_per_step);
  r.hardware_flops_per_step = hardware_flops(plan.model, plan.seq, r.tokens_per_step, st.ckpt);
  r.model_tflops = r.model_flops_per_step / r.median_s / 1e12;
  r.hardware_tflops = r.hardware_flops_per_step / r.median_s / 1e12;
  const auto& g = plan.cluster.gpu;
  r.peak_flops = st.precision == Precision::FP32 ? g.peak_fp32 : st.precision == Precision::FP16 ? g.peak_fp16
                                                                                                 : g.peak_bf16;
  if (cuda && r.peak_flops > 0) r.mfu = r.model_flops_per_step / r.median_s / r.peak_flops;
  if (!cuda) r.notes.push_back("ran on the CPU: MFU is not applicable and times are not comparable with the GPU prediction");
  if (r.skipped_steps > 0)
    r.notes.push_back(std::to_string(r.skipped_steps) + " fp16 step(s) skipped for inf/nan gradients (loss scale now " +
                      std::to_string(r.final_loss_scale) + ")");
  return r;
}

}  // namespace planner::rt

#include "runtime/measure.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <ATen/Parallel.h>

#include "specs/flops.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/engine.hpp"
#include "strategies/rank_grid.hpp"
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

namespace {

// Elementwise max (or the concatenation) of a vector of doubles over the world,
// through the CPU (MPI) communicator.
std::vector<double> all_gather_doubles(Communicator* world, const std::vector<double>& mine) {
  if (!world) return mine;
  at::Tensor in = at::tensor(mine, at::TensorOptions().dtype(at::kDouble));
  at::Tensor out = at::empty({int64_t(mine.size()) * world->size()}, in.options());
  world->all_gather(in, out)->wait();
  return std::vector<double>(out.data_ptr<double>(), out.data_ptr<double>() + out.numel());
}

// Host memcpy bandwidth (bytes read + written per second) over a 1 GiB buffer.
double host_copy_gbps() {
  const int64_t n = int64_t(1) << 28;  // floats
  at::Tensor a = at::ones({n}, at::kFloat), b = at::empty({n}, at::kFloat);
  b.copy_(a);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) b.copy_(a);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 3.0 * 2.0 * double(n) * 4.0 / s / 1e9;
}

// The host's CPU time so far, in clock ticks, from /proc/stat's first line:
// (stolen by the hypervisor, all). {-1, -1} where it cannot be read.
std::pair<double, double> cpu_ticks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  if (!(f >> cpu) || cpu != "cpu") return {-1, -1};
  double x = 0, total = 0, steal = 0;
  for (int i = 0; i < 8 && f >> x; ++i) {  // user nice system idle iowait irq softirq steal
    total += x;
    if (i == 7) steal = x;
  }
  return {steal, total};
}

// Test hook for the fault tests: PLANNER_TEST_KILL=RANK:STEP kills that rank
// (SIGKILL) at the start of that step.
void maybe_die(int rank, int step) {
  const char* e = std::getenv("PLANNER_TEST_KILL");
  if (!e) return;
  int r = -1, k = -1;
  if (std::sscanf(e, "%d:%d", &r, &k) == 2 && r == rank && k == step) std::raise(SIGKILL);
}

}  // namespace

Measurement run_training(const Plan& plan, const RunOptions& opt) {
  const Strategy& st = plan.strategy;
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

  // The world: one process per rank, started by MPI.
  const int world = st.world();
  WorldInfo wi;
  if (world > 1 || launched_by_mpi()) {
    wi = init_world();
    if (wi.size != world)
      throw InputError("the plan needs " + std::to_string(world) + " ranks (dp*tp*pp) but " + std::to_string(wi.size) +
                       " were started; run it with mpirun -np " + std::to_string(world) + " or let planner exec start them");
  }
  if (wi.local_size > 1 && !std::getenv("OMP_NUM_THREADS")) {
    // Several ranks on one node share its cores: each takes its part for
    // LibTorch's intra-op threads (the CPU AdamW of offload runs on them).
    // Measured on two H200 ranks with 32 threads each on 32 cores: host memcpy
    // 11 GB/s and CPU AdamW 4.1e8 parameters/s, against 103 GB/s and 3.0e9 for
    // one rank (validation/archive/h200x2/run4).
    if (const int t = threads_per_rank(wi.local_size); t > 0) at::set_num_threads(t);
  }
  if (opt.kernels && !cuda)
    throw InputError("--kernels records GPU kernels, but this run is on the CPU (no GPU, or --device cpu)");
  if (cuda) {
    const int n = cuda_device_count();
    if (wi.local_size > n)
      throw InputError(std::to_string(wi.local_size) + " ranks on this node but only " + std::to_string(n) + " GPU(s)");
    set_cuda_device(wi.local_rank);
  }

  Measurement r;
  r.world = world;
  r.root = wi.rank == 0;
  r.precision = to_string(st.precision);
  r.steps = opt.steps;
  r.warmup = opt.warmup;
  r.samples_per_step = st.global_batch();
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
  const at::Device device = cuda ? at::Device(at::kCUDA, int8_t(wi.local_rank)) : at::Device(at::kCPU);
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
    if (b.find(head) == std::string::npos) {
      const std::string note = "the plan is for " + plan.cluster.gpu.name + " but this GPU is " + r.machine.gpu_name +
                               "; MFU uses the plan's peak";
      r.notes.push_back(note);
      if (r.root && opt.progress) std::fprintf(stderr, "exec: warning: %s\n", note.c_str());  // before anything runs
    }
  }

  // Communicators from the rank grid; the device memory NCCL takes is measured
  // as the growth of memory outside the caching allocator across their set-up
  // and a first collective.
  // The pipeline's send/receive links are made by the Engine (runtime/comm/pipe_links.hpp).
  std::unique_ptr<Communicator> dpc, ppc, tpc, cpc, worldc;
  const RankGrid grid(st.dp, st.pp, st.tp, st.cp);
  const int64_t outside0 = world > 1 ? memory_outside_allocator(cuda) : 0;
  if (world > 1) {
    const auto timeout = std::chrono::seconds(opt.comm_timeout_seconds);
    std::vector<int> all(static_cast<size_t>(world));
    for (int i = 0; i < world; ++i) all[size_t(i)] = i;
    worldc = make_communicator(std::vector<std::vector<int>>{all}, "world", at::Device(at::kCPU), timeout);
    // The gradients' group: dp-cp (the dp group when cp = 1).
    if (st.dp_cp() > 1) dpc = make_communicator(grid.all_dp_cp_groups(), "dp", device, timeout);
    if (st.cp > 1) cpc = make_communicator(grid.all_cp_groups(), "cp", device, timeout);
    if (st.pp > 1) ppc = make_communicator(grid.all_pp_groups(), "pp", device, timeout);
    if (st.tp > 1) tpc = make_communicator(grid.all_tp_groups(), "tp", device, timeout);
  }

  TrainConfig cfg;
  cfg.precision = st.precision;
  cfg.ckpt = st.ckpt;
  cfg.mbs = st.mbs;
  cfg.gas = st.gas;
  cfg.seq = plan.seq;
  cfg.seed = opt.seed;
  cfg.lr = opt.lr;

  try {
    const auto t0 = std::chrono::steady_clock::now();
    reset_peak_memory(cuda);
    const MemStats before = memory_stats(cuda);
    Engine engine(plan.model, st, cfg, device, tokens, dpc.get(), ppc.get(), tpc.get(), cpc.get());
    synchronize(cuda);
    empty_cache(cuda);  // the initialisation's temporaries are not part of the step's memory
    r.init_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The model's parameters (a rank holds its tp part of them).
    r.params = st.tp > 1 ? plan.model.total_params() : engine.model().store().numel();

    MeasuredMemory& mm = r.memory;
    mm.parameters = engine.param_bytes();
    mm.gradients = engine.grad_bytes();
    mm.optimizer_states = engine.optimizer_state_bytes();
    mm.optimizer_work = engine.optimizer_work_bytes();
    const MemStats built = memory_stats(cuda);
    mm.after_optimizer_allocated = built.allocated - before.allocated;
    mm.after_optimizer_reserved = built.reserved;
    mm.after_model_allocated = mm.parameters + mm.gradients;
    mm.after_model_reserved = built.reserved;
    r.host_state_bytes = engine.host_state_bytes();

    // Hooks that read the allocator inside the step (host-side bookkeeping, no sync).
    bool timing = false;
    int64_t before_head = 0, peak_fb = 0, transient_peak = 0;
    engine.before_head = [&] {
      if (!timing) return;
      const int64_t now = memory_stats(cuda).allocated - before.allocated;
      before_head = std::max(before_head, now);
    };
    engine.after_backward = [&] {
      if (timing) peak_fb = std::max(peak_fb, memory_stats(cuda).allocated_peak - before.allocated);
    };

    IntervalTimer timer(cuda);
    std::vector<at::Tensor> losses;
    int64_t step_start = 0, peak_alloc = 0, peak_res = 0;
    const int total = opt.warmup + opt.steps;
    std::pair<double, double> ticks0{-1, -1};
    for (int s = 0; s < total; ++s) {
      maybe_die(wi.rank, s);
      timing = s >= opt.warmup;
      if (timing) {
        if (s == opt.warmup) {
          synchronize(cuda);
          engine.time_actions = opt.time_actions;
          ticks0 = cpu_ticks();
        }
        reset_peak_memory(cuda);
        step_start = std::max(step_start, memory_stats(cuda).allocated - before.allocated);
        timer.start();
      }
      if (timing && s == opt.warmup) engine.reset_transient_peak();
      if (opt.trace && s == total - 1) engine.trace_next_step = true;
      at::Tensor loss = engine.step(s);
      if (timing) {
        timer.stop();
        transient_peak = std::max(transient_peak, engine.transient_peak());
        const MemStats ms = memory_stats(cuda);
        peak_alloc = std::max(peak_alloc, ms.allocated_peak - before.allocated);
        peak_res = std::max(peak_res, ms.reserved_peak);
      }
      losses.push_back(loss);
      if (opt.progress && r.root && (!timing || !cuda)) {
        // Warm-up steps (and CPU steps) print as they finish; timed GPU steps print
        // at the end, so that printing forces no synchronisation inside the timing.
        std::fprintf(stderr, "exec: %s step %d/%d loss %.4f\n", timing ? "timed" : "warm-up", s + 1, total,
                     loss.item<double>());
      }
    }
    r.step_seconds = timer.seconds();
    if (const auto t1 = cpu_ticks(); ticks0.second >= 0 && t1.second > ticks0.second)
      r.cpu_steal_fraction = (t1.first - ticks0.first) / (t1.second - ticks0.second);
    for (auto& l : losses) r.losses.push_back(l.item<double>());
    if (opt.time_actions) {
      engine.collect_action_times();
      for (const auto& [op, sec] : engine.action_times().seconds) r.action_seconds.push_back({to_string(op), sec / opt.steps});
    }
    if (opt.trace) {
      // Every rank's spans of the last step to every rank (the same list
      // everywhere). Pipeline stages run different action lists: each rank's
      // spans are padded to the longest list for the all-gather.
      const auto spans = engine.traced_spans();
      std::vector<double> flat;
      for (const auto& [a, b] : spans) flat.push_back(a), flat.push_back(b);
      size_t per = flat.size();
      for (double n : all_gather_doubles(worldc.get(), {double(flat.size())})) per = std::max(per, size_t(n));
      flat.resize(per, -1.0);
      const std::vector<double> all = all_gather_doubles(worldc.get(), flat);
      for (size_t q = 0; per > 0 && q < all.size() / per; ++q) {
        std::vector<std::pair<double, double>> rank_spans;
        for (size_t i = 0; i < per; i += 2)
          if (all[q * per + i + 1] >= 0) rank_spans.push_back({all[q * per + i], all[q * per + i + 1]});
        r.trace_spans.push_back(std::move(rank_spans));
        r.trace_rank_stage.push_back(grid.coord(int(q)).pp);
      }
      for (const auto& stage : engine.program().stages) {
        r.trace_actions.emplace_back();
        for (const auto& a : stage) r.trace_actions.back().push_back(a.to_string());
      }
    }
    if (engine.cpu_adam_seconds() > 0) {
      r.cpu_adam_seconds = engine.cpu_adam_seconds();
      r.cpu_adam_params_per_second = double(engine.cpu_adam_params()) / r.cpu_adam_seconds;
      r.host_copy_gbps = host_copy_gbps();
    }

    mm.step_start_allocated = step_start;
    mm.before_head_allocated = before_head;
    mm.peak_fwd_bwd_allocated = peak_fb;
    mm.peak_step_allocated = peak_alloc;
    mm.peak_step_reserved = cuda ? peak_res : peak_alloc;
    mm.outside_allocator = memory_outside_allocator(cuda);
    mm.device_total = device_total_memory(cuda);
    // ZeRO-2/3 unit buffers (gathered units, unit gradients) are a fixed pool,
    // allocated in the first step: part of the static bytes at a timed step's
    // start, counted as communication buffers with NCCL's own.
    // NCCL's device memory: the growth outside the caching allocator since
    // before the first communicator (NCCL connects peers lazily, at their
    // first operation, so this is read after the timed steps).
    const int64_t comm_bytes = world > 1 ? std::max<int64_t>(0, memory_outside_allocator(cuda) - outside0) : 0;
    mm.comm_buffers = transient_peak + comm_bytes;
    if (before_head > 0) {
      mm.activations = std::max<int64_t>(0, before_head - step_start);
      mm.logits_loss = std::max<int64_t>(0, peak_fb - before_head);
    } else {  // a pipeline stage without the head: no logits
      mm.activations = std::max<int64_t>(0, peak_fb - step_start);
    }
    mm.total = mm.peak_step_reserved + mm.outside_allocator;
    const int64_t known = mm.parameters + mm.gradients + mm.optimizer_states + mm.activations + mm.logits_loss +
                          mm.comm_buffers;
    mm.overhead = std::max<int64_t>(0, mm.total - known);
    if (opt.kernels) {
      // One more step after every figure above was read (the profiler's own
      // work is in none of them): its forward and backward kernels, recorded
      // until the hook after the last backward; the optimizer runs unrecorded.
      synchronize(cuda);
      KernelRecorder rec;
      bool stopped = false;
      engine.after_backward = [&] {
        synchronize(cuda);
        r.kernels = rec.stop();
        stopped = true;
      };
      rec.start();
      engine.step(total);
      synchronize(cuda);
      if (!stopped) r.kernels = rec.stop();
      engine.after_backward = nullptr;
    }
    r.final_loss_scale = engine.loss_scale();
    r.skipped_steps = engine.skipped_steps();
  } catch (const c10::OutOfMemoryError& e) {
    std::string msg = e.what_without_backtrace();
    throw std::runtime_error("CUDA out of memory while running the plan (" + msg.substr(0, msg.find('\n')) +
                             "); the memory model predicts what `planner memory` prints for this plan");
  }

  // Every rank's figures to every rank; the step's time is the slowest rank's.
  {
    std::vector<double> mine = r.step_seconds;
    std::vector<double> sorted = mine;
    std::sort(sorted.begin(), sorted.end());
    mine.push_back(sorted[sorted.size() / 2]);
    for (int64_t c : r.memory.categories()) mine.push_back(double(c));
    mine.push_back(double(r.memory.total));
    mine.push_back(double(r.memory.comm_buffers));
    mine.push_back(double(host_peak_rss_bytes()));
    const size_t k = mine.size();
    const size_t cats = k - 3 - size_t(kMemCategories);  // after the median
    const std::vector<double> all = all_gather_doubles(worldc.get(), mine);
    const int n = int(all.size() / k);
    for (int q = 0; q < n; ++q) {
      const double* x = all.data() + size_t(q) * k;
      for (size_t i = 0; i < r.step_seconds.size(); ++i) r.step_seconds[i] = std::max(r.step_seconds[i], x[i]);
      RankMeasurement rm;
      rm.rank = q;
      for (size_t c = 0; c < rm.categories.size(); ++c) rm.categories[c] = int64_t(x[cats + c]);
      rm.median_s = x[cats - 1];
      rm.peak_bytes = int64_t(x[k - 3]);
      rm.comm_bytes = int64_t(x[k - 2]);
      rm.host_peak_bytes = int64_t(x[k - 1]);
      r.host_peak_bytes = std::max(r.host_peak_bytes, rm.host_peak_bytes);
      r.ranks.push_back(rm);
    }
    if (n > 1) {
      // The reported memory is the fullest rank's (all are alike in data parallelism).
      int64_t worst = 0;
      for (const auto& rm : r.ranks) worst = std::max(worst, rm.peak_bytes);
      if (worst > r.memory.total) r.notes.push_back("rank 0's memory breakdown is shown; the fullest rank peaked at " +
                                                    std::to_string(worst) + " bytes");
    }
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
  r.model_tflops = r.model_flops_per_step / r.median_s / 1e12 / r.world;  // per GPU
  r.hardware_tflops = r.hardware_flops_per_step / r.median_s / 1e12 / r.world;
  const auto& g = plan.cluster.gpu;
  r.peak_flops = st.precision == Precision::FP32 ? g.peak_fp32 : st.precision == Precision::FP16 ? g.peak_fp16
                                                                                                 : g.peak_bf16;
  if (cuda && r.peak_flops > 0) r.mfu = r.model_flops_per_step / r.median_s / (r.peak_flops * r.world);
  // Whether the times compare with the prediction depends on the profile it was
  // made with: the planner's exec report says (planner/cmd_exec.cpp note_devices).
  if (!cuda) r.notes.push_back("ran on the CPU: MFU is not applicable");
  if (r.skipped_steps > 0)
    r.notes.push_back(std::to_string(r.skipped_steps) + " fp16 step(s) skipped for inf/nan gradients (loss scale now " +
                      std::to_string(r.final_loss_scale) + ")");
  return r;
}

}  // namespace planner::rt

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

#include "runtime/comm/communicator.hpp"
#include "runtime/device.hpp"
#include "runtime/engine.hpp"
#include "runtime/measure_detail.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/errors.hpp"

namespace planner::rt {

using detail::LoopMemory;

namespace {

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

// What the set-up makes, read by the loop, the gather and the report.
struct RunSetup {
  bool cuda = false;
  WorldInfo wi;
  at::Device device = at::Device(at::kCPU);
  std::shared_ptr<TokenSource> tokens;
  std::unique_ptr<Communicator> dp, pp, tp, cp, ep, edp, world;  // dp: the dp-cp group (the dp group when cp = 1)
  int64_t outside0 = 0;  // memory outside the allocator before the first communicator
};

bool pick_cuda(const std::string& device) {
  if (device == "auto") return cuda_available();
  if (device == "cuda" || device == "gpu") {
    if (!cuda_available()) throw InputError("--device cuda: no CUDA GPU is visible to this LibTorch build");
    return true;
  }
  if (device == "cpu") return false;
  throw InputError("--device '" + device + "' is not one of auto|cuda|cpu");
}

// The world (one process per rank, started by MPI), this rank's device and its threads.
void setup_world(const RunConfig& cfg, RunSetup& su) {
  const int world = cfg.strategy().world();
  if (world > 1 || launched_by_mpi()) {
    su.wi = init_world();
    if (su.wi.size != world)
      throw InputError("the plan needs " + std::to_string(world) + " ranks (dp*tp*pp) but " +
                       std::to_string(su.wi.size) + " were started; run it with mpirun -np " + std::to_string(world) +
                       " or let planner exec start them");
  }
  if (su.wi.local_size > 1 && !std::getenv("OMP_NUM_THREADS")) {
    // Several ranks on one node share its cores: each takes its part for
    // LibTorch's intra-op threads (the CPU AdamW of offload runs on them).
    // Measured on two H200 ranks with 32 threads each on 32 cores: host memcpy
    // 11 GB/s and CPU AdamW 4.1e8 parameters/s, against 103 GB/s and 3.0e9 for
    // one rank (validation/archive/h200x2/run4).
    if (const int t = threads_per_rank(su.wi.local_size); t > 0) at::set_num_threads(t);
  }
  if (cfg.options.kernels && !su.cuda)
    throw InputError("--kernels records GPU kernels, but this run is on the CPU (no GPU, or --device cpu)");
  if (su.cuda) {
    const int n = cuda_device_count();
    if (su.wi.local_size > n)
      throw InputError(std::to_string(su.wi.local_size) + " ranks on this node but only " + std::to_string(n) +
                       " GPU(s)");
    set_cuda_device(su.wi.local_rank);
  }
}

// The machine, and a note when the plan names another GPU than this one.
void setup_device(const RunConfig& cfg, RunSetup& su, Measurement& r) {
  if (!su.cuda) enable_cpu_memory_counting();
  su.device = su.cuda ? at::Device(at::kCUDA, int8_t(su.wi.local_rank)) : at::Device(at::kCPU);
  if (su.cuda) {
    // Initialise the CUDA context and the caching allocator before reading them.
    at::zeros({1}, at::TensorOptions().device(su.device));
    synchronize(true);
    // TF32 for fp32 matmuls (the fp32 plans then run at the tf32 tensor-core rate).
    at::globalContext().setFloat32MatmulPrecision("high");
  }
  r.machine = machine_info(su.cuda);
  r.device = r.machine.device;
  const GpuSpec& gpu = cfg.plan.cluster.gpu;
  if (su.cuda && !gpu.name.empty() && !r.machine.gpu_name.empty()) {
    std::string a = gpu.name, b = r.machine.gpu_name;
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    const std::string head = a.substr(0, a.find('-'));
    if (b.find(head) == std::string::npos) {
      const std::string note = "the plan is for " + gpu.name + " but this GPU is " + r.machine.gpu_name +
                               "; MFU uses the plan's peak";
      r.notes.push_back(note);
      if (r.root && cfg.options.progress) std::fprintf(stderr, "exec: warning: %s\n", note.c_str());  // before anything runs
    }
  }
}

// Communicators from the rank grid; the device memory NCCL takes is measured
// as the growth of memory outside the caching allocator across their set-up
// and a first collective. The pipeline's send/receive links are made by the
// Engine (runtime/comm/pipe_links.hpp).
void setup_comms(const RunConfig& cfg, RunSetup& su) {
  const Strategy& st = cfg.strategy();
  const int world = st.world();
  if (world <= 1) return;
  su.outside0 = memory_outside_allocator(su.cuda);
  const RankGrid grid(st.dp, st.pp, st.tp, st.cp);
  const auto timeout = std::chrono::seconds(cfg.options.comm_timeout_seconds);
  std::vector<int> all(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) all[size_t(i)] = i;
  su.world = make_communicator(std::vector<std::vector<int>>{all}, "world", at::Device(at::kCPU), timeout);
  // The gradients' group: dp-cp (the dp group when cp = 1).
  if (st.dp_cp() > 1) su.dp = make_communicator(grid.all_dp_cp_groups(), "dp", su.device, timeout);
  if (st.cp > 1) su.cp = make_communicator(grid.all_cp_groups(), "cp", su.device, timeout);
  if (st.pp > 1) su.pp = make_communicator(grid.all_pp_groups(), "pp", su.device, timeout);
  if (st.tp > 1) su.tp = make_communicator(grid.all_tp_groups(), "tp", su.device, timeout);
  // Mixture of experts: the all-to-all's group and the experts' gradient group.
  if (st.ep > 1) su.ep = make_communicator(grid.all_ep_groups(st.ep), "ep", su.device, timeout);
  if (st.ep > 1 && st.dp / st.ep > 1)
    su.edp = make_communicator(grid.all_expert_dp_groups(st.ep), "edp", su.device, timeout);
}

// Set-up: device, world, token source (a bad token file is bad input, found
// before any work), machine, communicators.
RunSetup setup_run(const RunConfig& cfg, Measurement& r) {
  const Strategy& st = cfg.strategy();
  const RunOptions& opt = cfg.options;
  RunSetup su;
  su.cuda = pick_cuda(opt.device);
  setup_world(cfg, su);
  r.world = st.world();
  r.root = su.wi.rank == 0;
  r.precision = to_string(st.precision);
  r.steps = opt.steps;
  r.warmup = opt.warmup;
  r.samples_per_step = st.global_batch();
  r.tokens_per_step = r.samples_per_step * cfg.seq();
  if (!opt.tokens_path.empty())
    su.tokens = std::make_shared<FileTokens>(opt.tokens_path, parse_token_dtype(opt.tokens_dtype), cfg.model().vocab,
                                             cfg.seq(), opt.seed);
  else
    su.tokens = std::make_shared<SyntheticTokens>(cfg.model().vocab, opt.seed);
  r.data = su.tokens->describe();
  setup_device(cfg, su, r);
  setup_comms(cfg, su);
  return su;
}

// The warm-up and timed steps; the step times and the losses into r.
LoopMemory run_loop(const RunConfig& cfg, const RunSetup& su, Engine& engine, int64_t before, Measurement& r) {
  const RunOptions& opt = cfg.options;
  const bool cuda = su.cuda;
  LoopMemory lm;
  // Hooks that read the allocator inside the step (host-side bookkeeping, no sync).
  bool timing = false;
  // PLANNER_ALLOC_TRACE=FILE (runtime/README.md): rank 0 (or
  // PLANNER_ALLOC_TRACE_RANK) records the allocator's events over the warm-up
  // and timed steps, marked at each step's start (tag 0), the head (1) and
  // the end of the backward (2).
  const char* alloc_trace = std::getenv("PLANNER_ALLOC_TRACE");
  int trace_rank = 0;
  if (alloc_trace && *alloc_trace)
    trace_rank = int(env_integer("PLANNER_ALLOC_TRACE_RANK", 0, su.wi.size - 1,
                                 "a rank of this run (0 to " + std::to_string(su.wi.size - 1) + ")")
                         .value_or(0));
  const bool tracing = alloc_trace && *alloc_trace && su.wi.rank == trace_rank && cuda;
  std::ofstream trace_out;  // opened before the steps, so a bad path stops nothing half-done
  if (tracing && !(trace_out.open(alloc_trace), trace_out))
    throw InputError(std::string("PLANNER_ALLOC_TRACE: cannot write '") + alloc_trace + "'");
  if (tracing && !alloc_trace_start(cuda))
    std::fprintf(stderr, "exec: PLANNER_ALLOC_TRACE: this LibTorch's allocator does not record; nothing written\n");
  engine.before_head = [&] {
    if (tracing) alloc_trace_mark(cuda, 1);
    if (timing) lm.before_head = std::max(lm.before_head, memory_stats(cuda).allocated - before);
  };
  engine.after_backward = [&] {
    if (tracing) alloc_trace_mark(cuda, 2);
    if (timing) lm.peak_fwd_bwd = std::max(lm.peak_fwd_bwd, memory_stats(cuda).allocated_peak - before);
  };
  IntervalTimer timer(cuda);
  std::vector<at::Tensor> losses;
  const int total = opt.warmup + opt.steps;
  std::pair<double, double> ticks0{-1, -1};
  for (int s = 0; s < total; ++s) {
    maybe_die(su.wi.rank, s);
    timing = s >= opt.warmup;
    if (timing) {
      if (s == opt.warmup) {
        synchronize(cuda);
        engine.time_actions = opt.time_actions;
        ticks0 = cpu_ticks();
      }
      reset_peak_memory(cuda);
      lm.step_start = std::max(lm.step_start, memory_stats(cuda).allocated - before);
      timer.start();
    }
    if (timing && s == opt.warmup) engine.reset_transient_peak();
    if (opt.trace && s == total - 1) engine.trace_next_step = true;
    if (tracing) alloc_trace_mark(cuda, 0);
    at::Tensor loss = engine.step(s);
    if (timing) {
      timer.stop();
      lm.transient_peak = std::max(lm.transient_peak, engine.transient_peak());
      const MemStats ms = memory_stats(cuda);
      lm.peak_alloc = std::max(lm.peak_alloc, ms.allocated_peak - before);
      lm.peak_res = std::max(lm.peak_res, ms.reserved_peak);
    }
    losses.push_back(loss);
    if (opt.progress && r.root && (!timing || !cuda)) {
      // Warm-up steps (and CPU steps) print as they finish; timed GPU steps print
      // at the end, so that printing forces no synchronisation inside the timing.
      std::fprintf(stderr, "exec: %s step %d/%d loss %.4f\n", timing ? "timed" : "warm-up", s + 1, total,
                   loss.item<double>());
    }
  }
  engine.before_head = nullptr;
  engine.after_backward = nullptr;
  if (tracing) alloc_trace_write(cuda, trace_out);
  r.step_seconds = timer.seconds();
  if (const auto t1 = cpu_ticks(); ticks0.second >= 0 && t1.second > ticks0.second)
    r.cpu_steal_fraction = (t1.first - ticks0.first) / (t1.second - ticks0.second);
  for (auto& l : losses) r.losses.push_back(l.item<double>());
  return lm;
}

// One JSON object a line: name, start (seconds after the first event),
// duration, host (an ATen op on the host) or not (a GPU activity).
void write_kernel_events(std::ofstream& out, const std::vector<KernelEvent>& events) {
  const double t0 = events.empty() ? 0.0 : events.front().start_seconds;
  for (const auto& e : events) {
    std::string name;
    for (char c : e.name) name += c == '"' || c == '\\' ? ' ' : c;
    char line[96];
    std::snprintf(line, sizeof line, "\",\"start\":%.9f,\"dur\":%.9f,\"host\":%d}\n", e.start_seconds - t0, e.seconds,
                  int(e.host));
    out << "{\"name\":\"" << name << line;
  }
}

// --kernels: one more step after every figure was read (the profiler's own
// work is in none of them): its forward and backward kernels, recorded until
// the hook after the last backward; the optimizer runs unrecorded.
void record_kernels(const RunConfig& cfg, bool cuda, int rank, Engine& engine, Measurement& r) {
  synchronize(cuda);
  KernelRecorder rec;
  bool stopped = false;
  // PLANNER_KERNEL_EVENTS=FILE (a diagnosis aid, docs/RUNTIME.md): rank 0
  // also writes every event of the step, the host's ATen ops included.
  const char* dump = std::getenv("PLANNER_KERNEL_EVENTS");
  const bool write_events = dump && *dump && rank == 0;
  std::ofstream out;  // opened before the step, so a bad path stops nothing half-done
  if (write_events && !(out.open(dump), out))
    throw InputError(std::string("PLANNER_KERNEL_EVENTS: cannot write '") + dump + "'");
  engine.after_backward = [&] {
    synchronize(cuda);
    if (write_events) {
      const std::vector<KernelEvent> events = rec.stop_events(true);
      write_kernel_events(out, events);
      std::vector<KernelEvent> gpu;
      for (const auto& e : events)
        if (!e.host) gpu.push_back(e);
      r.kernels = summarize_kernels(gpu);
    } else {
      r.kernels = rec.stop();
    }
    stopped = true;
  };
  rec.start();
  engine.step(cfg.options.warmup + cfg.options.steps);
  synchronize(cuda);
  if (!stopped) r.kernels = rec.stop();
  engine.after_backward = nullptr;
}

// Builds the Engine, runs the loop and reads this rank's figures off it.
void measure_steps(const RunConfig& cfg, const RunSetup& su, Measurement& r) {
  const bool cuda = su.cuda;
  const auto t0 = std::chrono::steady_clock::now();
  reset_peak_memory(cuda);
  const MemStats before = memory_stats(cuda);
  Engine engine(cfg, su.device, su.tokens, su.dp.get(), su.pp.get(), su.tp.get(), su.cp.get(), su.ep.get(),
                su.edp.get());
  synchronize(cuda);
  empty_cache(cuda);  // the initialisation's temporaries are not part of the step's memory
  r.init_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The model's parameters (a rank holds its tp part of them).
  r.params = cfg.strategy().tp > 1 ? cfg.model().total_params() : engine.model().store().numel();
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

  const LoopMemory lm = run_loop(cfg, su, engine, before.allocated, r);
  if (cfg.options.time_actions) {
    engine.collect_action_times();
    for (const auto& [op, sec] : engine.action_times().seconds)
      r.action_seconds.push_back({to_string(op), sec / cfg.options.steps});
  }
  if (cfg.options.trace) detail::gather_trace(cfg, su.world.get(), engine, r);
  detail::gather_moe_routing(cfg, su.world.get(), engine, r);
  if (engine.cpu_adam_seconds() > 0) {
    r.cpu_adam_seconds = engine.cpu_adam_seconds();
    r.cpu_adam_params_per_second = double(engine.cpu_adam_params()) / r.cpu_adam_seconds;
    r.host_copy_gbps = host_copy_gbps();
  }
  detail::memory_categories(cuda, su.outside0, lm, r);
  if (cfg.options.kernels) record_kernels(cfg, cuda, su.world ? su.world->rank() : 0, engine, r);
  r.final_loss_scale = engine.loss_scale();
  r.skipped_steps = engine.skipped_steps();
}

}  // namespace

Measurement run_training(const RunConfig& cfg) {
  check_run_options(cfg.options);
  if (cfg.seq() <= 0) throw InputError("plan: seq must be positive");
  Measurement r;
  const RunSetup su = setup_run(cfg, r);
  try {
    measure_steps(cfg, su, r);
  } catch (const c10::OutOfMemoryError& e) {
    std::string msg = e.what_without_backtrace();
    throw std::runtime_error("CUDA out of memory while running the plan (" + msg.substr(0, msg.find('\n')) +
                             "); the memory model predicts what `planner memory` prints for this plan");
  }
  detail::gather_ranks(su.world.get(), r);
  detail::report(cfg, su.cuda, r);
  return r;
}

}  // namespace planner::rt

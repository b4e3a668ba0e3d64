// planner calibrate: host<->device copies, host memcpy, the CPU AdamW of the
// offload path, and the Communicator's collectives (calibration/measure.hpp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <future>
#include <thread>
#include <string>
#include <vector>

#include "costmodel/simulator.hpp"
#include "calibration/measure_detail.hpp"
#include "runtime/comm/pipe_links.hpp"
#include "runtime/device.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/buffers/streams.hpp"

namespace planner::rt::calib {

namespace {

using nlohmann::json;

std::string gbps(double bytes, double s) { return fmt_num(bytes / s / 1e9) + " GB/s"; }

}  // namespace

json measure_host_copies(const Ctx& c) {
  json out = json::array();
  const int64_t bytes = c.quick ? (int64_t(16) << 20) : (int64_t(256) << 20);
  at::Tensor dev = at::empty({bytes}, at::TensorOptions().device(c.device).dtype(at::kByte));
  at::Tensor pinned = pinned_empty(bytes, at::kByte, true);
  at::Tensor pageable = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  pageable.fill_(1), pinned.fill_(1), dev.fill_(1);
  struct Case {
    const char* direction;
    bool pinned;
  };
  for (const Case k : {Case{"h2d", true}, Case{"d2h", true}, Case{"h2d", false}, Case{"d2h", false}}) {
    at::Tensor host = k.pinned ? pinned : pageable;
    const bool h2d = std::string(k.direction) == "h2d";
    // Pinned copies are asynchronous on the current stream, as the runtime's
    // copy stream issues them; pageable ones are staged by the driver.
    const double s = time_per_call(c, [&] {
      if (h2d) dev.copy_(host, /*non_blocking=*/k.pinned);
      else host.copy_(dev, /*non_blocking=*/k.pinned);
    });
    say(c, std::string("copy ") + k.direction + (k.pinned ? " pinned: " : " pageable: ") + gbps(double(bytes), s));
    out.push_back({{"direction", k.direction}, {"pinned", k.pinned}, {"bytes", bytes}, {"seconds", s}});
  }
  synchronize(true);
  return out;
}

json measure_host_memcpy(const Ctx& c) {
  const int64_t n = c.quick ? (int64_t(1) << 22) : (int64_t(1) << 28);  // floats: 16 MiB or 1 GiB
  at::Tensor a = at::ones({n}, at::kFloat), b = at::empty({n}, at::kFloat);
  Ctx host = c;
  host.cuda = false;
  const double s = time_per_call(host, [&] { b.copy_(a); });
  const double bytes = 2.0 * double(n) * 4.0;  // read + write
  say(c, "host memcpy (read + write): " + gbps(bytes, s) + " with " + std::to_string(at::get_num_threads()) + " threads");
  return {{"bytes", bytes}, {"seconds", s}, {"threads", at::get_num_threads()}};
}

namespace {

// The CPU AdamW as Engine::opt runs it under offload (runtime/engine.cpp), by
// the Engine's own adam_range (runtime/optim/adamw.hpp) on buffers allocated as
// the Engine allocates them: fp32 master and moments and the 16-bit gradient
// and parameter copies pinned (the fp32 work chunk, pageable, is used only by
// PLANNER_HOST_ADAM=libtorch); units of 2^25
// parameters (a layer of a 1-3B model) updated on a worker thread while this
// thread waits for each and copies its 16-bit parameters to the device on a
// side stream (Engine::to_device). Each step's time is the worker's, from its
// first unit to its last, as the runtime reports it (Engine::cpu_adam_seconds);
// the median of 5 steps. `before_step` runs before each timed step: under
// mpirun, a barrier, so that the ranks' steps overlap as an offload run's do
// (their buffers allocated and warmed up before any is timed).
// Timed steps of measure_cpu_adam_offload (each after `before_step`).
int offload_steps(const Ctx& c) { return c.quick ? 1 : 5; }

json measure_cpu_adam_offload(const Ctx& c, const std::function<void()>& before_step = {}) {
  const int64_t unit = c.quick ? (int64_t(1) << 20) : (int64_t(1) << 25);
  const int64_t units = c.quick ? 2 : 8, n = unit * units;  // 268M parameters: 4 GiB pinned
  auto host_zeros = [&](int64_t k, at::ScalarType t) { return pinned_empty(k, t, true).zero_(); };
  at::Tensor master = host_zeros(n, at::kFloat), m = host_zeros(n, at::kFloat), v = host_zeros(n, at::kFloat);
  at::Tensor grad16 = host_zeros(n, at::kBFloat16), param16 = host_zeros(n, at::kBFloat16);
  at::Tensor work = at::empty({std::min(n, kOptChunk)}, at::TensorOptions().dtype(at::kFloat));
  master.normal_(), grad16.normal_();
  at::Tensor dev = at::empty({n}, at::TensorOptions().device(c.device).dtype(at::kBFloat16));
  at::Tensor step = at::ones({}, at::kFloat), divisor = at::ones({}, at::kFloat);
  const AdamHyper h;
  SideStream copy(true);
  auto one_step = [&] {
    std::vector<std::promise<void>> done(static_cast<size_t>(units));
    std::vector<std::future<void>> ready;
    for (auto& d : done) ready.push_back(d.get_future());
    double worker_seconds = 0;
    std::thread worker([&] {
      at::NoGradGuard ng;
      const auto t0 = std::chrono::steady_clock::now();
      int64_t u = 0;
      try {
        for (; u < units; ++u) {
          const int64_t o = u * unit;
          adam_range(master.narrow(0, o, unit), m.narrow(0, o, unit), v.narrow(0, o, unit), grad16.narrow(0, o, unit),
                     work, unit, h, step, divisor, param16.narrow(0, o, unit));
          done[size_t(u)].set_value();
        }
      } catch (...) {  // the waiting thread rethrows it
        for (; u < units; ++u) done[size_t(u)].set_exception(std::current_exception());
      }
      worker_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    try {
      for (int64_t u = 0; u < units; ++u) {
        ready[size_t(u)].get();
        copy.run([&] { dev.narrow(0, u * unit, unit).copy_(param16.narrow(0, u * unit, unit), /*non_blocking=*/true); });
      }
    } catch (...) {
      worker.join();
      throw;
    }
    worker.join();
    copy.host_wait();
    return worker_seconds;
  };
  at::NoGradGuard ng;
  (void)one_step();  // warm-up: the worker's thread pool, the pages
  std::vector<double> t;
  for (int i = 0; i < offload_steps(c); ++i) {
    if (before_step) before_step();
    t.push_back(one_step());
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  say(c, "CPU AdamW as the offload step runs it (Engine's adam_range on its worker thread, pinned buffers, copies "
         "to the device, median of " +
             std::to_string(t.size()) + "): " + fmt_num(double(n) / med) + " parameters/s (fastest " +
             fmt_num(double(n) / t.front()) + ", slowest " + fmt_num(double(n) / t.back()) + ")");
  return {{"params", n}, {"seconds", med}, {"seconds_all", t}, {"threads", at::get_num_threads()}};
}

}  // namespace

namespace {

// The CPU AdamW on one buffer on the calling thread (no device), best of 5:
// the Engine's adam_range (runtime/optim/adamw.hpp) over fp32 master and moments
// and a 16-bit gradient, writing the updated parameters back in 16 bits, as
// the offload step does, with ordinary (pageable) buffers.
json cpu_adam_plain(const Ctx& c) {
  const int64_t n = c.quick ? (int64_t(1) << 20) : (int64_t(1) << 26);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor master = at::randn({n}, f32), m = at::zeros({n}, f32), v = at::zeros({n}, f32);
  at::Tensor grad16 = at::randn({n}, f32).to(at::kBFloat16), param16 = at::empty({n}, f32.dtype(at::kBFloat16));
  at::Tensor work = at::empty({std::min(n, kOptChunk)}, f32);
  at::Tensor step = at::ones({}, f32), divisor = at::ones({}, f32);
  const AdamHyper h;
  Ctx host = c;
  host.cuda = false;
  at::NoGradGuard ng;
  const double s = time_per_call(host, [&] { adam_range(master, m, v, grad16, work, n, h, step, divisor, param16); },
                                 c.quick ? 0.005 : 0.2);
  return {{"params", n}, {"seconds", s}, {"threads", at::get_num_threads()}};
}

}  // namespace

json measure_cpu_adam(const Ctx& c) {
  json out = cpu_adam_plain(c);
  say(c, "CPU AdamW (one buffer, main thread, best of 5): " +
             fmt_num(out["params"].get<double>() / out["seconds"].get<double>()) + " parameters/s with " +
             std::to_string(at::get_num_threads()) + " threads");
  if (c.cuda) out["as_offload_runs_it"] = measure_cpu_adam_offload(c);
  return out;
}

json measure_cpu_adam_node(const Ctx& c, Communicator& world, int local_size) {
  // Each rank takes its share of the node's cores, as planner exec gives it
  // (runtime/measure.cpp), and all run at once.
  const int before = at::get_num_threads();
  const int share = threads_per_rank(local_size), threads = share > 0 ? share : before;
  at::set_num_threads(threads);
  Ctx quiet = c;
  quiet.progress = false;
  world.barrier();
  double rate = -1;  // a rank that fails still joins the barriers and the gather below
  const int steps = offload_steps(c);  // each after a barrier
  int barriers = 0;
  try {
    const json one =
        c.cuda ? measure_cpu_adam_offload(quiet, [&] { world.barrier(), ++barriers; }) : cpu_adam_plain(quiet);
    rate = one["params"].get<double>() / one["seconds"].get<double>();
  } catch (const std::exception& e) {
    say(c, std::string("CPU AdamW on every rank at once: failed on rank 0: ") + e.what());
    if (c.cuda)
      for (; barriers < steps; ++barriers) world.barrier();
  }
  at::set_num_threads(before);
  at::Tensor in = at::tensor(std::vector<double>{rate}, at::TensorOptions().dtype(at::kDouble));
  at::Tensor all = at::empty({int64_t(world.size())}, in.options());
  world.all_gather(in, all)->wait();
  std::vector<double> rates(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  double sum = 0;
  for (double r : rates) {
    if (!(r > 0)) return json();  // some rank failed: not measured
    sum += r;
  }
  const double per_process = sum / double(rates.size());
  json out = {{"processes_per_node", local_size},
              {"threads", threads},
              {"how", c.cuda ? "as the offload step runs it (pinned buffers, a worker thread, copies to the device)"
                             : "one buffer on the main thread"},
              {"per_process_params_per_second", rates},
              {"node_params_per_second", per_process * local_size}};
  say(c, "CPU AdamW on every rank at once (" + std::to_string(local_size) + " per node, " + std::to_string(threads) +
             " threads each): " + fmt_num(per_process) + " parameters/s per process, " +
             fmt_num(per_process * local_size) + " per node");
  return out;
}

namespace {

// Compute beside NCCL (every rank of `comm` at once, GPU): a loop of GEMMs
// (16384 x 8192 x 2048 bf16, a transformer MLP's) each followed by a copy,
// timed alone (CUDA events on the compute stream, the faster of two), then
// with `calls` collectives of 64 MiB queued on the communicator's stream just
// before it; and the collectives alone. Both sides slow down:
//  - the collectives, measured from the compute's start to their end (an event
//    on a side stream that waits for them): while the compute runs they
//    progress at 1/comm_slowdown of their own rate, after it at their own
//    (comm_slowdown_beside_compute, the inverse of the simulator's rule);
//  - the compute, for the time the two overlap:
//    slowdown = 1 + (with - alone) / min(alone, collectives' time beside it).
// On the CPU (MPI) the collectives' time beside the compute is not measured.
json measure_contention(const Ctx& c, Communicator& comm) {
  // The CPU (MPI, quick sizes in CI) runs the same code on fp32, small.
  const auto opt = at::TensorOptions().device(c.device).dtype(c.cuda ? at::kBFloat16 : at::kFloat);
  const int64_t T = c.quick ? 256 : 16384, h = c.quick ? 64 : 2048;
  at::Tensor x = at::randn({T, h}, opt), w = at::randn({4 * h, h}, opt), y = at::empty({T, 4 * h}, opt);
  at::Tensor src = at::randn({T * h}, opt), dst = at::empty_like(src);
  const int loops = c.quick ? 4 : 40;  // about 35 ms on an H100; the same on every rank
  auto compute = [&] {
    for (int i = 0; i < loops; ++i) {
      at::mm_out(y, x, w.t());
      dst.copy_(src);
    }
  };
  // The compute loop's time (the faster of two), with the collectives that
  // `before` queues running beside it; they are waited for after each.
  // Returns the compute's time and (GPU, with collectives) the collectives'
  // end after the compute's start, of the faster of the two runs.
  std::optional<SideStream> side;
  if (c.cuda) side.emplace(true);
  auto timed = [&](const std::function<std::vector<WorkPtr>()>& before) {
    std::pair<double, double> best{1e30, -1};
    for (int r = 0; r < 2; ++r) {
      comm.barrier();
      IntervalTimer t(c.cuda), tc(c.cuda);
      std::vector<WorkPtr> works;
      if (before) works = before();
      t.start();
      const bool comm_end = c.cuda && !works.empty();
      if (comm_end) {
        tc.start();
        // The side stream waits for the two starts only, then for the collectives.
        side->run([&] {
          for (auto& wk : works) wk->wait();
          tc.stop();
        });
      }
      compute();
      t.stop();
      const double s = t.seconds().at(0);
      if (s < best.first) best = {s, comm_end ? tc.seconds().at(0) : -1.0};
      for (auto& wk : works) wk->wait();
      synchronize(c.cuda);
    }
    return best;
  };
  compute();
  synchronize(c.cuda);
  const int g = comm.size();
  const int64_t bytes = c.quick ? int64_t(64) << 10 : int64_t(64) << 20;
  const int64_t n = bytes / 4;  // floats
  const auto fopt = at::TensorOptions().device(c.device).dtype(at::kFloat);
  // NCCL runs a communicator's collectives one after another on its stream:
  // one buffer serves them all. MPI may run its non-blocking ones at once:
  // each gets its own (small, quick sizes).
  std::vector<at::Tensor> fulls, parts;
  int next = 0;
  auto buffers = [&](int i) {
    const size_t k = c.cuda ? 0 : size_t(i);
    while (fulls.size() <= k) fulls.push_back(at::ones({n}, fopt)), parts.push_back(at::ones({n / g}, fopt));
    return std::pair<at::Tensor, at::Tensor>{fulls[k], parts[k]};
  };
  json ops = json::array();
  for (const char* op : {"all_reduce", "all_gather"}) {
    const std::string o = op;
    auto one = [&]() -> WorkPtr {
      auto [full, part] = buffers(next++);
      return o == "all_reduce" ? comm.all_reduce(full) : comm.all_gather(part, full);
    };
    next = 0;
    one()->wait();
    synchronize(c.cuda);
    // The collectives alone: as many as take about as long as the compute.
    const double alone = timed(nullptr).first;
    comm.barrier();
    const auto c0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) next = 0, one()->wait();
    synchronize(c.cuda);
    const double per_call = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() / 10;
    // Every rank must queue the same number: from the slowest rank's figures.
    at::Tensor mine = at::tensor(std::vector<double>{per_call, alone}, at::TensorOptions().dtype(at::kDouble))
                          .to(c.device);
    at::Tensor all = at::empty({2 * g}, mine.options());
    comm.all_gather(mine, all)->wait();
    synchronize(c.cuda);
    const at::Tensor worst = all.view({g, 2}).amax(0).cpu();
    const int calls = int(std::clamp(worst[1].item<double>() / std::max(worst[0].item<double>(), 1e-6), 4.0, 400.0));
    comm.barrier();
    const auto q0 = std::chrono::steady_clock::now();
    next = 0;
    std::vector<WorkPtr> works;
    for (int i = 0; i < calls; ++i) works.push_back(one());
    for (auto& wk : works) wk->wait();
    synchronize(c.cuda);
    const double comm_alone = std::chrono::duration<double>(std::chrono::steady_clock::now() - q0).count();
    const auto [with, comm_with] = timed([&] {
      next = 0;
      std::vector<WorkPtr> beside;
      for (int i = 0; i < calls; ++i) beside.push_back(one());
      return beside;
    });
    const double comm_slow = comm_with > 0 ? comm_slowdown_from(with, comm_alone, comm_with) : 1.0;
    const double overlap = std::min(alone, comm_with > 0 ? std::min(comm_with, comm_alone * comm_slow) : comm_alone);
    const double slowdown = 1 + std::max(0.0, with - alone) / std::max(overlap, 1e-9);
    say(c, "compute beside " + o + " (" + std::to_string(calls) + " x " + fmt_num(double(bytes) / 1048576.0) +
               " MiB over " + std::to_string(g) + " ranks): " + fmt_num(alone * 1e3) + " ms alone, " +
               fmt_num(with * 1e3) + " ms beside " + fmt_num(comm_alone * 1e3) + " ms of collectives: slowdown " +
               fmt_num(slowdown, 4) +
               (comm_with > 0 ? "; the collectives beside it end after " + fmt_num(comm_with * 1e3) +
                                    " ms: their slowdown " + fmt_num(comm_slow, 4)
                              : std::string()));
    json point = {{"op", o}, {"bytes", bytes}, {"calls", calls}, {"group_size", g},
                  {"compute_alone_seconds", alone}, {"compute_beside_seconds", with},
                  {"collectives_alone_seconds", comm_alone}, {"slowdown", slowdown}};
    if (comm_with > 0) point["collectives_beside_seconds"] = comm_with, point["comm_slowdown"] = comm_slow;
    ops.push_back(point);
  }
  return ops;
}

// Tensor-parallel collectives as the runtime issues them (runtime/model/tensor_parallel.cpp): a
// GEMM writes an activation, the collective runs on it through the
// Communicator (the compute stream waits for it), the next GEMM follows; `n`
// of them back to back on every rank at once. Against the same chain without
// the collectives and the collectives alone back to back, the time each one
// adds beyond its own transfer when it sits between GEMMs (the NCCL kernel
// starting after the GEMM's end on every rank, the skew between the ranks).
json measure_tp_chain(const Ctx& c, Communicator& comm) {
  const auto opt = at::TensorOptions().device(c.device).dtype(c.cuda ? at::kBFloat16 : at::kFloat);
  const int g = comm.size();
  const int64_t h = c.quick ? 32 : 2048;
  const int n = c.quick ? 4 : 30;
  at::Tensor w = at::randn({h, h}, opt).div_(std::sqrt(double(h)));
  json points = json::array();
  for (int64_t T : c.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{2048, 8192}) {
    at::Tensor x = at::randn({T, h}, opt), y = at::empty({T, h}, opt);
    at::Tensor part = at::empty({T / g, h}, opt), full = at::empty({T, h}, opt);
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      const std::string o = op;
      // The collective on the GEMM's output: all-reduce in place; all-gather
      // of this rank's rows into the full activation; reduce-scatter of it.
      auto coll = [&] {
        if (o == "all_reduce") comm.all_reduce(y)->wait();
        else if (o == "all_gather") comm.all_gather(y.narrow(0, 0, T / g), full)->wait();
        else comm.reduce_scatter(y, part)->wait();
      };
      // The fastest of three, each after a barrier (not time_fixed's back-to-back
      // batches): the ranks start every chain together, so its first
      // collective does not absorb the skew the GEMM-only batches leave.
      auto best_of = [&](const std::function<void()>& body) {
        double best = 1e30;
        for (int r = 0; r < 3; ++r) {
          comm.barrier();
          IntervalTimer t(c.cuda);
          t.start();
          body();
          t.stop();
          best = std::min(best, t.seconds().at(0));
          synchronize(c.cuda);
        }
        return best;
      };
      coll();  // the algorithm's first use sets up its buffers
      synchronize(c.cuda);
      const double chain = best_of([&] {
        for (int i = 0; i < n; ++i) {
          at::mm_out(y, x, w);
          coll();
        }
      });
      const double gemms = best_of([&] {
        for (int i = 0; i < n; ++i) at::mm_out(y, x, w);
      });
      const double alone = best_of([&] {
        for (int i = 0; i < n; ++i) coll();
      });
      const double extra = (chain - gemms - alone) / n;
      const int64_t bytes = T * h * int64_t(x.element_size());  // the full activation
      say(c, "tensor-parallel " + o + " between GEMMs (" + fmt_num(double(bytes) / 1048576.0) + " MiB over " +
                 std::to_string(g) + " ranks): " + fmt_num(chain / n * 1e6) + " us a GEMM and its collective, " +
                 fmt_num(gemms / n * 1e6) + " + " + fmt_num(alone / n * 1e6) + " us apart: " + fmt_num(extra * 1e6) +
                 " us more each");
      points.push_back({{"op", o}, {"bytes", bytes}, {"group_size", g}, {"calls", n}, {"chain_seconds", chain},
                        {"gemms_seconds", gemms}, {"collectives_seconds", alone}, {"extra_seconds", extra}});
    }
  }
  return points;
}

}  // namespace

void measure_collectives(const Ctx& c, Communicator& world, json& out) {
  const int W = c.world;
  const auto timeout = std::chrono::seconds(120);
  const std::vector<int64_t> sizes = c.quick ? std::vector<int64_t>{4096, 65536, 1 << 20}
                                             : std::vector<int64_t>{4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
  std::vector<int> group_sizes;
  for (int g = 2; g <= W; g *= 2) group_sizes.push_back(g);
  if (group_sizes.empty() || group_sizes.back() != W) group_sizes.push_back(W);
  json points = json::array();
  std::vector<double> mine;  // this rank's seconds, one per point, in the same order on every rank
  int64_t nccl_bytes = -1, p2p_bytes = -1;
  json contention;  // rank 0's measure_contention, or {failed}
  json tp_chain;    // rank 0's measure_tp_chain, or {failed}
  for (int g : group_sizes) {
    if (W % g) continue;  // every rank must be in exactly one group
    std::vector<std::vector<int>> groups;
    for (int s = 0; s < W; s += g) {
      std::vector<int> members;
      for (int r = s; r < s + g; ++r) members.push_back(r);
      groups.push_back(members);
    }
    const int64_t outside0 = memory_outside_allocator(c.cuda);
    auto comm = make_communicator(groups, "calibrate" + std::to_string(g), c.device, timeout);
    const bool first = nccl_bytes < 0 && c.cuda;
    const std::string backend = comm->backend() == Backend::Nccl ? "nccl" : "mpi";
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv"}) {
      const std::string o = op;
      // NCCL's device memory of a communicator, as the runtime's collective
      // communicators use it: the growth outside the caching allocator once
      // every collective has run (NCCL sets up each algorithm's buffers at its
      // first use: after the first all-reduce alone, 772 MiB of the 990 MiB a
      // dp=2 run holds on an H200). Send/recv add their own buffers (pipeline
      // links), measured apart.
      if (first && o == "send_recv") {
        synchronize(c.cuda);
        nccl_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - outside0);
      }
      if (o == "send_recv" && g != 2) continue;  // pairs only
      for (int64_t S : sizes) {
        const int64_t n = S / 4;  // floats
        const auto fopt = at::TensorOptions().device(c.device).dtype(at::kFloat);
        at::Tensor full = at::ones({n}, fopt), part = at::ones({n / g}, fopt);
        std::function<void()> fn;
        if (o == "all_reduce") fn = [&] { comm->all_reduce(full)->wait(); };
        else if (o == "reduce_scatter") fn = [&] { comm->reduce_scatter(full, part)->wait(); };
        else if (o == "all_gather") fn = [&] { comm->all_gather(part, full)->wait(); };
        else if (o == "broadcast") fn = [&] { comm->broadcast(full, 0)->wait(); };
        else fn = [&] { (comm->rank() == 0 ? comm->send(full, 1) : comm->recv(full, 0))->wait(); };
        // The same number of calls on every rank (no per-rank sizing).
        const int calls = S <= (1 << 20) ? 20 : S <= (16 << 20) ? 10 : 3;
        mine.push_back(time_fixed(c, fn, calls));
        points.push_back({{"op", o}, {"backend", backend}, {"group_size", g}, {"groups", int(groups.size())},
                          {"bytes", S}});
      }
    }
    synchronize(c.cuda);
    if (first) {
      if (nccl_bytes < 0) nccl_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - outside0);
      else p2p_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - outside0 - nccl_bytes);
    }
    // Compute beside the collectives, once (the smallest group). The CPU's
    // figure (MPI, compute on the same cores) is measured, not used by the fit.
    if (g == group_sizes.front() && contention.is_null()) {
      try {
        contention = measure_contention(c, *comm);
      } catch (const std::exception& e) {
        std::string msg = e.what();
        contention = json{{"failed", msg.substr(0, msg.find('\n'))}};
      }
      try {
        tp_chain = measure_tp_chain(c, *comm);
      } catch (const std::exception& e) {
        std::string msg = e.what();
        tp_chain = json{{"failed", msg.substr(0, msg.find('\n'))}};
      }
    }
  }
  // NCCL's memory per pipeline link, as the runtime makes them: pairs of ranks
  // as two-stage pipelines, each with the links of the interleaved ring (four
  // per rank: activations and gradients, each way), one message sent on each.
  // (On the CPU the same exchange runs over MPI, with nothing to measure.)
  int64_t link_bytes = -1;
  if (W >= 2 && W % 2 == 0) {
    std::vector<std::vector<int>> pairs;
    for (int r = 0; r < W; r += 2) pairs.push_back({r, r + 1});
    auto pp = make_communicator(pairs, "calibrate-pp", c.device, timeout);
    synchronize(c.cuda);
    const int64_t before = memory_outside_allocator(c.cuda);
    {
      PipeLinks links = make_pipe_links(*pp, /*ring=*/true, c.device);
      const auto fopt = at::TensorOptions().device(c.device).dtype(at::kFloat);
      std::vector<at::Tensor> bufs;
      std::vector<WorkPtr> works;
      int n = 0;
      // Both ranks take the links in one order (edge 0 then edge 1, activations
      // then gradients), so that a link's first use, which connects its two
      // ranks, finds the peer there.
      const int stage = pp->rank();
      auto op = [&](Communicator* link, bool send) {
        if (!link) return;
        bufs.push_back(at::ones({c.quick ? int64_t(1) << 10 : int64_t(4) << 20}, fopt));
        works.push_back(send ? link->send(bufs.back(), 1) : link->recv(bufs.back(), 0));
        ++n;
      };
      for (int edge = 0; edge < 2; ++edge) op(stage == edge ? links.f_out : links.f_in, stage == edge);
      for (int edge = 0; edge < 2; ++edge) op(stage == edge ? links.b_in : links.b_out, stage != edge);
      for (auto& w : works) w->wait();
      synchronize(c.cuda);
      if (n > 0 && c.cuda) link_bytes = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - before) / n;
    }
    synchronize(c.cuda);
  }
  // The slowest rank's time of each point (MPI on the CPU).
  at::Tensor in = at::tensor(mine, at::TensorOptions().dtype(at::kDouble));
  at::Tensor all = at::empty({int64_t(mine.size()) * W}, in.options());
  world.all_gather(in, all)->wait();
  if (c.rank != 0) return;
  const double* x = all.data_ptr<double>();
  for (size_t i = 0; i < mine.size(); ++i) {
    double worst = 0;
    for (int r = 0; r < W; ++r) worst = std::max(worst, x[size_t(r) * mine.size() + i]);
    points[i]["seconds"] = worst;
    const auto& p = points[i];
    if (p["bytes"].get<int64_t>() == sizes.back())
      say(c, p["op"].get<std::string>() + " " + p["backend"].get<std::string>() + " over " +
                 std::to_string(p["group_size"].get<int>()) + " ranks, " + fmt_num(double(sizes.back()) / 1048576.0) +
                 " MiB: " + fmt_num(worst * 1e3) + " ms");
  }
  out["collectives"] = points;
  if (nccl_bytes >= 0) out["nccl_communicator_bytes"] = nccl_bytes;
  if (p2p_bytes >= 0) out["nccl_send_recv_bytes"] = p2p_bytes;
  if (link_bytes >= 0) out["nccl_pipe_link_bytes"] = link_bytes;
  if (!contention.is_null()) out["compute_beside_comm"] = contention;
  if (!tp_chain.is_null()) out["tp_chain"] = tp_chain;
}

}  // namespace planner::rt::calib

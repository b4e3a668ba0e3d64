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

}  // namespace planner::rt::calib

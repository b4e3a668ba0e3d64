// planner calibrate, the runtime's half: runs the micro-benchmarks
// (calibration/measure_compute.cpp, calibration/measure_host.cpp) and the memory
// measurements, and returns the measured points. No fitting here: that is
// costmodel/calibration.cpp's job.
#include "calibration/measure.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "specs/plan.hpp"
#include "calibration/measure_detail.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/comm/world_node.hpp"
#include "runtime/device.hpp"
#include "strategies/errors.hpp"

#if __has_include(<cuda_runtime_api.h>)
#define PLANNER_CALIB_CUDA 1
#include <cuda_runtime_api.h>
#endif

namespace planner::rt {

namespace calib {

// Five batches of `calls` calls; the fastest, per call: interference (other
// processes, clock ramps) only ever makes a batch slower.
double best_of_batches(const Ctx& c, const std::function<void()>& fn, int calls) {
  IntervalTimer t(c.cuda);
  for (int r = 0; r < 5; ++r) {
    t.start();
    for (int i = 0; i < calls; ++i) fn();
    t.stop();
  }
  const std::vector<double> s = t.seconds();
  return *std::min_element(s.begin(), s.end()) / calls;
}

double time_per_call(const Ctx& c, const std::function<void()>& fn, double target) {
  if (target <= 0) target = c.target_seconds();
  fn();  // warm-up: kernels loaded, workspaces allocated
  synchronize(c.cuda);
  IntervalTimer once(c.cuda);
  once.start();
  fn();
  once.stop();
  const double one = std::max(1e-7, once.seconds().at(0));
  return best_of_batches(c, fn, int(std::clamp(target / one, 1.0, 10000.0)));
}

double time_fixed(const Ctx& c, const std::function<void()>& fn, int calls) {
  fn();
  synchronize(c.cuda);
  return best_of_batches(c, fn, calls);
}

void say(const Ctx& c, const std::string& line) {
  if (c.progress && c.rank == 0) std::fprintf(stderr, "calibrate: %s\n", line.c_str());
}

std::string fmt_num(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

}  // namespace calib

namespace {

using nlohmann::json;
using calib::Ctx;

// cudaMemGetInfo (free, total); zeros without CUDA.
std::pair<int64_t, int64_t> mem_info(bool cuda) {
#ifdef PLANNER_CALIB_CUDA
  if (cuda) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) return {int64_t(f), int64_t(t)};
  }
#endif
  (void)cuda;
  return {0, 0};
}

// What the process itself takes once the libraries the benchmarks used are
// loaded, and what the caching allocator can really reserve. GPU only; run
// after the compute benchmarks with no tensor of theirs alive.
json measure_device_memory(const Ctx& c, const std::pair<int64_t, int64_t>& after_context) {
  json m = {{"total_bytes", after_context.second}, {"free_after_context_bytes", after_context.first}};
  synchronize(true);
  empty_cache(true);
  // Outside the allocator: the context, cuBLAS/cuDNN handles and the kernels
  // loaded so far (lazy loading: these grow as new kernels run).
  m["context_bytes"] = memory_outside_allocator(true);
  // Inside the allocator with nothing of ours alive: cuBLAS workspaces (one per
  // handle and stream) and small library buffers.
  m["workspace_bytes"] = memory_stats(true).allocated;
  // Blocks the caching allocator rounds: 64 tensors of a transformer-like
  // odd size (gpt2-xl: 8 x 1024 x 1600 bf16 plus a few bytes).
  {
    const int64_t before = memory_stats(true).reserved;
    std::vector<at::Tensor> keep;
    const int64_t n = 64, bytes = 8 * 1024 * 1600 * 2 + 24;  // 1.6 GiB
    for (int64_t i = 0; i < n; ++i) keep.push_back(at::empty({bytes}, at::TensorOptions().device(c.device).dtype(at::kByte)));
    m["rounding"] = {{"tensors", n}, {"tensor_bytes", bytes},
                     {"reserved_bytes", memory_stats(true).reserved - before}};
    keep.clear();
    empty_cache(true);
  }
  // The probe: reserve in ever smaller blocks until the allocator refuses.
  std::vector<at::Tensor> held;
  int64_t chunk = int64_t(1) << 30;
  const auto t0 = std::chrono::steady_clock::now();
  while (chunk >= (int64_t(2) << 20)) {
    try {
      held.push_back(at::empty({chunk}, at::TensorOptions().device(c.device).dtype(at::kByte)));
    } catch (const c10::OutOfMemoryError&) {
      chunk /= 2;
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) break;  // never hang here
  }
  const MemStats st = memory_stats(true);
  m["probe"] = {{"allocated_bytes", st.allocated},
                {"reserved_bytes", st.reserved},
                {"outside_allocator_bytes", memory_outside_allocator(true)},
                {"free_bytes", mem_info(true).first},
                {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
  held.clear();
  empty_cache(true);
  calib::say(c, "memory: total " + calib::fmt_num(after_context.second / 1073741824.0, 5) + " GiB, free after context " +
                    calib::fmt_num(after_context.first / 1073741824.0, 5) + " GiB, reservable " +
                    calib::fmt_num(st.reserved / 1073741824.0, 5) + " GiB, context " +
                    calib::fmt_num(m["context_bytes"].get<int64_t>() / 1048576.0, 4) + " MiB");
  return m;
}

}  // namespace

double estimated_calibration_seconds(bool cuda, bool quick) {
  if (cuda) return quick ? 20 : 170;
  return 60;
}

namespace {

// Seconds kept out of --budget for the collectives part under mpirun (it runs
// after rank 0's single-device parts and is not cut short): per group size,
// the collectives, send/recv and the two contention loops; plus NCCL's
// communicators and the node's CPU AdamW.
double collectives_reserve_seconds(bool cuda, bool quick, int world) {
  if (world < 2) return 0;
  const double per_size = cuda && !quick ? 25 : 3;
  return (cuda && !quick ? 20 : 2) + per_size * double(calib::calibrated_group_sizes(world).size());
}

// The node of every rank: the ranks' node keys gathered over `world`,
// numbered in the order they first appear.
std::vector<int> gather_nodes(Communicator& world, int64_t key) {
  at::Tensor in = at::tensor(std::vector<int64_t>{key}, at::TensorOptions().dtype(at::kLong));
  at::Tensor all = at::empty({int64_t(world.size())}, in.options());
  world.all_gather(in, all)->wait();
  std::vector<int64_t> keys(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
  std::vector<int64_t> seen;
  std::vector<int> out;
  for (int64_t k : keys) {
    auto it = std::find(seen.begin(), seen.end(), k);
    if (it == seen.end()) seen.push_back(k), it = seen.end() - 1;
    out.push_back(int(it - seen.begin()));
  }
  return out;
}

// Rank 0's single-device parts, in order, each skipped once `budget_s` (0:
// none) is spent since t0. One failing part (a kernel this GPU lacks, out of
// memory) costs its points and a note, not the rest of the calibration.
void single_device_parts(const Ctx& c, json& m, std::vector<std::string>& notes, double budget_s,
                         std::chrono::steady_clock::time_point t0, std::pair<int64_t, int64_t> after_context,
                         const std::vector<std::string>& only) {
  const bool cuda = c.cuda;
  auto part = [&](const char* key, const std::function<json()>& fn) {
    // The one list of names (--only checks against it): a part measured here
    // under another name would be unreachable with --only.
    const auto& names = calibration_part_names();
    if (std::find(names.begin(), names.end(), key) == names.end())
      throw std::logic_error(std::string("calibrate: part '") + key + "' is missing from calibration_part_names()");
    if (!only.empty() && std::find(only.begin(), only.end(), key) == only.end()) {
      notes.push_back(std::string(key) + ": not measured (--only)");
      return;
    }
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (budget_s > 0 && spent >= budget_s) {
      notes.push_back(std::string(key) + ": not measured (--budget: " + calib::fmt_num(budget_s, 3) +
                      " s for the single-GPU parts spent)");
      calib::say(c, std::string(key) + " skipped: the budget is spent");
      return;
    }
    // When each part started (seconds since t0, as `seconds`): the record
    // shows that no part began after the budget, whatever the machine's load.
    m["part_started_seconds"][key] = spent;
    try {
      m[key] = fn();
    } catch (const std::exception& e) {
      std::string msg = e.what();
      msg = msg.substr(0, msg.find('\n'));
      notes.push_back(std::string(key) + ": failed, not measured (" + msg + ")");
      calib::say(c, std::string(key) + " failed: " + msg);
      empty_cache(cuda);
    }
  };
  part("gemm", [&] { return calib::measure_gemms(c); });
  part("attention", [&] { return calib::measure_attention(c); });
  part("attention_window", [&] { return calib::measure_attention_window(c); });
  part("memory_kernels", [&] { return calib::measure_memory_kernels(c); });
  part("kernel_overhead_seconds", [&] { return json(calib::measure_kernel_overhead(c)); });
  if (cuda) part("host_copies", [&] { return calib::measure_host_copies(c); });
  else notes.push_back("host<->device copies: no GPU, not measured");
  part("host_memcpy", [&] { return calib::measure_host_memcpy(c); });
  part("cpu_adam", [&] { return calib::measure_cpu_adam(c); });
  if (cuda) part("memory", [&] { return measure_device_memory(c, after_context); });
  else notes.push_back("GPU memory (context, workspaces, what a process can allocate): no GPU, not measured");
  // After the memory part: its Trainers load kernels (AdamW, the loss) whose
  // code would count as memory outside the allocator there.
  part("in_step", [&] { return calib::measure_in_step(c); });
  part("moe_host", [&] { return calib::measure_moe_host(c, nullptr); });
}

// Ranks 0 .. n-1: the one group of a world-wide communicator.
std::vector<int> all_ranks(int n) {
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[size_t(i)] = i;
  return all;
}

// Every rank: the MoE layer's host time with every rank in one ep group.
void moe_host_ep_part(const Ctx& c, Communicator& worldc, const WorldInfo& wi, json& m,
                      std::vector<std::string>& notes) {
  const std::vector<int> all = all_ranks(wi.size);
  worldc.barrier();
  try {
    // NCCL's device memory for the all-to-all communicator: the growth outside
    // the caching allocator across its set-up and the block's exchanges.
    const int64_t outside0 = memory_outside_allocator(c.cuda);
    auto ep = make_communicator({all}, "calibrate-moe", c.device, std::chrono::seconds(600));
    json r = calib::measure_moe_host(c, ep.get());
    if (c.cuda) r["communicator_bytes"] = std::max<int64_t>(0, memory_outside_allocator(c.cuda) - outside0);
    if (wi.rank == 0) m["moe_host_ep"] = std::move(r);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    notes.push_back("moe_host over " + std::to_string(wi.size) + " ranks: failed, not measured (" +
                    msg.substr(0, msg.find('\n')) + ")");
  }
  worldc.barrier();
}

// Every rank: the collectives and the node's CPU AdamW (under mpirun).
void multi_rank_parts(const Ctx& c, Communicator& worldc, const WorldInfo& wi, json& m,
                      std::vector<std::string>& notes) {
  worldc.barrier();
  calib::measure_collectives(c, worldc, m);
  worldc.barrier();
  if (wi.local_size > 1) {
    json node = calib::measure_cpu_adam_node(c, worldc, wi.local_size);
    if (!node.is_null()) m["cpu_adam_node"] = std::move(node);
    else notes.push_back("CPU AdamW on every rank at once: failed on a rank, not measured");
  }
}

}  // namespace

const std::vector<std::string>& calibration_part_names() {
  static const std::vector<std::string> names{"gemm",        "attention",   "attention_window", "memory_kernels",
                                              "kernel_overhead_seconds", "host_copies", "host_memcpy",
                                              "cpu_adam",    "memory",      "in_step",          "moe_host",
                                              "collectives"};
  return names;
}

CalibrateRun run_calibration(const CalibrateOptions& o) {
  for (const auto& p : o.only)
    if (std::find(calibration_part_names().begin(), calibration_part_names().end(), p) == calibration_part_names().end())
      throw InputError("--only: '" + p + "' is not a part of calibrate (" + [] {
        std::string all;
        for (const auto& n : calibration_part_names()) all += (all.empty() ? "" : ", ") + n;
        return all;
      }() + ")");
  if (o.device != "auto" && o.device != "cuda" && o.device != "gpu" && o.device != "cpu")
    throw InputError("--device '" + o.device + "' is not one of auto|cuda|cpu");
  bool cuda = o.device == "auto" ? cuda_available() : o.device != "cpu";
  if (cuda && !cuda_available()) throw InputError("--device cuda: no CUDA GPU is visible to this LibTorch build");
  WorldInfo wi;
  if (launched_by_mpi()) wi = init_world();
  if (cuda) {
    if (wi.local_size > cuda_device_count())
      throw InputError(std::to_string(wi.local_size) + " ranks on this node but only " +
                       std::to_string(cuda_device_count()) + " GPU(s)");
    set_cuda_device(wi.local_rank);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> notes;
  Ctx c;
  c.cuda = cuda;
  // No GPU: CPU-sized shapes (a GPU's 16384x4096 GEMMs and 8-layer models at
  // seq 2048 take hours on a CPU; issue 29 saw 21 measurements in 540 s).
  c.quick = o.quick || !cuda;
  if (!cuda && !o.quick) notes.push_back("no GPU: the CPU was measured with CPU-sized shapes (those of --quick)");
  c.progress = o.progress;
  c.device = cuda ? at::Device(at::kCUDA, int8_t(wi.local_rank)) : at::Device(at::kCPU);
  c.rank = wi.rank;
  c.world = wi.size;
  c.notes = &notes;
  std::pair<int64_t, int64_t> after_context{0, 0};
  if (cuda) {
    at::zeros({1}, at::TensorOptions().device(c.device));
    synchronize(true);
    after_context = mem_info(true);
    // As the runtime: fp32 matmuls on TF32 tensor cores.
    at::globalContext().setFloat32MatmulPrecision("high");
  }
  // Under mpirun a rank starts with one LibTorch thread (seen on two H200s:
  // calibrate's host memcpy ran at 10 GB/s, CPU AdamW at 3e8/s, against 99 GB/s
  // and 2.5e9 alone). Rank 0's benchmarks below run while the other ranks wait
  // (asleep in the barrier): it takes every core, as one process alone would.
  const int threads_before = at::get_num_threads();
  if (wi.size > 1 && wi.rank == 0 && !std::getenv("OMP_NUM_THREADS") && threads_per_rank(1) > 0)
    at::set_num_threads(threads_per_rank(1));
  json m = {{"format", "planner-calibration"},
            {"created", utc_timestamp()},
            {"device", cuda ? "cuda" : "cpu"},
            {"quick", c.quick},
            {"ranks", wi.size},
            {"machine", machine_json(machine_info(cuda))}};
  // Barriers of the whole world over MPI; rank 0's single-device benchmarks
  // take minutes, so this one waits long.
  std::unique_ptr<Communicator> worldc;
  if (wi.size > 1) {
    worldc = make_communicator({all_ranks(wi.size)}, "world", at::Device(at::kCPU), std::chrono::seconds(3600));
    c.node_of_rank = gather_nodes(*worldc, world_node_key());
    m["nodes"] = *std::max_element(c.node_of_rank.begin(), c.node_of_rank.end()) + 1;
    m["node_of_rank"] = c.node_of_rank;
  }
  // Under mpirun the budget keeps room for the collectives, which follow.
  const double reserve = collectives_reserve_seconds(cuda, c.quick, wi.size);
  const double single_budget = o.budget_seconds > 0 ? std::max(1.0, o.budget_seconds - reserve) : 0;
  if (wi.rank == 0) {
    calib::say(c, std::string("on ") + (cuda ? m["machine"]["gpu_name"].get<std::string>() : "the CPU (" +
                                                                                               m["machine"]["cpu"].get<std::string>() + ")") +
                      (o.quick ? ", quick sizes" : cuda ? "" : ", CPU-sized shapes (no GPU)") + "; " +
                      std::to_string(wi.size) + " rank(s); about " +
                      calib::fmt_num(estimated_calibration_seconds(cuda, c.quick) + reserve, 2) + " s" +
                      (o.budget_seconds > 0 ? ", at most " + calib::fmt_num(single_budget, 3) +
                                                  " s for the single-GPU parts (--budget " +
                                                  calib::fmt_num(o.budget_seconds, 3) + " less " +
                                                  calib::fmt_num(reserve, 3) + " s kept for the collectives)"
                                            : ""));
    single_device_parts(c, m, notes, single_budget, t0, after_context, o.only);
  }
  at::set_num_threads(threads_before);
  const bool collectives = o.only.empty() || std::find(o.only.begin(), o.only.end(), "collectives") != o.only.end();
  const bool moe = o.only.empty() || std::find(o.only.begin(), o.only.end(), "moe_host") != o.only.end();
  if (worldc && moe) moe_host_ep_part(c, *worldc, wi, m, notes);
  if (worldc && collectives) multi_rank_parts(c, *worldc, wi, m, notes);
  else if (worldc) notes.push_back("collectives: not measured (--only)");
  else notes.push_back("collectives and send/recv: one rank, skipped (run it under mpirun -np N to measure them)");
  m["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m["notes"] = notes;
  CalibrateRun r;
  r.report = wi.rank == 0;
  r.measured = std::move(m);
  return r;
}

}  // namespace planner::rt

// The offload step's host AdamW, planner's one-pass loop on its own thread
// team (runtime/optim/adamw.cpp) against LibTorch's three passes (a 16-bit
// gradient into an fp32 chunk, at::_fused_adamw_, the master copied back in 16
// bits), which the runtime ran before and still runs with
// PLANNER_HOST_ADAM=libtorch. Same buffers, same process, alternated.
//
//   host_adam_bench [--params N] [--threads T] [--reps R] [--dtype bf16|fp16]
//                   [--spin] [--start-at UNIX_SECONDS] [--json FILE]
//
// --spin keeps one more thread busy-waiting during the timed passes, as a CUDA
// synchronisation or an NCCL proxy thread spins beside the offload step's
// update. --start-at sleeps until that time after the warm-up, so that two
// instances started from a shell time their passes together (two ranks on one
// host). Prints one line per implementation and writes the numbers as JSON.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/bench_args.hpp"
#include "runtime/optim/adamw.hpp"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void usage_error(const std::string& what) { bench::usage_error("host_adam_bench", what); }

int64_t parse_int(const char* s, const char* flag) { return bench::parse_positive_int("host_adam_bench", s, flag); }

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t(1) << 27, reps = 5, threads = at::get_num_threads();
  long long start_at = 0;
  bool spin = false;
  at::ScalarType type = at::kBFloat16;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--params") n = parse_int(next(), "--params");
    else if (a == "--threads") threads = parse_int(next(), "--threads");
    else if (a == "--reps") reps = parse_int(next(), "--reps");
    else if (a == "--start-at") start_at = parse_int(next(), "--start-at");
    else if (a == "--spin") spin = true;
    else if (a == "--dtype") {
      const std::string d = next();
      if (d == "bf16") type = at::kBFloat16;
      else if (d == "fp16") type = at::kHalf;
      else usage_error("--dtype is bf16 or fp16, got '" + d + "'");
    }
    else if (a == "--json") json_path = next();
    else if (a == "-h" || a == "--help") {
      std::printf(
          "host_adam_bench [--params N] [--threads T] [--reps R] [--dtype bf16|fp16] [--spin] [--start-at UNIX_SECONDS]\n"
          "                [--json FILE]\n"
          "  the offload step's host AdamW: planner's one-pass loop against LibTorch's three passes\n"
          "example: host_adam_bench --params 134217728 --threads 16 --json out.json\n");
      return 0;
    } else usage_error("unknown argument '" + a + "' (see --help)");
  }
  std::ofstream json_file;  // opened before the run: a bad path is refused at once
  if (!json_path.empty()) {
    json_file.open(json_path);
    if (!json_file) usage_error("cannot write " + json_path);
  }
  at::set_num_threads(int(threads));
  const int64_t unit = std::min<int64_t>(n, int64_t(1) << 25);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor master = at::randn({n}, f32), m = at::zeros({n}, f32), v = at::zeros({n}, f32);
  at::Tensor grad16 = at::randn({n}, f32).mul_(1e-3).to(type), param16 = at::empty({n}, f32.dtype(type));
  at::Tensor work = at::empty({std::min(n, planner::rt::kOptChunk)}, f32);
  const at::Tensor step = at::ones({}, f32), divisor = at::ones({}, f32);
  const planner::rt::AdamHyper h;
  auto one_pass = [&] {
    for (int64_t o = 0; o < n; o += unit) {
      const int64_t len = std::min(unit, n - o);
      planner::rt::adam_range(master.narrow(0, o, len), m.narrow(0, o, len), v.narrow(0, o, len),
                              grad16.narrow(0, o, len), work, len, h, step, divisor, param16.narrow(0, o, len));
    }
  };
  const char* impls[2] = {"planner", "libtorch"};
  for (const char* impl : impls) {  // warm-up: pages, teams
    setenv("PLANNER_HOST_ADAM", impl, 1);
    one_pass();
  }
  if (start_at > 0) std::this_thread::sleep_until(std::chrono::system_clock::time_point(std::chrono::seconds(start_at)));
  std::atomic<bool> stop{false};
  std::thread spinner;
  if (spin)
    spinner = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  std::vector<double> t[2];
  for (int64_t r = 0; r < reps; ++r)
    for (int k = 0; k < 2; ++k) {
      setenv("PLANNER_HOST_ADAM", impls[k], 1);
      const auto t0 = Clock::now();
      one_pass();
      t[k].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  stop = true;
  if (spinner.joinable()) spinner.join();
  std::string json = "{\"params\": " + std::to_string(n) + ", \"threads\": " + std::to_string(threads) +
                     ", \"dtype\": \"" + (type == at::kHalf ? "fp16" : "bf16") + "\", \"spin\": " + (spin ? "true" : "false") + ", \"cores\": " +
                     std::to_string(std::thread::hardware_concurrency());
  double med[2];
  for (int k = 0; k < 2; ++k) {
    std::vector<double> s = t[k];
    std::sort(s.begin(), s.end());
    med[k] = s[s.size() / 2];
    std::printf("%-8s %.3g parameters/s (median of %lld; fastest %.3g, slowest %.3g), %lld threads, %s%s\n", impls[k],
                double(n) / med[k], (long long)reps, double(n) / s.front(), double(n) / s.back(), (long long)threads,
                type == at::kHalf ? "fp16" : "bf16", spin ? ", beside a spinning thread" : "");
    json += std::string(", \"") + impls[k] + "\": {\"params_per_second\": " + std::to_string(double(n) / med[k]) +
            ", \"seconds\": [";
    for (size_t i = 0; i < t[k].size(); ++i) json += (i ? ", " : "") + std::to_string(t[k][i]);
    json += "]}";
  }
  std::printf("planner / libtorch: %.2fx\n", med[1] / med[0]);
  json += ", \"speedup\": " + std::to_string(med[1] / med[0]) + "}\n";
  if (!json_path.empty() && !(json_file << json << std::flush)) usage_error("cannot write " + json_path);
  return 0;
}

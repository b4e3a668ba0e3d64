#pragma once
// Where the runtime runs and what it can measure there: CUDA (caching allocator
// statistics, CUDA events) or the CPU (a counting CPU allocator, wall clock).
// No LibTorch types in this header.
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace planner::rt {

// True when this build can use CUDA and a GPU is visible.
bool cuda_available();
// True when the build was compiled against CUDA headers (events, allocator stats).
bool cuda_instrumented();

// Bytes held by the tensor allocator of the device.
//  CUDA: c10::cuda::CUDACachingAllocator device statistics (aggregate pools):
//        allocated = bytes in live tensors, reserved = bytes cudaMalloc'ed by the cache.
//  CPU:  a counting wrapper around LibTorch's CPU allocator (installed by
//        enable_cpu_memory_counting()); reserved == allocated.
struct MemStats {
  int64_t allocated = 0, allocated_peak = 0;
  int64_t reserved = 0, reserved_peak = 0;
};
MemStats memory_stats(bool cuda);
void reset_peak_memory(bool cuda);
// Device memory in use outside the caching allocator: cudaMemGetInfo's
// (total - free) minus the allocator's reserved bytes (CUDA context, cuBLAS/cuDNN
// handles, kernels). 0 on the CPU.
int64_t memory_outside_allocator(bool cuda);
int64_t device_total_memory(bool cuda);
// Installs (once per process) the counting CPU allocator; later CPU tensors are counted.
void enable_cpu_memory_counting();
bool cpu_memory_counting_enabled();
// The integer in environment variable `name` when it is set and not empty,
// else nullopt. Throws InputError, naming the variable and `meaning`, when it
// is not a whole number in [lo, hi].
std::optional<long> env_integer(const char* name, long lo, long hi, const std::string& meaning);
// Waits for the device.
void synchronize(bool cuda);
// Binds this process to GPU `index` (cudaSetDevice); no-op without CUDA.
void set_cuda_device(int index);
int cuda_device_count();
// Peak resident host memory of this process (VmHWM), bytes; 0 where unknown.
int64_t host_peak_rss_bytes();
// Frees cached blocks (CUDA), so that a later run starts from a clean pool.
void empty_cache(bool cuda);

// PLANNER_ALLOC_TRACE=FILE (a diagnosis aid, runtime/README.md): the CUDA caching
// allocator's own record of every allocation, free and segment mapping from
// alloc_trace_start on, written by alloc_trace_write as CSV (action,addr,size)
// to a stream the caller opened before the steps;
// alloc_trace_mark puts a small block of (1000 + tag) x 512 bytes into it as a
// marker. No-ops without CUDA; start returns whether this LibTorch records.
bool alloc_trace_start(bool cuda);
void alloc_trace_mark(bool cuda, int tag);
void alloc_trace_write(bool cuda, std::ostream& out);

// Times a sequence of intervals: CUDA events on the current stream (no host sync
// until seconds()), or the host's steady clock on the CPU.
class IntervalTimer {
 public:
  explicit IntervalTimer(bool cuda);
  ~IntervalTimer();
  void start();
  void stop();
  // Synchronises, then returns one duration per start/stop pair.
  std::vector<double> seconds();
  // Synchronises, then returns each pair's start and stop, seconds after the first start.
  std::vector<std::pair<double, double>> spans();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct MachineInfo {
  std::string device;          // "cuda:0" or "cpu"
  std::string gpu_name;        // cudaDeviceProp name
  std::string driver;          // NVIDIA driver version (/proc/driver/nvidia/version), else CUDA driver API version
  std::string cuda_runtime;    // CUDA runtime version the program runs with
  std::string libtorch;        // LibTorch version it was built against
  std::string cpu;             // CPU model name
  std::string hostname;
  int64_t gpu_memory_bytes = 0;
  int gpu_sm_count = 0;
  int cpu_threads = 0;         // intra-op threads LibTorch uses
  std::string allocator_conf;  // PYTORCH_CUDA_ALLOC_CONF as the process runs with it (use_expandable_segments below)
};
MachineInfo machine_info(bool cuda);
// The fields above as JSON (result.json's and calibrate's "machine").
nlohmann::json machine_json(const MachineInfo& m);

// The runtime's CUDA caching allocator settings: expandable segments unless
// the user set PYTORCH_CUDA_ALLOC_CONF. Called first thing in planner-exec's
// main, before LibTorch reads the variable. With the default segments, memory
// freed within a step fragments: TinyLlama with full checkpointing held 1.9-2.2
// GiB reserved that no tensor used (8-10% of its peak), against 0.13-0.14 GiB
// with expandable segments, at the same step time (validation/archive/h200x2/alloc).
void use_expandable_segments();

// LibTorch intra-op threads for one of `ranks_on_node` processes sharing the
// node's cores (at least 1); 0 when the core count is unknown.
int threads_per_rank(int ranks_on_node);

}  // namespace planner::rt

#pragma once
// `planner exec --kernels`: the GPU kernels of one step's forward and backward
// (recomputation included), recorded with LibTorch's Kineto profiler and summed
// by the time model's op classes (costmodel/layer_costs.hpp OpTimes), so that a
// step-time miss can be traced to the class of kernels that causes it. No
// LibTorch types in this header.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace planner::rt {

// GEMM (cuBLAS/cuBLASLt/CUTLASS matrix multiplies, split-K reductions),
// attention (flash, memory-efficient and cuDNN SDPA kernels), memory-bound
// (every other kernel, device-to-device copies and memsets) and copies between
// host and device, and collective communication (NCCL kernels, which run on
// their own streams beside the compute).
enum class KernelClass { Gemm, Attention, Memory, HostCopy, Comm };
const char* to_string(KernelClass c);
// The class of a kernel from its name as the profiler reports it ("Memcpy HtoD
// (Pinned -> Device)" for a copy activity).
KernelClass kernel_class(const std::string& name);

struct KernelEvent {
  std::string name;
  double start_seconds = 0;  // on the profiler's clock
  double seconds = 0;        // duration
  bool host = false;         // a host-side op (stop_events(true) only), else a GPU activity
};

struct KernelRow {
  std::string name;
  KernelClass cls = KernelClass::Memory;
  int64_t count = 0;
  double seconds = 0;  // summed over the launches
};

// The compute kernels beside the collectives: how much of their time ran while
// an NCCL kernel was resident on another stream, and how much slower they ran
// then. The slowdown compares launches of one kernel name: those that ran
// wholly beside a collective (at least 90% of their time) against those that
// ran with none (the same kernels of a micro-batch before the gradients'
// reductions start), summed over the names that have both:
// slowdown = sum of the beside launches' time / sum of (their count x the
// name's mean time alone). Names seen only beside collectives are left out
// (`matched_seconds` says how much of the beside time the figure covers).
struct BesideComm {
  double comm_busy_seconds = 0;  // the union of the collectives' intervals
  // Per compute class (GEMM, attention, memory-bound: KernelClass's order):
  std::array<double, 3> beside_seconds{};  // time inside that union
  std::array<double, 3> matched_seconds{};        // beside launches whose name also ran alone
  std::array<double, 3> matched_alone_seconds{};  // the same launches at their name's mean time alone
  double compute_beside_seconds() const { return beside_seconds[0] + beside_seconds[1] + beside_seconds[2]; }
  // One class's slowdown (0 where nothing matched), or all of them together (-1).
  double slowdown(int cls = -1) const;
};

struct KernelProfile {
  bool recorded = false;
  std::vector<KernelRow> kernels;  // distinct names, longest total first
  double gemm_seconds = 0, attention_seconds = 0, memory_seconds = 0, host_copy_seconds = 0, comm_seconds = 0;
  int64_t launches = 0;
  // First start to last end of the compute kernels (GEMM, attention,
  // memory-bound): with one compute stream, span minus their sum is the time it
  // sat idle between them (launch latency, host synchronisation, waits for
  // communication).
  double span_seconds = 0;
  BesideComm beside;
  double busy_seconds() const { return gemm_seconds + attention_seconds + memory_seconds; }
  double idle_seconds() const { return span_seconds > busy_seconds() ? span_seconds - busy_seconds() : 0.0; }
};

// Sums events by name and class.
KernelProfile summarize_kernels(const std::vector<KernelEvent>& events);

// Records the GPU kernels (and copy/memset activities) launched between start()
// and stop(). stop() synchronises nothing: call it after the device has
// finished the work (the caller synchronises).
class KernelRecorder {
 public:
  KernelRecorder() = default;
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;
  ~KernelRecorder();  // a recorder left running (an exception in the step) turns the profiler off
  void start();
  KernelProfile stop();
  // stop() without the summary: every event, in the order of their starts;
  // with `host_ops` also the host's ATen ops (KernelEvent::host).
  std::vector<KernelEvent> stop_events(bool host_ops = false);

 private:
  bool running_ = false;
};

}  // namespace planner::rt

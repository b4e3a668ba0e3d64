#include "runtime/device.hpp"
#include "strategies/errors.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <cctype>
#include <unordered_map>

#if __has_include(<cuda_runtime_api.h>) && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#define PLANNER_RT_CUDA 1
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace planner::rt {

namespace {

// ---- Counting CPU allocator -------------------------------------------------
// Wraps LibTorch's default CPU allocator and keeps the live and peak bytes of
// every CPU tensor allocated after it is installed. This is what the CPU path
// reports as "allocated" memory, and what the tests use to see that activation
// checkpointing really keeps fewer bytes alive between forward and backward.
struct CountingCpuAllocator final : c10::Allocator {
  c10::Allocator* inner = nullptr;
  c10::DeleterFnPtr inner_delete = nullptr;
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::mutex mu;
  std::unordered_map<void*, int64_t> sizes;  // live allocations

  static CountingCpuAllocator* self;

  // The DataPtr keeps the raw pointer as its context (LibTorch's raw_allocate
  // interface needs get() == get_context()); sizes live in a map.
  static void deleter(void* p) {
    if (p == nullptr) return;
    int64_t n = 0;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      auto it = self->sizes.find(p);
      if (it != self->sizes.end()) {
        n = it->second;
        self->sizes.erase(it);
      }
    }
    self->current.fetch_sub(n, std::memory_order_relaxed);
    self->inner_delete(p);
  }

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr d = inner->allocate(n);
    const c10::Device dev = d.device();
    void* raw = d.release_context();
    if (raw != nullptr) {
      std::lock_guard<std::mutex> lock(mu);
      sizes[raw] = static_cast<int64_t>(n);
    }
    const int64_t now = current.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) + static_cast<int64_t>(n);
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
    return c10::DataPtr(raw, raw, &deleter, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
CountingCpuAllocator* CountingCpuAllocator::self = nullptr;

// Never destroyed: tensors may outlive main's locals and free through it.
CountingCpuAllocator*& counting_slot() {
  static CountingCpuAllocator* a = nullptr;
  return a;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) return trim(line.substr(c + 1));
    }
  }
  return "unknown";
}

}  // namespace

bool cuda_instrumented() {
#ifdef PLANNER_RT_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() { return torch::cuda::is_available(); }

void enable_cpu_memory_counting() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* inner = c10::GetDefaultCPUAllocator();
    if (inner->raw_deleter() == nullptr) return;  // cannot wrap: leave counting off
    auto* a = new CountingCpuAllocator();
    a->inner = inner;
    a->inner_delete = inner->raw_deleter();
    CountingCpuAllocator::self = a;
    // Priority above the default registration (0), so that it wins.
    c10::SetCPUAllocator(a, /*priority=*/1);
    counting_slot() = a;
  });
}

bool cpu_memory_counting_enabled() { return counting_slot() != nullptr; }

MemStats memory_stats(bool cuda) {
  MemStats m;
  if (cuda) {
#ifdef PLANNER_RT_CUDA
    const auto dev = c10::cuda::current_device();
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(dev);
    // index 0 = StatType::AGGREGATE (all pools)
    m.allocated = s.allocated_bytes[0].current;
    m.allocated_peak = s.allocated_bytes[0].peak;
    m.reserved = s.reserved_bytes[0].current;
    m.reserved_peak = s.reserved_bytes[0].peak;
#endif
    return m;
  }
  if (auto* a = counting_slot()) {
    m.allocated = a->current.load();
    m.allocated_peak = a->peak.load();
    m.reserved = m.allocated;
    m.reserved_peak = m.allocated_peak;
  }
  return m;
}

void reset_peak_memory(bool cuda) {
  if (cuda) {
#ifdef PLANNER_RT_CUDA
    c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
    return;
  }
  if (auto* a = counting_slot()) a->peak.store(a->current.load());
}

int64_t memory_outside_allocator(bool cuda) {
#ifdef PLANNER_RT_CUDA
  if (cuda) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    const int64_t used = static_cast<int64_t>(total_b) - static_cast<int64_t>(free_b);
    return used - memory_stats(true).reserved;
  }
#endif
  (void)cuda;
  return 0;
}

int64_t device_total_memory(bool cuda) {
#ifdef PLANNER_RT_CUDA
  if (cuda) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return static_cast<int64_t>(total_b);
  }
#endif
  (void)cuda;
  return 0;
}

void synchronize(bool cuda) {
  if (cuda) torch::cuda::synchronize();
}

void set_cuda_device(int index) {
#ifdef PLANNER_RT_CUDA
  if (cudaSetDevice(index) != cudaSuccess) throw std::runtime_error("cudaSetDevice(" + std::to_string(index) + ") failed");
#endif
  (void)index;
}

int cuda_device_count() { return cuda_available() ? int(torch::cuda::device_count()) : 0; }

int64_t host_peak_rss_bytes() {
  // VmHWM: the process's peak resident set (Linux).
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

void empty_cache(bool cuda) {
#ifdef PLANNER_RT_CUDA
  if (cuda) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)cuda;
}

// ---- The allocator's event trace (PLANNER_ALLOC_TRACE) ---------------------
#ifdef PLANNER_RT_CUDA
namespace {
std::shared_ptr<c10::GatheredContext> no_context() { return nullptr; }
// recordHistory's arguments differ between LibTorch releases (clearHistory and
// then skip_actions were added): the first form this build's header takes is
// called.
template <class... A>
auto record_history(int, A&&... a)
    -> decltype(c10::cuda::CUDACachingAllocator::recordHistory(std::forward<A>(a)...), bool()) {
  c10::cuda::CUDACachingAllocator::recordHistory(std::forward<A>(a)...);
  return true;
}
template <class... A>
bool record_history(long, A&&...) {
  return false;
}
}  // namespace
#endif

bool alloc_trace_start(bool cuda) {
#ifdef PLANNER_RT_CUDA
  if (cuda) {
    using namespace c10::cuda::CUDACachingAllocator;
    const size_t entries = 8000000;
    if (record_history(0, true, &no_context, entries, RecordContext::NEVER, true, std::vector<std::string>{}))
      return true;
    if (record_history(0, true, &no_context, entries, RecordContext::NEVER, true)) return true;
    return record_history(0, true, &no_context, entries, RecordContext::NEVER);
  }
#endif
  (void)cuda;
  return false;
}

void alloc_trace_mark(bool cuda, int tag) {
  if (!cuda) return;
  // A small-pool block of a size nothing else asks for: (1000 + tag) x 512 bytes.
  auto t = at::empty({int64_t(1000 + tag) * 512}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  (void)t;
}

void alloc_trace_write(bool cuda, std::ostream& out) {
#ifdef PLANNER_RT_CUDA
  if (!cuda) return;
  const auto snap = c10::cuda::CUDACachingAllocator::snapshot();
  out << "action,addr,size\n";
  const auto dev = size_t(c10::cuda::current_device());
  if (dev >= snap.device_traces.size()) return;
  for (const auto& e : snap.device_traces[dev]) {
    using Action = std::decay_t<decltype(e.action_)>;
    const char* name = "other";
    switch (e.action_) {
      case Action::ALLOC: name = "alloc"; break;
      case Action::FREE_REQUESTED: name = "free_requested"; break;
      case Action::FREE_COMPLETED: name = "free_completed"; break;
      case Action::SEGMENT_ALLOC: name = "segment_alloc"; break;
      case Action::SEGMENT_FREE: name = "segment_free"; break;
      case Action::SEGMENT_MAP: name = "segment_map"; break;
      case Action::SEGMENT_UNMAP: name = "segment_unmap"; break;
      case Action::OOM: name = "oom"; break;
      default: break;
    }
    out << name << ',' << e.addr_ << ',' << e.size_ << '\n';
  }
#else
  (void)cuda;
  (void)out;
#endif
}

// ---- IntervalTimer ----------------------------------------------------------
struct IntervalTimer::Impl {
  bool cuda = false;
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> host_start, host_stop;
#ifdef PLANNER_RT_CUDA
  std::vector<cudaEvent_t> ev_start, ev_stop;
#endif
  ~Impl() {
#ifdef PLANNER_RT_CUDA
    for (auto e : ev_start) cudaEventDestroy(e);
    for (auto e : ev_stop) cudaEventDestroy(e);
#endif
  }
};

IntervalTimer::IntervalTimer(bool cuda) : impl_(std::make_unique<Impl>()) {
  impl_->cuda = cuda && cuda_instrumented();
}
IntervalTimer::~IntervalTimer() = default;

#ifdef PLANNER_RT_CUDA
namespace {
cudaEvent_t record_event() {
  cudaEvent_t e;
  if (cudaEventCreate(&e) != cudaSuccess) throw std::runtime_error("cudaEventCreate failed");
  if (cudaEventRecord(e, c10::cuda::getCurrentCUDAStream().stream()) != cudaSuccess)
    throw std::runtime_error("cudaEventRecord failed");
  return e;
}
}  // namespace
#endif

void IntervalTimer::start() {
#ifdef PLANNER_RT_CUDA
  if (impl_->cuda) {
    impl_->ev_start.push_back(record_event());
    return;
  }
#endif
  impl_->host_start.push_back(Impl::Clock::now());
}

void IntervalTimer::stop() {
#ifdef PLANNER_RT_CUDA
  if (impl_->cuda) {
    impl_->ev_stop.push_back(record_event());
    return;
  }
#endif
  impl_->host_stop.push_back(Impl::Clock::now());
}

std::vector<double> IntervalTimer::seconds() {
  std::vector<double> out;
#ifdef PLANNER_RT_CUDA
  if (impl_->cuda) {
    for (size_t i = 0; i < impl_->ev_stop.size(); ++i) {
      if (cudaEventSynchronize(impl_->ev_stop[i]) != cudaSuccess) throw std::runtime_error("cudaEventSynchronize failed");
      float ms = 0;
      if (cudaEventElapsedTime(&ms, impl_->ev_start[i], impl_->ev_stop[i]) != cudaSuccess)
        throw std::runtime_error("cudaEventElapsedTime failed");
      out.push_back(static_cast<double>(ms) * 1e-3);
    }
    return out;
  }
#endif
  for (size_t i = 0; i < impl_->host_stop.size(); ++i)
    out.push_back(std::chrono::duration<double>(impl_->host_stop[i] - impl_->host_start[i]).count());
  return out;
}

std::vector<std::pair<double, double>> IntervalTimer::spans() {
  std::vector<std::pair<double, double>> out;
#ifdef PLANNER_RT_CUDA
  if (impl_->cuda) {
    auto since = [&](cudaEvent_t e) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, impl_->ev_start.front(), e) != cudaSuccess)
        throw std::runtime_error("cudaEventElapsedTime failed");
      return static_cast<double>(ms) * 1e-3;
    };
    if (!impl_->ev_stop.empty() && cudaEventSynchronize(impl_->ev_stop.back()) != cudaSuccess)
      throw std::runtime_error("cudaEventSynchronize failed");
    for (size_t i = 0; i < impl_->ev_stop.size(); ++i) out.push_back({since(impl_->ev_start[i]), since(impl_->ev_stop[i])});
    return out;
  }
#endif
  for (size_t i = 0; i < impl_->host_stop.size(); ++i) {
    const auto t0 = impl_->host_start.front();
    out.push_back({std::chrono::duration<double>(impl_->host_start[i] - t0).count(),
                   std::chrono::duration<double>(impl_->host_stop[i] - t0).count()});
  }
  return out;
}

// ---- Machine ----------------------------------------------------------------
void use_expandable_segments() { setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0); }

int threads_per_rank(int ranks_on_node) {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? std::max(1, int(hw) / std::max(1, ranks_on_node)) : 0;
}

nlohmann::json machine_json(const MachineInfo& m) {
  return {{"device", m.device},
          {"gpu_name", m.gpu_name},
          {"gpu_memory_bytes", m.gpu_memory_bytes},
          {"gpu_sm_count", m.gpu_sm_count},
          {"driver", m.driver},
          {"cuda_runtime", m.cuda_runtime},
          {"libtorch", m.libtorch},
          {"cpu", m.cpu},
          {"cpu_threads", m.cpu_threads},
          {"allocator_conf", m.allocator_conf},
          {"hostname", m.hostname}};
}

MachineInfo machine_info(bool cuda) {
  MachineInfo m;
  m.libtorch = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
               std::to_string(TORCH_VERSION_PATCH);
  m.cpu = cpu_model_name();
  m.cpu_threads = at::get_num_threads();
  if (const char* a = std::getenv("PYTORCH_CUDA_ALLOC_CONF")) m.allocator_conf = a;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) m.hostname = host;
  m.device = "cpu";
#ifdef PLANNER_RT_CUDA
  if (cuda) {
    const int dev = c10::cuda::current_device();
    m.device = "cuda:" + std::to_string(dev);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
      m.gpu_name = prop.name;
      m.gpu_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
      m.gpu_sm_count = prop.multiProcessorCount;
    }
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    m.cuda_runtime = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
    // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...":
    // the first word of the form digits.digits[.digits].
    std::ifstream in("/proc/driver/nvidia/version");
    std::string line, word;
    if (std::getline(in, line)) {
      std::istringstream words(line);
      while (words >> word) {
        const bool digits_dots = word.find_first_not_of("0123456789.") == std::string::npos;
        if (digits_dots && word.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(word[0]))) {
          m.driver = word;
          break;
        }
      }
    }
    if (m.driver.empty()) m.driver = "CUDA driver API " + std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10);
  }
#else
  if (cuda) m.device = "cuda:0";
#endif
  return m;
}

std::optional<long> env_integer(const char* name, long lo, long hi, const std::string& meaning) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(e, &end, 10);
  const bool starts = std::isdigit(static_cast<unsigned char>(e[0])) || e[0] == '-' || e[0] == '+';  // strtol skips spaces
  if (!starts || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw InputError(std::string(name) + ": '" + e + "' is not " + meaning);
  return v;
}

}  // namespace planner::rt

#include "runtime/kernel_profile.hpp"

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace planner::rt {

const char* to_string(KernelClass c) {
  switch (c) {
    case KernelClass::Gemm: return "gemm";
    case KernelClass::Attention: return "attention";
    case KernelClass::Memory: return "memory_bound";
    case KernelClass::HostCopy: return "host_copy";
    case KernelClass::Comm: return "communication";
  }
  return "?";
}

namespace {
bool has(const std::string& lower, const char* part) { return lower.find(part) != std::string::npos; }
}  // namespace

KernelClass kernel_class(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  // Copy activities: host<->device transfers are their own class; a
  // device-to-device copy or a memset streams through HBM like any kernel.
  if (s.rfind("memcpy", 0) == 0) return has(s, "htod") || has(s, "dtoh") ? KernelClass::HostCopy : KernelClass::Memory;
  if (s.rfind("memset", 0) == 0) return KernelClass::Memory;
  if (has(s, "nccl")) return KernelClass::Comm;
  // Attention before GEMM: the memory-efficient kernels are CUTLASS-built (fmha_cutlass*).
  // The fused backward's own helpers count with it, as the layer model prices
  // them: FlashAttention-2's flash_bwd_dot_do_o / flash_bwd_convert_dq and
  // cuDNN's cudnn::fusion::compute_dot_do_o_specialized / convert_dq_to_16bits.
  for (const char* a : {"flash", "fmha", "sdpa", "attention", "attn", "dot_do_o", "convert_dq"})
    if (has(s, a)) return KernelClass::Attention;
  for (const char* g : {"gemm", "nvjet", "cutlass", "xmma", "splitkreduce", "gemv", "cublas", "dot_kernel"})
    if (has(s, g)) return KernelClass::Gemm;
  return KernelClass::Memory;
}

KernelProfile summarize_kernels(const std::vector<KernelEvent>& events) {
  KernelProfile p;
  p.recorded = true;
  std::map<std::string, KernelRow> by_name;
  double first = 0, last = 0;
  int64_t computed = 0;  // compute kernels seen (the span is theirs)
  for (const auto& e : events) {
    KernelRow& r = by_name[e.name];
    if (r.count == 0) r.name = e.name, r.cls = kernel_class(e.name);
    r.count += 1;
    r.seconds += e.seconds;
    (r.cls == KernelClass::Gemm        ? p.gemm_seconds
     : r.cls == KernelClass::Attention ? p.attention_seconds
     : r.cls == KernelClass::Memory    ? p.memory_seconds
     : r.cls == KernelClass::HostCopy  ? p.host_copy_seconds
                                       : p.comm_seconds) += e.seconds;
    p.launches += 1;
    if (r.cls == KernelClass::HostCopy || r.cls == KernelClass::Comm) continue;  // other streams
    if (computed == 0 || e.start_seconds < first) first = e.start_seconds;
    if (computed == 0 || e.start_seconds + e.seconds > last) last = e.start_seconds + e.seconds;
    computed += 1;
  }
  p.span_seconds = last - first;
  for (auto& [_, r] : by_name) p.kernels.push_back(std::move(r));
  std::stable_sort(p.kernels.begin(), p.kernels.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.seconds > b.seconds; });
  return p;
}

namespace prof = torch::profiler::impl;

KernelRecorder::~KernelRecorder() {
  if (!running_) return;
  try {
    (void)torch::autograd::profiler::disableProfiler();
  } catch (...) {
  }
}

void KernelRecorder::start() {
  if (running_) throw std::logic_error("KernelRecorder::start: already recording");
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running_ = true;
}

KernelProfile KernelRecorder::stop() { return summarize_kernels(stop_events()); }

std::vector<KernelEvent> KernelRecorder::stop_events() {
  if (!running_) throw std::logic_error("KernelRecorder::stop: not recording");
  running_ = false;
  const auto result = torch::autograd::profiler::disableProfiler();
  std::vector<KernelEvent> events;
  using K = libkineto::ActivityType;
  for (const auto& e : result->events()) {
    const auto t = K(e.activityType());
    if (t != K::CONCURRENT_KERNEL && t != K::GPU_MEMCPY && t != K::GPU_MEMSET) continue;
    events.push_back({e.name(), double(e.startNs()) * 1e-9, double(e.durationNs()) * 1e-9});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const KernelEvent& a, const KernelEvent& b) { return a.start_seconds < b.start_seconds; });
  return events;
}

}  // namespace planner::rt

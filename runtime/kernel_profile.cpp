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

bool is_compute(KernelClass c) { return c == KernelClass::Gemm || c == KernelClass::Attention || c == KernelClass::Memory; }

// Each kernel name's class, as summarize_kernels found it.
using ClassOf = std::map<std::string, KernelRow>;

// The collectives' intervals merged into a sorted union.
std::vector<std::pair<double, double>> comm_union(const std::vector<KernelEvent>& events, const ClassOf& rows) {
  std::vector<std::pair<double, double>> iv;
  for (const auto& e : events)
    if (rows.at(e.name).cls == KernelClass::Comm && e.seconds > 0) iv.push_back({e.start_seconds, e.start_seconds + e.seconds});
  std::sort(iv.begin(), iv.end());
  std::vector<std::pair<double, double>> u;
  for (const auto& x : iv) {
    if (!u.empty() && x.first <= u.back().second) u.back().second = std::max(u.back().second, x.second);
    else u.push_back(x);
  }
  return u;
}

// The part of [a, b] inside the union.
double inside(const std::vector<std::pair<double, double>>& u, double a, double b) {
  double s = 0;
  auto it = std::upper_bound(u.begin(), u.end(), std::make_pair(a, 1e300));
  if (it != u.begin()) --it;
  for (; it != u.end() && it->first < b; ++it) s += std::max(0.0, std::min(b, it->second) - std::max(a, it->first));
  return s;
}

BesideComm beside_comm(const std::vector<KernelEvent>& events, const ClassOf& rows) {
  BesideComm r;
  const auto u = comm_union(events, rows);
  for (const auto& x : u) r.comm_busy_seconds += x.second - x.first;
  if (u.empty()) return r;
  struct Launches {
    int64_t alone = 0, beside = 0;
    double alone_s = 0, beside_s = 0;
  };
  std::map<std::string, Launches> by_name;
  for (const auto& e : events) {
    const KernelClass c = rows.at(e.name).cls;
    if (!is_compute(c) || e.seconds <= 0) continue;
    const double in = inside(u, e.start_seconds, e.start_seconds + e.seconds);
    r.beside_seconds[size_t(c)] += in;
    Launches& l = by_name[e.name];
    if (in == 0) l.alone += 1, l.alone_s += e.seconds;
    else if (in >= 0.9 * e.seconds) l.beside += 1, l.beside_s += e.seconds;
  }
  for (const auto& [name, l] : by_name)
    if (l.alone > 0 && l.beside > 0) {
      const size_t c = size_t(rows.at(name).cls);
      r.matched_seconds[c] += l.beside_s;
      r.matched_alone_seconds[c] += double(l.beside) * l.alone_s / double(l.alone);
    }
  return r;
}

}  // namespace

double BesideComm::slowdown(int cls) const {
  double a = 0, b = 0;
  for (int c = 0; c < 3; ++c)
    if (cls < 0 || cls == c) a += matched_seconds[size_t(c)], b += matched_alone_seconds[size_t(c)];
  return b > 0 ? a / b : 0.0;
}

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
    if (!is_compute(r.cls)) continue;  // other streams
    if (computed == 0 || e.start_seconds < first) first = e.start_seconds;
    if (computed == 0 || e.start_seconds + e.seconds > last) last = e.start_seconds + e.seconds;
    computed += 1;
  }
  p.span_seconds = last - first;
  p.beside = beside_comm(events, by_name);
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

std::vector<KernelEvent> KernelRecorder::stop_events(bool host_ops) {
  if (!running_) throw std::logic_error("KernelRecorder::stop: not recording");
  running_ = false;
  const auto result = torch::autograd::profiler::disableProfiler();
  std::vector<KernelEvent> events;
  using K = libkineto::ActivityType;
  for (const auto& e : result->events()) {
    const auto t = K(e.activityType());
    const bool host = t == K::CPU_OP;
    if (!(host && host_ops) && t != K::CONCURRENT_KERNEL && t != K::GPU_MEMCPY && t != K::GPU_MEMSET) continue;
    events.push_back({e.name(), double(e.startNs()) * 1e-9, double(e.durationNs()) * 1e-9, host});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const KernelEvent& a, const KernelEvent& b) { return a.start_seconds < b.start_seconds; });
  return events;
}

}  // namespace planner::rt

#pragma once
// A side CUDA stream for host<->device copies (offload), ordered with the
// compute stream by CUDA events, never by a device-wide synchronisation. On the
// CPU everything is synchronous and these are no-ops. No CUDA types here: the
// CUDA parts compile only where the CUDA headers are (as runtime/device.cpp).
#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace planner::rt {

// A page-locked host tensor of exactly n elements (cudaHostAlloc, freed with
// the tensor). LibTorch's pinned allocator rounds every block up to a power of
// two, which for offloaded optimizer states of billions of parameters wastes up
// to half the host memory (measured: 131 GiB resident for 99.5 GiB of states,
// opt-6.7b, validation/archive/h200x2/run2). Without CUDA: an ordinary CPU tensor.
at::Tensor pinned_empty(int64_t n, at::ScalarType dtype, bool cuda);

class SideStream {
 public:
  explicit SideStream(bool cuda);
  ~SideStream();
  // Runs `enqueue` with the side stream as the current stream, after making the
  // side stream wait for everything queued so far on the current (compute) stream.
  void run(const std::function<void()>& enqueue);
  // The current (compute) stream waits for everything queued so far on the side stream.
  void join();
  // A point on the side stream: what is queued there so far (null on the CPU).
  // wait(mark) makes the current (compute) stream wait for that much only, not
  // for what was queued on the side stream after it (join() waits for all of it).
  using Mark = std::shared_ptr<void>;
  Mark mark();
  void wait(const Mark& m);
  // The host waits for the side stream (before the CPU reads what it copied).
  void host_wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace planner::rt

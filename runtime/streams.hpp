#pragma once
// A side CUDA stream for host<->device copies (offload), ordered with the
// compute stream by CUDA events, never by a device-wide synchronisation. On the
// CPU everything is synchronous and these are no-ops. No CUDA types here: the
// CUDA parts compile only where the CUDA headers are (as runtime/device.cpp).
#include <functional>
#include <memory>

namespace planner::rt {

class SideStream {
 public:
  explicit SideStream(bool cuda);
  ~SideStream();
  // Runs `enqueue` with the side stream as the current stream, after making the
  // side stream wait for everything queued so far on the current (compute) stream.
  void run(const std::function<void()>& enqueue);
  // The current (compute) stream waits for everything queued so far on the side stream.
  void join();
  // The host waits for the side stream (before the CPU reads what it copied).
  void host_wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace planner::rt

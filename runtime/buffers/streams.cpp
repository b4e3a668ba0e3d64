#include "runtime/buffers/streams.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#if __has_include(<cuda_runtime_api.h>) && __has_include(<c10/cuda/CUDAStream.h>)
#define PLANNER_STREAMS_CUDA 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace planner::rt {

#if defined(PLANNER_STREAMS_CUDA)
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

struct SideStream::Impl {
  bool cuda = false;
  std::optional<c10::cuda::CUDAStream> stream;
  cudaEvent_t to_side = nullptr, to_main = nullptr;
};

at::Tensor pinned_empty(int64_t n, at::ScalarType dtype, bool cuda) {
  if (!cuda) return at::empty({n}, at::TensorOptions().dtype(dtype));
  void* p = nullptr;
  const size_t bytes = size_t(n) * c10::elementSize(dtype);
  check(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault), "cudaHostAlloc");
  return at::from_blob(p, {n}, [](void* q) { cudaFreeHost(q); }, at::TensorOptions().dtype(dtype));
}

SideStream::SideStream(bool cuda) : impl_(std::make_unique<Impl>()) {
  impl_->cuda = cuda;
  if (!cuda) return;
  impl_->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false);
  check(cudaEventCreateWithFlags(&impl_->to_side, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&impl_->to_main, cudaEventDisableTiming), "cudaEventCreate");
}

SideStream::~SideStream() {
  if (impl_ && impl_->cuda) {
    cudaEventDestroy(impl_->to_side);
    cudaEventDestroy(impl_->to_main);
  }
}

void SideStream::run(const std::function<void()>& enqueue) {
  if (!impl_->cuda) return enqueue();
  auto main = c10::cuda::getCurrentCUDAStream();
  check(cudaEventRecord(impl_->to_side, main.stream()), "cudaEventRecord");
  check(cudaStreamWaitEvent(impl_->stream->stream(), impl_->to_side, 0), "cudaStreamWaitEvent");
  c10::cuda::CUDAStreamGuard guard(*impl_->stream);
  enqueue();
}

void SideStream::join() {
  if (!impl_->cuda) return;
  check(cudaEventRecord(impl_->to_main, impl_->stream->stream()), "cudaEventRecord");
  check(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream().stream(), impl_->to_main, 0), "cudaStreamWaitEvent");
}

void SideStream::host_wait() {
  if (impl_->cuda) check(cudaStreamSynchronize(impl_->stream->stream()), "cudaStreamSynchronize");
}
SideStream::Mark SideStream::mark() {
  if (!impl_->cuda) return nullptr;
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  Mark m(new cudaEvent_t(e), [](void* q) {
    cudaEventDestroy(*static_cast<cudaEvent_t*>(q));
    delete static_cast<cudaEvent_t*>(q);
  });
  check(cudaEventRecord(e, impl_->stream->stream()), "cudaEventRecord");
  return m;
}
void SideStream::wait(const Mark& m) {
  if (!impl_->cuda || !m) return;
  check(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream().stream(), *static_cast<cudaEvent_t*>(m.get()), 0),
        "cudaStreamWaitEvent");
}
#else
at::Tensor pinned_empty(int64_t n, at::ScalarType dtype, bool cuda) {
  if (cuda) throw std::runtime_error("this build has no CUDA headers: no pinned memory");
  return at::empty({n}, at::TensorOptions().dtype(dtype));
}
struct SideStream::Impl {};
SideStream::SideStream(bool cuda) : impl_(std::make_unique<Impl>()) {
  if (cuda) throw std::runtime_error("this build has no CUDA headers: no side streams");
}
SideStream::~SideStream() = default;
void SideStream::run(const std::function<void()>& enqueue) { enqueue(); }
void SideStream::join() {}
void SideStream::host_wait() {}
SideStream::Mark SideStream::mark() { return nullptr; }
void SideStream::wait(const Mark&) {}
#endif

}  // namespace planner::rt

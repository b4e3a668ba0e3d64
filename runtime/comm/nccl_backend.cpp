// The NCCL backend: CUDA tensors. Built only when LibTorch has CUDA and NCCL is
// found (CMakeLists.txt defines PLANNER_HAS_NCCL).
//
// Ordering (llm.c's way, never a device-wide sync): each communicator owns a
// high-priority CUDA stream from LibTorch's pool. A call records `ready` on the
// caller's current stream, makes the communicator's stream wait for it, issues
// the NCCL call there and records `done`; Work::wait() makes the caller's
// current stream wait for `done` (the host returns at once).
//
// Memory: the Work holds the operation's tensors until wait(). When wait() runs
// on the stream that issued the call, the tensors are then simply released:
// any later reuse of their memory by the caching allocator is work queued on
// that stream after the wait, so after `done`. Only a Work waited on another
// stream, or dropped unwaited before its `done` has passed, records its
// tensors on the communicator's stream (recordStream), whose cost is that the
// allocator cannot reuse them until it sees that stream's event pass: with the
// host running ahead of the GPU, every tensor freed meanwhile stays reserved.
// Tensor parallelism issues collectives on activations all through the step,
// and recording them all held several GiB per GPU in the allocator (2.8 GiB
// with tp=2, 7.7 GiB with sp, gpt-neo-1.3b on an H200; validation/h200x2-3d
// run2). This is PyTorch's TORCH_NCCL_AVOID_RECORD_STREAMS scheme.
//
// Faults: since wait() does not block the host, a watchdog thread per
// communicator polls the outstanding operations (cudaEventQuery) and
// ncclCommGetAsyncError every 100 ms. An operation whose `ready` event has
// passed but whose `done` has not within the timeout (or a host-side NCCL call
// that has not returned within it: connection setup waits for the peers), or
// an asynchronous NCCL error, ends the job: ncclCommAbort, one line on stderr,
// MPI_Abort. The watchdog calls no MPI function except MPI_Abort.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "runtime/comm/comm_detail.hpp"

namespace planner::rt::detail {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kLong: return ncclInt64;
    default: throw std::runtime_error(std::string("NCCL backend: unsupported dtype ") + c10::toString(t));
  }
}

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error(what + " failed: " + cudaGetErrorString(e));
}

// At process exit the CUDA runtime may be gone before a communicator: its
// events then count as finished, not as a fault.
bool cuda_shutting_down(cudaError_t e) { return e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed; }

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += " (" + std::string(last) + ")";
  return s;
}

// One operation, shared by its Work and the watchdog.
struct Op {
  explicit Op(const char* n) : name(n), host_start(Clock::now()) {}
  ~Op() {
    if (ready != nullptr) cudaEventDestroy(ready);
    if (done != nullptr) cudaEventDestroy(done);
  }
  const char* name;
  cudaEvent_t ready = nullptr, done = nullptr;
  Clock::time_point host_start;      // the call began (bounds a host-side hang in NCCL)
  std::atomic<bool> issued{false};   // the NCCL call returned and `done` is recorded
  // Watchdog only:
  bool started = false;              // `ready` has passed: the collective can run
  Clock::time_point device_start{};  // when the watchdog saw that
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Op> op, at::Device dev, c10::cuda::CUDAStream issued_on, c10::cuda::CUDAStream comm_stream,
           std::vector<at::Tensor> keep)
      : op_(std::move(op)), dev_(dev), issued_on_(issued_on), comm_stream_(comm_stream), keep_(std::move(keep)) {}
  ~NcclWork() override { record_kept(); }
  void wait() override {
    c10::cuda::CUDAGuard guard(dev_);
    const auto cur = c10::cuda::getCurrentCUDAStream(dev_.index());
    check_cuda(cudaStreamWaitEvent(cur.stream(), op_->done, 0), std::string(op_->name) + ": cudaStreamWaitEvent");
    if (cur == issued_on_) keep_.clear();  // reuse is ordered after `done` (see the top of this file)
    else record_kept();
  }
  bool done() override {
    const cudaError_t q = cudaEventQuery(op_->done);
    if (q == cudaSuccess) {
      keep_.clear();
      return true;
    }
    if (q != cudaErrorNotReady) check_cuda(q, std::string(op_->name) + ": cudaEventQuery");
    return false;
  }

 private:
  // The tensors still held, recorded on the communicator's stream and released:
  // the allocator reuses their memory only once the collective is over.
  void record_kept() noexcept {
    for (const auto& t : keep_)
      if (t.numel() > 0) {
        try {
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), comm_stream_);
        } catch (...) {  // CUDA shutting down at exit: nothing will reuse the memory
        }
      }
    keep_.clear();
  }
  std::shared_ptr<Op> op_;
  at::Device dev_;
  c10::cuda::CUDAStream issued_on_, comm_stream_;
  std::vector<at::Tensor> keep_;
};

class NcclCommunicator final : public GroupCommunicator {
 public:
  NcclCommunicator(SplitGroup s, at::Device dev)
      : GroupCommunicator(std::move(s.info)),
        mpi_(s.comm),
        dev_(dev),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, dev.index())) {
    c10::cuda::CUDAGuard guard(dev_);
    watchdog_ = std::thread([this] { watch(); });
    // The init is guarded like a collective: a peer that never arrives ends the job.
    auto init = std::make_shared<Op>("NCCL communicator init");
    track(init);
    try {
      ncclUniqueId id{};
      if (g_->rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      MPI_Request req = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, mpi_, &req),
                "communicator " + g_->name + ": MPI_Ibcast of the NCCL unique id");
      wait_request(req, *g_, "NCCL unique id broadcast", Clock::now());
      ncclComm_t c = nullptr;
      check_nccl(ncclCommInitRank(&c, size(), id, g_->rank), "ncclCommInitRank");
      comm_.store(c);
    } catch (...) {
      untrack(init);
      if (aborting()) park();
      shutdown_watchdog();
      MPI_Comm_free(&mpi_);
      throw;
    }
    untrack(init);
  }

  ~NcclCommunicator() override {
    // Let the outstanding operations finish (the watchdog still enforces the
    // timeout), then stop the watchdog and free NCCL's and MPI's resources.
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    shutdown_watchdog();
    if (ncclComm_t c = comm_.exchange(nullptr)) ncclCommDestroy(c);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  }

  Backend backend() const override { return Backend::Nccl; }

  WorkPtr all_reduce(at::Tensor t) override {
    static const char* op = "all_reduce";
    check(op, "t", t);
    return launch(op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()),
                           ncclSum, c, s);
    });
  }

  WorkPtr all_reduce_max(at::Tensor t) override {
    static const char* op = "all_reduce_max";
    check(op, "t", t);
    check_max_dtype(*g_, op, t);
    return launch(op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), ncclFloat32, ncclMax, c, s);
    });
  }

  WorkPtr reduce_scatter(const at::Tensor& in, at::Tensor out) override {
    static const char* op = "reduce_scatter";
    check(op, "in", in);
    check(op, "out", out);
    check_pair(*g_, op, in, out);
    if (in.numel() != size() * out.numel()) throw_sizes(op, "in", in, "out", out);
    chunk_in_place(*g_, op, out, in);  // NCCL's in-place form is exactly out = in's chunk rank()
    return launch(op, {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                               nccl_type(in.scalar_type()), ncclSum, c, s);
    });
  }

  WorkPtr all_gather(const at::Tensor& in, at::Tensor out) override {
    static const char* op = "all_gather";
    check(op, "in", in);
    check(op, "out", out);
    check_pair(*g_, op, in, out);
    if (out.numel() != size() * in.numel()) throw_sizes(op, "out", out, "in", in);
    chunk_in_place(*g_, op, in, out);  // NCCL's in-place form is exactly in = out's chunk rank()
    return launch(op, {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.scalar_type()),
                           c, s);
    });
  }

  WorkPtr broadcast(at::Tensor t, int root) override {
    static const char* op = "broadcast";
    check(op, "t", t);
    check_peer(*g_, op, root, "root");
    return launch(op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()),
                           root, c, s);
    });
  }

  WorkPtr send(const at::Tensor& t, int peer) override {
    static const char* op = "send";
    check(op, "t", t);
    check_p2p_peer(op, peer);
    return launch(op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), peer, c, s);
    });
  }

  WorkPtr recv(at::Tensor t, int peer) override {
    static const char* op = "recv";
    check(op, "t", t);
    check_p2p_peer(op, peer);
    return launch(op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()), peer, c, s);
    });
  }

  WorkPtr all_to_all_v(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor out,
                       const std::vector<int64_t>& recv_counts) override {
    static const char* op = "all_to_all_v";
    check(op, "in", in);
    check(op, "out", out);
    check_pair(*g_, op, in, out);
    if (static_cast<int>(send_counts.size()) != size() || static_cast<int>(recv_counts.size()) != size())
      throw std::runtime_error("communicator " + g_->name + ": all_to_all_v: counts do not match the group");
    const ncclDataType_t type = nccl_type(in.scalar_type());
    const size_t esz = static_cast<size_t>(in.element_size());
    // NCCL has no all-to-all call; its documented form is one group of sends and receives.
    return launch(op, {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      size_t so = 0, ro = 0;
      for (int p = 0; p < size() && r == ncclSuccess; ++p) {
        const auto sn = static_cast<size_t>(send_counts[size_t(p)]), rn = static_cast<size_t>(recv_counts[size_t(p)]);
        if (sn > 0) r = ncclSend(static_cast<char*>(in.data_ptr()) + so * esz, sn, type, p, c, s);
        if (r == ncclSuccess && rn > 0) r = ncclRecv(static_cast<char*>(out.data_ptr()) + ro * esz, rn, type, p, c, s);
        so += sn, ro += rn;
      }
      const ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
  }

  // The host barrier goes over the group's MPI communicator.
  void barrier() override {
    if (!mpi_thread_ok())
      throw std::runtime_error("communicator " + g_->name +
                               ": barrier: called from a second thread, but this MPI does not provide MPI_THREAD_MULTIPLE");
    MPI_Request req = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibarrier(mpi_, &req), "communicator " + g_->name + ": barrier: MPI_Ibarrier");
    wait_request(req, *g_, "barrier", Clock::now());
  }

 private:
  void check_nccl(ncclResult_t r, const char* call) {
    if (r != ncclSuccess && aborting()) park();  // the watchdog aborted NCCL and is ending the job
    if (r != ncclSuccess)
      throw std::runtime_error("communicator " + g_->name + ": " + call + " failed: " + nccl_error(r, comm_.load()));
  }
  void check(const char* op, const char* arg, const at::Tensor& t) {
    check_tensor(*g_, op, arg, t, at::kCUDA);
    if (t.device().index() != dev_.index())
      throw std::runtime_error("communicator " + g_->name + ": " + op + ": " + arg + " is on " + t.device().str() +
                               ", but this communicator was built on " + dev_.str());
  }

  template <class Call>
  WorkPtr launch(const char* name, std::vector<at::Tensor> tensors, Call&& call) {
    c10::cuda::CUDAGuard guard(dev_);
    auto op = std::make_shared<Op>(name);
    const std::string where = "communicator " + g_->name + ": " + name + ": ";
    std::optional<c10::cuda::CUDAStream> caller_stream;
    track(op);
    try {
      check_cuda(cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming), where + "cudaEventCreate");
      check_cuda(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming), where + "cudaEventCreate");
      const auto caller = c10::cuda::getCurrentCUDAStream(dev_.index());
      check_cuda(cudaEventRecord(op->ready, caller.stream()), where + "cudaEventRecord");
      check_cuda(cudaStreamWaitEvent(stream_.stream(), op->ready, 0), where + "cudaStreamWaitEvent");
      const ncclResult_t r = call(comm_.load(), stream_.stream());
      if (r != ncclSuccess) throw std::runtime_error(where + "NCCL failed: " + nccl_error(r, comm_.load()));
      check_cuda(cudaEventRecord(op->done, stream_.stream()), where + "cudaEventRecord");
      caller_stream = caller;
    } catch (...) {
      untrack(op);
      if (aborting()) park();  // the failure came from the watchdog's abort, which is ending the job
      throw;
    }
    op->issued.store(true, std::memory_order_release);
    return std::make_shared<NcclWork>(op, dev_, *caller_stream, stream_, std::move(tensors));
  }

  void track(const std::shared_ptr<Op>& op) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(op);
  }
  void untrack(const std::shared_ptr<Op>& op) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(std::remove(pending_.begin(), pending_.end(), op), pending_.end());
  }
  void shutdown_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  // Ends the job: the line first (so that it is out even if the aborted NCCL
  // makes a call on the main thread fail), then ncclCommAbort (its kernels stop
  // spinning) for at most a few seconds, then MPI_Abort.
  [[noreturn]] void fault(const std::string& message) {
    begin_abort(message);
    if (ncclComm_t c = comm_.load()) {
      auto finished = std::make_shared<std::atomic<bool>>(false);
      std::thread([c, finished] {
        ncclCommAbort(c);
        finished->store(true);
      }).detach();
      const auto until = Clock::now() + std::chrono::seconds(5);
      while (!finished->load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    finish_abort(1);
  }

  void watch() {
    // Event queries need this device's context on this thread (and must not
    // create one on device 0).
    cudaSetDevice(dev_.index());
    const auto timeout = g_->timeout;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_) break;
      std::vector<std::shared_ptr<Op>> ops = pending_;
      lock.unlock();
      std::vector<std::shared_ptr<Op>> finished;
      const auto now = Clock::now();
      for (const auto& op : ops) {
        if (!op->issued.load(std::memory_order_acquire)) {
          if (now - op->host_start > timeout) fault(timeout_message(*g_, op->name));
          continue;
        }
        if (!op->started) {
          const cudaError_t q = cudaEventQuery(op->ready);
          if (q == cudaSuccess || cuda_shutting_down(q)) {
            op->started = true;
            op->device_start = now;
          } else if (q != cudaErrorNotReady) {
            fault(std::string(op->name) + " on group " + g_->describe() + ": CUDA error " + cudaGetErrorString(q) +
                  "; ending the job");
          }
        }
        const cudaError_t q = cudaEventQuery(op->done);
        if (q == cudaSuccess || cuda_shutting_down(q)) {
          finished.push_back(op);
        } else if (q != cudaErrorNotReady) {
          fault(std::string(op->name) + " on group " + g_->describe() + ": CUDA error " + cudaGetErrorString(q) +
                "; ending the job");
        } else if (op->started && now - op->device_start > timeout) {
          fault(timeout_message(*g_, op->name));
        }
      }
      if (ncclComm_t c = comm_.load()) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
          fault("NCCL error on group " + g_->describe() + ": " + nccl_error(async, c) + "; ending the job");
      }
      lock.lock();
      for (const auto& op : finished) pending_.erase(std::remove(pending_.begin(), pending_.end(), op), pending_.end());
    }
  }

  MPI_Comm mpi_;
  at::Device dev_;
  c10::cuda::CUDAStream stream_;
  std::atomic<ncclComm_t> comm_{nullptr};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::shared_ptr<Op>> pending_;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(SplitGroup split, at::Device device) {
  if (!device.has_index()) device = at::Device(at::kCUDA, c10::cuda::current_device());
  const int n = static_cast<int>(c10::cuda::device_count());
  if (device.index() >= n) {
    const std::string name = split.info.name;
    MPI_Comm_free(&split.comm);
    throw std::runtime_error("make_communicator " + name + ": device " + device.str() + " does not exist (" +
                             std::to_string(n) + " CUDA devices visible)");
  }
  return std::make_unique<NcclCommunicator>(std::move(split), device);
}

}  // namespace planner::rt::detail

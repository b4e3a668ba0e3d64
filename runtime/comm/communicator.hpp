#pragma once
// The narrow communicator the distributed runtime uses (docs/RUNTIME.md,
// "Runtime"): one process per device, started by MPI; one Communicator per
// process group of the RankGrid (dp, tp or pp group). Two backends behind one
// interface:
//   - NCCL for CUDA tensors (runtime/comm/nccl_backend.cpp, built only when
//     LibTorch has CUDA and NCCL is found): the unique id is broadcast over MPI;
//     each collective runs on the communicator's own CUDA stream, ordered after
//     the work already queued on the caller's current stream by a CUDA event,
//     never by a device-wide synchronisation;
//   - MPI for CPU tensors (runtime/comm/mpi_backend.cpp): non-blocking MPI
//     calls (MPI_Iallreduce ...), so every strategy is testable on the CPU in CI.
//
// Semantics common to both:
//   - every call is asynchronous and returns a Work; Work::wait() makes the
//     caller's *current* stream (GPU) or the calling thread (CPU) wait for it;
//   - the tensors passed stay alive until the Work completes (the Work keeps
//     references; the NCCL backend also records them on its stream for the
//     caching allocator);
//   - reductions are sums (all_reduce_max apart); tensors are contiguous; float32, float64, bfloat16,
//     float16 and int64 are supported (MPI reduces 16-bit types through its own
//     user-defined operation, in fp32 per element, then rounds);
//   - every wait has a deadline (`timeout`): a collective that does not finish
//     in time ends the whole job (MPI_Abort) after one line on stderr naming this
//     rank, the group, the operation and the timeout: a dead or stuck peer never
//     hangs the job. MPI counts the timeout from the wait() call; NCCL's
//     watchdog (one thread per communicator, polling every 100 ms) from the
//     moment the operation could start on the device (the caller's stream reached
//     it), or from the call itself while NCCL's host side has not returned (its
//     connection set-up waits for the peers). An asynchronous NCCL error ends the
//     job the same way.
#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace planner::rt {

// This process's place in the MPI world (MPI_COMM_WORLD) and on its node.
struct WorldInfo {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks of this node (MPI_COMM_TYPE_SHARED)
  std::string hostname;
};

// MPI_Init_thread (MPI_THREAD_MULTIPLE requested, FUNNELED accepted) once per
// process; safe to call again. Also installed: an atexit MPI_Finalize.
WorldInfo init_world();
bool world_initialized();
// True when this process was started by a launcher (mpirun/srun/PMI variables
// in the environment), i.e. MPI_Init will find a multi-rank world.
bool launched_by_mpi();
// Ends every rank: prints `message` (one line, prefixed with this rank) on
// stderr and calls MPI_Abort(MPI_COMM_WORLD, code).
[[noreturn]] void abort_world(const std::string& message, int code = 1);
// MPI_Finalize now, when init_world() started MPI and it is not finalized yet
// (the atexit hook then does nothing). Every communicator must be gone first.
void finalize_world();
// True when this build has the NCCL backend (LibTorch with CUDA and NCCL found).
bool has_nccl();

// For tests on the CPU: the MPI backend's sends started from now on report
// done() == false until they are waited for, as a GPU host running ahead of
// its device sees most NCCL sends (their `done` event not yet passed). What
// frees a send's tensor only when the host sees it done then frees nothing.
// Returns the setting before.
bool mpi_sends_seen_done_only_when_waited(bool on);

class Work {
 public:
  virtual ~Work() = default;
  // GPU: the caller's current CUDA stream waits for the collective (an event
  // wait; the host returns at once). CPU: blocks until done, or aborts the job
  // after the communicator's timeout.
  virtual void wait() = 0;
  // True once the operation has completed (never blocks).
  virtual bool done() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

enum class Backend { Mpi, Nccl };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual Backend backend() const = 0;
  virtual int rank() const = 0;   // rank inside this group
  virtual int size() const = 0;
  virtual const std::vector<int>& members() const = 0;  // world ranks, in group order
  virtual const std::string& name() const = 0;          // "dp", "tp", "pp", "world" (for messages)
  virtual std::chrono::seconds timeout() const = 0;     // the deadline of every wait

  // In place: t = sum over the group.
  virtual WorkPtr all_reduce(at::Tensor t) = 0;
  // In place: t = elementwise maximum over the group; float32 only (MPI_MAX,
  // ncclMax). precision=fp8 under tp: the per-tensor amaxes of sharded tensors
  // (runtime/model/fp8_linear.hpp), as Transformer Engine reduces its amaxes
  // over the tp group.
  virtual WorkPtr all_reduce_max(at::Tensor t) = 0;
  // in.numel() == size() * out.numel(); out = sum over the group of chunk rank() of in.
  // `out` may be in's own chunk rank() (in place).
  virtual WorkPtr reduce_scatter(const at::Tensor& in, at::Tensor out) = 0;
  // out.numel() == size() * in.numel(); chunk r of out = in of rank r. `in` may be
  // out's own chunk rank() (in place).
  virtual WorkPtr all_gather(const at::Tensor& in, at::Tensor out) = 0;
  virtual WorkPtr broadcast(at::Tensor t, int root) = 0;  // root: rank in this group
  virtual WorkPtr send(const at::Tensor& t, int peer) = 0;  // peer: rank in this group
  virtual WorkPtr recv(at::Tensor t, int peer) = 0;
  // All-to-all with per-peer counts (MPI_Alltoallv; NCCL: grouped sends and
  // receives): `in` holds send_counts[r] elements for rank r, one run after
  // another in rank order, `out` receives recv_counts[r] elements from rank r
  // the same way. Counts are elements; in and out of one dtype, not aliased.
  // Mixture of experts' token dispatch and combine (runtime/model/moe.hpp).
  virtual WorkPtr all_to_all_v(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor out,
                               const std::vector<int64_t>& recv_counts) = 0;
  // Blocks the host until every member arrives (with the timeout).
  virtual void barrier() = 0;
};

// Collective over the whole world: every rank passes the same `groups` (for
// example RankGrid::all_dp_groups()), each rank in exactly one of them, and gets
// the communicator of its own group. `device` picks the backend: CUDA -> NCCL
// (throws std::runtime_error when this build has no NCCL), CPU -> MPI.
std::unique_ptr<Communicator> make_communicator(const std::vector<std::vector<int>>& groups, const std::string& name,
                                                at::Device device, std::chrono::seconds timeout);
// The same collective over the whole world, for callers that know only their
// own group: every rank passes the members of its group (world ranks, in group
// order; every member of a group passes the same list, and the groups of one
// call are disjoint and cover the world). A group of one rank is allowed.
std::unique_ptr<Communicator> make_group_communicator(const std::vector<int>& my_group, const std::string& name,
                                                      at::Device device, std::chrono::seconds timeout);

}  // namespace planner::rt

#pragma once
// Internals shared by the MPI and NCCL backends (not part of the runtime's
// interface): the world's MPI state, group splitting, argument checks, timed
// waits on MPI requests and the one-line fault messages.
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace planner::rt::detail {

using Clock = std::chrono::steady_clock;

// What every message about a group names, shared by a communicator and its works.
struct GroupInfo {
  std::string name;          // "dp", "tp", "pp", "world"
  std::vector<int> members;  // world ranks, in group order
  int world_rank = 0;
  int rank = 0;  // position in the group
  std::chrono::seconds timeout{0};
  // "dp {0,1}"
  std::string describe() const;
};

// abort_world() in two halves, for the NCCL watchdog, which aborts NCCL in
// between: begin_abort prints the one line (or, when another thread is already
// ending the job, parks this one for good); finish_abort calls MPI_Abort.
void begin_abort(const std::string& message);
[[noreturn]] void finish_abort(int code);
// True once some thread has begun ending the job.
bool aborting();
// Blocks this thread until the job ends (while another thread aborts it).
[[noreturn]] void park();

// The world's MPI state, set by init_world().
int world_rank();  // -1 before init_world()
// True when MPI may be called from this thread: always with
// MPI_THREAD_MULTIPLE, otherwise only from the thread that called init_world().
bool mpi_thread_ok();
// Throws std::runtime_error naming `what` and MPI's error string when rc is not MPI_SUCCESS.
void check_mpi(int rc, const std::string& what);
// The committed 2-byte MPI datatypes for bfloat16 and float16 and the sum that
// adds them in fp32 per element (created by init_world()).
MPI_Datatype mpi_bf16_type();
MPI_Datatype mpi_fp16_type();
MPI_Op mpi_sum16_op();

// The line that ends the job when an operation misses its deadline.
std::string timeout_message(const GroupInfo& g, const char* op);

// Polls `req` with MPI_Test (yielding, then short sleeps) until it completes or
// `timeout` has passed since `start`; then abort_world(timeout_message(...)).
void wait_request(MPI_Request& req, const GroupInfo& g, const char* op, Clock::time_point start);

// This rank's group out of `groups` (every rank in exactly one group), with its
// own MPI communicator from MPI_Comm_split (color = group index, key = position).
struct SplitGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  GroupInfo info;
};
SplitGroup split_world(const std::vector<std::vector<int>>& groups, const std::string& name,
                       std::chrono::seconds timeout);
// The same from this rank's own group only (color = the group's smallest world rank).
SplitGroup split_own(const std::vector<int>& my_group, const std::string& name, std::chrono::seconds timeout);

// Argument checks shared by both backends; each throws std::runtime_error with
// one line naming the communicator, the operation and what was wrong.
void check_tensor(const GroupInfo& g, const char* op, const char* arg, const at::Tensor& t, at::DeviceType device);
void check_pair(const GroupInfo& g, const char* op, const at::Tensor& in, const at::Tensor& out);
// all_reduce_max takes float32 only.
void check_max_dtype(const GroupInfo& g, const char* op, const at::Tensor& t);
void check_peer(const GroupInfo& g, const char* op, int peer, const char* what);
// For all_gather: true when `in` is out's chunk rank() (in place); throws when
// `in` overlaps `out` anywhere else. reduce_scatter passes (out, in).
bool chunk_in_place(const GroupInfo& g, const char* op, const at::Tensor& chunk, const at::Tensor& whole);

// What both backends share: the group's accessors (rank, size, members, name,
// timeout) and the one-line messages about a peer or sizes that do not fit.
class GroupCommunicator : public Communicator {
 public:
  explicit GroupCommunicator(GroupInfo info) : g_(std::make_shared<GroupInfo>(std::move(info))) {}
  int rank() const override { return g_->rank; }
  int size() const override { return static_cast<int>(g_->members.size()); }
  const std::vector<int>& members() const override { return g_->members; }
  const std::string& name() const override { return g_->name; }
  std::chrono::seconds timeout() const override { return g_->timeout; }

 protected:
  // A send/recv peer: a rank of this group other than this one.
  void check_p2p_peer(const char* op, int peer) const;
  // `big` should have size() times `small`'s elements.
  [[noreturn]] void throw_sizes(const char* op, const char* big, const at::Tensor& b, const char* small,
                                const at::Tensor& s) const;
  // Shared with the works, which name the group in their messages.
  std::shared_ptr<GroupInfo> g_;
};

std::unique_ptr<Communicator> make_mpi_communicator(SplitGroup split);
#if defined(PLANNER_HAS_NCCL)
std::unique_ptr<Communicator> make_nccl_communicator(SplitGroup split, at::Device device);
#endif

}  // namespace planner::rt::detail

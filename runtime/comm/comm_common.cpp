// Shared by both backends: groups, argument checks, timed waits, and the
// backend choice in make_communicator().
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <thread>

#include "runtime/comm/comm_detail.hpp"

namespace planner::rt {
namespace detail {
namespace {

std::string list_ranks(const std::vector<int>& v) {
  std::string s = "{";
  const size_t shown = v.size() > 16 ? 8 : v.size();
  for (size_t i = 0; i < shown; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  if (shown < v.size()) s += ",...," + std::to_string(v.back()) + "} (" + std::to_string(v.size()) + " ranks)";
  else s += "}";
  return s;
}

std::string where(const GroupInfo& g, const char* op) { return "communicator " + g.name + ": " + op + ": "; }

const char* dtype_name(at::ScalarType t) { return c10::toString(t); }

}  // namespace

std::string GroupInfo::describe() const { return name + " " + list_ranks(members); }

std::string timeout_message(const GroupInfo& g, const char* op) {
  return std::string(op) + " on group " + g.describe() + " did not finish within " + std::to_string(g.timeout.count()) +
         " s (a peer is dead or stuck); ending the job";
}

void wait_request(MPI_Request& req, const GroupInfo& g, const char* op, Clock::time_point start) {
  if (!mpi_thread_ok())
    throw std::runtime_error(where(g, op) +
                             "waited from a second thread, but this MPI does not provide MPI_THREAD_MULTIPLE");
  const auto deadline = start + g.timeout;
  // MPI progresses non-blocking operations only inside MPI calls, so poll:
  // spin with yields first (short collectives), then sleep a little longer
  // each round up to 1 ms (ranks may share cores: CI oversubscribes).
  for (int i = 0;; ++i) {
    int flag = 0;
    check_mpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), where(g, op) + "MPI_Test");
    if (flag) return;
    if (Clock::now() > deadline) abort_world(timeout_message(g, op));
    if (i < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 * (i - 199))));
  }
}

SplitGroup split_color(const std::vector<int>& members, int color, int position, const std::string& name,
                       std::chrono::seconds timeout);

SplitGroup split_world(const std::vector<std::vector<int>>& groups, const std::string& name,
                       std::chrono::seconds timeout) {
  const WorldInfo w = init_world();
  if (timeout.count() <= 0)
    throw std::runtime_error("make_communicator " + name + ": the timeout must be positive, got " +
                             std::to_string(timeout.count()) + " s");
  // Every rank checks the same list, so every rank throws the same error
  // before any collective call.
  std::vector<int> owner(static_cast<size_t>(w.size), -1), position(static_cast<size_t>(w.size), -1);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (groups[gi].empty()) throw std::runtime_error("make_communicator " + name + ": group " + std::to_string(gi) + " is empty");
    for (size_t p = 0; p < groups[gi].size(); ++p) {
      const int r = groups[gi][p];
      if (r < 0 || r >= w.size)
        throw std::runtime_error("make_communicator " + name + ": group " + list_ranks(groups[gi]) + " names rank " +
                                 std::to_string(r) + ", but the world has ranks 0.." + std::to_string(w.size - 1));
      if (owner[static_cast<size_t>(r)] >= 0)
        throw std::runtime_error("make_communicator " + name + ": rank " + std::to_string(r) +
                                 " is in more than one group (each rank must be in exactly one)");
      owner[static_cast<size_t>(r)] = static_cast<int>(gi);
      position[static_cast<size_t>(r)] = static_cast<int>(p);
    }
  }
  for (int r = 0; r < w.size; ++r)
    if (owner[static_cast<size_t>(r)] < 0)
      throw std::runtime_error("make_communicator " + name + ": rank " + std::to_string(r) +
                               " is in no group (each rank must be in exactly one)");

  return split_color(groups[static_cast<size_t>(owner[static_cast<size_t>(w.rank)])], owner[static_cast<size_t>(w.rank)],
                     position[static_cast<size_t>(w.rank)], name, timeout);
}

SplitGroup split_own(const std::vector<int>& my_group, const std::string& name, std::chrono::seconds timeout) {
  const WorldInfo w = init_world();
  if (timeout.count() <= 0)
    throw std::runtime_error("make_communicator " + name + ": the timeout must be positive, got " +
                             std::to_string(timeout.count()) + " s");
  const auto me = std::find(my_group.begin(), my_group.end(), w.rank);
  if (me == my_group.end())
    throw std::runtime_error("make_communicator " + name + ": rank " + std::to_string(w.rank) + " is not in its group " +
                             list_ranks(my_group));
  for (int r : my_group)
    if (r < 0 || r >= w.size)
      throw std::runtime_error("make_communicator " + name + ": group " + list_ranks(my_group) + " names rank " +
                               std::to_string(r) + ", but the world has ranks 0.." + std::to_string(w.size - 1));
  return split_color(my_group, *std::min_element(my_group.begin(), my_group.end()),
                     static_cast<int>(me - my_group.begin()), name, timeout);
}

SplitGroup split_color(const std::vector<int>& members, int color, int position, const std::string& name,
                       std::chrono::seconds timeout) {
  const WorldInfo w = init_world();
  SplitGroup s;
  s.info.name = name;
  s.info.members = members;
  s.info.world_rank = w.rank;
  s.info.rank = position;
  s.info.timeout = timeout;
  if (!mpi_thread_ok())
    throw std::runtime_error("make_communicator " + name +
                             ": called from a second thread, but this MPI does not provide MPI_THREAD_MULTIPLE");
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, s.info.rank, &s.comm), "make_communicator " + name + ": MPI_Comm_split");
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN);
  return s;
}

void check_tensor(const GroupInfo& g, const char* op, const char* arg, const at::Tensor& t, at::DeviceType device) {
  if (!t.defined()) throw std::runtime_error(where(g, op) + arg + " is an undefined tensor");
  if (t.device().type() != device)
    throw std::runtime_error(where(g, op) + arg + " is on " + t.device().str() + ", but this communicator works on " +
                             (device == at::kCUDA ? "CUDA" : "CPU") + " tensors");
  if (!t.is_contiguous()) throw std::runtime_error(where(g, op) + arg + " must be contiguous");
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kLong:
      break;
    default:
      throw std::runtime_error(where(g, op) + arg + " has dtype " + dtype_name(t.scalar_type()) +
                               "; supported: float32, float64, bfloat16, float16, int64");
  }
  if (device == at::kCPU && t.numel() > INT_MAX)
    throw std::runtime_error(where(g, op) + arg + " has " + std::to_string(t.numel()) +
                             " elements; the MPI backend takes at most 2^31-1 per call");
}

void check_pair(const GroupInfo& g, const char* op, const at::Tensor& in, const at::Tensor& out) {
  if (in.scalar_type() != out.scalar_type())
    throw std::runtime_error(where(g, op) + "in has dtype " + dtype_name(in.scalar_type()) + " but out has " +
                             dtype_name(out.scalar_type()));
  if (in.device() != out.device())
    throw std::runtime_error(where(g, op) + "in is on " + in.device().str() + " but out on " + out.device().str());
}

void check_max_dtype(const GroupInfo& g, const char* op, const at::Tensor& t) {
  if (t.scalar_type() != at::kFloat)
    throw std::runtime_error(where(g, op) + "takes float32 only, got " + dtype_name(t.scalar_type()));
}

void check_peer(const GroupInfo& g, const char* op, int peer, const char* what) {
  const int n = static_cast<int>(g.members.size());
  if (peer < 0 || peer >= n)
    throw std::runtime_error(where(g, op) + what + " " + std::to_string(peer) + " is not a rank of this group (0.." +
                             std::to_string(n - 1) + ")");
}

bool chunk_in_place(const GroupInfo& g, const char* op, const at::Tensor& chunk, const at::Tensor& whole) {
  const auto* c = static_cast<const char*>(chunk.data_ptr());
  const auto* w = static_cast<const char*>(whole.data_ptr());
  const auto cb = static_cast<int64_t>(chunk.nbytes()), wb = static_cast<int64_t>(whole.nbytes());
  if (cb == 0) return false;
  if (c == w + g.rank * cb) return true;
  if (c < w + wb && w < c + cb)
    throw std::runtime_error(where(g, op) +
                             "in and out overlap; the only overlap allowed is the smaller one being chunk rank() of "
                             "the larger (in place)");
  return false;
}

void GroupCommunicator::check_p2p_peer(const char* op, int peer) const {
  check_peer(*g_, op, peer, "peer");
  if (peer == g_->rank)
    throw std::runtime_error("communicator " + g_->name + ": " + op + ": peer " + std::to_string(peer) +
                             " is this rank itself");
}

void GroupCommunicator::throw_sizes(const char* op, const char* big, const at::Tensor& b, const char* small,
                                    const at::Tensor& s) const {
  throw std::runtime_error("communicator " + g_->name + ": " + op + ": " + big + " has " + std::to_string(b.numel()) +
                           " elements, expected size() * " + small + ".numel() = " + std::to_string(size()) + " * " +
                           std::to_string(s.numel()) + " = " + std::to_string(size() * s.numel()));
}

}  // namespace detail

std::unique_ptr<Communicator> make_communicator(const std::vector<std::vector<int>>& groups, const std::string& name,
                                                at::Device device, std::chrono::seconds timeout) {
  if (device.is_cuda()) {
#if defined(PLANNER_HAS_NCCL)
    return detail::make_nccl_communicator(detail::split_world(groups, name, timeout), device);
#else
    throw std::runtime_error("make_communicator " + name +
                             ": this build has no NCCL (needs LibTorch with CUDA and NCCL at configure time, "
                             "e.g. -DNCCL_ROOT=<dir with include/nccl.h>), so it cannot communicate CUDA tensors");
#endif
  }
  if (device.is_cpu()) return detail::make_mpi_communicator(detail::split_world(groups, name, timeout));
  throw std::runtime_error("make_communicator " + name + ": no backend for device " + device.str() +
                           " (CUDA uses NCCL, CPU uses MPI)");
}

std::unique_ptr<Communicator> make_group_communicator(const std::vector<int>& my_group, const std::string& name,
                                                      at::Device device, std::chrono::seconds timeout) {
  if (device.is_cuda()) {
#if defined(PLANNER_HAS_NCCL)
    return detail::make_nccl_communicator(detail::split_own(my_group, name, timeout), device);
#else
    throw std::runtime_error("make_communicator " + name + ": this build has no NCCL, so it cannot communicate CUDA tensors");
#endif
  }
  if (device.is_cpu()) return detail::make_mpi_communicator(detail::split_own(my_group, name, timeout));
  throw std::runtime_error("make_communicator " + name + ": no backend for device " + device.str() +
                           " (CUDA uses NCCL, CPU uses MPI)");
}

}  // namespace planner::rt

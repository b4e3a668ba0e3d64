// The MPI backend: CPU tensors, non-blocking MPI calls (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Isend/MPI_Irecv),
// so every strategy runs on the CPU under `mpirun -np N` in CI.
// 16-bit types travel as 2-byte MPI types and are summed by a user-defined
// commutative operation in fp32 per element (world.cpp).
#include <atomic>
#include <functional>
#include <stdexcept>

#include "runtime/comm/comm_detail.hpp"

namespace planner::rt {
namespace {
std::atomic<bool> g_sends_seen_done_only_when_waited{false};
}  // namespace

bool mpi_sends_seen_done_only_when_waited(bool on) { return g_sends_seen_done_only_when_waited.exchange(on); }

namespace detail {
namespace {

struct TypeOp {
  MPI_Datatype type;
  MPI_Op sum;
};

TypeOp mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {MPI_FLOAT, MPI_SUM};
    case at::kDouble: return {MPI_DOUBLE, MPI_SUM};
    case at::kLong: return {MPI_INT64_T, MPI_SUM};
    case at::kBFloat16: return {mpi_bf16_type(), mpi_sum16_op()};
    case at::kHalf: return {mpi_fp16_type(), mpi_sum16_op()};
    default: throw std::runtime_error(std::string("MPI backend: unsupported dtype ") + c10::toString(t));
  }
}

int count(const at::Tensor& t) { return static_cast<int>(t.numel()); }

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<const GroupInfo> g, const char* op, std::vector<at::Tensor> keep,
          std::function<void()> finish = {})
      : g_(std::move(g)), op_(op), keep_(std::move(keep)), finish_(std::move(finish)) {}
  // A work dropped before it completed would leave MPI writing into freed
  // memory: wait it out (with the deadline) instead.
  ~MpiWork() override {
    if (complete_ || req_ == MPI_REQUEST_NULL) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    try {
      wait();
    } catch (...) {
    }
  }
  MPI_Request* request() { return &req_; }
  // done() stays false until wait() (mpi_sends_seen_done_only_when_waited).
  void make_opaque() { opaque_ = true; }

  void wait() override {
    if (complete_) return;
    wait_request(req_, *g_, op_, Clock::now());
    finish();
  }
  bool done() override {
    if (complete_) return true;
    if (opaque_) return false;
    if (!mpi_thread_ok()) return false;  // only the MPI thread can make progress
    int flag = 0;
    check_mpi(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "communicator " + g_->name + ": " + op_ + ": MPI_Test");
    if (flag) finish();
    return complete_;
  }

 private:
  void finish() {
    complete_ = true;
    if (finish_) finish_();
    keep_.clear();
  }
  std::shared_ptr<const GroupInfo> g_;
  const char* op_;
  std::vector<at::Tensor> keep_;
  std::function<void()> finish_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool complete_ = false, opaque_ = false;
};

class MpiCommunicator final : public GroupCommunicator {
 public:
  explicit MpiCommunicator(SplitGroup s) : GroupCommunicator(std::move(s.info)), comm_(s.comm) {}
  ~MpiCommunicator() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  Backend backend() const override { return Backend::Mpi; }

  WorkPtr all_reduce(at::Tensor t) override {
    static const char* op = "all_reduce";
    check_tensor(*g_, op, "t", t, at::kCPU);
    auto w = start(op, {t});
    const auto [type, sum] = mpi_type(t.scalar_type());
    check(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count(t), type, sum, comm_, w->request()), op, "MPI_Iallreduce");
    return w;
  }

  WorkPtr all_reduce_max(at::Tensor t) override {
    static const char* op = "all_reduce_max";
    check_tensor(*g_, op, "t", t, at::kCPU);
    check_max_dtype(*g_, op, t);
    auto w = start(op, {t});
    check(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count(t), MPI_FLOAT, MPI_MAX, comm_, w->request()), op,
          "MPI_Iallreduce");
    return w;
  }

  WorkPtr reduce_scatter(const at::Tensor& in, at::Tensor out) override {
    static const char* op = "reduce_scatter";
    check_tensor(*g_, op, "in", in, at::kCPU);
    check_tensor(*g_, op, "out", out, at::kCPU);
    check_pair(*g_, op, in, out);
    if (in.numel() != size() * out.numel()) throw_sizes(op, "in", in, "out", out);
    // In place (out is in's chunk rank()): MPI has no such form, so reduce into
    // a temporary and copy it into out once done.
    at::Tensor dst = chunk_in_place(*g_, op, out, in) ? at::empty_like(out) : out;
    std::function<void()> finish;
    if (!dst.is_same(out)) finish = [dst, out]() mutable { out.copy_(dst); };
    auto w = start(op, {in, out, dst}, std::move(finish));
    const auto [type, sum] = mpi_type(in.scalar_type());
    check(MPI_Ireduce_scatter_block(in.data_ptr(), dst.data_ptr(), count(out), type, sum, comm_, w->request()), op,
          "MPI_Ireduce_scatter_block");
    return w;
  }

  WorkPtr all_gather(const at::Tensor& in, at::Tensor out) override {
    static const char* op = "all_gather";
    check_tensor(*g_, op, "in", in, at::kCPU);
    check_tensor(*g_, op, "out", out, at::kCPU);
    check_pair(*g_, op, in, out);
    if (out.numel() != size() * in.numel()) throw_sizes(op, "out", out, "in", in);
    const bool in_place = chunk_in_place(*g_, op, in, out);
    auto w = start(op, {in, out});
    const MPI_Datatype type = mpi_type(in.scalar_type()).type;
    check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data_ptr(), count(in), type, out.data_ptr(), count(in), type,
                         comm_, w->request()),
          op, "MPI_Iallgather");
    return w;
  }

  WorkPtr broadcast(at::Tensor t, int root) override {
    static const char* op = "broadcast";
    check_tensor(*g_, op, "t", t, at::kCPU);
    check_peer(*g_, op, root, "root");
    auto w = start(op, {t});
    check(MPI_Ibcast(t.data_ptr(), count(t), mpi_type(t.scalar_type()).type, root, comm_, w->request()), op,
          "MPI_Ibcast");
    return w;
  }

  WorkPtr send(const at::Tensor& t, int peer) override {
    static const char* op = "send";
    check_tensor(*g_, op, "t", t, at::kCPU);
    check_p2p_peer(op, peer);
    auto w = start(op, {t});
    if (g_sends_seen_done_only_when_waited) w->make_opaque();
    check(MPI_Isend(t.data_ptr(), count(t), mpi_type(t.scalar_type()).type, peer, kTag, comm_, w->request()), op,
          "MPI_Isend");
    return w;
  }

  WorkPtr recv(at::Tensor t, int peer) override {
    static const char* op = "recv";
    check_tensor(*g_, op, "t", t, at::kCPU);
    check_p2p_peer(op, peer);
    auto w = start(op, {t});
    check(MPI_Irecv(t.data_ptr(), count(t), mpi_type(t.scalar_type()).type, peer, kTag, comm_, w->request()), op,
          "MPI_Irecv");
    return w;
  }

  WorkPtr all_to_all_v(const at::Tensor& in, const std::vector<int64_t>& send_counts, at::Tensor out,
                       const std::vector<int64_t>& recv_counts) override {
    static const char* op = "all_to_all_v";
    check_tensor(*g_, op, "in", in, at::kCPU);
    check_tensor(*g_, op, "out", out, at::kCPU);
    check_pair(*g_, op, in, out);
    auto sc = std::make_shared<std::vector<int>>(), sd = std::make_shared<std::vector<int>>();
    auto rc = std::make_shared<std::vector<int>>(), rd = std::make_shared<std::vector<int>>();
    a2a_counts(op, send_counts, in.numel(), *sc, *sd);
    a2a_counts(op, recv_counts, out.numel(), *rc, *rd);
    // The count arrays must outlive the non-blocking call: the work keeps them.
    auto w = start(op, {in, out}, [sc, sd, rc, rd] {});
    const MPI_Datatype type = mpi_type(in.scalar_type()).type;
    check(MPI_Ialltoallv(in.data_ptr(), sc->data(), sd->data(), type, out.data_ptr(), rc->data(), rd->data(), type,
                         comm_, w->request()),
          op, "MPI_Ialltoallv");
    return w;
  }

  void barrier() override {
    static const char* op = "barrier";
    auto w = start(op, {});
    check(MPI_Ibarrier(comm_, w->request()), op, "MPI_Ibarrier");
    w->wait();
  }

 private:
  // Messages between two ranks of one communicator match in the order they
  // were posted (MPI's non-overtaking rule), as NCCL's send/recv do: one tag.
  static constexpr int kTag = 0;

  std::shared_ptr<MpiWork> start(const char* op, std::vector<at::Tensor> keep, std::function<void()> finish = {}) {
    if (!mpi_thread_ok())
      throw std::runtime_error("communicator " + g_->name + ": " + op +
                               ": called from a second thread, but this MPI does not provide MPI_THREAD_MULTIPLE");
    return std::make_shared<MpiWork>(g_, op, std::move(keep), std::move(finish));
  }
  // Counts and displacements as MPI's ints, checked against the group and the tensor.
  void a2a_counts(const char* op, const std::vector<int64_t>& counts, int64_t numel, std::vector<int>& c,
                  std::vector<int>& d) const {
    if (static_cast<int>(counts.size()) != size())
      throw std::runtime_error("communicator " + g_->name + ": " + op + ": " + std::to_string(counts.size()) +
                               " counts for a group of " + std::to_string(size()));
    int64_t off = 0;
    for (const int64_t n : counts) {
      if (n < 0 || off + n > numel)
        throw std::runtime_error("communicator " + g_->name + ": " + op + ": counts exceed the tensor");
      c.push_back(static_cast<int>(n));
      d.push_back(static_cast<int>(off));
      off += n;
    }
  }
  void check(int rc, const char* op, const char* call) { check_mpi(rc, "communicator " + g_->name + ": " + op + ": " + call); }

  MPI_Comm comm_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(SplitGroup split) {
  return std::make_unique<MpiCommunicator>(std::move(split));
}

}  // namespace detail
}  // namespace planner::rt

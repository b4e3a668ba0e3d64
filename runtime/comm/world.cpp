// The MPI world: initialisation, rank discovery, ending every rank on a fault.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "runtime/comm/comm_detail.hpp"
#include "runtime/comm/world_node.hpp"
#include "strategies/errors.hpp"
#include "runtime/exec_launch.hpp"

namespace planner::rt {
namespace {

struct WorldState {
  std::mutex mu;
  bool ready = false;
  bool we_initialised = false;  // init_world() called MPI_Init_thread (so we finalize)
  int provided = MPI_THREAD_SINGLE;
  std::thread::id main_thread;
  WorldInfo info;
  int node_key = 0;  // world_node_key()
  MPI_Datatype bf16 = MPI_DATATYPE_NULL, fp16 = MPI_DATATYPE_NULL;
  MPI_Op sum16 = MPI_OP_NULL;
};

WorldState& state() {
  static WorldState s;
  return s;
}
std::atomic<int> g_world_rank{-1};

// MPI_User_function for the 2-byte types: a + b in fp32, rounded back to
// nearest-even (c10's conversions), element by element.
void sum16(void* in, void* inout, int* len, MPI_Datatype* type) {
  const bool bf16 = *type == state().bf16;
  auto* a = static_cast<const unsigned char*>(in);
  auto* b = static_cast<unsigned char*>(inout);
  for (int i = 0; i < *len; ++i, a += 2, b += 2) {
    if (bf16) {
      c10::BFloat16 x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const c10::BFloat16 s(static_cast<float>(x) + static_cast<float>(y));
      std::memcpy(b, &s, 2);
    } else {
      c10::Half x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const c10::Half s(static_cast<float>(x) + static_cast<float>(y));
      std::memcpy(b, &s, 2);
    }
  }
}

bool mpi_finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

void finalize_at_exit() { finalize_world(); }

}  // namespace

WorldInfo init_world() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.ready) return s.info;
  if (mpi_finalized()) throw std::runtime_error("init_world: MPI was already finalized in this process");
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw std::runtime_error("init_world: MPI_Init_thread failed");
    s.provided = provided;
    s.we_initialised = true;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&s.provided);
  }
  s.main_thread = std::this_thread::get_id();
  // Errors come back as return codes and become exceptions with one line,
  // instead of MPI's default handler ending the job with its own report.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  detail::check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &s.info.rank), "init_world: MPI_Comm_rank");
  detail::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &s.info.size), "init_world: MPI_Comm_size");
  // The node, as a cluster's launcher gives it: PLANNER_NODE (several "nodes"
  // emulated on one host), else Slurm's SLURM_NODEID; the local rank and size
  // then among the ranks of that node. Without either: the ranks that share
  // memory, keyed by their lowest world rank.
  MPI_Comm node = MPI_COMM_NULL;
  const char* node_var = std::getenv("PLANNER_NODE") ? "PLANNER_NODE" : std::getenv("SLURM_NODEID") ? "SLURM_NODEID" : nullptr;
  if (node_var) {
    char* end = nullptr;
    const long v = std::strtol(std::getenv(node_var), &end, 10);
    if (end == std::getenv(node_var) || *end != '\0' || v < 0 || v > (1 << 30))
      throw InputError(std::string(node_var) + "='" + std::getenv(node_var) + "' is not a node number (0, 1, ...)");
    s.node_key = int(v);
    detail::check_mpi(MPI_Comm_split(MPI_COMM_WORLD, int(v), s.info.rank, &node), "init_world: MPI_Comm_split (node)");
  } else {
    detail::check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.info.rank, MPI_INFO_NULL, &node),
                      "init_world: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    detail::check_mpi(MPI_Allreduce(&s.info.rank, &s.node_key, 1, MPI_INT, MPI_MIN, node), "init_world: node key");
  }
  MPI_Comm_rank(node, &s.info.local_rank);
  MPI_Comm_size(node, &s.info.local_size);
  MPI_Comm_free(&node);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  if (MPI_Get_processor_name(host, &len) == MPI_SUCCESS) s.info.hostname.assign(host, static_cast<size_t>(len));

  detail::check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &s.bf16), "init_world: MPI_Type_contiguous (bfloat16)");
  detail::check_mpi(MPI_Type_commit(&s.bf16), "init_world: MPI_Type_commit (bfloat16)");
  detail::check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &s.fp16), "init_world: MPI_Type_contiguous (float16)");
  detail::check_mpi(MPI_Type_commit(&s.fp16), "init_world: MPI_Type_commit (float16)");
  detail::check_mpi(MPI_Op_create(&sum16, /*commute=*/1, &s.sum16), "init_world: MPI_Op_create (16-bit sum)");

  g_world_rank = s.info.rank;
  s.ready = true;
  return s.info;
}

int world_node_key() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.node_key;
}

bool world_initialized() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.ready && !mpi_finalized();
}

bool launched_by_mpi() {
  // Open MPI's mpirun, PMI-1/PMI-2 (MPICH's hydra, srun --mpi=pmi2), PMIx
  // (srun --mpi=pmix, Open MPI 5), MVAPICH. Not SLURM_PROCID alone: an sbatch
  // script has it too without being an MPI launch.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

void abort_world(const std::string& message, int code) {
  detail::begin_abort(message);
  detail::finish_abort(code);
}

void finalize_world() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.we_initialised || mpi_finalized()) return;
  if (s.sum16 != MPI_OP_NULL) MPI_Op_free(&s.sum16);
  if (s.bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&s.bf16);
  if (s.fp16 != MPI_DATATYPE_NULL) MPI_Type_free(&s.fp16);
  MPI_Finalize();
  s.ready = false;
  g_world_rank = -1;
}

bool has_nccl() {
#if defined(PLANNER_HAS_NCCL)
  return true;
#else
  return false;
#endif
}

namespace detail {

namespace {
std::atomic<bool> g_aborting{false};
}

bool aborting() { return g_aborting.load(); }

void begin_abort(const std::string& message) {
  // One line, even when several threads (the NCCL watchdogs, the main thread)
  // fail at once: the first one prints and aborts, the others wait for the end.
  if (g_aborting.exchange(true)) park();
  // Under a launch by planner exec, the launcher prints one line for the job
  // (runtime/exec_launch.hpp), naming this rank.
  std::string flat;
  for (char c : message) flat += (c == '\n' || c == '\r') ? ' ' : c;
  if (relay_failure(1, flat)) return;
  std::string line = "planner: ";
  if (g_world_rank >= 0) line += "rank " + std::to_string(g_world_rank.load()) + ": ";
  for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;
  line += '\n';
  // One write(2) so that the ranks' lines do not interleave mid-line.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

void finish_abort(int code) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void park() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int world_rank() { return g_world_rank.load(); }

bool mpi_thread_ok() {
  auto& s = state();
  return s.provided >= MPI_THREAD_MULTIPLE || std::this_thread::get_id() == s.main_thread;
}

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(what + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

MPI_Datatype mpi_bf16_type() { return state().bf16; }
MPI_Datatype mpi_fp16_type() { return state().fp16; }
MPI_Op mpi_sum16_op() { return state().sum16; }

}  // namespace detail
}  // namespace planner::rt

#pragma once
// Pieces of planner calibrate's measurements shared by calibration/measure*.cpp.
// LibTorch inside: not for the planner's headers.
#include <ATen/ATen.h>

#include <array>
#include <functional>
#include <mutex>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace planner::rt::calib {

struct Ctx {
  bool cuda = false;
  bool quick = false;
  bool progress = true;
  at::Device device{at::kCPU};
  int rank = 0, world = 1;
  std::vector<std::string>* notes = nullptr;
  // The node of every world rank (0, 1, ... in the order the nodes first
  // appear among the ranks), from the environment as the runtime reads it
  // (runtime/comm/world.cpp); empty: one node.
  std::vector<int> node_of_rank;
  double target_seconds() const { return quick ? 0.002 : 0.02; }  // one timed batch of calls
};

// Seconds per call of `fn`: one warm-up call, one call to size the batch,
// then five batches of calls lasting at least `target` seconds each (CUDA
// events on the GPU, the steady clock on the CPU); the fastest batch.
double time_per_call(const Ctx& c, const std::function<void()>& fn, double target = -1);
// The same with a fixed number of calls per batch (collectives: every rank must
// make the same calls).
double time_fixed(const Ctx& c, const std::function<void()>& fn, int calls);
// One progress line on stderr (rank 0 only).
void say(const Ctx& c, const std::string& line);
std::string fmt_num(double v, int digits = 3);  // "%.3g" (LibTorch's fmt shadows the system's here)

// calibration/measure_compute.cpp
// Seconds of one call of `gemm` (`alone`: its back-to-back time) as calibrate
// times its GEMM points on the GPU: each call followed by a memory-bound copy
// of about its own duration (a layer's norms, activations and residuals come
// between its GEMMs), only the GEMM timed, by CUDA events around it; the
// median over calls lasting about 0.1 s in all. On the H100 this changed the
// rate by -32% to +7% per shape against back to back (validation/h100/kernels).
// What it does not capture: at the 700 W cap the clock follows the kernel mix,
// and a sustained training step's GEMMs ran 13-16% faster than these points
// (validation/archive/h100/in-step; calibrate's in_step part measures the ratio).
struct Filler {
  at::Tensor src, dst;      // bf16 buffers of 2^26 elements; a copy between them is the memory-bound kernel
  double per_element = 0;  // seconds per element copied
  explicit Filler(const Ctx& c);
};
double time_interleaved(const Ctx& c, const std::function<void()>& gemm, double alone, const Filler& f);
nlohmann::json measure_gemms(const Ctx& c);
// calibration/measure_moe.cpp: the host seconds of one MoE layer's forward and
// backward in the runtime, alone (`ep` null) or over the ep group `ep` (every
// rank of it calls at once).
nlohmann::json measure_moe_host(const Ctx& c, Communicator* ep);
nlohmann::json measure_attention(const Ctx& c);
// Sliding-window attention beside full causal attention of the same shapes (CUDA 16-bit).
nlohmann::json measure_attention_window(const Ctx& c);
nlohmann::json measure_memory_kernels(const Ctx& c);
// {kernel_overhead_seconds (GPU: queued behind work, as in a step), launch_bound_seconds}
nlohmann::json measure_kernel_overhead(const Ctx& c);

// calibration/measure_in_step.cpp: GEMMs and attention in a sustained training
// step of eight-layer models (fewer on a small GPU; Kineto kernel sums)
// against the same kernels timed as calibrate times its points; one row per
// model family and precision: {precision, model, layers, tokens, gemms (calls),
// shapes: [{layout, m, n, k, count, seconds}], attention: [{batch, heads,
// kv_heads, seq, head_dim, count, seconds}], alone_gemm_seconds,
// alone_attention_seconds (each shape's seconds times its count), and on the
// GPU step_gemm_seconds, step_attention_seconds}.
nlohmann::json measure_in_step(const Ctx& c);

// The operands of every GEMM (aten::mm, addmm, addmm_; 2-D) and fused
// attention (q, k, v; the output gradient of each attention backward) run on
// any thread while fn() runs, copied (a RecordFunction observer; one capture
// at a time). `self` is addmm's bias or addmm_'s accumulator; an FP8 GEMM
// (precision=fp8's at::_scaled_mm) keeps its two scales and output dtype.
struct CapturedGemm {
  std::string op;  // "aten::mm", "aten::addmm", "aten::addmm_", "aten::_scaled_mm"
  at::Tensor a, b, self;
  at::Tensor scale_a, scale_b;                    // aten::_scaled_mm only
  at::ScalarType out_dtype = at::kBFloat16;       // aten::_scaled_mm only
  int count = 1;  // calls of this shape and layout (more than 1 only when `distinct`)
};
struct Captured {
  // distinct: keep one copy per GEMM shape and layout (counting the calls)
  // and the first attention's inputs with the gradient of its output (the
  // last backward), so that a deep model's capture costs about one layer's
  // memory; otherwise every call in order (a replay needs them all).
  bool distinct = false;
  std::mutex mu;
  std::vector<CapturedGemm> gemms;
  std::vector<std::array<at::Tensor, 3>> attention;
  std::vector<at::Tensor> attention_grads;
  int attention_calls = 0;  // forwards seen
};
void capture_ops(Captured& cap, const std::function<void()>& fn);
// One call of the GEMM as it was called (addmm_ accumulates into the captured
// copy of its accumulator, which grows with each call).
void replay_gemm(const CapturedGemm& g);

// calibration/measure_host.cpp
nlohmann::json measure_host_copies(const Ctx& c);  // GPU only
nlohmann::json measure_host_memcpy(const Ctx& c);
nlohmann::json measure_cpu_adam(const Ctx& c);
// Every rank at once (collective over `world`, the CPU communicator of all
// ranks), each with hardware threads / local_size threads as planner exec
// gives it: the CPU AdamW (as the offload step runs it on a GPU machine) when
// local_size processes share a node. Returns, for rank 0's report,
// {processes_per_node, threads, how, per_process_params_per_second [per rank],
// node_params_per_second (the mean per process times local_size)}, or null if
// a rank failed.
nlohmann::json measure_cpu_adam_node(const Ctx& c, Communicator& world, int local_size);
// calibration/measure_contention.cpp, every rank of `comm` at once:
// compute beside its collectives both ways ([{op, bytes, calls, group_size,
// compute_alone_seconds, compute_beside_seconds, collectives_alone_seconds,
// slowdown, and on the GPU collectives_beside_seconds, comm_slowdown}]), and
// its tensor-parallel collectives between GEMMs ([{op, bytes, group_size,
// calls, chain_seconds, gemms_seconds, collectives_seconds, extra_seconds}]).
nlohmann::json measure_contention(const Ctx& c, Communicator& comm);
// The same beside the runtime's own layers' backward, a collective queued
// after each layer as a data-parallel backward queues its units' reductions:
// [{op, payload: "layers" (each layer's gradients) or "layers_time" (a
// collective as long as a layer's backward), bytes, calls, layers, tokens,
// group_size, layer_seconds,
// compute_alone_seconds, compute_beside_seconds, collectives_alone_seconds,
// slowdown, and on the GPU collectives_beside_seconds, comm_slowdown}], both
// slowdowns solved from the chain's two ends by the simulator's rules.
nlohmann::json measure_contention_layers(const Ctx& c, Communicator& comm);
nlohmann::json measure_tp_chain(const Ctx& c, Communicator& comm);

// calibration/measure_collectives.cpp
// The group sizes calibrate measures on `world` ranks: 2, 4, ... and world,
// each dividing it (the sizes a plan's dp/tp groups take on these GPUs).
std::vector<int> calibrated_group_sizes(int world);
// Every rank: the collectives of the runtime's Communicator over sizes, for
// every group size (the world split into contiguous blocks, all at once),
// send/recv per pair class (same node; across nodes when the ranks span
// several), compute beside the collectives both ways per group size, the
// tensor-parallel chain over the smallest groups and NCCL's memory; `world`
// is the CPU (MPI) communicator of all ranks. Fills "collectives",
// "compute_beside_comm", "tp_chain" and the nccl_*_bytes of `out` (rank 0).
void measure_collectives(const Ctx& c, Communicator& world, nlohmann::json& out);

}  // namespace planner::rt::calib

#pragma once
// Runs a plan for warm-up + timed steps and measures it: step times
// (CUDA events on the GPU, the steady clock on the CPU), throughput, model
// TFLOP/s and MFU, losses, and device memory by phase and by the memory model's
// categories. No LibTorch types in this header (exec.cpp and the CLI include it).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "specs/memory_category.hpp"
#include "specs/plan.hpp"
#include "runtime/device.hpp"
#include "runtime/run_config.hpp"
#include "runtime/kernel_profile.hpp"

namespace planner::rt {


// Memory in the memory model's categories (bytes on the device at the step's peak).
//  parameters, gradients, optimizer_states: exact sizes of the flat buffers.
//  activations: allocated just before the LM head (largest over the timed
//               micro-batches) minus the static bytes allocated at the step's start.
//  logits_loss: the peak of forward + backward minus that.
//  comm_buffers: 0 on one device.
//  overhead:    everything else in use at the peak: memory outside the caching
//               allocator (CUDA context, library handles), reserved-but-unallocated
//               cache, other static tensors (rotary tables, the optimizer's fp32 work
//               chunk, cuBLAS workspaces), and whatever the optimizer step
//               allocates above the forward/backward peak.
struct MeasuredMemory {
  int64_t parameters = 0, gradients = 0, optimizer_states = 0, activations = 0, logits_loss = 0,
          comm_buffers = 0, overhead = 0;
  int64_t total = 0;  // peak reserved + outside the allocator = sum of the categories
  // Phases (allocator bytes).
  int64_t after_model_allocated = 0, after_model_reserved = 0;
  int64_t after_optimizer_allocated = 0, after_optimizer_reserved = 0;
  int64_t step_start_allocated = 0;        // static bytes at the start of a timed step
  int64_t before_head_allocated = 0;       // largest over the timed micro-batches
  int64_t peak_fwd_bwd_allocated = 0;      // largest over the timed steps
  int64_t peak_step_allocated = 0, peak_step_reserved = 0;  // optimizer included
  int64_t outside_allocator = 0;           // CUDA context etc. (0 on the CPU)
  int64_t optimizer_work = 0;              // fp32 gradient chunk buffer (part of overhead)
  int64_t device_total = 0;                // the device's memory (0 on the CPU)
  // The memory model's categories, in MemCategory's order (specs/memory_category.hpp).
  MemBreakdown categories() const {
    return {parameters, gradients, optimizer_states, activations, logits_loss, comm_buffers, overhead};
  }
};

// One rank's own figures (gathered to rank 0).
struct RankMeasurement {
  int rank = 0;
  std::string host;
  double median_s = 0;          // this rank's median step time
  int64_t peak_bytes = 0;       // device peak (reserved + outside the allocator)
  int64_t comm_bytes = 0;       // device memory the communicators took (NCCL buffers), outside the allocator
  int64_t host_peak_bytes = 0;  // peak resident host memory of the process (VmHWM)
  MemBreakdown categories{};    // its memory by MemCategory (pipeline stages differ)
};

struct Measurement {
  int world = 1;                       // ranks that ran the plan
  bool root = true;                    // this process is rank 0 (the one that reports)
  std::vector<RankMeasurement> ranks;  // every rank, on rank 0
  int64_t host_state_bytes = 0;        // pinned host buffers of the offloaded optimizer (per rank)
  int64_t host_peak_bytes = 0;         // largest VmHWM over the ranks
  double cpu_adam_seconds = 0;         // CPU AdamW of the last timed step (offload)
  double cpu_adam_params_per_second = 0;
  double host_copy_gbps = 0;           // host memcpy bandwidth measured beside it (read + write bytes / s)
  // The share of the host's CPU time that the hypervisor gave to others (the
  // "steal" of /proc/stat) over the timed steps; < 0 where not readable.
  double cpu_steal_fraction = -1;
  std::vector<std::pair<std::string, double>> action_seconds;  // per step, by action kind (rank 0)
  // With RunOptions::trace: the step program's actions (stage 0's list, every
  // rank runs it) and, per rank, (start, end) of each in the last timed step.
  std::vector<std::vector<std::string>> trace_actions;  // per pipeline stage
  std::vector<int> trace_rank_stage;                     // each rank's stage
  std::vector<std::vector<std::pair<double, double>>> trace_spans;
  std::string device;         // "cuda:0" / "cpu"
  std::string precision;      // fp32 | fp16 | bf16
  int steps = 0, warmup = 0;
  int64_t params = 0;         // parameters built (== ModelSpec::total_params())
  int64_t tokens_per_step = 0, samples_per_step = 0;
  std::vector<double> step_seconds;   // timed steps (the slowest rank's time of each step)
  std::vector<double> losses;         // every step, warm-up included
  double median_s = 0, mean_s = 0, min_s = 0, max_s = 0, p10_s = 0, p90_s = 0;
  double samples_per_second = 0, tokens_per_second = 0;
  double model_flops_per_step = 0, hardware_flops_per_step = 0;
  double model_tflops = 0, hardware_tflops = 0;
  double mfu = -1;            // < 0: not applicable (CPU)
  double peak_flops = 0;      // the GPU's dense peak for the precision (plan's GpuSpec)
  double init_seconds = 0;    // building the model and the optimizer
  double final_loss_scale = 1;
  int64_t skipped_steps = 0;
  // Mixture of experts with ep > 1, rank 0's ep group: the rows the busiest
  // rank received per layer forward, summed over the layer forwards, over
  // the group's mean (1: balanced; what --moe-imbalance assumes), and the
  // largest single layer's such ratio. 0: not measured.
  double moe_imbalance = 0, moe_imbalance_largest = 0;
  // Mixture of experts: the routing that ran, "learned" or "balanced"
  // (RunOptions::moe_routing); empty for a dense model.
  std::string moe_routing;
  std::string data;           // description of the token source
  MeasuredMemory memory;
  KernelProfile kernels;      // RunOptions::kernels: one extra step's forward + backward kernels (this rank's)
  MachineInfo machine;
  std::vector<std::string> notes;
};

// Runs config.plan with config.options: set-up (device, world, token source,
// communicators), the warm-up and timed steps, every rank's figures gathered,
// the report (statistics, throughput, MFU, notes).
// Throws InputError for a run that cannot happen here (another number of
// ranks than the plan's, device not available, unreadable token file),
// std::runtime_error for failures (CUDA out of memory included).
Measurement run_training(const RunConfig& config);

}  // namespace planner::rt

#pragma once
// The prediction of one training step: time (from the simulator) and memory
// (from the memory model). The contract between the cost model, the planner's
// commands and the runtime's measured-vs-predicted report.
#include <string>
#include <nlohmann/json_fwd.hpp>

#include "costmodel/hardware_profile.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/memory_model.hpp"
#include "specs/plan.hpp"

namespace planner {

struct StepPrediction {
  double step_seconds = 0;
  double samples_per_second = 0;
  double tokens_per_second = 0;
  double model_flops_per_step = 0;     // flops.hpp model_flops
  double hardware_flops_per_step = 0;  // with recomputation
  double tflops_per_gpu = 0;           // model TFLOP/s per GPU
  double hw_tflops_per_gpu = 0;        // hardware TFLOP/s per GPU
  double mfu = 0;                      // model FLOP/s over the GPUs' dense peak in the working precision
  // Where the time goes, seconds per step on the critical rank.
  double compute_seconds = 0;          // forward + backward (+ recompute) kernels
  double contention_seconds = 0;       // of which: slowed by the DP/ZeRO collectives beside them
  double exposed_comm_seconds = 0;     // communication not hidden behind compute
  double bubble_seconds = 0;           // pipeline idle time
  double optimizer_seconds = 0;        // optimizer step (GPU or CPU)
  double offload_seconds = 0;          // exposed host<->device copies
  // The critical rank's forward, backward and recompute kernels of a step by op
  // class (cost_model.hpp step_op_times); their total is compute_seconds plus
  // the TP collectives when nothing else delays the stage.
  OpTimes compute_by_class;
  // The same for rank 0's pipeline stage (stage 0), the rank whose forward and
  // backward `planner exec` reports (its F and B actions, --kernels): under
  // pp the critical stage may be another. rank0_fb_seconds is what its F and
  // B actions hold: stage 0's compute as simulated (its kernels and their
  // slowdown beside the DP/ZeRO collectives) plus, under tp, the TP
  // collectives waited for inside its passes. compute_by_class_rank0 holds
  // the kernels alone, without that slowdown.
  OpTimes compute_by_class_rank0;
  double rank0_fb_seconds = 0;
  MemoryReport memory;
};

// Predicts with the default hardware profile of the plan's GPU, or with the
// profile saved at `profile_path` when not empty.
StepPrediction predict(const Plan& plan, const std::string& profile_path = "");
nlohmann::json prediction_json(const StepPrediction& p);  // the documented predict keys

// One truth per input (issue 28): a profile measured on another GPU (or on
// the CPU, "gpu": "cpu") than `gpu` is refused (InputError naming both and
// --profile-any) unless `any`; with `any` the note every answer then prints
// ("" when the profile is the GPU's own).
std::string check_profile_gpu(const HardwareProfile& profile, const GpuSpec& gpu, bool any);

}  // namespace planner

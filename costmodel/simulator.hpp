#pragma once
// The step simulator: runs one training step's pipeline schedule (the action
// lists the runtime executes) against a cost model and returns the makespan.
// One representative rank per pipeline stage (DP and TP replicas are alike),
// each with a compute stream and streams for collectives (DP/ZeRO), pipeline
// sends, host copies and the CPU (offload). docs/TIME_MODEL.md ("Simulator").
#include <cstdint>
#include <vector>

#include "costmodel/cost_model.hpp"
#include "strategies/schedule.hpp"

namespace planner {

enum class Stream : uint8_t { Compute, Comm, P2P, Copy, Cpu };
const char* to_string(Stream s);

struct TraceEvent {
  int stage = 0;
  Stream stream = Stream::Compute;
  double start_seconds = 0, end_seconds = 0;
  const char* name = "";   // static string: "F", "B", "send", "grad reduce", ...
  int microbatch = -1, chunk = 0;
};

// Where one stage's step goes; the parts add up to the makespan.
struct StageTime {
  double compute_seconds = 0;       // forward + backward + recompute kernels
  double tp_comm_seconds = 0;       // TP collectives inside the passes
  double exposed_comm_seconds = 0;  // waiting for DP/ZeRO collectives, tied-embedding sync, parameter all-gather
  double bubble_seconds = 0;        // waiting for other stages (pipeline fill/drain, the step's end)
  double optimizer_seconds = 0;     // GPU or CPU optimizer step
  double offload_seconds = 0;       // waiting for host<->device copies
  double end_seconds = 0;           // when the stage finished
};

struct SimResult {
  double makespan_seconds = 0;
  std::vector<StageTime> stages;
  int critical_stage = 0;           // the stage with the least bubble
  bool deadlock = false;            // the schedule cannot finish (makespan is then infinite)
  std::vector<TraceEvent> events;   // only with record_trace
};

struct SimOptions {
  bool record_trace = false;
};

// Reusable buffers, so the search simulates without allocating.
class Simulator {
 public:
  const SimResult& run(const PipelineSchedule& schedule, const CostModel& cost, const SimOptions& opt = {});

 private:
  SimResult result_;
  std::vector<double> fwd_end_, bwd_end_, fwd_arrive_, bwd_arrive_;
  std::vector<int> b_left_;
};

SimResult simulate(const PipelineSchedule& schedule, const CostModel& cost, const SimOptions& opt = {});

// A lower bound on the makespan that needs no simulation: the busiest stage's
// compute stream, plus the forward of micro-batch 0 through the stages before
// it and the backward of the last micro-batch through them, plus its optimizer.
// Never above the simulated makespan, so the search may prune with it.
double makespan_lower_bound(const CostModel& cost, int microbatches);

}  // namespace planner

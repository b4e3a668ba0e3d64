#pragma once
// The step simulator: walks the step program (strategies/step_program.hpp: the
// action lists that the runtime's executor walks), one handler per action kind,
// against a cost model, and returns the makespan, where each stage's time went
// and the trace. One representative rank per pipeline stage (DP and TP replicas
// are alike), each with a compute stream and streams for DP/ZeRO collectives,
// pipeline sends, host copies and the CPU (offload). docs/SIMULATOR.md
// ("The simulator").
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "costmodel/cost_model.hpp"
#include "strategies/step_program.hpp"

namespace planner {

enum class Stream : uint8_t { Compute, Comm, P2P, Copy, Cpu };
const char* to_string(Stream s);

struct TraceEvent {
  int stage = 0;
  Stream stream = Stream::Compute;
  double start_seconds = 0, end_seconds = 0;
  const char* name = "";   // display only: "F", "B", "gather", "all-reduce", ... (trace_name of its action)
  StepOp op = StepOp::Forward;  // its action's op (what readers of a trace go by, never the name)
  int microbatch = -1, chunk = 0, unit = -1;
  int action = -1;         // index of its action in the stage's list; -1: a part of the action `op` shown
                           // apart (an offload fetch before a gather, the tied-embedding gradient at the Sync)
};

// The trace name of an action kind: "F", "B", "gather", "release", "all-reduce"
// or "reduce-scatter" (by the action's scatter flag), "to host", "to device",
// "all-gather", "sync", "grad norm", "optimizer" or "cpu adam" (offload),
// "send activation", "recv activation", "send gradient", "recv gradient",
// "tied embedding grad", "replicated grad sum", "loss all-reduce",
// "grad norm all-reduce", "clip".
const char* trace_name(const StepAction& a, bool cpu_optimizer);

// Where one stage's step goes; the parts add up to the makespan.
struct StageTime {
  double compute_seconds = 0;       // forward + backward + recompute kernels (contention included)
  double contention_seconds = 0;    // of which: passes slowed by the DP/ZeRO collectives beside them
  double tp_comm_seconds = 0;       // TP collectives inside the passes
  double exposed_comm_seconds = 0;  // waiting for DP/ZeRO collectives and the step-end reductions
  double bubble_seconds = 0;        // waiting for other stages (pipeline fill/drain, the step's end)
  double optimizer_seconds = 0;     // GPU or CPU optimizer step
  double offload_seconds = 0;       // waiting for host<->device copies
  double end_seconds = 0;           // when the stage finished (all its streams)
};

// A stage's streams right after one of its actions: when its compute, DP/ZeRO
// communication, pipeline-send, host-copy and CPU streams are next free, and
// when the last released ZeRO-3 buffer is. Every time the simulator writes
// (and later reads) is one of these, so they are the stage's whole state.
using StreamState = std::array<double, 6>;

struct SimResult {
  double makespan_seconds = 0;
  std::vector<StageTime> stages;
  int critical_stage = 0;           // the stage with the least bubble
  bool deadlock = false;            // the program cannot finish (makespan is then infinite)
  std::vector<TraceEvent> events;   // only with record_trace: one per action (zero-length ones too), plus parts
  // Only with SimOptions::state_window: per stage, the state after each
  // action of the window (costmodel/long_run.cpp checks the steady state with it).
  std::vector<std::vector<StreamState>> states;
};

struct SimOptions {
  bool record_trace = false;
  // Per stage, the actions [first, second) after which to record the StreamState (empty: none).
  std::vector<std::pair<size_t, size_t>> state_window;
};

// Reusable buffers, so the search simulates without allocating.
class Simulator {
 public:
  // Throws std::invalid_argument when the program's layout is not the cost model's.
  const SimResult& run(const StepProgram& program, const CostModel& cost, const SimOptions& opt = {});

 private:
  struct StageState;
  class Walk;  // one walk of a program, one handler per kind of action (simulator_walk.cpp)
  SimResult result_;
  std::vector<double> fwd_end_, bwd_end_, fwd_arrive_, bwd_arrive_;
  std::vector<double> param_ready_, fetch_end_, grad_ready_, param_updated_;
  std::vector<int> chunk_first_, chunk_last_;
};

SimResult simulate(const StepProgram& program, const CostModel& cost, const SimOptions& opt = {});

// The DP/ZeRO collectives beside the compute (HardwareProfile::
// comm_slowdown_beside_compute = c): while a pass runs they progress at 1/c of
// their own rate, at their own rate otherwise. Work on the comm stream that
// would end at `end` running alone from `t`, with a pass over [t, t + pass]:
// where it ends. Identity for end <= t or c <= 1.
double comm_end_beside_compute(double t, double end, double pass, double c);
// The inverse, for calibrate: collectives of `alone` seconds queued with a
// compute of `pass` seconds that ended `end` seconds after both started; the c
// that gives it, in [1, HardwareProfile::kMaxCommSlowdown].
double comm_slowdown_from(double pass, double alone, double end);

// A backward of `n` equal passes of `pass` seconds alone, the first `colls`
// of them (at most n) each followed by a collective of `coll` seconds alone
// queued on the comm stream at the pass's end (the gradients of a
// data-parallel backward, one unit at a time), under the simulator's rules
// (simulator_walk.cpp): a pass beside queued collectives runs `s` times slower
// for its overlap with them, min(pass, their remaining time x c), and they
// progress at 1/c of their rate beside it.
struct ChainBeside {
  double compute_end = 0;  // the last pass's end
  double comm_end = 0;     // the last collective's end
};
ChainBeside chain_beside(int n, int colls, double pass, double coll, double s, double c);
// The inverse, for calibrate: the (s, c) whose chain_beside gives the measured
// compute and comm ends (s in [1, 3], c in [1, HardwareProfile::
// kMaxCommSlowdown]); the closest pair where none gives both exactly. With
// colls < n the last collective ends beside the last pass, which identifies c
// even where the collectives never queue up behind each other.
std::pair<double, double> chain_slowdowns_from(int n, int colls, double pass, double coll, double compute_end,
                                               double comm_end);

// A lower bound on the makespan that needs no simulation: the busiest stage's
// compute stream, plus the forward of micro-batch 0 through the stages before
// it and the backward of the last micro-batch through them, plus its step-end
// reductions as its program has them (StageCost::step_end_reductions: from the
// first across the pipeline on, all of them on the first stage), its optimizer
// and the copies and all-gathers after it (every priced cost counts: a table
// prices them only where the program has those actions). Never above the
// simulated makespan, so the search may prune with it.
double makespan_lower_bound(const CostModel& cost, int microbatches);

}  // namespace planner

#pragma once
// Steps of very many micro-batches, simulated in bounded work (issue 11).
//
// The simulator walks every micro-batch of every stage, so its work grows
// with pp*vpp*gas. But the micro-batches of a step are identical: once the
// pipeline is full, each further period of micro-batches (one micro-batch;
// pp of them under the interleaved schedule, whose order repeats every pp)
// runs the same actions as the one before, each start shifted by the same
// time. The simulation is max-plus linear (every start is the max of the
// times it waits for, plus a duration), and such a system, fed the same
// period again and again, settles into exactly such a periodic regime after
// a transient. From there every output of the step -- the makespan and each
// stage's compute, communication, bubble, optimizer and offload time -- grows
// by the same amount per period, whatever happens in the drain and the
// optimizer step after the last micro-batch.
//
// That regime is recognised, not assumed: a step of m micro-batches is
// simulated with b, b+h and b+2h micro-batches (b past the pipeline's fill
// and congruent to m modulo the period h). In the first, the simulator
// records each stage's stream times after every action of the last periods
// of its steady segment; when each of them is, one period later, later by
// one common shift (or unchanged: an idle stream), the state the next period
// starts from is the last one's shifted, so every later period repeats too
// (max-plus maps commute with a common shift and do not expand differences:
// rounding cannot grow). Each output then grows by the same amount per
// period, the two increments are checked to agree (to 1e-9 of the makespan),
// and each output is extrapolated to m. A stage still eating the slack of its
// warm-up (a transient as long as that slack over the difference of two
// rates: unbounded in general) fails the check; the next attempt doubles b.
// When no attempt within the budget succeeds, the step is simulated whole if
// it is within the budget, else refused. tests/unit/test_long_run.cpp checks
// the extrapolation against the full simulation over schedules, pp, vpp,
// ZeRO, offload and micro-batch counts where the full simulation is cheap.
// GPipe (all forwards, then all backwards: two steady segments) is not
// extrapolated.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "costmodel/simulator.hpp"
#include "strategies/step_program.hpp"

namespace planner {

// Micro-batches after which the step's action pattern repeats, read off the
// compute schedule (long_run.cpp): pp for the interleaved schedule, else 1.
int steady_period(const Strategy& s);

// The micro-batch counts sampled by attempt `attempt` (0, 1, 2...) for a step
// of s.gas micro-batches: b, b+h, b+2h. Nothing for GPipe, or when the step
// is not longer than b+2h.
struct LongRunSample {
  int base = 0, step = 0;
  int64_t chunks = 0;  // pp*vpp times the micro-batches of the three simulations
};
std::optional<LongRunSample> long_run_sample(const Strategy& s, int attempt);

// Whether predict can answer for `s`: by simulating every micro-batch
// (pp*vpp*gas at most `direct_limit`), or by the extrapolation above with
// its first attempt's simulations within the same limit.
bool simulation_affordable(const Strategy& s, int64_t direct_limit = kMaxSimulatedChunks);

// How much simulate_step may simulate, in micro-batch chunks: steps of up to
// `whole` chunks are always simulated whole, and nothing beyond `limit` is
// (tests lower them to compare the extrapolation with the whole simulation).
struct SimBudget {
  int64_t whole = int64_t(1) << 12;
  int64_t limit = kMaxSimulatedChunks;
};

// The step of `s` (with its s.gas micro-batches) on `cost`: simulated whole
// when it is short (budget.whole), traced, or not twice the extrapolation's
// own simulations; else extrapolated, and simulated whole after all if no
// periodic steady state is found and pp*vpp*gas is within budget.limit.
// `program_for(m)` returns the step program of `s` with m micro-batches (a
// reference valid until its next call). Throws InputError when the step can
// be neither extrapolated nor simulated within budget.limit chunks.
SimResult simulate_step(const Strategy& s, const CostModel& cost,
                        const std::function<const StepProgram&(int)>& program_for, Simulator& sim,
                        const SimOptions& opt = {}, const SimBudget& budget = {});

}  // namespace planner

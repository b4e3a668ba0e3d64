// Extrapolating a step of many identical micro-batches from a few short
// simulations (why it is exact: long_run.hpp).
#include "costmodel/long_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "strategies/errors.hpp"
#include "strategies/schedule.hpp"

namespace planner {

namespace {

// Action b is action a one period (h micro-batches) later.
bool one_period_later(const StepAction& a, const StepAction& b, int h) {
  return a.op == b.op && a.unit == b.unit && a.chunk == b.chunk && a.scatter == b.scatter &&
         (a.microbatch < 0 ? b.microbatch == a.microbatch : b.microbatch == a.microbatch + h);
}

}  // namespace

// Read off the compute schedule (schedule.hpp, the step program's first pass)
// rather than restated: the smallest h in 1..pp for which every stage's list
// has a stretch of two periods (2 L actions, L = 2 h vpp) where each action
// recurs L actions later, h micro-batches later; 1 when none has (GPipe: two
// segments, never extrapolated). A schedule of pp (2 vpp + 8) micro-batches
// holds such a stretch for the true period (1 for 1F1B, pp for Megatron-LM's
// interleaved order, which goes through groups of pp micro-batches); a
// shorter h pairs actions of different chunks or micro-batches. Once per
// shape and thread (the search asks often).
int steady_period(const Strategy& s) {
  const int vpp = s.schedule == Schedule::Interleaved ? s.vpp : 1;
  thread_local std::map<std::tuple<int, int, int>, int> known;
  const auto key = std::make_tuple(int(s.schedule), s.pp, vpp);
  if (auto it = known.find(key); it != known.end()) return it->second;
  Strategy x = s;
  x.gas = s.pp * (2 * vpp + 8);
  const PipelineSchedule sched = compute_schedule(x);
  int period = 1;
  for (int h = 1; h <= s.pp; ++h) {
    const size_t L = size_t(2) * h * vpp;
    bool all = true;
    for (const StepList& list : sched) {
      size_t run = 0, best = 0;
      for (size_t i = 0; i + L < list.size() && best < 2 * L; ++i) {
        run = one_period_later(list[i], list[i + L], h) ? run + 1 : 0;
        best = std::max(best, run);
      }
      if (best < 2 * L) {
        all = false;
        break;
      }
    }
    if (all) {
      period = h;
      break;
    }
  }
  return known[key] = period;
}

namespace {

// Periods of the steady state checked: enough to hold every dependency of a
// period on earlier ones (a 1F1B stage's backward follows its forward by up
// to pp micro-batches; an interleaved one by less than two groups of pp).
int checked_periods(const Strategy& s) { return s.schedule == Schedule::Interleaved ? 4 : s.pp + 2; }

std::string too_long(const Strategy& s, int64_t limit) {
  return fmt::format(
      "strategy: the {} micro-batches per step (pp*vpp*gas = {}*{}*{}) are more than the simulator's limit of {} "
      "chunks, and their steady state could not be extrapolated within it; use a larger mbs or a smaller global batch",
      s.gas, s.pp, s.vpp, s.gas, limit);
}

// Attempts double the base each time; the budget ends them earlier for deep pipelines.
constexpr int kAttempts = 4;
// Times equal to this fraction of the makespan are equal but for floating-point rounding.
constexpr double kTolerance = 1e-9;
constexpr int kFields = 8;  // per stage, in the order of outputs()

// Every output of a simulation that predict reads, as one vector.
std::vector<double> outputs(const SimResult& r) {
  std::vector<double> v{r.makespan_seconds};
  v.reserve(1 + kFields * r.stages.size());
  for (const StageTime& t : r.stages)
    v.insert(v.end(), {t.compute_seconds, t.contention_seconds, t.tp_comm_seconds, t.exposed_comm_seconds,
                       t.bubble_seconds, t.optimizer_seconds, t.offload_seconds, t.end_seconds});
  return v;
}

SimResult from_outputs(const std::vector<double>& v) {
  SimResult r;
  r.makespan_seconds = v[0];
  r.stages.resize((v.size() - 1) / kFields);
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const double* f = &v[1 + kFields * s];
    StageTime& t = r.stages[s];
    t.compute_seconds = f[0], t.contention_seconds = f[1], t.tp_comm_seconds = f[2], t.exposed_comm_seconds = f[3];
    t.bubble_seconds = f[4], t.optimizer_seconds = f[5], t.offload_seconds = f[6], t.end_seconds = f[7];
    // As Simulator::run picks it: the first stage with the least bubble.
    if (r.stages[s].bubble_seconds < r.stages[size_t(r.critical_stage)].bubble_seconds) r.critical_stage = int(s);
  }
  return r;
}

// Where each stage's steady state is checked: the last `periods` periods of
// actions (a period is `length` actions, what one more period of
// micro-batches adds to the stage's list) before the end of its steady
// segment, plus the period after them. Empty when a stage's segment is shorter.
struct Window {
  size_t first = 0, length = 0;
};

std::vector<Window> steady_windows(const StepProgram& prog, const std::vector<size_t>& longer_sizes, int h,
                                   int periods) {
  std::vector<Window> out;
  for (size_t s = 0; s < prog.stages.size(); ++s) {
    const StepList& list = prog.stages[s];
    if (longer_sizes[s] <= list.size()) return {};
    const size_t L = longer_sizes[s] - list.size();
    // The steady segment: the longest stretch of i with list[i + L] one period after list[i].
    size_t best_end = 0, best_len = 0, run = 0;
    for (size_t i = 0; i + L < list.size(); ++i) {
      run = one_period_later(list[i], list[i + L], h) ? run + 1 : 0;
      if (run > best_len) best_len = run, best_end = i + 1;
    }
    if (best_len < size_t(periods) * L) return {};
    out.push_back({best_end - size_t(periods) * L, L});
  }
  return out;
}

// Every stream of every stage, after each action of its window, is one
// period later exactly `shift` seconds later, or not at all (a stream idle in
// the steady state, whose time falls ever further behind). Then the state
// the next period starts from is the last one's shifted, and by induction
// every further period repeats (max-plus maps commute with a common shift and
// do not expand differences, so rounding cannot grow).
bool steady_state_repeats(const SimResult& r, const std::vector<Window>& w, double tol) {
  double shift = -1;
  for (size_t s = 0; s < w.size(); ++s) {
    const auto& st = r.states[s];
    const size_t L = w[s].length, n = st.size();
    if (n < 2 * L) return false;
    for (size_t i = 0; i + L < n; ++i)
      for (size_t k = 0; k < st[i].size(); ++k) {
        const double d = st[i + L][k] - st[i][k];
        if (d == 0) continue;
        if (shift < 0) shift = d;
        if (!(std::abs(d - shift) <= tol)) return false;
      }
  }
  return shift > 0;
}

// Attempt after attempt (each doubling b), within `budget` chunks in all:
// the extrapolated outputs, or nothing when no attempt found the steady state.
std::optional<SimResult> extrapolate(const Strategy& s, const CostModel& cost,
                                     const std::function<const StepProgram&(int)>& program_for, Simulator& sim,
                                     int64_t budget) {
  int64_t spent = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const auto x = long_run_sample(s, attempt);
    if (!x || spent + x->chunks > budget) break;
    spent += x->chunks;
    // Simulations of b, b+h and b+2h micro-batches; the first records the
    // state over its steady segment's last periods.
    std::vector<size_t> longer_sizes;
    for (const StepList& l : program_for(x->base + x->step).stages) longer_sizes.push_back(l.size());
    const StepProgram& small = program_for(x->base);
    const std::vector<Window> w = steady_windows(small, longer_sizes, x->step, checked_periods(s));
    if (w.empty()) continue;
    SimOptions rec;
    for (const Window& k : w) rec.state_window.push_back({k.first, k.first + (size_t(checked_periods(s)) + 1) * k.length});
    std::array<std::vector<double>, 3> out;
    const SimResult& head = sim.run(small, cost, rec);
    if (head.deadlock) return head;
    const double tol = kTolerance * head.makespan_seconds;
    if (!steady_state_repeats(head, w, tol)) continue;
    out[0] = outputs(head);
    for (int k = 1; k < 3; ++k) {
      const SimResult& r = sim.run(program_for(x->base + k * x->step), cost);
      if (r.deadlock) return r;
      out[size_t(k)] = outputs(r);
    }
    // The steady state repeats, so one more period adds the same to every
    // output; the third simulation checks it.
    bool same = true;
    for (size_t i = 0; i < out[0].size() && same; ++i)
      same = std::abs((out[2][i] - out[1][i]) - (out[1][i] - out[0][i])) <= tol;
    if (!same) continue;
    const double q = double((int64_t(s.gas) - x->base) / x->step - 2);  // periods after b + 2h
    std::vector<double> v = out[2];
    for (size_t i = 0; i < v.size(); ++i) v[i] += q * (out[2][i] - out[0][i]) / 2;
    return from_outputs(v);
  }
  return std::nullopt;
}

}  // namespace

std::optional<LongRunSample> long_run_sample(const Strategy& s, int attempt) {
  // GPipe runs all forwards, then all backwards: two steady segments per
  // stage, which this does not follow; its long steps are simulated in full
  // or refused.
  if (s.schedule == Schedule::GPipe && s.pp > 1) return std::nullopt;
  const int64_t scale = int64_t(1) << attempt, period = steady_period(s);
  // Past the fill (pp micro-batches; the interleaved warm-up is shorter than
  // 2 pp), then the checked periods and as many again for a transient.
  const int64_t base_min = (int64_t(s.pp) + 2 * checked_periods(s) * period) * scale;
  const int64_t m = s.gas;
  if (m < base_min + 3 * period) return std::nullopt;  // as many as the step has: simulate it whole
  LongRunSample x;
  x.base = int(base_min + (m - base_min) % period);  // congruent to m: the same phase of the period
  x.step = int(period);
  x.chunks = int64_t(s.pp) * s.vpp * (3 * int64_t(x.base) + 3 * period);
  return x;
}

bool simulation_affordable(const Strategy& s, int64_t direct_limit) {
  if (simulated_chunks(s) <= direct_limit) return true;
  const auto x = long_run_sample(s, 0);
  return x && x->chunks <= direct_limit;
}

SimResult simulate_step(const Strategy& s, const CostModel& cost,
                        const std::function<const StepProgram&(int)>& program_for, Simulator& sim,
                        const SimOptions& opt, const SimBudget& budget) {
  const int64_t chunks = simulated_chunks(s);
  const auto first = long_run_sample(s, 0);
  // Whole: a trace, a short step, or one the extrapolation would not halve.
  if (opt.record_trace || chunks <= budget.whole || !first || 2 * first->chunks > chunks) {
    if (chunks > budget.limit) throw InputError(too_long(s, budget.limit));
    return sim.run(program_for(s.gas), cost, opt);
  }
  if (auto r = extrapolate(s, cost, program_for, sim, budget.limit)) return std::move(*r);
  // No periodic steady state within the budget: whole if the step is within it.
  if (chunks > budget.limit) throw InputError(too_long(s, budget.limit));
  return sim.run(program_for(s.gas), cost, opt);
}

}  // namespace planner

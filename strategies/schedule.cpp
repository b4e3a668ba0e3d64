#include "strategies/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "strategies/errors.hpp"

namespace planner {

const char* to_string(Op op) {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::SendF: return "SF";
    case Op::RecvF: return "RF";
    case Op::SendB: return "SB";
    case Op::RecvB: return "RB";
    case Op::AllReduce: return "AR";
    case Op::OptStep: return "OPT";
  }
  return "?";
}

std::string Action::to_string() const {
  if (op == Op::AllReduce || op == Op::OptStep) return fmt::format("{}{}", stage, planner::to_string(op));
  if (chunk > 0) return fmt::format("{}{}{}.{}", stage, planner::to_string(op), microbatch, chunk);
  return fmt::format("{}{}{}", stage, planner::to_string(op), microbatch);
}

namespace {

void check_args(int pp, int m) {
  if (pp < 1) throw InputError(fmt::format("schedule: pp={} must be at least 1", pp));
  if (m < 1) throw InputError(fmt::format("schedule: micro-batches={} must be at least 1", m));
}

// A forward of micro-batch i on stage s of pp stages, with its receive and send.
void push_forward(StageActions& a, int s, int pp, int i) {
  if (s > 0) a.push_back({s, Op::RecvF, i, 0});
  a.push_back({s, Op::F, i, 0});
  if (s < pp - 1) a.push_back({s, Op::SendF, i, 0});
}

void push_backward(StageActions& a, int s, int pp, int i) {
  if (s < pp - 1) a.push_back({s, Op::RecvB, i, 0});
  a.push_back({s, Op::B, i, 0});
  if (s > 0) a.push_back({s, Op::SendB, i, 0});
}

}  // namespace

PipelineSchedule gpipe(int pp, int m) {
  check_args(pp, m);
  PipelineSchedule out(pp);
  for (int s = 0; s < pp; ++s) {
    for (int i = 0; i < m; ++i) push_forward(out[s], s, pp, i);
    for (int i = 0; i < m; ++i) push_backward(out[s], s, pp, i);
  }
  return out;
}

PipelineSchedule one_f_one_b(int pp, int m) {
  check_args(pp, m);
  PipelineSchedule out(pp);
  for (int s = 0; s < pp; ++s) {
    const int warmup = std::min(pp - s - 1, m);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) push_forward(out[s], s, pp, next_f);
    // Steady state: one forward, one backward.
    while (next_f < m) {
      push_forward(out[s], s, pp, next_f++);
      push_backward(out[s], s, pp, next_b++);
    }
    // Cool-down: the backwards of the warm-up forwards.
    while (next_b < m) push_backward(out[s], s, pp, next_b++);
  }
  return out;
}

PipelineSchedule make_schedule(const Strategy& st) {
  PipelineSchedule sched;
  switch (st.schedule) {
    case Schedule::GPipe: sched = gpipe(st.pp, st.gas); break;
    case Schedule::OneFOneB: sched = one_f_one_b(st.pp, st.gas); break;
    case Schedule::Interleaved: sched = interleaved_one_f_one_b(st.pp, st.gas, st.vpp); break;
  }
  for (int s = 0; s < st.pp; ++s) {
    sched[s].push_back({s, Op::AllReduce, -1, 0});
    sched[s].push_back({s, Op::OptStep, -1, 0});
  }
  return sched;
}

int max_inflight(const StageActions& actions) {
  int live = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.op == Op::F) peak = std::max(peak, ++live);
    else if (a.op == Op::B) --live;
  }
  return peak;
}

std::string to_string(const PipelineSchedule& s) {
  std::string out;
  for (const auto& stage : s) {
    bool first = true;
    for (const auto& a : stage) {
      if (a.op != Op::F && a.op != Op::B) continue;  // compact: compute actions only
      out += (first ? "" : " ") + a.to_string();
      first = false;
    }
    out += "\n";
  }
  return out;
}

}  // namespace planner

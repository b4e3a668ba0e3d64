#include "strategies/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "strategies/errors.hpp"

namespace planner {

namespace {

void check_args(int pp, int m) {
  if (pp < 1) throw InputError(fmt::format("schedule: pp={} must be at least 1", pp));
  if (m < 1) throw InputError(fmt::format("schedule: micro-batches={} must be at least 1", m));
}

StepAction pass(StepOp op, int s, int mb, int chunk = 0) { return {op, s, mb, -1, chunk}; }

}  // namespace

PipelineSchedule gpipe(int pp, int m) {
  check_args(pp, m);
  PipelineSchedule out(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    for (int i = 0; i < m; ++i) out[size_t(s)].push_back(pass(StepOp::Forward, s, i));
    for (int i = 0; i < m; ++i) out[size_t(s)].push_back(pass(StepOp::Backward, s, i));
  }
  return out;
}

PipelineSchedule one_f_one_b(int pp, int m) {
  check_args(pp, m);
  PipelineSchedule out(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    StepList& a = out[size_t(s)];
    const int warmup = std::min(pp - s - 1, m);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) a.push_back(pass(StepOp::Forward, s, next_f));
    // Steady state: one forward, one backward.
    while (next_f < m) {
      a.push_back(pass(StepOp::Forward, s, next_f++));
      a.push_back(pass(StepOp::Backward, s, next_b++));
    }
    // Cool-down: the backwards of the warm-up forwards.
    while (next_b < m) a.push_back(pass(StepOp::Backward, s, next_b++));
  }
  return out;
}

PipelineSchedule compute_schedule(const Strategy& st) {
  switch (st.schedule) {
    case Schedule::GPipe: return gpipe(st.pp, st.gas);
    case Schedule::OneFOneB: return one_f_one_b(st.pp, st.gas);
    case Schedule::Interleaved: return interleaved_one_f_one_b(st.pp, st.gas, st.vpp);
  }
  return one_f_one_b(st.pp, st.gas);
}

PipelineSchedule add_pipeline_transfers(const PipelineSchedule& compute, int vpp) {
  const int pp = int(compute.size()), last = pp * vpp - 1;
  PipelineSchedule out(compute.size());
  for (int s = 0; s < pp; ++s) {
    StepList& a = out[size_t(s)];
    a.reserve(3 * compute[size_t(s)].size());
    for (const StepAction& x : compute[size_t(s)]) {
      if (!is_compute(x.op)) {
        a.push_back(x);
        continue;
      }
      const int v = x.chunk * pp + s;
      const bool fwd = x.op == StepOp::Forward;
      const bool recv = fwd ? v > 0 : v < last, send = fwd ? v < last : v > 0;
      if (recv) a.push_back(pass(fwd ? StepOp::RecvF : StepOp::RecvB, s, x.microbatch, x.chunk));
      a.push_back(x);
      if (send) a.push_back(pass(fwd ? StepOp::SendF : StepOp::SendB, s, x.microbatch, x.chunk));
    }
  }
  return out;
}

PipelineSchedule make_schedule(const Strategy& st) {
  return add_pipeline_transfers(compute_schedule(st), st.schedule == Schedule::Interleaved ? st.vpp : 1);
}

std::string to_string(const PipelineSchedule& s) {
  std::string out;
  for (const auto& stage : s) {
    bool first = true;
    for (const auto& a : stage) {
      if (!is_compute(a.op)) continue;  // compact: compute actions only
      out += (first ? "" : " ") + a.to_string();
      first = false;
    }
    out += "\n";
  }
  return out;
}

}  // namespace planner

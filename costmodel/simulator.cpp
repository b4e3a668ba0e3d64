#include "costmodel/simulator.hpp"

#include <algorithm>
#include <cmath>

namespace planner {

const char* to_string(Stream s) {
  switch (s) {
    case Stream::Compute: return "compute";
    case Stream::Comm: return "comm";
    case Stream::P2P: return "p2p";
    case Stream::Copy: return "copy";
    case Stream::Cpu: return "cpu";
  }
  return "?";
}

const char* trace_name(const StepAction& a, bool cpu_optimizer) {
  switch (a.op) {
    case StepOp::Forward: return "F";
    case StepOp::Backward: return "B";
    case StepOp::SendF: return "send activation";
    case StepOp::RecvF: return "recv activation";
    case StepOp::SendB: return "send gradient";
    case StepOp::RecvB: return "recv gradient";
    case StepOp::Gather: return "gather";
    case StepOp::Release: return "release";
    case StepOp::Reduce: return a.scatter ? "reduce-scatter" : "all-reduce";
    case StepOp::ToHost: return "to host";
    case StepOp::Sync: return "sync";
    case StepOp::Norm: return "grad norm";
    case StepOp::TiedReduce: return "tied embedding grad";
    case StepOp::ReplicaReduce: return "replicated grad sum";
    case StepOp::LossReduce: return "loss all-reduce";
    case StepOp::NormReduce: return "grad norm all-reduce";
    case StepOp::Clip: return "clip";
    case StepOp::CpRingF: return "cp ring (forward)";
    case StepOp::CpRingB: return "cp ring (backward)";
    case StepOp::MoeATAF: return "moe all-to-all (forward)";
    case StepOp::MoeATAB: return "moe all-to-all (backward)";
    case StepOp::Opt: return cpu_optimizer ? "cpu adam" : "optimizer";
    case StepOp::ToDevice: return "to device";
    case StepOp::AllGather: return "all-gather";
  }
  return "?";
}

double comm_end_beside_compute(double t, double end, double pass, double c) {
  if (end <= t || c <= 1 || pass <= 0) return end;
  const double work = end - t;
  return work * c <= pass ? t + work * c : end + pass - pass / c;
}

double comm_slowdown_from(double pass, double alone, double end) {
  const double cap = HardwareProfile::kMaxCommSlowdown;
  if (!(alone > 0) || !(pass > 0) || !(end > 0)) return 1.0;
  // Ended inside the compute: end = alone * c.
  if (end <= pass) return std::clamp(end / alone, 1.0, cap);
  // Ended after it: end = pass + alone - pass / c.
  const double done_beside = pass + alone - end;  // = pass / c
  return done_beside <= pass / cap ? cap : std::clamp(pass / done_beside, 1.0, cap);
}

ChainBeside chain_beside(int n, int colls, double pass, double coll, double s, double c) {
  double t = 0, comm_free = 0;
  for (int i = 0; i < n; ++i) {
    double dur = pass;
    if (comm_free > t) {
      const double overlap = std::min(dur, (comm_free - t) * c);
      dur += overlap * (s - 1);
      comm_free = comm_end_beside_compute(t, comm_free, dur, c);
    }
    t += dur;
    if (i < colls) comm_free = std::max(comm_free, t) + coll;  // queued at the pass's end, alone until the next pass
  }
  return {t, comm_free};
}

std::pair<double, double> chain_slowdowns_from(int n, int colls, double pass, double coll, double compute_end,
                                               double comm_end) {
  const double cap = HardwareProfile::kMaxCommSlowdown;
  // For a given c, the s that gives the compute's end (it grows with s).
  auto s_for = [&](double c) {
    double lo = 1, hi = 3;
    if (chain_beside(n, colls, pass, coll, lo, c).compute_end >= compute_end) return lo;
    if (chain_beside(n, colls, pass, coll, hi, c).compute_end <= compute_end) return hi;
    for (int k = 0; k < 60; ++k) {
      const double mid = (lo + hi) / 2;
      (chain_beside(n, colls, pass, coll, mid, c).compute_end < compute_end ? lo : hi) = mid;
    }
    return (lo + hi) / 2;
  };
  // Then the c whose comm end is closest, over a geometric grid refined once.
  auto miss = [&](double c) { return std::abs(chain_beside(n, colls, pass, coll, s_for(c), c).comm_end - comm_end); };
  double best = 1, best_miss = miss(1);
  const int steps = 400;
  for (int k = 1; k <= steps; ++k) {
    const double c = std::pow(cap, double(k) / steps);
    const double m = miss(c);
    if (m < best_miss) best = c, best_miss = m;
  }
  const double step = std::pow(cap, 1.0 / steps);
  for (int k = -50; k <= 50; ++k) {
    const double c = std::clamp(best * std::pow(step, k / 50.0), 1.0, cap);
    const double m = miss(c);
    if (m < best_miss) best = c, best_miss = m;
  }
  return {s_for(best), best};
}

SimResult simulate(const StepProgram& program, const CostModel& cost, const SimOptions& opt) {
  Simulator sim;
  return sim.run(program, cost, opt);
}

double makespan_lower_bound(const CostModel& cost, int m) {
  const LayerPartition& part = cost.partition();
  const int pp = part.pp(), vpp = part.vpp();
  double best = 0, head = 0, tail = 0;
  for (int s = 0; s < pp; ++s) {
    const StageCost& sc = cost.stage(s);
    double busy = 0, f0 = 0, b0 = 0, cpu = 0, to_device = 0, all_gather = 0, td_last = 0, ag_last = 0;
    for (int c = 0; c < vpp; ++c) {
      const auto [b, e] = part.units_of(s, c);
      for (int u = b; u < e; ++u) {
        const UnitCost& uc = cost.unit(u);
        // cp's ring and MoE's all-to-alls: their own actions, on the compute stream.
        const double xf = uc.cp_ring_forward_seconds + uc.moe_a2a_forward_seconds;
        const double xb = uc.cp_ring_backward_seconds + uc.moe_a2a_backward_seconds;
        busy += uc.forward_seconds + uc.backward_seconds + xf + xb;
        if (c == 0) f0 += uc.forward_seconds + xf, b0 += uc.backward_seconds + xb;
        if (sc.cpu_optimizer) cpu += uc.cpu_adam_seconds;
        to_device += uc.to_device_seconds, all_gather += uc.all_gather_seconds;
        td_last = uc.to_device_seconds, ag_last = uc.all_gather_seconds;
      }
    }
    // The step's end on the compute stream: the stage's blocking reductions
    // as its program has them (StageCost::step_end_reductions). From the
    // first one across the pipeline on (TiedReduce waits for the first stage,
    // a reduction over pp for every stage) they follow the last backward's
    // way down (tail); those before it may run while it goes down, so only
    // the first stage, which has no way down, counts them. After the norm: the GPU
    // optimizer, or the CPU's unit after unit; the uploads (copy stream) and
    // all-gathers (comm stream) are serial on their streams, and the last
    // unit's follow its own update.
    double reductions = 0;
    bool after_pipeline = s == 0;
    for (const StepAction& a : sc.step_end_reductions) {
      after_pipeline = after_pipeline || a.op == StepOp::TiedReduce || a.group == CommGroup::Pp;
      if (after_pipeline) reductions += sc.reduction_seconds(a);
    }
    const double after = (sc.cpu_optimizer ? 0 : sc.optimizer_seconds) +
                         std::max({cpu + td_last + ag_last, to_device + ag_last, all_gather});
    best = std::max(best, head + m * busy + tail + reductions + after);
    head += f0 + cost.send(s, 0).forward_seconds;
    tail += b0 + cost.send(s, 0).backward_seconds;
  }
  return best;
}

}  // namespace planner

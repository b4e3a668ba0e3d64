#include "costmodel/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

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
    case StepOp::Opt: return cpu_optimizer ? "cpu adam" : "optimizer";
    case StepOp::ToDevice: return "to device";
    case StepOp::AllGather: return "all-gather";
  }
  return "?";
}

namespace {

constexpr double kUnknown = -1;

// Moves the compute stream's clock `t` to `until`, charging the wait to `part`.
inline void wait_until(double& t, double until, double& part) {
  if (until > t) part += until - t, t = until;
}

}  // namespace

struct Simulator::StageState {
  size_t next = 0;                 // index of the next action
  double compute_free = 0, comm_free = 0, p2p_free = 0, copy_free = 0, cpu_free = 0;
  double release_done = 0;         // the last released unit's buffer is free (ZeRO-3 gathers wait for it)
  int meeting = -1;                // the action (a collective across stages) this stage has arrived at
  bool done = false;
  std::vector<size_t> deferred;    // Reduce/ToHost held for the Sync (overlap_grad_reduce off)
  // Collectives on the comm stream that may not have ended (a pass beside them
  // moves their ends, comm_end_beside_compute): the unit, whether a gather
  // (param_ready_) or a reduction (grad_ready_), its trace event (-1: none)
  // and its end. A unit's later collective of the same kind takes over its
  // param_ready_/grad_ready_ (ZeRO-3 gathers again for the backward, ZeRO-2
  // reduces every micro-batch); the earlier one then moves only its own end.
  struct Pending {
    int unit;
    bool gather;
    long event;
    double end;
  };
  std::vector<Pending> pending;
};

const SimResult& Simulator::run(const StepProgram& prog, const CostModel& cost, const SimOptions& opt) {
  SimResult& r = result_;
  const LayerPartition& part = prog.partition;
  const int pp = part.pp(), vpp = part.vpp(), V = pp * vpp;
  if (cost.pp() != pp || cost.vpp() != vpp || cost.partition().units() != part.units() ||
      int(prog.stages.size()) != pp)
    throw std::invalid_argument(fmt::format(
        "simulator: the step program (pp={}, vpp={}, {} units) is not the cost model's (pp={}, vpp={}, {} units)", pp,
        vpp, part.units(), cost.pp(), cost.vpp(), cost.partition().units()));
  r.makespan_seconds = 0;
  r.deadlock = false;
  r.critical_stage = 0;
  r.events.clear();
  r.states.assign(opt.state_window.empty() ? 0 : size_t(pp), {});
  r.stages.assign(size_t(pp), StageTime{});
  const int m = std::max(1, prog.microbatches);
  const size_t n = size_t(V) * m;
  fwd_end_.assign(n, kUnknown), bwd_end_.assign(n, kUnknown);
  fwd_arrive_.assign(n, kUnknown), bwd_arrive_.assign(n, kUnknown);
  const size_t units = size_t(part.units());
  param_ready_.assign(units, 0), fetch_end_.assign(units, 0), grad_ready_.assign(units, 0);
  param_updated_.assign(units, 0);
  chunk_first_.resize(size_t(V)), chunk_last_.resize(size_t(V));
  for (int v = 0; v < V; ++v) {
    const auto [b, e] = part.units_of(v % pp, v / pp);
    chunk_first_[size_t(v)] = b, chunk_last_[size_t(v)] = e - 1;
  }
  auto at = [m](int v, int mb) { return size_t(v) * m + size_t(mb); };
  // A collective of `seconds` alone queued at t0 on a stage's comm stream:
  // its end, slowed for the part of it beside the compute already simulated.
  auto queue_comm = [](const StageState& st, const StageCost& sc, double t0, double seconds) {
    return comm_end_beside_compute(t0, t0 + seconds, st.compute_free - t0, sc.comm_slowdown_beside_compute);
  };
  // A pass over [t, t + pass] beside the stage's queued collectives: each of
  // them ends later (and its trace event with it).
  auto stretch_comm = [&](StageState& st, const StageCost& sc, double t, double pass) {
    const double c = sc.comm_slowdown_beside_compute;
    if (c <= 1 || st.comm_free <= t) return;
    auto moved = [&](double x) { return comm_end_beside_compute(t, x, pass, c); };
    size_t keep = 0;
    for (auto q : st.pending) {
      if (q.end <= t) continue;  // ended before the pass: no longer pending
      double& ready = q.gather ? param_ready_[size_t(q.unit)] : grad_ready_[size_t(q.unit)];
      const double before = q.end;
      q.end = moved(before);
      if (ready == before) ready = q.end;  // still this collective's
      if (q.event >= 0) {
        TraceEvent& ev = r.events[size_t(q.event)];
        ev.start_seconds = moved(ev.start_seconds), ev.end_seconds = q.end;
      }
      st.pending[keep++] = q;
    }
    st.pending.resize(keep);
    st.comm_free = moved(st.comm_free);
  };
  // One trace event of action `a` (index -1: a part of it shown apart).
  auto emit = [&](int s, Stream k, double t0, double t1, const char* name, const StepAction& a, int index) {
    if (!opt.record_trace) return;
    TraceEvent ev{s, k, t0, t1, name, a.op};
    if (index >= 0) ev.microbatch = a.microbatch, ev.chunk = a.chunk, ev.unit = a.unit, ev.action = index;
    r.events.push_back(ev);
  };

  std::vector<StageState> S(static_cast<size_t>(pp));
  int finished = 0;
  // Collectives across stages (TiedReduce, LossReduce and NormReduce over the
  // pipeline), by op and group: how many stages have arrived, and the latest
  // arrival (the collective's start once every member is there).
  struct Meet {
    int arrived = 0;
    double start = 0;
  };
  std::array<Meet, size_t(kStepOps) * 4> meets{};
  while (finished < pp) {
    bool progress = false;
    for (int s = 0; s < pp; ++s) {
      StageState& st = S[size_t(s)];
      StageTime& tm = r.stages[size_t(s)];
      const StageCost& sc = cost.stage(s);
      const StepList& list = prog.stages[size_t(s)];

      // Gradient reduction and its copy to the host (a Reduce or ToHost action).
      auto reduce = [&](size_t i, double floor) {
        const StepAction& a = list[i];
        const UnitCost& uc = cost.unit(a.unit);
        const double t0 = std::max({st.comm_free, grad_ready_[size_t(a.unit)], floor});
        st.comm_free = queue_comm(st, sc, t0, a.scatter ? uc.reduce_scatter_seconds : uc.all_reduce_seconds);
        grad_ready_[size_t(a.unit)] = st.comm_free;
        st.pending.push_back({a.unit, false, opt.record_trace ? long(r.events.size()) : -1L, st.comm_free});
        emit(s, Stream::Comm, t0, st.comm_free, trace_name(a, false), a, int(i));
      };
      auto to_host = [&](size_t i, double floor) {
        const StepAction& a = list[i];
        const double t0 = std::max({st.copy_free, grad_ready_[size_t(a.unit)], floor});
        st.copy_free = t0 + cost.unit(a.unit).to_host_seconds;
        emit(s, Stream::Copy, t0, st.copy_free, "to host", a, int(i));
      };

      while (!st.done) {
        if (st.next == list.size()) {  // the stage's end: its streams drain
          double t = st.compute_free;
          wait_until(t, st.cpu_free, tm.optimizer_seconds);
          wait_until(t, st.copy_free, tm.offload_seconds);
          wait_until(t, st.comm_free, tm.exposed_comm_seconds);
          wait_until(t, st.p2p_free, tm.exposed_comm_seconds);
          tm.end_seconds = t;
          st.done = true, ++finished, progress = true;
          break;
        }
        const size_t i = st.next;
        const StepAction& a = list[i];
        const int v = a.chunk * pp + s;
        bool blocked = false;
        switch (a.op) {
          case StepOp::Forward:
          case StepOp::Backward: {
            const bool fwd = a.op == StepOp::Forward;
            const size_t u = size_t(a.unit);
            const UnitCost& uc = cost.unit(a.unit);
            // Data from another virtual stage: the activation into its first
            // unit, the gradient into its last (own earlier actions are done).
            double data = 0;
            if (fwd && a.unit == chunk_first_[size_t(v)] && v > 0) data = fwd_arrive_[at(v, a.microbatch)];
            if (!fwd && a.unit == chunk_last_[size_t(v)] && v < V - 1) data = bwd_arrive_[at(v, a.microbatch)];
            if (data < 0) {
              blocked = true;
              break;
            }
            double t = st.compute_free;
            wait_until(t, data, tm.bubble_seconds);
            wait_until(t, fetch_end_[u], tm.offload_seconds);        // offload=all: the shard from the host
            wait_until(t, param_ready_[u], tm.exposed_comm_seconds);  // ZeRO-3: its gather
            double dur = fwd ? uc.forward_seconds : uc.backward_seconds;
            const double comm = fwd ? uc.forward_comm_seconds : uc.backward_comm_seconds;
            // The part that overlaps the DP/ZeRO collectives queued so far on
            // the comm stream runs slower, and they run slower beside it
            // (calibrate: compute beside NCCL). The overlap: the pass, or the
            // collectives' remaining time at their rate beside a pass.
            if (st.comm_free > t) {
              const double overlap = std::min(dur, (st.comm_free - t) * sc.comm_slowdown_beside_compute);
              if (sc.compute_slowdown_beside_comm > 1) {
                const double extra = overlap * (sc.compute_slowdown_beside_comm - 1);
                dur += extra;
                tm.contention_seconds += extra;
              }
              stretch_comm(st, sc, t, dur);
            }
            tm.tp_comm_seconds += comm;
            tm.compute_seconds += dur - comm;
            st.compute_free = t + dur;
            emit(s, Stream::Compute, t, st.compute_free, fwd ? "F" : "B", a, int(i));
            if (fwd) {
              if (a.unit == chunk_last_[size_t(v)]) fwd_end_[at(v, a.microbatch)] = st.compute_free;
            } else {
              grad_ready_[u] = st.compute_free;
              if (a.unit == chunk_first_[size_t(v)]) bwd_end_[at(v, a.microbatch)] = st.compute_free;
            }
            break;
          }
          case StepOp::SendF:
          case StepOp::SendB: {
            const bool fwd = a.op == StepOp::SendF;
            const int to = fwd ? v + 1 : v - 1;
            const double ready = (fwd ? fwd_end_ : bwd_end_)[at(v, a.microbatch)];
            if (ready < 0 || to < 0 || to >= V) {  // sent before computed, or to no one: a malformed program
              blocked = true;
              break;
            }
            const double t0 = std::max(st.p2p_free, ready);
            st.p2p_free = t0 + (fwd ? cost.send(s, a.chunk).forward_seconds : cost.send(s, a.chunk).backward_seconds);
            (fwd ? fwd_arrive_ : bwd_arrive_)[at(to, a.microbatch)] = st.p2p_free;
            emit(s, Stream::P2P, t0, st.p2p_free, trace_name(a, false), a, int(i));
            break;
          }
          case StepOp::RecvF:
          case StepOp::RecvB: {
            // The transfer is the sender's; the receiver learns when it arrives
            // (its compute waits for it in F or B).
            const double arrive = (a.op == StepOp::RecvF ? fwd_arrive_ : bwd_arrive_)[at(v, a.microbatch)];
            if (arrive < 0) {
              blocked = true;
              break;
            }
            emit(s, Stream::P2P, arrive, arrive, trace_name(a, false), a, int(i));
            break;
          }
          case StepOp::Gather: {
            // On the comm stream in list order, once the buffer of the last
            // released unit is free (at most the unit in use and the prefetched one).
            const UnitCost& uc = cost.unit(a.unit);
            double t0 = std::max(st.comm_free, st.release_done);
            double fetched = 0;
            if (uc.fetch_seconds > 0) {
              const double c0 = std::max(st.copy_free, st.release_done);
              st.copy_free = fetched = c0 + uc.fetch_seconds;
              emit(s, Stream::Copy, c0, fetched, "param fetch", a, -1);
              t0 = std::max(t0, fetched);
            }
            st.comm_free = queue_comm(st, sc, t0, uc.gather_seconds);
            param_ready_[size_t(a.unit)] = st.comm_free;
            st.pending.push_back({a.unit, true, opt.record_trace ? long(r.events.size()) : -1L, st.comm_free});
            fetch_end_[size_t(a.unit)] = fetched;
            emit(s, Stream::Comm, t0, st.comm_free, "gather", a, int(i));
            break;
          }
          case StepOp::Release:
            st.release_done = st.compute_free;  // freed when the unit's last compute so far ends
            emit(s, Stream::Compute, st.compute_free, st.compute_free, "release", a, int(i));
            break;
          case StepOp::Reduce:
            if (sc.overlap_grad_reduce) reduce(i, 0);
            else st.deferred.push_back(i);
            break;
          case StepOp::ToHost:
            if (sc.overlap_grad_reduce) to_host(i, 0);
            else st.deferred.push_back(i);
            break;
          case StepOp::Sync: {
            for (size_t d : st.deferred) {
              if (list[d].op == StepOp::Reduce) reduce(d, st.compute_free);
              else to_host(d, st.compute_free);
            }
            st.deferred.clear();
            double t = st.compute_free;
            wait_until(t, st.comm_free, tm.exposed_comm_seconds);
            wait_until(t, st.copy_free, tm.offload_seconds);
            wait_until(t, st.p2p_free, tm.exposed_comm_seconds);
            emit(s, Stream::Compute, st.compute_free, t, "sync", a, int(i));
            st.compute_free = t;
            break;
          }
          case StepOp::Norm:
          case StepOp::Clip:  // local arithmetic on one float (Clip: fp16's host sync, not timed)
            emit(s, Stream::Compute, st.compute_free, st.compute_free, trace_name(a, false), a, int(i));
            break;
          case StepOp::TiedReduce:
          case StepOp::ReplicaReduce:
          case StepOp::LossReduce:
          case StepOp::NormReduce: {
            // A blocking collective (the runtime waits for it): the compute
            // stream waits for the stage's comm stream, and over the
            // pipeline (TiedReduce: the first and the last stage) for every
            // member to arrive.
            const bool across = a.op == StepOp::TiedReduce || a.group == CommGroup::Pp;
            const int members = a.op == StepOp::TiedReduce ? std::min(pp, 2) : across ? pp : 1;
            const double seconds = a.op == StepOp::TiedReduce      ? sc.tied_grad_seconds
                                   : a.op == StepOp::ReplicaReduce ? sc.replica_reduce_seconds
                                                                   : sc.scalar_reduce_seconds[size_t(a.group)];
            Meet& mt = meets[size_t(a.op) * 4 + size_t(a.group)];
            if (across) {
              if (st.meeting != int(i)) {
                st.meeting = int(i), ++mt.arrived, progress = true;
                mt.start = std::max({mt.start, st.compute_free, st.comm_free});
              }
              if (mt.arrived < members) {
                blocked = true;
                break;
              }
            }
            double t = st.compute_free;
            wait_until(t, st.comm_free, tm.exposed_comm_seconds);
            if (across) wait_until(t, mt.start, tm.bubble_seconds);
            tm.exposed_comm_seconds += seconds;
            st.compute_free = st.comm_free = t + seconds;
            emit(s, Stream::Comm, t, st.compute_free, trace_name(a, false), a, int(i));
            break;
          }
          case StepOp::CpRingF:
          case StepOp::CpRingB: {
            // Context parallelism: the part of the layer's K/V ring that its
            // attention blocks do not hide (costmodel/cp_costs.hpp), waited
            // for on the compute stream inside the pass that follows.
            const UnitCost& uc = cost.unit(a.unit);
            const double t0 = st.compute_free;
            const double d = a.op == StepOp::CpRingF ? uc.cp_ring_forward_seconds : uc.cp_ring_backward_seconds;
            st.compute_free = t0 + d;
            tm.exposed_comm_seconds += d;
            emit(s, Stream::Compute, t0, st.compute_free, trace_name(a, false), a, int(i));
            break;
          }
          case StepOp::Opt:
            if (sc.cpu_optimizer) {
              // Offload: the CPU updates the stage's units one after another;
              // each unit's ToDevice waits for its own update only.
              const double t0 = std::max(st.cpu_free, st.compute_free);
              double t = t0;
              for (int c = 0; c < vpp; ++c) {
                const auto [b, e] = part.units_of(s, c);
                for (int u = b; u < e; ++u) param_updated_[size_t(u)] = t += cost.unit(u).cpu_adam_seconds;
              }
              st.cpu_free = t;
              emit(s, Stream::Cpu, t0, t, "cpu adam", a, int(i));
            } else {
              const double t0 = st.compute_free;
              st.compute_free = t0 + sc.optimizer_seconds;
              tm.optimizer_seconds += sc.optimizer_seconds;
              for (int c = 0; c < vpp; ++c) {
                const auto [b, e] = part.units_of(s, c);
                for (int u = b; u < e; ++u) param_updated_[size_t(u)] = st.compute_free;
              }
              emit(s, Stream::Compute, t0, st.compute_free, "optimizer", a, int(i));
            }
            break;
          case StepOp::ToDevice: {
            const double t0 = std::max(st.copy_free, param_updated_[size_t(a.unit)]);
            st.copy_free = param_updated_[size_t(a.unit)] = t0 + cost.unit(a.unit).to_device_seconds;
            emit(s, Stream::Copy, t0, st.copy_free, "to device", a, int(i));
            break;
          }
          case StepOp::AllGather: {
            const double t0 = std::max(st.comm_free, param_updated_[size_t(a.unit)]);
            st.comm_free = t0 + cost.unit(a.unit).all_gather_seconds;
            emit(s, Stream::Comm, t0, st.comm_free, "all-gather", a, int(i));
            break;
          }
        }
        if (blocked) break;  // waits for another stage
        if (!opt.state_window.empty() && i >= opt.state_window[size_t(s)].first &&
            i < opt.state_window[size_t(s)].second)
          r.states[size_t(s)].push_back(
              {st.compute_free, st.comm_free, st.p2p_free, st.copy_free, st.cpu_free, st.release_done});
        ++st.next;
        progress = true;
      }
    }
    if (!progress) {
      r.deadlock = true;
      r.makespan_seconds = std::numeric_limits<double>::infinity();
      return r;
    }
  }
  for (const StageTime& tm : r.stages) r.makespan_seconds = std::max(r.makespan_seconds, tm.end_seconds);
  for (int s = 0; s < pp; ++s) {
    StageTime& tm = r.stages[size_t(s)];
    tm.bubble_seconds += r.makespan_seconds - tm.end_seconds;
    if (tm.bubble_seconds < r.stages[size_t(r.critical_stage)].bubble_seconds) r.critical_stage = s;
  }
  return r;
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
        const double ring = uc.cp_ring_forward_seconds + uc.cp_ring_backward_seconds;  // cp: on the compute stream
        busy += uc.forward_seconds + uc.backward_seconds + ring;
        if (c == 0) f0 += uc.forward_seconds + uc.cp_ring_forward_seconds, b0 += uc.backward_seconds + uc.cp_ring_backward_seconds;
        if (sc.cpu_optimizer) cpu += uc.cpu_adam_seconds;
        to_device += uc.to_device_seconds, all_gather += uc.all_gather_seconds;
        td_last = uc.to_device_seconds, ag_last = uc.all_gather_seconds;
      }
    }
    // The step's end on the compute stream: the blocking reductions every
    // program of this shape has (the loss over pp and dp, the norm over tp and
    // pp, the tied sum where priced: it waits for the first stage, so it
    // follows the last backward's way down). The replicated sum only on the
    // first stage: elsewhere it may run while the last backward goes down
    // the pipeline (tail). After the norm: the GPU
    // optimizer, or the CPU's unit after unit; the uploads (copy stream) and
    // all-gathers (comm stream) are serial on their streams, and the last
    // unit's follow its own update.
    const auto& q = sc.scalar_reduce_seconds;
    const double reductions = sc.tied_grad_seconds + (s == 0 ? sc.replica_reduce_seconds : 0) +
                              2 * q[size_t(CommGroup::Pp)] + q[size_t(CommGroup::Dp)] + q[size_t(CommGroup::Tp)];
    const double after = (sc.cpu_optimizer ? 0 : sc.optimizer_seconds) +
                         std::max({cpu + td_last + ag_last, to_device + ag_last, all_gather});
    best = std::max(best, head + m * busy + tail + reductions + after);
    head += f0 + cost.send(s, 0).forward_seconds;
    tail += b0 + cost.send(s, 0).backward_seconds;
  }
  return best;
}

}  // namespace planner

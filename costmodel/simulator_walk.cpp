// The simulator's walk of a step program (simulator.hpp): one walk's stage
// states and one handler per kind of action; Simulator::run resets the
// buffers and runs it. docs/SIMULATOR.md ("The simulator").
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "costmodel/simulator.hpp"

namespace planner {

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

// One walk of a program: the stages' states and one handler per kind of
// action. Each handler returns false when its action waits for another stage
// (the walk then turns to the next stage and comes back).
class Simulator::Walk {
 public:
  Walk(Simulator& sim, const StepProgram& prog, const CostModel& cost, const SimOptions& opt)
      : sim_(sim), r_(sim.result_), prog_(prog), cost_(cost), opt_(opt), part_(prog.partition), pp_(part_.pp()),
        vpp_(part_.vpp()), V_(pp_ * vpp_), m_(std::max(1, prog.microbatches)), S_(size_t(pp_)) {}

  // Walks every stage to its end; false on a deadlock.
  bool run() {
    while (finished_ < pp_) {
      progress_ = false;
      for (int s = 0; s < pp_; ++s) walk_stage(s);
      if (!progress_) return false;
    }
    return true;
  }

 private:
  // Collectives across stages (TiedReduce, LossReduce and NormReduce over the
  // pipeline), by op and group: how many stages have arrived, and the latest
  // arrival (the collective's start once every member is there).
  struct Meet {
    int arrived = 0;
    double start = 0;
  };

  Simulator& sim_;
  SimResult& r_;
  const StepProgram& prog_;
  const CostModel& cost_;
  const SimOptions& opt_;
  const LayerPartition& part_;
  const int pp_, vpp_, V_, m_;
  std::vector<StageState> S_;
  std::array<Meet, size_t(kStepOps) * 4> meets_{};
  int finished_ = 0;
  bool progress_ = false;

  size_t at(int v, int mb) const { return size_t(v) * m_ + size_t(mb); }

  // A collective of `seconds` alone queued at t0 on a stage's comm stream:
  // its end, slowed for the part of it beside the compute already simulated.
  static double queue_comm(const StageState& st, const StageCost& sc, double t0, double seconds) {
    return comm_end_beside_compute(t0, t0 + seconds, st.compute_free - t0, sc.comm_slowdown_beside_compute);
  }

  // A pass over [t, t + pass] beside the stage's queued collectives: each of
  // them ends later (and its trace event with it).
  void stretch_comm(StageState& st, const StageCost& sc, double t, double pass) {
    const double c = sc.comm_slowdown_beside_compute;
    if (c <= 1 || st.comm_free <= t) return;
    auto moved = [&](double x) { return comm_end_beside_compute(t, x, pass, c); };
    size_t keep = 0;
    for (auto q : st.pending) {
      if (q.end <= t) continue;  // ended before the pass: no longer pending
      double& ready = q.gather ? sim_.param_ready_[size_t(q.unit)] : sim_.grad_ready_[size_t(q.unit)];
      const double before = q.end;
      q.end = moved(before);
      if (ready == before) ready = q.end;  // still this collective's
      if (q.event >= 0) {
        TraceEvent& ev = r_.events[size_t(q.event)];
        ev.start_seconds = moved(ev.start_seconds), ev.end_seconds = q.end;
      }
      st.pending[keep++] = q;
    }
    st.pending.resize(keep);
    st.comm_free = moved(st.comm_free);
  }

  // One trace event of action `a` (index -1: a part of it shown apart).
  void emit(int s, Stream k, double t0, double t1, const char* name, const StepAction& a, int index) {
    if (!opt_.record_trace) return;
    TraceEvent ev{s, k, t0, t1, name, a.op};
    if (index >= 0) ev.microbatch = a.microbatch, ev.chunk = a.chunk, ev.unit = a.unit, ev.action = index;
    r_.events.push_back(ev);
  }
  long next_event() const { return opt_.record_trace ? long(r_.events.size()) : -1L; }

  // Gradient reduction and its copy to the host (a Reduce or ToHost action).
  void reduce_grad(int s, size_t i, double floor) {
    StageState& st = S_[size_t(s)];
    const StepAction& a = prog_.stages[size_t(s)][i];
    const UnitCost& uc = cost_.unit(a.unit);
    const double t0 = std::max({st.comm_free, sim_.grad_ready_[size_t(a.unit)], floor});
    st.comm_free = queue_comm(st, cost_.stage(s), t0, a.scatter ? uc.reduce_scatter_seconds : uc.all_reduce_seconds);
    sim_.grad_ready_[size_t(a.unit)] = st.comm_free;
    st.pending.push_back({a.unit, false, next_event(), st.comm_free});
    emit(s, Stream::Comm, t0, st.comm_free, trace_name(a, false), a, int(i));
  }
  void copy_to_host(int s, size_t i, double floor) {
    StageState& st = S_[size_t(s)];
    const StepAction& a = prog_.stages[size_t(s)][i];
    const double t0 = std::max({st.copy_free, sim_.grad_ready_[size_t(a.unit)], floor});
    st.copy_free = t0 + cost_.unit(a.unit).to_host_seconds;
    emit(s, Stream::Copy, t0, st.copy_free, "to host", a, int(i));
  }

  // Runs stage s's actions until its end or one that waits for another stage.
  void walk_stage(int s) {
    StageState& st = S_[size_t(s)];
    StageTime& tm = r_.stages[size_t(s)];
    const StepList& list = prog_.stages[size_t(s)];
    while (!st.done) {
      if (st.next == list.size()) {  // the stage's end: its streams drain
        double t = st.compute_free;
        wait_until(t, st.cpu_free, tm.optimizer_seconds);
        wait_until(t, st.copy_free, tm.offload_seconds);
        wait_until(t, st.comm_free, tm.exposed_comm_seconds);
        wait_until(t, st.p2p_free, tm.exposed_comm_seconds);
        tm.end_seconds = t;
        st.done = true, ++finished_, progress_ = true;
        break;
      }
      const size_t i = st.next;
      if (!act(s, i)) break;  // waits for another stage
      const auto& w = opt_.state_window;
      if (!w.empty() && i >= w[size_t(s)].first && i < w[size_t(s)].second)
        r_.states[size_t(s)].push_back(
            {st.compute_free, st.comm_free, st.p2p_free, st.copy_free, st.cpu_free, st.release_done});
      ++st.next;
      progress_ = true;
    }
  }

  // Action i of stage s, by its op.
  bool act(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    const StageCost& sc = cost_.stage(s);
    const StepList& list = prog_.stages[size_t(s)];
    const StepAction& a = list[i];
    auto reduce = [&](size_t d, double floor) { reduce_grad(s, d, floor); };
    auto to_host = [&](size_t d, double floor) { copy_to_host(s, d, floor); };
    switch (a.op) {
      case StepOp::Forward:
      case StepOp::Backward: return compute(s, i);
      case StepOp::SendF:
      case StepOp::SendB: return send(s, i);
      case StepOp::RecvF:
      case StepOp::RecvB: return recv(s, i);
      case StepOp::Gather: gather(s, i); return true;
      case StepOp::Release:
        st.release_done = st.compute_free;  // freed when the unit's last compute so far ends
        emit(s, Stream::Compute, st.compute_free, st.compute_free, "release", a, int(i));
        return true;
      case StepOp::Reduce:
        if (prog_.options.overlap_grad_reduce) reduce(i, 0);
        else st.deferred.push_back(i);
        return true;
      case StepOp::ToHost:
        if (prog_.options.overlap_grad_reduce) to_host(i, 0);
        else st.deferred.push_back(i);
        return true;
      case StepOp::Sync: {
        for (size_t d : st.deferred) {
          if (list[d].op == StepOp::Reduce) reduce(d, st.compute_free);
          else to_host(d, st.compute_free);
        }
        st.deferred.clear();
        sync(s, i);
        return true;
      }
      case StepOp::Norm:
      case StepOp::Clip:  // local arithmetic on one float (Clip: fp16's host sync, not timed)
        emit(s, Stream::Compute, st.compute_free, st.compute_free, trace_name(a, false), a, int(i));
        return true;
      case StepOp::TiedReduce:
      case StepOp::ReplicaReduce:
      case StepOp::LossReduce:
      case StepOp::NormReduce: return blocking_collective(s, i);
      case StepOp::CpRingF:
      case StepOp::CpRingB: cp_ring(s, i); return true;
      case StepOp::MoeATAF:
      case StepOp::MoeATAB: cp_ring(s, i); return true;  // the same: a wait on the compute stream
      case StepOp::Opt: optimizer(s, i); return true;
      case StepOp::ToDevice: {
        const double t0 = std::max(st.copy_free, sim_.param_updated_[size_t(a.unit)]);
        st.copy_free = sim_.param_updated_[size_t(a.unit)] = t0 + cost_.unit(a.unit).to_device_seconds;
        emit(s, Stream::Copy, t0, st.copy_free, "to device", a, int(i));
        return true;
      }
      case StepOp::AllGather: {
        const double t0 = std::max(st.comm_free, sim_.param_updated_[size_t(a.unit)]);
        st.comm_free = t0 + (prog_.options.overlap_param_gather ? 0.0 : cost_.unit(a.unit).all_gather_seconds);
        emit(s, Stream::Comm, t0, st.comm_free, "all-gather", a, int(i));
        return true;
      }
    }
    return true;
  }

  // Context parallelism (KVF/KVB): the part of the layer's K/V ring that its
  // attention blocks do not hide (costmodel/cp_costs.hpp), waited for on the
  // compute stream inside the pass that follows. Mixture of experts
  // (ATAF/ATAB): the dispatch and combine all-to-alls of the pass that
  // follows (costmodel/moe_costs.hpp), which block it the same way.
  void cp_ring(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    StageTime& tm = r_.stages[size_t(s)];
    const StepAction& a = prog_.stages[size_t(s)][i];
    const UnitCost& uc = cost_.unit(a.unit);
    const double t0 = st.compute_free;
    const double d = a.op == StepOp::CpRingF   ? uc.cp_ring_forward_seconds
                     : a.op == StepOp::CpRingB ? uc.cp_ring_backward_seconds
                     : a.op == StepOp::MoeATAF ? uc.moe_a2a_forward_seconds
                                               : uc.moe_a2a_backward_seconds;
    st.compute_free = t0 + d;
    tm.exposed_comm_seconds += d;
    emit(s, Stream::Compute, t0, st.compute_free, trace_name(a, false), a, int(i));
  }

  // Forward or backward of one unit of one micro-batch.
  bool compute(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    StageTime& tm = r_.stages[size_t(s)];
    const StageCost& sc = cost_.stage(s);
    const StepAction& a = prog_.stages[size_t(s)][i];
    const int v = a.chunk * pp_ + s;
    const bool fwd = a.op == StepOp::Forward;
    const size_t u = size_t(a.unit);
    const UnitCost& uc = cost_.unit(a.unit);
    // Data from another virtual stage: the activation into its first
    // unit, the gradient into its last (own earlier actions are done).
    double data = 0;
    if (fwd && a.unit == sim_.chunk_first_[size_t(v)] && v > 0) data = sim_.fwd_arrive_[at(v, a.microbatch)];
    if (!fwd && a.unit == sim_.chunk_last_[size_t(v)] && v < V_ - 1) data = sim_.bwd_arrive_[at(v, a.microbatch)];
    if (data < 0) return false;
    double t = st.compute_free;
    wait_until(t, data, tm.bubble_seconds);
    wait_until(t, sim_.fetch_end_[u], tm.offload_seconds);        // offload=all: the shard from the host
    wait_until(t, sim_.param_ready_[u], tm.exposed_comm_seconds);  // ZeRO-3: its gather
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
      if (a.unit == sim_.chunk_last_[size_t(v)]) sim_.fwd_end_[at(v, a.microbatch)] = st.compute_free;
    } else {
      sim_.grad_ready_[u] = st.compute_free;
      if (a.unit == sim_.chunk_first_[size_t(v)]) sim_.bwd_end_[at(v, a.microbatch)] = st.compute_free;
    }
    return true;
  }

  bool send(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    const StepAction& a = prog_.stages[size_t(s)][i];
    const int v = a.chunk * pp_ + s;
    const bool fwd = a.op == StepOp::SendF;
    const int to = fwd ? v + 1 : v - 1;
    const double ready = (fwd ? sim_.fwd_end_ : sim_.bwd_end_)[at(v, a.microbatch)];
    if (ready < 0 || to < 0 || to >= V_) return false;  // sent before computed, or to no one: a malformed program
    const double t0 = std::max(st.p2p_free, ready);
    st.p2p_free = t0 + (fwd ? cost_.send(s, a.chunk).forward_seconds : cost_.send(s, a.chunk).backward_seconds);
    (fwd ? sim_.fwd_arrive_ : sim_.bwd_arrive_)[at(to, a.microbatch)] = st.p2p_free;
    emit(s, Stream::P2P, t0, st.p2p_free, trace_name(a, false), a, int(i));
    return true;
  }

  // The transfer is the sender's; the receiver learns when it arrives (its
  // compute waits for it in F or B).
  bool recv(int s, size_t i) {
    const StepAction& a = prog_.stages[size_t(s)][i];
    const int v = a.chunk * pp_ + s;
    const double arrive = (a.op == StepOp::RecvF ? sim_.fwd_arrive_ : sim_.bwd_arrive_)[at(v, a.microbatch)];
    if (arrive < 0) return false;
    emit(s, Stream::P2P, arrive, arrive, trace_name(a, false), a, int(i));
    return true;
  }

  // On the comm stream in list order, once the buffer of the last released
  // unit is free (at most the unit in use and the prefetched one).
  void gather(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    const StepAction& a = prog_.stages[size_t(s)][i];
    const UnitCost& uc = cost_.unit(a.unit);
    double t0 = std::max(st.comm_free, st.release_done);
    double fetched = 0;
    if (uc.fetch_seconds > 0) {
      const double c0 = std::max(st.copy_free, st.release_done);
      st.copy_free = fetched = c0 + uc.fetch_seconds;
      emit(s, Stream::Copy, c0, fetched, "param fetch", a, -1);
      t0 = std::max(t0, fetched);
    }
    st.comm_free = queue_comm(st, cost_.stage(s), t0, uc.gather_seconds);
    sim_.param_ready_[size_t(a.unit)] = st.comm_free;
    st.pending.push_back({a.unit, true, next_event(), st.comm_free});
    sim_.fetch_end_[size_t(a.unit)] = fetched;
    emit(s, Stream::Comm, t0, st.comm_free, "gather", a, int(i));
  }

  // The compute stream waits for every outstanding collective and copy.
  void sync(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    StageTime& tm = r_.stages[size_t(s)];
    double t = st.compute_free;
    wait_until(t, st.comm_free, tm.exposed_comm_seconds);
    wait_until(t, st.copy_free, tm.offload_seconds);
    wait_until(t, st.p2p_free, tm.exposed_comm_seconds);
    emit(s, Stream::Compute, st.compute_free, t, "sync", prog_.stages[size_t(s)][i], int(i));
    st.compute_free = t;
  }

  // A blocking collective (the runtime waits for it): the compute stream
  // waits for the stage's comm stream, and over the pipeline (TiedReduce:
  // the first and the last stage) for every member to arrive.
  bool blocking_collective(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    StageTime& tm = r_.stages[size_t(s)];
    const StageCost& sc = cost_.stage(s);
    const StepAction& a = prog_.stages[size_t(s)][i];
    const bool across = a.op == StepOp::TiedReduce || a.group == CommGroup::Pp;
    const int members = a.op == StepOp::TiedReduce ? std::min(pp_, 2) : across ? pp_ : 1;
    const double seconds = sc.reduction_seconds(a);
    Meet& mt = meets_[size_t(a.op) * 4 + size_t(a.group)];
    if (across) {
      if (st.meeting != int(i)) {
        st.meeting = int(i), ++mt.arrived, progress_ = true;
        mt.start = std::max({mt.start, st.compute_free, st.comm_free});
      }
      if (mt.arrived < members) return false;
    }
    double t = st.compute_free;
    wait_until(t, st.comm_free, tm.exposed_comm_seconds);
    if (across) wait_until(t, mt.start, tm.bubble_seconds);
    tm.exposed_comm_seconds += seconds;
    st.compute_free = st.comm_free = t + seconds;
    emit(s, Stream::Comm, t, st.compute_free, trace_name(a, false), a, int(i));
    return true;
  }

  void optimizer(int s, size_t i) {
    StageState& st = S_[size_t(s)];
    StageTime& tm = r_.stages[size_t(s)];
    const StageCost& sc = cost_.stage(s);
    const StepAction& a = prog_.stages[size_t(s)][i];
    auto updated_at = [&](double t) {  // the stage's units, all updated at t
      for (int c = 0; c < vpp_; ++c) {
        const auto [b, e] = part_.units_of(s, c);
        for (int u = b; u < e; ++u) sim_.param_updated_[size_t(u)] = t;
      }
    };
    if (sc.cpu_optimizer) {
      // Offload: the CPU updates the stage's units one after another;
      // each unit's ToDevice waits for its own update only.
      const double t0 = std::max(st.cpu_free, st.compute_free);
      double t = t0;
      for (int c = 0; c < vpp_; ++c) {
        const auto [b, e] = part_.units_of(s, c);
        for (int u = b; u < e; ++u) sim_.param_updated_[size_t(u)] = t += cost_.unit(u).cpu_adam_seconds;
      }
      st.cpu_free = t;
      emit(s, Stream::Cpu, t0, t, "cpu adam", a, int(i));
    } else {
      const double t0 = st.compute_free;
      st.compute_free = t0 + sc.optimizer_seconds;
      tm.optimizer_seconds += sc.optimizer_seconds;
      updated_at(st.compute_free);
      emit(s, Stream::Compute, t0, st.compute_free, "optimizer", a, int(i));
    }
  }
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
  if (!Walk(*this, prog, cost, opt).run()) {
    r.deadlock = true;
    r.makespan_seconds = std::numeric_limits<double>::infinity();
    return r;
  }
  for (const StageTime& tm : r.stages) r.makespan_seconds = std::max(r.makespan_seconds, tm.end_seconds);
  for (int s = 0; s < pp; ++s) {
    StageTime& tm = r.stages[size_t(s)];
    tm.bubble_seconds += r.makespan_seconds - tm.end_seconds;
    if (tm.bubble_seconds < r.stages[size_t(r.critical_stage)].bubble_seconds) r.critical_stage = s;
  }
  return r;
}

}  // namespace planner

#include "costmodel/simulator.hpp"

#include <algorithm>
#include <limits>

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

namespace {

constexpr double kUnknown = -1;

struct StageState {
  size_t next = 0;                 // index of the next action
  double compute_free = 0, comm_free = 0, p2p_free = 0, copy_free = 0;
  double prev_compute_start = 0;   // ZeRO-3 prefetch may start this early
  double grad_done = 0;            // last gradient collective (and its offload copy) finished
  double copy_done = 0;
  bool done = false;
};

}  // namespace

const SimResult& Simulator::run(const PipelineSchedule& sched, const CostModel& cost, const SimOptions& opt) {
  SimResult& r = result_;
  const int pp = cost.pp(), vpp = cost.vpp(), V = pp * vpp;
  r.makespan_seconds = 0;
  r.deadlock = false;
  r.critical_stage = 0;
  r.events.clear();
  r.stages.assign(pp, StageTime{});
  int m = 0;
  for (const auto& st : sched)
    for (const auto& a : st) m = std::max(m, a.microbatch + 1);
  const size_t n = size_t(V) * std::max(1, m);
  fwd_end_.assign(n, kUnknown), bwd_end_.assign(n, kUnknown);
  fwd_arrive_.assign(n, kUnknown), bwd_arrive_.assign(n, kUnknown);
  b_left_.assign(size_t(V), 0);
  for (const auto& st : sched)
    for (const auto& a : st)
      if (a.op == Op::B) ++b_left_[size_t(a.chunk) * pp + a.stage];
  auto at = [m](int v, int mb) { return size_t(v) * m + mb; };
  auto emit = [&](int s, Stream k, double t0, double t1, const char* name, int mb = -1, int c = 0) {
    if (opt.record_trace && t1 > t0) r.events.push_back({s, k, t0, t1, name, mb, c});
  };

  std::vector<StageState> S(pp);
  int finished = 0;
  while (finished < pp) {
    bool progress = false;
    for (int s = 0; s < pp; ++s) {
      StageState& st = S[s];
      StageTime& tm = r.stages[s];
      const auto& list = sched[s];
      while (!st.done) {
        if (st.next == list.size() || list[st.next].op == Op::AllReduce || list[st.next].op == Op::OptStep) {
          st.done = true, ++finished, progress = true;
          break;
        }
        const Action& a = list[st.next];
        if (a.op != Op::F && a.op != Op::B) {  // sends and receives follow from the data dependencies
          ++st.next;
          continue;
        }
        const int v = a.chunk * pp + s, mb = a.microbatch;
        const ChunkCost& cc = cost.chunk(s, a.chunk);
        const bool fwd = a.op == Op::F;
        double data_ready;
        if (fwd) {
          data_ready = v == 0 ? 0 : fwd_arrive_[at(v, mb)];
        } else {
          const double own = fwd_end_[at(v, mb)];
          const double grad = v == V - 1 ? own : bwd_arrive_[at(v, mb)];
          data_ready = own < 0 || grad < 0 ? kUnknown : std::max(own, grad);
        }
        if (data_ready < 0) break;  // blocked on another stage
        const double dur = fwd ? cc.forward_seconds : cc.backward_seconds;
        const double layer_dur = dur / cc.layers;
        double start = std::max(st.compute_free, data_ready);
        double min_end = 0;
        double param_wait = 0, fetch_wait = 0;
        // Offload=all: fetch the shard from the host, layer by layer, one action ahead.
        double fetch_first = 0, fetch_end = 0;
        if (cc.param_fetch_seconds > 0) {
          const double t0 = std::max(st.copy_free, st.prev_compute_start);
          fetch_end = t0 + cc.param_fetch_seconds;
          fetch_first = t0 + cc.param_fetch_seconds / cc.layers;
          st.copy_free = fetch_end;
          emit(s, Stream::Copy, t0, fetch_end, "param fetch", mb, a.chunk);
        }
        // ZeRO-3: all-gather the chunk's parameters, layer by layer, prefetched one action ahead.
        if (cc.param_gather_seconds > 0) {
          const double g = cc.param_gather_seconds, gl = g / cc.layers;
          double t0 = std::max(st.comm_free, st.prev_compute_start);
          if (fetch_end > 0) t0 = std::max(t0, fetch_first);
          const double g_end = std::max(t0 + g, fetch_end + gl);
          st.comm_free = g_end;
          emit(s, Stream::Comm, t0, g_end, "param all-gather", mb, a.chunk);
          const double first = t0 + gl;
          if (first > start) param_wait = first - start, start = first;
          min_end = g_end + layer_dur;
        } else if (fetch_end > 0) {
          if (fetch_first > start) fetch_wait = fetch_first - start, start = fetch_first;
          min_end = fetch_end + layer_dur;
        }
        const double end = std::max(start + dur, min_end);
        // Attribute the compute stream's idle time before and inside this action.
        const double idle = std::max(0.0, std::max(st.compute_free, data_ready) - st.compute_free);
        tm.bubble_seconds += idle;
        tm.exposed_comm_seconds += param_wait + (cc.param_gather_seconds > 0 ? end - start - dur : 0);
        tm.offload_seconds += fetch_wait + (cc.param_gather_seconds <= 0 && fetch_end > 0 ? end - start - dur : 0);
        const double comm_part = fwd ? cc.forward_comm_seconds : cc.backward_comm_seconds;
        tm.tp_comm_seconds += comm_part;
        tm.compute_seconds += dur - comm_part;
        emit(s, Stream::Compute, start, end, fwd ? "F" : "B", mb, a.chunk);
        st.prev_compute_start = start;
        st.compute_free = end;
        if (fwd) {
          fwd_end_[at(v, mb)] = end;
          if (v < V - 1) {
            const double t0 = std::max(end, st.p2p_free);
            st.p2p_free = t0 + cc.send_forward_seconds;
            fwd_arrive_[at(v + 1, mb)] = st.p2p_free;
            emit(s, Stream::P2P, t0, st.p2p_free, "send activation", mb, a.chunk);
          }
        } else {
          bwd_end_[at(v, mb)] = end;
          if (v > 0) {
            const double t0 = std::max(end, st.p2p_free);
            st.p2p_free = t0 + cc.send_backward_seconds;
            bwd_arrive_[at(v - 1, mb)] = st.p2p_free;
            emit(s, Stream::P2P, t0, st.p2p_free, "send gradient", mb, a.chunk);
          }
          const bool last = --b_left_[v] == 0;
          if ((last || cc.reduce_every_microbatch) && cc.grad_reduce_seconds > 0) {
            // Buckets fill evenly through the backward and reduce in order on the comm stream.
            const StageCost& sc = cost.stage(s);
            const int nb = cc.grad_buckets;
            const double per = cc.grad_reduce_seconds / nb;
            const double copy_per = sc.grad_offload_seconds / (double(vpp) * nb);
            for (int i = 0; i < nb; ++i) {
              const double ready = cc.overlap_grad_reduce ? start + (end - start) * (i + 1) / nb : end;
              const double t0 = std::max(ready, st.comm_free);
              st.comm_free = t0 + per;
              emit(s, Stream::Comm, t0, st.comm_free, "grad reduce", -1, a.chunk);
              st.grad_done = std::max(st.grad_done, st.comm_free);
              if (copy_per > 0) {
                const double c0 = std::max(st.comm_free, st.copy_free);
                st.copy_free = c0 + copy_per;
                st.copy_done = st.copy_free;
                emit(s, Stream::Copy, c0, st.copy_free, "grad to host", -1, a.chunk);
              }
            }
          } else if (last && cost.stage(s).grad_offload_seconds > 0 && cc.grad_reduce_seconds <= 0) {
            const double c0 = std::max(end, st.copy_free);  // dp = 1: nothing to reduce, still copy to the host
            st.copy_free = c0 + cost.stage(s).grad_offload_seconds / vpp;
            st.copy_done = st.copy_free;
            emit(s, Stream::Copy, c0, st.copy_free, "grad to host", -1, a.chunk);
          }
        }
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

  // End of the step: DP reduction done, tied-embedding sync, the global
  // gradient-norm all-reduce, then the optimizer and the parameter all-gather.
  std::vector<double> ready(pp);
  double sync = 0;
  for (int s = 0; s < pp; ++s) {
    StageState& st = S[s];
    StageTime& tm = r.stages[s];
    const StageCost& sc = cost.stage(s);
    double t = st.compute_free;
    double comm_done = st.grad_done;
    if (sc.tied_grad_seconds > 0) {
      const double t0 = std::max({st.comm_free, st.compute_free});
      comm_done = t0 + sc.tied_grad_seconds;
      st.comm_free = comm_done;
      emit(s, Stream::Comm, t0, comm_done, "tied embedding grad");
    }
    if (comm_done > t) tm.exposed_comm_seconds += comm_done - t, t = comm_done;
    if (st.copy_done > t) tm.offload_seconds += st.copy_done - t, t = st.copy_done;
    ready[s] = t;
    sync = std::max(sync, t);
  }
  sync += cost.grad_norm_sync_seconds();
  for (int s = 0; s < pp; ++s) {
    StageState& st = S[s];
    StageTime& tm = r.stages[s];
    const StageCost& sc = cost.stage(s);
    tm.bubble_seconds += sync - cost.grad_norm_sync_seconds() - ready[s];
    tm.exposed_comm_seconds += cost.grad_norm_sync_seconds();
    double t = sync;
    if (sc.cpu_optimizer_seconds > 0) {
      emit(s, Stream::Cpu, t, t + sc.cpu_optimizer_seconds, "cpu adam");
      t += sc.cpu_optimizer_seconds;
      tm.optimizer_seconds += sc.cpu_optimizer_seconds;
      emit(s, Stream::Copy, t, t + sc.param_upload_seconds, "params to device");
      t += sc.param_upload_seconds;
      tm.offload_seconds += sc.param_upload_seconds;
    }
    if (sc.optimizer_seconds > 0) {
      emit(s, Stream::Compute, t, t + sc.optimizer_seconds, "optimizer");
      t += sc.optimizer_seconds;
      tm.optimizer_seconds += sc.optimizer_seconds;
    }
    if (sc.param_allgather_seconds > 0) {
      emit(s, Stream::Comm, t, t + sc.param_allgather_seconds, "param all-gather");
      t += sc.param_allgather_seconds;
      tm.exposed_comm_seconds += sc.param_allgather_seconds;
    }
    tm.end_seconds = t;
    r.makespan_seconds = std::max(r.makespan_seconds, t);
  }
  for (int s = 0; s < pp; ++s) {
    StageTime& tm = r.stages[s];
    tm.bubble_seconds += r.makespan_seconds - tm.end_seconds;
    if (tm.bubble_seconds < r.stages[r.critical_stage].bubble_seconds) r.critical_stage = s;
  }
  return r;
}

SimResult simulate(const PipelineSchedule& schedule, const CostModel& cost, const SimOptions& opt) {
  Simulator sim;
  return sim.run(schedule, cost, opt);
}

double makespan_lower_bound(const CostModel& cost, int m) {
  const int pp = cost.pp(), vpp = cost.vpp();
  double best = 0, head = 0, tail = 0;
  for (int s = 0; s < pp; ++s) {
    double busy = 0;
    for (int c = 0; c < vpp; ++c) busy += cost.chunk(s, c).forward_seconds + cost.chunk(s, c).backward_seconds;
    const StageCost& sc = cost.stage(s);
    const double after = sc.optimizer_seconds + sc.cpu_optimizer_seconds + sc.param_upload_seconds +
                         sc.param_allgather_seconds;
    best = std::max(best, head + m * busy + tail + after);
    const ChunkCost& c0 = cost.chunk(s, 0);
    head += c0.forward_seconds + c0.send_forward_seconds;
    tail += c0.backward_seconds + c0.send_backward_seconds;
  }
  return best + cost.grad_norm_sync_seconds();
}

}  // namespace planner

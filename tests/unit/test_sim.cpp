// The step simulator against closed forms, with a fake cost model of
// hand-picked durations (TableCostModel filled directly).
#include <nlohmann/json.hpp>

#include <map>
#include <stdexcept>
#include <string>

#include "catch.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/simulator.hpp"
#include "costmodel/trace.hpp"
#include "strategies/schedule.hpp"

using namespace planner;

namespace {

Strategy strategy(int pp, int m, Schedule sched = Schedule::OneFOneB, int vpp = 1) {
  Strategy s;
  s.pp = pp, s.gas = m, s.schedule = sched, s.vpp = vpp;
  return s;
}

// Every chunk's forward f and backward b for one micro-batch, spread over its units.
TableCostModel uniform(const StepProgram& p, double f, double b) {
  TableCostModel c(p.partition);
  for (int s = 0; s < p.partition.pp(); ++s)
    for (int k = 0; k < p.partition.vpp(); ++k) {
      UnitCost chunk;
      chunk.forward_seconds = f, chunk.backward_seconds = b;
      c.set_chunk(s, k, chunk);
    }
  return c;
}

int count(const SimResult& r, const char* name, int stage = -1) {
  int n = 0;
  for (const auto& e : r.events) n += std::string(e.name) == name && (stage < 0 || e.stage == stage);
  return n;
}

}  // namespace

TEST_CASE("GPipe and 1F1B: makespan (m + p - 1)(f + b), bubble fraction (p - 1)/(m + p - 1)", "[sim]") {
  const double f = 1.0, b = 2.0;
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 3, 8, 16})
      for (Schedule sched : {Schedule::GPipe, Schedule::OneFOneB})
        for (int layers : {p, 3 * p}) {  // one or three layers per stage: the units share the stage's f and b
          const StepProgram prog = build_step_program(strategy(p, m, sched), layers);
          const auto cost = uniform(prog, f, b);
          const SimResult r = simulate(prog, cost);
          INFO("p=" << p << " m=" << m << " layers=" << layers << " " << to_string(sched));
          REQUIRE_FALSE(r.deadlock);
          CHECK(r.makespan_seconds == Approx((m + p - 1) * (f + b)));
          for (const auto& st : r.stages) {
            CHECK(st.bubble_seconds / r.makespan_seconds == Approx(double(p - 1) / (m + p - 1)).margin(1e-12));
            CHECK(st.compute_seconds == Approx(m * (f + b)));
          }
          CHECK(makespan_lower_bound(cost, m) == Approx(r.makespan_seconds));
        }
}

TEST_CASE("interleaved 1F1B divides the bubble by v", "[sim]") {
  // Each chunk holds 1/v of the stage: forward f/v, backward b/v.
  const double f = 1.0, b = 2.0;
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int m : {2 * p, 4 * p}) {
        const StepProgram prog = build_step_program(strategy(p, m, Schedule::Interleaved, v), 2 * p * v);
        const auto cost = uniform(prog, f / v, b / v);
        const SimResult r = simulate(prog, cost);
        INFO("p=" << p << " v=" << v << " m=" << m);
        REQUIRE_FALSE(r.deadlock);
        const double bubble = (p - 1) * (f + b) / v;
        CHECK(r.makespan_seconds == Approx(m * (f + b) + bubble));
        CHECK(r.stages[0].bubble_seconds == Approx(bubble));
        CHECK(makespan_lower_bound(cost, m) <= r.makespan_seconds + 1e-12);
      }
}

TEST_CASE("pipeline sends add to the critical path; the lower bound stays below", "[sim]") {
  const StepProgram prog = build_step_program(strategy(4, 8), 4);
  auto cost = uniform(prog, 1.0, 2.0);
  for (int s = 0; s < 4; ++s) cost.send(s, 0).forward_seconds = 0.1, cost.send(s, 0).backward_seconds = 0.1;
  const SimResult r = simulate(prog, cost);
  // Fill: three hops forward and three back, each 0.1 s, on top of (m + p - 1)(f + b).
  CHECK(r.makespan_seconds >= (8 + 3) * 3.0 + 6 * 0.1 - 1e-9);
  CHECK(makespan_lower_bound(cost, 8) <= r.makespan_seconds + 1e-12);
}

TEST_CASE("DP gradient reduction is hidden behind a long enough backward, except the last unit's", "[sim]") {
  // One stage, one micro-batch, dp = 2: 6 layers, so 8 units (embedding,
  // layers, head); forward 1 s, backward 4 s (0.5 s per unit). Each unit's
  // all-reduce takes 0.25 s and starts when its backward ends, so each is done
  // before the next unit's backward ends; only the last one (the embedding's) is exposed.
  Strategy s = strategy(1, 1);
  s.dp = 2;
  const StepProgram prog = build_step_program(s, 6);
  TableCostModel cost = uniform(prog, 1.0, 4.0);
  for (int u = 0; u < 8; ++u) cost.unit(u).all_reduce_seconds = 0.25;
  cost.stage(0).optimizer_seconds = 0.5;
  SimOptions trace;
  trace.record_trace = true;
  const SimResult r = simulate(prog, cost, trace);
  CHECK(count(r, "all-reduce") == 8);
  CHECK(r.makespan_seconds == Approx(1 + 4 + 0.25 + 0.5));
  CHECK(r.stages[0].exposed_comm_seconds == Approx(0.25));
  CHECK(r.stages[0].optimizer_seconds == Approx(0.5));
  CHECK(r.stages[0].contention_seconds == 0);
  // Compute 1.5x as long beside the collectives: the 7 backwards after the
  // first each overlap their predecessor's 0.25 s all-reduce and take 0.125 s
  // more; the forward overlaps none.
  {
    TableCostModel slow = cost;
    slow.stage(0).compute_slowdown_beside_comm = 1.5;
    const SimResult rs = simulate(prog, slow);
    CHECK(rs.stages[0].contention_seconds == Approx(7 * 0.125));
    CHECK(rs.makespan_seconds == Approx(1 + 4 + 7 * 0.125 + 0.25 + 0.5));
    CHECK(rs.stages[0].compute_seconds == Approx(r.stages[0].compute_seconds + 7 * 0.125));
  }
  // The collectives at 1/4 of their rate beside a pass. Their backlog (in
  // seconds of work alone) after the first backward is 0.25; each of the 7
  // backwards after it does 0.5 / 4 = 0.125 of it and adds its own 0.25, so
  // the 1.125 left when the last backward ends at 5 s runs alone after it.
  {
    TableCostModel slow = cost;
    slow.stage(0).comm_slowdown_beside_compute = 4;
    const SimResult rs = simulate(prog, slow, trace);
    CHECK(rs.makespan_seconds == Approx(5 + 1.125 + 0.5));
    CHECK(rs.stages[0].exposed_comm_seconds == Approx(1.125));
    CHECK(rs.stages[0].contention_seconds == 0);
    // The first all-reduce (1.5 to 1.75 alone): 0.125 of it done beside the
    // second backward (to 2.0), the rest at 1/4 beside the third, ending at 2.5.
    const TraceEvent* first = nullptr;
    for (const auto& e : rs.events)
      if (std::string(e.name) == "all-reduce" && !first) first = &e;
    REQUIRE(first != nullptr);
    CHECK(first->start_seconds == Approx(1.5));
    CHECK(first->end_seconds == Approx(2.5));
    // With the compute 1.5x as long beside them too: every later backward is
    // beside them for all of its 0.75 s and does 0.75 / 4 of their work:
    // backlog 0.25 + 7 x (0.25 - 0.1875) = 0.6875 when the last ends at 6.75.
    slow.stage(0).compute_slowdown_beside_comm = 1.5;
    const SimResult both = simulate(prog, slow);
    CHECK(both.stages[0].contention_seconds == Approx(7 * 0.25));
    CHECK(both.makespan_seconds == Approx(6.75 + 0.6875 + 0.5));
    CHECK(makespan_lower_bound(slow, 1) <= both.makespan_seconds + 1e-12);
  }
  // calibrate's chain of passes, each followed by its collective, under the
  // same rules, and its inverse: the chain's two ends by hand, and (s, c) back
  // from them.
  auto chain_round_trip = [](int n, int colls, double pass, double coll, double s, double c, double compute_end,
                             double comm_end) {
    const ChainBeside ch = chain_beside(n, colls, pass, coll, s, c);
    CHECK(ch.compute_end == Approx(compute_end));
    CHECK(ch.comm_end == Approx(comm_end));
    const auto [s_back, c_back] = chain_slowdowns_from(n, colls, pass, coll, ch.compute_end, ch.comm_end);
    CHECK(s_back == Approx(s).epsilon(1e-3));
    CHECK(c_back == Approx(c).epsilon(1e-3));
  };
  // The simulated program above (8 backwards of 0.5 s after a 1 s forward, an
  // all-reduce of 0.25 s after each, s = 1.5, c = 4) ends its backward at
  // 6.75 s and its collectives 0.6875 s later.
  chain_round_trip(8, 8, 0.5, 0.25, 1.5, 4, 6.75 - 1, 6.75 - 1 + 0.6875);
  // 3 passes of 1 s, collectives of 1 s, s = 1.1, c = 2. The second pass is
  // beside the first collective all along (1.1 s), which does 0.55 of its work
  // then and ends at 2 + 1.1 - 0.55 = 2.55; the second collective queues
  // behind it to 3.55, moves to 4.1 beside the third pass (ends 3.2), and the
  // third runs alone after it: 5.1.
  chain_round_trip(3, 3, 1, 1, 1.1, 2, 3.2, 5.1);
  // No collective after the last pass: 4 passes of 1 s, collectives of 0.25 s
  // after the first 3, s = 1.2, c = 2. Each collective is done 0.5 s into the
  // next pass, which takes 1 + 0.5 x 0.2 = 1.1 s: the compute ends at
  // 1 + 3 x 1.1 = 4.3, the last collective at 3.2 + 0.5 = 3.7, inside the last
  // pass; both slowdowns come back though the collectives never queue up.
  chain_round_trip(4, 3, 1, 0.25, 1.2, 2, 4.3, 3.7);
  // Nothing slower than alone: both 1.
  {
    const auto [s1, c1] = chain_slowdowns_from(3, 3, 1, 1, 3, 4);
    CHECK(s1 == Approx(1));
    CHECK(c1 == Approx(1));
  }
  // The rule and calibrate's inverse of it: 30 ms of compute with 28 ms of
  // collectives at 1/5 of their rate: 6 ms done beside it, 22 after: 52 ms.
  CHECK(comm_end_beside_compute(0, 0.028, 0.030, 5) == Approx(0.052));
  CHECK(comm_slowdown_from(0.030, 0.028, 0.052) == Approx(5));
  // Ending inside the compute: 10 ms at 1/2 -> 20 ms.
  CHECK(comm_end_beside_compute(1, 1.010, 0.030, 2) == Approx(1.020));
  CHECK(comm_slowdown_from(0.030, 0.010, 0.020) == Approx(2));
  for (double c : {1.0, 1.3, 3.0, 12.0})
    for (double alone : {0.005, 0.03, 0.08})
      CHECK(comm_slowdown_from(0.03, alone, comm_end_beside_compute(0, alone, 0.03, c)) == Approx(c));
  // No progress beside the compute at all, or faster than alone: the bounds.
  CHECK(comm_slowdown_from(0.03, 0.01, 0.045) == HardwareProfile::kMaxCommSlowdown);
  CHECK(comm_slowdown_from(0.03, 0.01, 0.008) == 1.0);
  // Ring all-reduce of S bytes over n ranks moves 2(n-1)/n S at the bottleneck B.
  for (int n : {2, 4, 8}) {
    const double S = 1e9, B = 100e9;
    GroupLink g;
    g.size = n, g.seconds_per_byte = 1 / B;
    CHECK(all_reduce_seconds(S, g, 0) == Approx(2.0 * (n - 1) / n * S / B));
  }
  // Without overlap the whole reduction is exposed.
  StepProgram serial = prog;
  serial.options.overlap_grad_reduce = false;
  CHECK(simulate(serial, cost).makespan_seconds == Approx(1 + 4 + 2 + 0.5));
  // A reduction slower than the backward shows: 8 x 1 s, the first after 0.5 s of backward.
  for (int u = 0; u < 8; ++u) cost.unit(u).all_reduce_seconds = 1.0;
  CHECK(simulate(prog, cost).makespan_seconds == Approx(1 + 0.5 + 8 + 0.5));
}

TEST_CASE("ZeRO-2/3 reduce-scatter after every backward; ZeRO-0/1 all-reduce once", "[sim]") {
  for (int zero = 0; zero <= 3; ++zero) {
    Strategy s = strategy(1, 4);
    s.dp = 2, s.zero = zero;
    const StepProgram prog = build_step_program(s, 2);
    TableCostModel cost = uniform(prog, 1.0, 2.0);
    for (int u = 0; u < 4; ++u) cost.unit(u).all_reduce_seconds = 0.02, cost.unit(u).reduce_scatter_seconds = 0.01;
    SimOptions trace;
    trace.record_trace = true;
    const SimResult r = simulate(prog, cost, trace);
    INFO("zero=" << zero);
    CHECK(count(r, "all-reduce") == (zero >= 2 ? 0 : 4));
    CHECK(count(r, "reduce-scatter") == (zero >= 2 ? 4 * 4 : 0));
    // Each unit's reduction hides behind the next unit's backward (0.5 s); the
    // embedding's (last) is exposed once, at the step's end.
    CHECK(r.makespan_seconds == Approx(4 * 3.0 + (zero >= 2 ? 0.01 : 0.02)));
  }
}

TEST_CASE("ZeRO-2 reduce-scatters at 1/4 of their rate beside every pass: a backlog across micro-batches",
          "[sim]") {
  // Four micro-batches of forward 1 s and backward 2 s (four units of 0.5 s)
  // back to back, 0 to 12 s; each unit's reduce-scatter, 0.2 s alone, queued
  // when its backward ends, the first at 1.5 s. While any pass runs they do
  // 0.25 s of their work a second: by 12 s, 10.5 x 0.25 = 2.625 s of the 16 x
  // 0.2 = 3.2 s queued (never idle before), and the 0.575 s left run alone.
  Strategy s = strategy(1, 4);
  s.dp = 2, s.zero = 2;
  const StepProgram prog = build_step_program(s, 2);
  TableCostModel cost = uniform(prog, 1.0, 2.0);
  for (int u = 0; u < 4; ++u) cost.unit(u).reduce_scatter_seconds = 0.2;
  cost.stage(0).comm_slowdown_beside_compute = 4;
  SimOptions trace;
  trace.record_trace = true;
  const SimResult r = simulate(prog, cost, trace);
  CHECK(r.makespan_seconds == Approx(12.575));
  CHECK(r.stages[0].exposed_comm_seconds == Approx(0.575));
  // The trace's reduce-scatters follow one another on the stream, the last ending at the makespan.
  double last_end = 0;
  for (const auto& e : r.events)
    if (std::string(e.name) == "reduce-scatter") {
      CHECK(e.start_seconds >= last_end - 1e-9);
      CHECK(e.end_seconds > e.start_seconds);
      last_end = e.end_seconds;
    }
  CHECK(last_end == Approx(12.575));
}

TEST_CASE("ZeRO-3 parameter gathers are prefetched one unit ahead", "[sim]") {
  // 4 micro-batches, forward 1 s and backward 2 s over 4 layers (6 units, 1/6
  // and 1/3 s each); gathering a unit takes 0.1 s. A gather starts when the
  // buffer of the last released unit is free, one unit ahead of its use: only
  // the very first gather waits.
  Strategy s = strategy(1, 4);
  s.dp = 2, s.zero = 3;
  const StepProgram prog = build_step_program(s, 4);
  TableCostModel cost = uniform(prog, 1.0, 2.0);
  for (int u = 0; u < 6; ++u) cost.unit(u).gather_seconds = 0.1;
  SimOptions trace;
  trace.record_trace = true;
  const SimResult r = simulate(prog, cost, trace);
  CHECK(r.makespan_seconds == Approx(0.1 + 4 * 3.0));
  CHECK(r.stages[0].exposed_comm_seconds == Approx(0.1));
  int gathers = 0;
  for (const auto& a : prog.stages[0]) gathers += a.op == StepOp::Gather;
  CHECK(count(r, "gather") == gathers);
  // Slower gathers than the units' compute are exposed, each pass.
  for (int u = 0; u < 6; ++u) cost.unit(u).gather_seconds = 0.5;
  const SimResult slow = simulate(prog, cost);
  CHECK(slow.makespan_seconds > 4 * 3.0 + 1.0);
  CHECK(slow.stages[0].exposed_comm_seconds == Approx(slow.makespan_seconds - 4 * 3.0));
  CHECK(makespan_lower_bound(cost, 4) <= slow.makespan_seconds);
}

TEST_CASE("offload: gradients go to the host as reduced, the CPU steps, parameters come back", "[sim]") {
  // dp = 1, zero = 1, offload = optimizer, one micro-batch over 2 layers (4
  // units): each unit's gradient copy (0.1 s) starts when its backward ends;
  // the copies of the first three hide behind the next backward (0.5 s), the
  // embedding's does not. Then the CPU updates the units one after another
  // (0.25 s each), each unit's upload (0.2 s) following its own update: only
  // the last upload shows.
  Strategy s = strategy(1, 1);
  s.zero = 1, s.offload = Offload::Optimizer;
  const StepProgram prog = build_step_program(s, 2);
  TableCostModel cost = uniform(prog, 1.0, 2.0);
  for (int u = 0; u < 4; ++u) {
    cost.unit(u).to_host_seconds = 0.1, cost.unit(u).to_device_seconds = 0.2;
    cost.unit(u).cpu_adam_seconds = 0.25;
  }
  cost.stage(0).cpu_optimizer = true;
  SimOptions trace;
  trace.record_trace = true;
  const SimResult r = simulate(prog, cost, trace);
  CHECK(r.makespan_seconds == Approx(3.0 + 0.1 + 1.0 + 0.2));
  CHECK(r.stages[0].offload_seconds == Approx(0.1 + 0.2));
  CHECK(r.stages[0].optimizer_seconds == Approx(1.0));
  CHECK(count(r, "to host") == 4);
  CHECK(count(r, "to device") == 4);
  CHECK(count(r, "cpu adam") == 1);
  CHECK(makespan_lower_bound(cost, 1) <= r.makespan_seconds);
  // ZeRO-1 with dp = 2: each unit's all-gather follows its upload, overlapping the next one.
  s.dp = 2;
  const StepProgram prog2 = build_step_program(s, 2);
  TableCostModel cost2 = cost;
  for (int u = 0; u < 4; ++u) cost2.unit(u).all_gather_seconds = 0.05;
  const SimResult r2 = simulate(prog2, cost2);
  CHECK(r2.makespan_seconds == Approx(3.0 + 0.1 + 1.0 + 0.2 + 0.05));
  CHECK(makespan_lower_bound(cost2, 1) <= r2.makespan_seconds);
}

TEST_CASE("the step waits for the slowest stage before the optimizer", "[sim]") {
  Strategy s = strategy(2, 2);
  s.dp = 2;
  const StepProgram prog = build_step_program(s, 2);  // stage 1: layer 1 (unit 2) and the head (unit 3)
  TableCostModel cost = uniform(prog, 1.0, 2.0);
  cost.unit(2).all_reduce_seconds = 10;  // stage 1's DP reduction dominates
  cost.stage(0).optimizer_seconds = cost.stage(1).optimizer_seconds = 1;
  // The loss and the gradient norm, each summed over the pipeline: 0.25 s each.
  for (int st = 0; st < 2; ++st) cost.stage(st).scalar_reduce_seconds[size_t(CommGroup::Pp)] = 0.25;
  const SimResult r = simulate(prog, cost);
  // Stage 1 runs F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; unit 2's all-reduce runs
  // over [7,17]; stage 0 ends its compute at 9 and waits in the loss's
  // reduction over the pipeline; the two reductions take 0.5 s and the
  // optimizer 1 s.
  CHECK(r.makespan_seconds == Approx(17 + 0.5 + 1));
  CHECK(r.stages[0].end_seconds == Approx(r.stages[1].end_seconds));
  CHECK(r.stages[0].bubble_seconds > r.stages[1].bubble_seconds);
}

TEST_CASE("the parts of a stage's time add up to the makespan", "[sim]") {
  Strategy s = strategy(4, 8, Schedule::Interleaved, 2);
  s.dp = 2, s.zero = 1;
  const StepProgram prog = build_step_program(s, 16);
  TableCostModel cost = uniform(prog, 0.5, 1.0);
  for (int st = 0; st < 4; ++st) {
    UnitCost c0;
    c0.forward_seconds = 0.5, c0.backward_seconds = 1.0, c0.all_reduce_seconds = 0.7, c0.all_gather_seconds = 0.1;
    cost.set_chunk(st, 0, c0);
    cost.send(st, 1).forward_seconds = 0.05;
    cost.stage(st).optimizer_seconds = 0.2;
  }
  const SimResult r = simulate(prog, cost);
  for (const auto& st : r.stages) {
    const double sum = st.compute_seconds + st.tp_comm_seconds + st.exposed_comm_seconds + st.bubble_seconds +
                       st.optimizer_seconds + st.offload_seconds;
    CHECK(sum == Approx(r.makespan_seconds));
  }
}

TEST_CASE("the simulator visits every action of the step program exactly once", "[sim]") {
  // Over dp, ZeRO, offload, pp, schedules and micro-batches, with a non-zero
  // cost for everything: one trace event per action, named for its kind, and
  // per kind as many events as actions.
  int checked = 0;
  for (int dp : {1, 2})
    for (int zero = 0; zero <= 3; ++zero)
      for (int off = 0; off < 3; ++off)
        for (int pp : {1, 2, 4})
          for (int gas : {1, 4, 8})
            for (int sched = 0; sched < 3; ++sched)
              for (bool tied : {false, true}) {
                Strategy s;
                s.dp = dp, s.zero = zero, s.offload = Offload(off), s.pp = pp, s.gas = gas;
                s.schedule = Schedule(sched);
                s.vpp = s.schedule == Schedule::Interleaved ? 2 : 1;
                try {
                  s.validate();
                } catch (const std::exception&) {
                  continue;
                }
                if (s.schedule == Schedule::Interleaved && (pp == 1 || gas % pp)) continue;
                const StepProgram prog = build_step_program(s, 8, {tied});
                TableCostModel cost(prog.partition);
                for (int u = 0; u < prog.partition.units(); ++u) {
                  UnitCost& c = cost.unit(u);
                  c.forward_seconds = 0.01, c.backward_seconds = 0.02, c.gather_seconds = 0.003;
                  c.fetch_seconds = off == 2 ? 0.002 : 0;
                  c.all_reduce_seconds = 0.004, c.reduce_scatter_seconds = 0.002;
                  c.to_host_seconds = 0.003, c.cpu_adam_seconds = off ? 0.005 : 0;
                  // The lower bound counts every ToDevice and AllGather: priced only where the program has them.
                  c.all_gather_seconds = dp > 1 && (zero == 1 || zero == 2) ? 0.002 : 0;
                  c.to_device_seconds = off == 1 || (off == 2 && zero < 3) ? 0.003 : 0;
                }
                for (int st = 0; st < pp; ++st) {
                  for (int c = 0; c < prog.partition.vpp(); ++c) cost.send(st, c) = {0.001, 0.001};
                  cost.stage(st).cpu_optimizer = off != 0;
                  cost.stage(st).optimizer_seconds = off ? 0 : 0.05;
                  if (tied && pp > 1 && (st == 0 || st == pp - 1)) cost.stage(st).tied_grad_seconds = 0.004;
                  // The step-end reductions, priced only where the program has them (the lower bound counts them).
                  auto& q = cost.stage(st).scalar_reduce_seconds;
                  q[size_t(CommGroup::Dp)] = dp > 1 ? 0.001 : 0;
                  q[size_t(CommGroup::Pp)] = pp > 1 ? 0.001 : 0;
                }
                SimOptions opt;
                opt.record_trace = true;
                const SimResult r = simulate(prog, cost, opt);
                INFO(s.to_string() << " tied=" << tied);
                REQUIRE_FALSE(r.deadlock);
                for (int st = 0; st < pp; ++st) {
                  const StepList& list = prog.stages[size_t(st)];
                  std::vector<int> seen(list.size(), 0);
                  std::map<std::string, int> want, got;
                  for (const auto& a : list) ++want[trace_name(a, off != 0)];
                  for (const auto& e : r.events) {
                    if (e.stage != st || e.action < 0) continue;
                    REQUIRE(size_t(e.action) < list.size());
                    ++seen[size_t(e.action)];
                    const StepAction& a = list[size_t(e.action)];
                    CHECK(std::string(e.name) == trace_name(a, off != 0));
                    CHECK(e.unit == a.unit);
                    CHECK(e.microbatch == a.microbatch);
                    CHECK(e.end_seconds >= e.start_seconds);
                    ++got[e.name];
                  }
                  for (size_t i = 0; i < list.size(); ++i) CHECK(seen[i] == 1);
                  CHECK(got == want);
                }
                const double sum = r.stages[0].compute_seconds + r.stages[0].tp_comm_seconds +
                                   r.stages[0].exposed_comm_seconds + r.stages[0].bubble_seconds +
                                   r.stages[0].optimizer_seconds + r.stages[0].offload_seconds;
                CHECK(sum == Approx(r.makespan_seconds));
                CHECK(makespan_lower_bound(cost, gas) <= r.makespan_seconds * (1 + 1e-12));
                ++checked;
              }
  CHECK(checked > 100);
}

TEST_CASE("a program and a cost model of different layouts are refused", "[sim]") {
  const StepProgram prog = build_step_program(strategy(2, 2), 4);
  TableCostModel cost(LayerPartition(6, 2, 1));
  CHECK_THROWS_AS(simulate(prog, cost), std::invalid_argument);
}

TEST_CASE("the Chrome trace has one process per stage and one thread per stream", "[sim]") {
  const StepProgram prog = build_step_program(strategy(2, 2), 2);  // two units per stage
  auto cost = uniform(prog, 1.0, 2.0);
  for (int s = 0; s < 2; ++s) cost.send(s, 0) = {0.1, 0.1};
  SimOptions opt;
  opt.record_trace = true;
  const SimResult r = simulate(prog, cost, opt);
  const auto j = chrome_trace_json(r, "test");
  int complete = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++complete;
      CHECK(e.at("dur").get<double>() > 0);
      CHECK(e.at("pid").get<int>() < 2);
    }
  }
  // F and B of two units and two micro-batches on two stages; two activation
  // and two gradient sends; stage 1's sync waits for its last gradient send.
  CHECK(complete == 2 * 2 * (2 + 2) + 4 + 1);
  CHECK(count(r, "sync", 1) == 1);
  CHECK(j.at("otherData").at("makespan_seconds").get<double>() == Approx(r.makespan_seconds));
}

#include <filesystem>
#include <fstream>

#include "costmodel/predict_detail.hpp"

TEST_CASE("predict writes the documented keys and a Perfetto trace", "[sim]") {
  Plan plan;
  plan.model = resolve_model("gpt2");
  plan.cluster = resolve_cluster("2x8xA100-80GB");
  plan.strategy = Strategy::parse("dp=4,tp=2,pp=2,mbs=2,gas=4,ckpt=full");
  plan.seq = 1024;
  plan.global_batch = 32;
  const auto path = (std::filesystem::temp_directory_path() / "planner_test_trace.json").string();
  const StepPrediction p = predict_with_trace(plan, "", path);
  CHECK(p.step_seconds > 0);
  CHECK(p.hw_tflops_per_gpu > p.tflops_per_gpu);  // full recomputation
  const auto j = prediction_json(p);
  for (const char* key : {"step_seconds", "samples_per_second", "tokens_per_second", "tflops_per_gpu", "mfu", "fits",
                          "per_gpu_peak_bytes", "breakdown"})
    CHECK(j.contains(key));
  CHECK(j["samples_per_second"].get<double>() == Approx(32 / p.step_seconds));
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  CHECK(trace.at("traceEvents").size() > 30);
  std::filesystem::remove(path);
}

TEST_CASE("predict's compute by op class adds up to the simulated compute of the critical stage", "[sim]") {
  // compute_by_class (what exec --kernels measures beside it) is built apart
  // from the simulator's table: its classes must sum to the compute the
  // simulator charged the critical stage, and its TP collectives to the
  // stage's TP time, for every kind of layout.
  struct Case {
    const char* gpus;
    const char* strategy;
  };
  for (const Case c : {Case{"1xH100", "mbs=4,gas=3"}, Case{"1xH100", "mbs=2,gas=2,ckpt=full"},
                       Case{"1xH100", "mbs=2,gas=2,ckpt=selective,precision=fp16"},
                       Case{"8xA100-80GB", "dp=2,tp=2,pp=2,mbs=2,gas=4,sp=1"},
                       Case{"8xA100-80GB", "dp=2,tp=1,pp=4,mbs=1,gas=8,schedule=interleaved,vpp=3"}}) {
    INFO(c.gpus << " " << c.strategy);
    Plan plan;
    plan.model = resolve_model("gpt2");
    plan.cluster = resolve_cluster(c.gpus);
    plan.strategy = Strategy::parse(c.strategy);
    plan.seq = 1024;
    plan.global_batch = plan.strategy.global_batch();
    SimResult sim;
    const StepPrediction p = predict(plan, load_profile("", plan.cluster.gpu), &sim, false);
    const StageTime& st = sim.stages.at(sim.critical_stage);
    CHECK(p.compute_by_class.gemm_seconds > 0);
    CHECK(p.compute_by_class.attention_seconds > 0);
    CHECK(p.compute_by_class.memory_seconds > 0);
    // The classes are the kernels alone: the simulator's compute less its
    // slowdown beside the DP/ZeRO collectives.
    CHECK(p.compute_by_class.compute_seconds() + p.compute_by_class.tp_comm_seconds ==
          Approx(st.compute_seconds - st.contention_seconds + st.tp_comm_seconds).epsilon(1e-9));
    CHECK(p.compute_by_class.tp_comm_seconds == Approx(st.tp_comm_seconds).margin(1e-12));
    // Rank 0's stage (what exec reports): stage 0's compute and TP time; its
    // F and B actions hold compute_seconds where it is the critical stage
    // without tp.
    const StageTime& s0 = sim.stages.at(0);
    CHECK(p.compute_by_class_rank0.total_seconds() ==
          Approx(s0.compute_seconds - s0.contention_seconds + s0.tp_comm_seconds).epsilon(1e-9));
    if (sim.critical_stage == 0 && plan.strategy.tp == 1) CHECK(p.rank0_fb_seconds == Approx(p.compute_seconds));
    else CHECK(p.rank0_fb_seconds == Approx(s0.compute_seconds + s0.tp_comm_seconds).epsilon(1e-9));
    const auto j = prediction_json(p).at("breakdown").at("compute_by_class");
    CHECK(j.at("gemm_seconds").get<double>() == Approx(p.compute_by_class.gemm_seconds));
    CHECK(j.at("memory_bound_seconds").get<double>() == Approx(p.compute_by_class.memory_seconds));
  }
}

// The tied embedding's gradient sum is an action of its own (TiedReduce) on
// the first and the last stage: it starts when both have arrived and costs
// what the table says, on each stage's exposed communication.
TEST_CASE("the tied-embedding sum waits for both ends of the pipeline", "[sim]") {
  Strategy s = strategy(2, 1);
  const StepProgram prog = build_step_program(s, 2, {true});  // stage 0: units 0, 1; stage 1: units 2, 3
  TableCostModel cost = uniform(prog, 1.0, 2.0);
  cost.unit(0).backward_seconds = 5;
  for (int st = 0; st < 2; ++st) cost.stage(st).tied_grad_seconds = 0.5;
  const SimResult r = simulate(prog, cost);
  // Units take 0.5 s forward and 1 s backward. Stage 0: F [0,1], then B of
  // unit 1 [4,5] and of unit 0 [5,10]. Stage 1: F [1,2], B [2,4]; it waits at
  // the tied sum from 4 to 10, then both sum for 0.5 s.
  CHECK(r.makespan_seconds == Approx(10.5));
  CHECK(r.stages[1].exposed_comm_seconds == Approx(0.5));
  CHECK(r.stages[1].bubble_seconds == Approx(1 + 6));  // its first forward's input (1), stage 0's backward (6)
  CHECK(r.stages[0].exposed_comm_seconds == Approx(0.5));
}

// Invariants of the pipeline schedules (GPipe, 1F1B, interleaved 1F1B) for pp
// 1..8 and 1..32 micro-batches: every (micro-batch, chunk) has one forward and
// one backward on its stage, the backward after the forward, every send has its
// receive, and the lists run to the end under message-passing semantics
// (a receive waits for its send; sends do not block) without deadlock.
#include <map>
#include <set>
#include <tuple>

#include "catch.hpp"
#include "costmodel/simulator.hpp"
#include "strategies/schedule.hpp"

using namespace planner;

namespace {

// Runs the lists as the runtime would: each stage executes its actions in
// order; a RecvF/RecvB blocks until the peer's matching SendF/SendB ran.
// Returns false on deadlock.
bool runs_to_completion(const PipelineSchedule& sched, int pp, int vpp) {
  std::vector<size_t> next(pp, 0);
  std::set<std::tuple<int, int, int>> sent;  // (op, target virtual stage, microbatch)
  const int V = pp * vpp;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      while (next[s] < sched[s].size()) {
        const StepAction& a = sched[s][next[s]];
        const int v = a.chunk * pp + s;
        if (a.op == StepOp::RecvF && !sent.count({0, v, a.microbatch})) break;
        if (a.op == StepOp::RecvB && !sent.count({1, v, a.microbatch})) break;
        if (a.op == StepOp::SendF) {
          REQUIRE(v + 1 < V);
          sent.insert({0, v + 1, a.microbatch});
        }
        if (a.op == StepOp::SendB) {
          REQUIRE(v > 0);
          sent.insert({1, v - 1, a.microbatch});
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s)
    if (next[s] != sched[s].size()) return false;
  return true;
}

void check_schedule(const PipelineSchedule& compute, int pp, int m, int vpp, Schedule kind) {
  // The generators emit compute only; the transfers are a pass of their own.
  for (const StepList& list : compute)
    for (const StepAction& a : list) REQUIRE((is_compute(a.op) && a.unit == -1));
  const PipelineSchedule sched = add_pipeline_transfers(compute, vpp);
  REQUIRE(int(sched.size()) == pp);
  const int V = pp * vpp;
  for (int s = 0; s < pp; ++s) {
    std::map<std::pair<int, int>, int> f_at, b_at;  // (mb, chunk) -> position
    int sends_f = 0, recvs_f = 0, sends_b = 0, recvs_b = 0;
    for (int i = 0; i < int(sched[s].size()); ++i) {
      const StepAction& a = sched[s][i];
      REQUIRE(a.stage == s);
      const int v = a.chunk * pp + s;
      switch (a.op) {
        case StepOp::Forward: REQUIRE(f_at.emplace(std::make_pair(a.microbatch, a.chunk), i).second); break;
        case StepOp::Backward:
          REQUIRE(b_at.emplace(std::make_pair(a.microbatch, a.chunk), i).second);
          REQUIRE(f_at.count({a.microbatch, a.chunk}));  // backward after its forward
          break;
        case StepOp::SendF: ++sends_f; REQUIRE(v < V - 1); break;
        case StepOp::RecvF: ++recvs_f; REQUIRE(v > 0); break;
        case StepOp::SendB: ++sends_b; REQUIRE(v > 0); break;
        case StepOp::RecvB: ++recvs_b; REQUIRE(v < V - 1); break;
        default: break;
      }
    }
    REQUIRE(int(f_at.size()) == m * vpp);
    REQUIRE(int(b_at.size()) == m * vpp);
    for (int mb = 0; mb < m; ++mb)
      for (int c = 0; c < vpp; ++c) REQUIRE((f_at.count({mb, c}) && b_at.count({mb, c})));
    // One transfer per micro-batch and chunk boundary.
    int first = 0, last = 0;
    for (int c = 0; c < vpp; ++c) first += (c * pp + s == 0), last += (c * pp + s == V - 1);
    REQUIRE(sends_f == m * (vpp - last));
    REQUIRE(recvs_f == m * (vpp - first));
    REQUIRE(sends_b == m * (vpp - first));
    REQUIRE(recvs_b == m * (vpp - last));
  }
  REQUIRE(runs_to_completion(sched, pp, vpp));
  // The simulator finishes it too (no deadlock under its data dependencies),
  // walking the step program built on this schedule.
  Strategy st;
  st.pp = pp, st.gas = m, st.schedule = kind, st.vpp = vpp;
  const StepProgram prog = build_step_program(st, pp * vpp);
  TableCostModel cost(prog.partition);
  for (int s = 0; s < pp; ++s)
    for (int c = 0; c < vpp; ++c) {
      UnitCost chunk;
      chunk.forward_seconds = 1, chunk.backward_seconds = 2;
      cost.set_chunk(s, c, chunk);
    }
  REQUIRE_FALSE(simulate(prog, cost).deadlock);
}

}  // namespace

TEST_CASE("gpipe and 1f1b schedules keep their invariants for pp 1..8, 1..32 micro-batches", "[schedule]") {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 32; ++m) {
      INFO("pp=" << pp << " m=" << m);
      check_schedule(gpipe(pp, m), pp, m, 1, Schedule::GPipe);
      check_schedule(one_f_one_b(pp, m), pp, m, 1, Schedule::OneFOneB);
    }
}

TEST_CASE("interleaved 1f1b keeps its invariants for pp 1..8, 1..32 micro-batches, vpp 2..4", "[schedule]") {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 32; ++m)
      for (int vpp = 2; vpp <= 4; ++vpp) {
        if (m % pp) {
          REQUIRE_THROWS(interleaved_one_f_one_b(pp, m, vpp));
          continue;
        }
        INFO("pp=" << pp << " m=" << m << " vpp=" << vpp);
        check_schedule(interleaved_one_f_one_b(pp, m, vpp), pp, m, vpp, Schedule::Interleaved);
      }
}

TEST_CASE("interleaved 1f1b: chunk order and warm-up follow Megatron-LM", "[schedule]") {
  // pp=2, m=4, vpp=2: rank 0 warms up with 2*(2-0-1) + (2-1)*2 = 4 forwards:
  // micro-batches 0,1 on chunk 0, then 0,1 on chunk 1.
  const auto s = interleaved_one_f_one_b(2, 4, 2);
  std::vector<std::string> fb;
  for (const auto& a : s[0])
    if (a.op == StepOp::Forward || a.op == StepOp::Backward) fb.push_back(a.to_string());
  REQUIRE(fb.size() == 16);
  CHECK(fb[0] == "0F0");
  CHECK(fb[1] == "0F1");
  CHECK(fb[2] == "0F0.c1");
  CHECK(fb[3] == "0F1.c1");
  CHECK(fb[4] == "0F2");    // steady state: forward then the first backward (chunk 1 first)
  CHECK(fb[5] == "0B0.c1");
  CHECK(fb.back() == "0B3");
  // vpp=1 is plain 1F1B.
  CHECK(interleaved_one_f_one_b(4, 8, 1) == one_f_one_b(4, 8));
  // The peak of in-flight chunks on the first rank: its warm-up plus one.
  CHECK(max_inflight(interleaved_one_f_one_b(4, 8, 2)[0]) == 2 * 3 + 4 + 1);
  // The last rank: its warm-up is chunk 0's forwards of micro-batches 0-3
  // ((vpp - 1) pp = 4), then one forward more; chunk 1 (the LM head's) runs
  // each forward beside its own backward (F0.c1 B0.c1, F1.c1 B1.c1, ...), so
  // at most one micro-batch waits there: the logits of one, not of five.
  CHECK(max_inflight(interleaved_one_f_one_b(4, 8, 2)[3]) == 4 + 1);
  CHECK(max_inflight(interleaved_one_f_one_b(4, 8, 2)[3], 1) == 1);
  CHECK(max_inflight(interleaved_one_f_one_b(4, 8, 2)[3], 0) == 4 + 1);
}

// The whole-step action lists (strategies/step_program.hpp) over a space of
// strategies: every unit of every micro-batch has one forward and one backward
// in order; ZeRO-3 computes only on gathered units and never holds more than
// the unit in use and the one prefetched (plus the tied embedding); gradients
// are reduced once per step (ZeRO-0/1) or after every backward (ZeRO-2/3), each
// after the backward that completes them; offload copies and the optimizer
// come in the right order. And the layer partition's worked example.
#include <map>
#include <set>

#include "catch.hpp"
#include "strategies/errors.hpp"
#include "strategies/partition.hpp"
#include "strategies/step_program.hpp"

using namespace planner;

TEST_CASE("layer partition: the worked example of partition.hpp", "[step]") {
  LayerPartition p(10, 2, 2);
  CHECK(p.chunk_layers() == std::vector<int>{2, 3, 3, 2});
  CHECK(p.units_of(0, 0) == std::pair<int, int>{0, 3});
  CHECK(p.units_of(1, 0) == std::pair<int, int>{3, 6});
  CHECK(p.units_of(0, 1) == std::pair<int, int>{6, 9});
  CHECK(p.units_of(1, 1) == std::pair<int, int>{9, 12});
  CHECK(p.stage_units(1) == std::vector<int>{3, 4, 5, 9, 10, 11});
  CHECK(p.owner(11) == std::pair<int, int>{1, 1});
  CHECK(p.owner(0) == std::pair<int, int>{0, 0});
  CHECK_THROWS(LayerPartition(3, 2, 2));  // 4 virtual stages, 3 layers
}

TEST_CASE("step program: the ZeRO-3 example of step_program.hpp", "[step]") {
  Strategy s = Strategy::parse("dp=2,zero=3,gas=1");
  StepOptions o;
  o.tied_embeddings = true;
  CHECK(to_string(build_step_program(s, 2, o)) ==
        "0G0 0G1 0F0.0 0G2 0F0.1 0R1 0G3 0F0.2 0R2 0F0.3 0G2 0B0.3 0RS3 0R3 0G1 0B0.2 0RS2 0R2 0B0.1 0RS1 0R1 "
        "0B0.0 0RS0 0R0 0Sync 0LRdp 0Norm 0NRdp 0Clip 0Opt\n");
}

namespace {

void check_program(const Strategy& s, int layers, bool tied) {
  StepOptions o;
  o.tied_embeddings = tied;
  const StepProgram p = build_step_program(s, layers, o);
  REQUIRE(int(p.stages.size()) == s.pp);
  for (int st = 0; st < s.pp; ++st) {
    const auto units = p.partition.stage_units(st);
    const std::set<int> mine(units.begin(), units.end());
    std::map<std::pair<int, int>, int> fwd, bwd;  // (mb, unit) -> index
    std::map<int, int> last_b, reduces, last_reduce, to_host;
    std::set<int> gathered;
    size_t peak_gathered = 0;
    int sync = -1, norm = -1, opt = -1;
    const auto& list = p.stages[size_t(st)];
    for (int i = 0; i < int(list.size()); ++i) {
      const StepAction& a = list[size_t(i)];
      CHECK(a.stage == st);
      switch (a.op) {
        case StepOp::Forward:
        case StepOp::Backward: {
          CHECK(mine.count(a.unit) == 1);
          if (s.zero == 3) CHECK(gathered.count(a.unit) == 1);
          auto& m = a.op == StepOp::Forward ? fwd : bwd;
          CHECK(m.count({a.microbatch, a.unit}) == 0);
          m[{a.microbatch, a.unit}] = i;
          if (a.op == StepOp::Backward) {
            CHECK(fwd.count({a.microbatch, a.unit}) == 1);
            last_b[a.unit] = i;
          }
          break;
        }
        case StepOp::Gather:
          CHECK(s.zero == 3);
          CHECK(gathered.insert(a.unit).second);
          peak_gathered = std::max(peak_gathered, gathered.size());
          break;
        case StepOp::Release: CHECK(gathered.erase(a.unit) == 1); break;
        case StepOp::Reduce:
          CHECK(a.scatter == (s.zero >= 2));
          CHECK(last_b.count(a.unit) == 1);
          CHECK(list[size_t(last_b[a.unit])].unit == a.unit);
          ++reduces[a.unit];
          last_reduce[a.unit] = i;
          break;
        case StepOp::ToHost:
          CHECK(s.offload != Offload::None);
          ++to_host[a.unit];
          break;
        case StepOp::Sync: sync = i; break;
        case StepOp::Norm: norm = i; break;
        case StepOp::Opt: opt = i; break;
        case StepOp::ToDevice:
        case StepOp::AllGather: CHECK(i > opt); CHECK(opt >= 0); break;
        default: break;
      }
    }
    CHECK(int(fwd.size()) == s.gas * int(units.size()));
    CHECK(int(bwd.size()) == s.gas * int(units.size()));
    CHECK(sync >= 0);
    CHECK(sync < norm);
    CHECK(norm < opt);
    if (s.zero == 3) {
      CHECK(gathered.empty());  // everything released by the end of the step
      CHECK(int(peak_gathered) <= 2 + (tied && s.pp == 1 ? 1 : 0));
    }
    for (int u : units) {
      const int want = s.zero >= 2 ? s.gas : (s.dp > 1 ? 1 : 0);
      CHECK(reduces[u] == want);
      if (want > 0) CHECK(last_reduce[u] > last_b[u]);
      CHECK(to_host[u] == (s.offload != Offload::None ? 1 : 0));
    }
  }
}

}  // namespace

TEST_CASE("step program invariants over dp, zero, offload, pp, schedules and micro-batches", "[step]") {
  int checked = 0;
  for (int dp : {1, 2, 4})
    for (int zero = 0; zero <= 3; ++zero)
      for (int off = 0; off < 3; ++off)
        for (int pp : {1, 2, 4})
          for (int gas : {1, 2, 4, 8})
            for (int sched = 0; sched < 3; ++sched) {
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
              for (bool tied : {false, true}) check_program(s, 8, tied);
              ++checked;
            }
  CHECK(checked > 100);
}

// The pipeline links (runtime/comm/pipe_links.hpp) carry each direction of each
// pair of neighbouring stages on its own communicator, in issue order (NCCL
// has no tags). That is correct only if, on every link, the sender's sends come
// in the order of the receiver's receives: (micro-batch, virtual stage) pairs
// must match one for one.
TEST_CASE("step program: on every pipeline link, sends and receives come in the same order", "[step]") {
  for (int pp : {2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 16})
      for (const char* sched : {"gpipe", "1f1b", "interleaved"}) {
        const bool inter = std::string(sched) == "interleaved";
        for (int vpp : inter ? std::vector<int>{2, 3} : std::vector<int>{1}) {
          if (inter && m % pp != 0) continue;
          Strategy s;
          s.pp = pp, s.gas = m, s.vpp = vpp;
          s.schedule = inter ? Schedule::Interleaved : std::string(sched) == "gpipe" ? Schedule::GPipe : Schedule::OneFOneB;
          const StepProgram prog = build_step_program(s, int64_t(pp) * vpp * 2, {});
          INFO(sched << " pp=" << pp << " m=" << m << " vpp=" << vpp);
          // link (from, to, dir) -> sequence of (micro-batch, virtual stage of the data's consumer)
          using Seq = std::vector<std::pair<int, int>>;
          std::map<std::tuple<int, int, int>, Seq> sent, received;
          for (int st = 0; st < pp; ++st)
            for (const StepAction& a : prog.stages[size_t(st)]) {
              const int v = a.chunk * pp + st;  // this action's virtual stage
              switch (a.op) {
                case StepOp::SendF: sent[{st, (st + 1) % pp, 0}].push_back({a.microbatch, v + 1}); break;
                case StepOp::RecvF: received[{(st - 1 + pp) % pp, st, 0}].push_back({a.microbatch, v}); break;
                case StepOp::SendB: sent[{st, (st - 1 + pp) % pp, 1}].push_back({a.microbatch, v - 1}); break;
                case StepOp::RecvB: received[{(st + 1) % pp, st, 1}].push_back({a.microbatch, v}); break;
                default: break;
              }
            }
          CHECK(sent == received);
          size_t links = 0;
          for (const auto& [k, seq] : sent) links += seq.empty() ? 0 : 1;
          CHECK(links == size_t(inter ? 2 * pp : 2 * (pp - 1)));
        }
      }
}

// One printer, one parser: every action of every program of every schedule
// kind reads back as itself, and the printed forms of the docs parse to the
// actions they name.
TEST_CASE("step program: the printer and parse_step_lists are inverse on every schedule kind", "[step]") {
  int programs = 0;
  for (const char* sched : {"gpipe", "1f1b", "interleaved"})
    for (int pp : {1, 2, 4})
      for (int zero = 0; zero <= 3; ++zero)
        for (int off = 0; off < 3; ++off) {
          Strategy s;
          s.pp = pp, s.gas = 4, s.dp = 2, s.zero = zero, s.offload = Offload(off);
          const bool inter = std::string(sched) == "interleaved";
          s.schedule = inter ? Schedule::Interleaved : std::string(sched) == "gpipe" ? Schedule::GPipe : Schedule::OneFOneB;
          s.vpp = inter ? 2 : 1;
          try {
            s.validate();
          } catch (const std::exception&) {
            continue;
          }
          if (inter && pp == 1) continue;
          const StepProgram p = build_step_program(s, 8, {});
          INFO(s.to_string());
          CHECK(parse_step_lists(to_string(p)) == p.stages);
          ++programs;
        }
  CHECK(programs > 30);
  const StepAction f = parse_step_action("3F7.12.c1");
  CHECK((f.op == StepOp::Forward && f.stage == 3 && f.microbatch == 7 && f.unit == 12 && f.chunk == 1));
  const StepAction rs = parse_step_action("0RS5");
  CHECK((rs.op == StepOp::Reduce && rs.scatter && rs.unit == 5));
  CHECK(parse_step_action("0R5").op == StepOp::Release);
  CHECK(parse_step_action("0RB2").op == StepOp::RecvB);
  CHECK(parse_step_action("1Norm").op == StepOp::Norm);
  CHECK_THROWS_AS(parse_step_action("0Red5"), InputError);  // the op's name, not its printed form
  CHECK_THROWS_AS(parse_step_action("0F"), InputError);
  CHECK_THROWS_AS(parse_step_action("0G5x"), InputError);
  StepOp op;
  for (int k = 0; k < kStepOps; ++k) CHECK((parse_step_op(to_string(StepOp(k)), op) && op == StepOp(k)));
  CHECK_FALSE(parse_step_op("recompute", op));
}

// Every collective of the step's end is an action (issue 27): the tied
// embedding's sum on the first and the last stage, the replicated ranges'
// sum under sequence parallelism, the loss over pp and dp, and the norm's
// reductions over tp, dp (ZeRO-2/3) and pp, in one order on every stage.
TEST_CASE("step program: the step's end lists every collective", "[step]") {
  Strategy s = Strategy::parse("dp=2,tp=2,pp=3,sp=1,zero=2,gas=3");
  StepOptions o;
  o.tied_embeddings = true;
  const StepProgram p = build_step_program(s, 6, o);
  auto tail = [&](int st) {
    std::string out;
    for (const StepAction& a : p.stages[size_t(st)])
      if (!is_compute(a.op) && a.op != StepOp::Reduce && a.op != StepOp::SendF && a.op != StepOp::RecvF &&
          a.op != StepOp::SendB && a.op != StepOp::RecvB && a.op != StepOp::AllGather)
        out += a.to_string() + " ";
    return out;
  };
  CHECK(tail(0) == "0Sync 0TE 0Rep 0LRpp 0LRdp 0Norm 0NRtp 0NRdp 0NRpp 0Clip 0Opt ");
  CHECK(tail(1) == "1Sync 1Rep 1LRpp 1LRdp 1Norm 1NRtp 1NRdp 1NRpp 1Clip 1Opt ");  // not an end: no tied sum
  CHECK(tail(2) == "2Sync 2TE 2Rep 2LRpp 2LRdp 2Norm 2NRtp 2NRdp 2NRpp 2Clip 2Opt ");
  // One device: no collective at all.
  const std::string one = to_string(build_step_program(Strategy::parse("gas=1"), 1, o));
  CHECK(one == "0F0.0 0F0.1 0F0.2 0B0.2 0B0.1 0B0.0 0Sync 0Norm 0Clip 0Opt\n");
  CHECK(parse_step_lists(to_string(p)) == p.stages);
}

// One pass (add_layer_exchanges) puts both kinds of per-layer exchange before
// a layer unit's pass: the context-parallel ring (KVF/KVB) and, under expert
// parallelism, the MoE all-to-alls (ATAF/ATAB); legality allows cp and ep
// together (tests/unit/test_context_parallel.cpp, "cp with ep").
TEST_CASE("step program: cp and ep together put the ring, then the all-to-alls, before each layer's pass", "[step][cp][moe]") {
  // Two layers on one stage: units 0 (embedding), 1-2 (layers), 3 (head). The
  // gradients go over the dp-cp group of 4 ranks (AR after each B at gas=1).
  const StepProgram one = build_step_program(Strategy::parse("dp=2,cp=2,ep=2,mbs=1,gas=1,precision=fp32"), 2);
  CHECK(to_string(one) ==
        "0F0.0 0KVF0.1 0ATAF0.1 0F0.1 0KVF0.2 0ATAF0.2 0F0.2 0F0.3 "
        "0B0.3 0AR3 0KVB0.2 0ATAB0.2 0B0.2 0AR2 0KVB0.1 0ATAB0.1 0B0.1 0AR1 0B0.0 0AR0 "
        "0Sync 0LRdp 0Norm 0Clip 0Opt\n");
  // Eight layers over pp=2 with vpp=2 (two layers a chunk, four layer units a
  // stage) and 4 micro-batches: each stage runs 4 x 4 = 16 layer forwards and
  // 16 layer backwards, so 16 of each exchange, each right before its pass.
  const Strategy s = Strategy::parse("dp=2,cp=2,ep=2,pp=2,mbs=1,gas=4,schedule=interleaved,vpp=2");
  const StepProgram p = build_step_program(s, 8);
  REQUIRE(p.stages.size() == 2);
  for (const StepList& list : p.stages) {
    std::map<StepOp, int> n;
    for (size_t i = 0; i < list.size(); ++i) {
      const StepAction& a = list[i];
      ++n[a.op];
      if (a.op != StepOp::CpRingF && a.op != StepOp::CpRingB) continue;
      REQUIRE(i + 2 < list.size());
      const bool fwd = a.op == StepOp::CpRingF;
      const StepAction& x = list[i + 1];
      const StepAction& c = list[i + 2];
      CHECK(x.op == (fwd ? StepOp::MoeATAF : StepOp::MoeATAB));
      CHECK(c.op == (fwd ? StepOp::Forward : StepOp::Backward));
      CHECK((x.microbatch == a.microbatch && x.unit == a.unit && x.chunk == a.chunk));
      CHECK((c.microbatch == a.microbatch && c.unit == a.unit && c.chunk == a.chunk));
    }
    for (StepOp op : {StepOp::CpRingF, StepOp::CpRingB, StepOp::MoeATAF, StepOp::MoeATAB}) CHECK(n[op] == 16);
    // Each stage also holds either the embedding or the head: 4 x (4 + 1) passes each way.
    CHECK(n[StepOp::Forward] == 20);
    CHECK(n[StepOp::Backward] == 20);
  }
  // Only cp, or only ep: the other kind is absent, the counts unchanged.
  for (const char* only : {"dp=4,cp=2,pp=2,mbs=1,gas=4,schedule=interleaved,vpp=2",
                           "dp=2,ep=2,pp=2,mbs=1,gas=4,schedule=interleaved,vpp=2"}) {
    const Strategy t = Strategy::parse(only);
    INFO(only);
    for (const StepList& list : build_step_program(t, 8).stages) {
      std::map<StepOp, int> n;
      for (const StepAction& a : list) ++n[a.op];
      CHECK(n[StepOp::CpRingF] == (t.cp > 1 ? 16 : 0));
      CHECK(n[StepOp::CpRingB] == (t.cp > 1 ? 16 : 0));
      CHECK(n[StepOp::MoeATAF] == (t.ep > 1 ? 16 : 0));
      CHECK(n[StepOp::MoeATAB] == (t.ep > 1 ? 16 : 0));
    }
  }
}

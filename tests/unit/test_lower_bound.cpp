// makespan_lower_bound reads the step-end reductions off the program's tail
// (StageCost::step_end_reductions, filled by CostContext::build from
// add_step_tail).
#include "catch.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/simulator.hpp"
#include "specs/cluster_spec.hpp"
#include "specs/model_spec.hpp"
#include "strategies/step_program.hpp"

using namespace planner;

namespace {

// The bound, and the bound of the same table without the step-end reductions.
std::pair<double, double> with_and_without(CostContext& ctx, const Strategy& s) {
  TableCostModel t;
  ctx.build(s, t);
  const double with = makespan_lower_bound(t, s.gas);
  for (int st = 0; st < s.pp; ++st) t.stage(st).step_end_reductions.clear();
  return {with, makespan_lower_bound(t, s.gas)};
}

}  // namespace

TEST_CASE("the lower bound counts the step-end reductions the program's tail has", "[search][sim]") {
  const ModelSpec m = resolve_model("llama-2-7b");
  const ClusterSpec c = parse_cluster("2x8xA100-80GB");
  CostContext ctx(m, c, 2048, default_profile(c.gpu));
  SECTION("ZeRO-3, one stage: all of them, the norm's dp reduction too") {
    const Strategy s = Strategy::parse("dp=8,tp=2,zero=3,mbs=1,gas=4");
    TableCostModel t;
    ctx.build(s, t);
    const StageCost& sc = t.stage(0);
    // The tail: LRdp, then Norm's NRtp and NRdp (add_step_tail; no sp, no pp).
    REQUIRE(sc.step_end_reductions.size() == 3);
    const auto& q = sc.scalar_reduce_seconds;
    const double dp = q[size_t(CommGroup::Dp)], tp = q[size_t(CommGroup::Tp)];
    REQUIRE(dp > 0);
    REQUIRE(tp > 0);
    const auto [with, without] = with_and_without(ctx, s);
    CHECK(with - without == Approx(2 * dp + tp).epsilon(1e-9));
  }
  SECTION("a pipeline: from the first reduction over pp on, on every stage") {
    const Strategy s = Strategy::parse("dp=2,tp=2,pp=4,zero=1,mbs=1,gas=8,sp=1");
    TableCostModel t;
    ctx.build(s, t);
    const auto [with, without] = with_and_without(ctx, s);
    // The bound is a max over stages: it grew by at least the smallest stage's
    // reductions and at most the largest's. Each stage counts LRpp, LRdp, NRtp
    // and NRpp (from LRpp on); stage 0 also the replicated sum before them.
    double least = 1e300, most = 0;
    for (int st = 0; st < s.pp; ++st) {
      const auto& q = t.stage(st).scalar_reduce_seconds;
      const double after = 2 * q[size_t(CommGroup::Pp)] + q[size_t(CommGroup::Dp)] + q[size_t(CommGroup::Tp)];
      const double all = after + (st == 0 ? t.stage(st).replica_reduce_seconds : 0);
      least = std::min(least, after), most = std::max(most, all);
    }
    CHECK(with - without >= least * (1 - 1e-9));
    CHECK(with - without <= most * (1 + 1e-9));
    const StepProgram prog = build_step_program(s, m.layers, {m.tied_embeddings});
    CHECK(with <= simulate(prog, t).makespan_seconds * (1 + 1e-12));
  }
}

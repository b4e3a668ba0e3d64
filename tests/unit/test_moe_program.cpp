// Expert parallelism's all-to-alls as actions of the step program (ATAF,
// ATAB; strategies/step_program.hpp) and their walk in the simulator
// (costmodel/simulator_walk.cpp): where they sit, their text form, and the
// time they add on the compute stream, by hand.
#include "catch.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/simulator.hpp"
#include "strategies/step_program.hpp"
#include "strategies/strategy.hpp"

using namespace planner;

TEST_CASE("moe: an ATAF before every layer's F and an ATAB before its B", "[moe][step_program]") {
  Strategy s = Strategy::parse("dp=2,ep=2,mbs=1,gas=1,precision=fp32");
  const StepProgram p = build_step_program(s, 2);
  // Units: 0 embedding, 1-2 layers, 3 head; no exchange around the embedding or the head.
  CHECK(to_string(p) ==
        "0F0.0 0ATAF0.1 0F0.1 0ATAF0.2 0F0.2 0F0.3 0B0.3 0AR3 0ATAB0.2 0B0.2 0AR2 0ATAB0.1 0B0.1 0AR1 0B0.0 0AR0 "
        "0Sync 0LRdp 0Norm 0Clip 0Opt\n");
  CHECK(parse_step_lists(to_string(p).substr(0, to_string(p).size() - 1)) == p.stages);
  CHECK(parse_step_action("1ATAB3.7.c1") == StepAction{StepOp::MoeATAB, 1, 3, 7, 1});
  // ep=1: none.
  s.ep = 1;
  CHECK(to_string(build_step_program(s, 2)).find("A2A") == std::string::npos);
}

TEST_CASE("moe: the simulator puts the all-to-alls on the compute stream", "[moe][sim]") {
  const Strategy s = Strategy::parse("dp=2,ep=2,mbs=1,gas=2,precision=fp32");
  const StepProgram p = build_step_program(s, 2);
  TableCostModel cost(p.partition);
  for (int u = 0; u < p.partition.units(); ++u) {
    UnitCost& c = cost.unit(u);
    c.forward_seconds = 1, c.backward_seconds = 2;
    if (u == 1 || u == 2) c.moe_a2a_forward_seconds = 0.5, c.moe_a2a_backward_seconds = 0.25;
  }
  // Two micro-batches of 4 units (F 1 + B 2 each) and 2 layers' all-to-alls
  // (0.5 + 0.25 each): 2 * (12 + 1.5) = 27 s; the all-reduces cost nothing.
  CHECK(simulate(p, cost).makespan_seconds == Approx(27.0).epsilon(1e-12));
  CHECK(makespan_lower_bound(cost, 2) == Approx(27.0).epsilon(1e-12));
}

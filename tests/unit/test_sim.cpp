// The step simulator against closed forms, with a fake cost model of
// hand-picked durations (TableCostModel filled directly).
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/simulator.hpp"
#include "costmodel/trace.hpp"
#include "strategies/schedule.hpp"

using namespace planner;

namespace {

TableCostModel uniform(int pp, int vpp, double f, double b) {
  TableCostModel c(pp, vpp);
  for (int s = 0; s < pp; ++s)
    for (int k = 0; k < vpp; ++k) c.chunk(s, k).forward_seconds = f, c.chunk(s, k).backward_seconds = b;
  return c;
}

}  // namespace

TEST_CASE("GPipe and 1F1B: makespan (m + p - 1)(f + b), bubble fraction (p - 1)/(m + p - 1)", "[sim]") {
  const double f = 1.0, b = 2.0;
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 3, 8, 16}) {
      const auto cost = uniform(p, 1, f, b);
      for (const auto& sched : {gpipe(p, m), one_f_one_b(p, m)}) {
        const SimResult r = simulate(sched, cost);
        INFO("p=" << p << " m=" << m);
        REQUIRE_FALSE(r.deadlock);
        CHECK(r.makespan_seconds == Approx((m + p - 1) * (f + b)));
        for (const auto& st : r.stages) {
          CHECK(st.bubble_seconds / r.makespan_seconds == Approx(double(p - 1) / (m + p - 1)).margin(1e-12));
          CHECK(st.compute_seconds == Approx(m * (f + b)));
        }
        CHECK(makespan_lower_bound(cost, m) == Approx(r.makespan_seconds));
      }
    }
}

TEST_CASE("interleaved 1F1B divides the bubble by v", "[sim]") {
  // Each chunk holds 1/v of the stage: forward f/v, backward b/v.
  const double f = 1.0, b = 2.0;
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int m : {2 * p, 4 * p}) {
        const auto cost = uniform(p, v, f / v, b / v);
        const SimResult r = simulate(interleaved_one_f_one_b(p, m, v), cost);
        INFO("p=" << p << " v=" << v << " m=" << m);
        REQUIRE_FALSE(r.deadlock);
        const double bubble = (p - 1) * (f + b) / v;
        CHECK(r.makespan_seconds == Approx(m * (f + b) + bubble));
        CHECK(r.stages[0].bubble_seconds == Approx(bubble));
        CHECK(makespan_lower_bound(cost, m) <= r.makespan_seconds + 1e-12);
      }
}

TEST_CASE("pipeline sends add to the critical path; the lower bound stays below", "[sim]") {
  auto cost = uniform(4, 1, 1.0, 2.0);
  for (int s = 0; s < 4; ++s) cost.chunk(s, 0).send_forward_seconds = 0.1, cost.chunk(s, 0).send_backward_seconds = 0.1;
  const SimResult r = simulate(one_f_one_b(4, 8), cost);
  // Fill: three hops forward and three back, each 0.1 s, on top of (m + p - 1)(f + b).
  CHECK(r.makespan_seconds >= (8 + 3) * 3.0 + 6 * 0.1 - 1e-9);
  CHECK(makespan_lower_bound(cost, 8) <= r.makespan_seconds + 1e-12);
}

TEST_CASE("DP gradient reduction is hidden behind a long enough backward, except the last bucket", "[sim]") {
  // One stage, one micro-batch: forward 1 s, backward 4 s; 8 buckets of 0.25 s
  // each (2 s in all). Bucket i is ready at 1 + 4 (i + 1)/8 and its reduction
  // takes 0.25 s < 0.5 s between buckets, so only the last one is exposed.
  TableCostModel cost = uniform(1, 1, 1.0, 4.0);
  cost.chunk(0, 0).grad_reduce_seconds = 2.0;
  cost.chunk(0, 0).grad_buckets = 8;
  cost.stage(0).optimizer_seconds = 0.5;
  const SimResult r = simulate(one_f_one_b(1, 1), cost);
  CHECK(r.makespan_seconds == Approx(1 + 4 + 0.25 + 0.5));
  CHECK(r.stages[0].exposed_comm_seconds == Approx(0.25));
  CHECK(r.stages[0].optimizer_seconds == Approx(0.5));
  // Without overlap the whole reduction is exposed.
  cost.chunk(0, 0).overlap_grad_reduce = false;
  CHECK(simulate(one_f_one_b(1, 1), cost).makespan_seconds == Approx(1 + 4 + 2 + 0.5));
  // A reduction slower than the backward shows: 8 x 1 s behind a 4 s backward.
  cost.chunk(0, 0).overlap_grad_reduce = true;
  cost.chunk(0, 0).grad_reduce_seconds = 8.0;
  CHECK(simulate(one_f_one_b(1, 1), cost).makespan_seconds == Approx(1 + 0.5 + 8 + 0.5));
}

TEST_CASE("ZeRO-3 parameter gathers are prefetched behind the previous action", "[sim]") {
  // 4 micro-batches, forward 1 s and backward 2 s over 4 layers; gathering a
  // chunk takes 0.4 s. Only the first layer's gather of the first forward waits.
  TableCostModel cost = uniform(1, 1, 1.0, 2.0);
  cost.chunk(0, 0).param_gather_seconds = 0.4;
  cost.chunk(0, 0).layers = 4;
  const SimResult r = simulate(one_f_one_b(1, 4), cost);
  CHECK(r.makespan_seconds == Approx(0.1 + 4 * 3.0));
  CHECK(r.stages[0].exposed_comm_seconds == Approx(0.1));
}

TEST_CASE("the step waits for the slowest stage before the optimizer", "[sim]") {
  TableCostModel cost = uniform(2, 1, 1.0, 2.0);
  cost.chunk(1, 0).grad_reduce_seconds = 10;  // stage 1's DP reduction dominates
  cost.stage(0).optimizer_seconds = cost.stage(1).optimizer_seconds = 1;
  cost.set_grad_norm_sync_seconds(0.5);
  const SimResult r = simulate(one_f_one_b(2, 2), cost);
  // Stage 1 runs F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; its one bucket reduces
  // over [7,17]; stage 0 ends its compute at 9 and waits; the norm sync takes
  // 0.5 s and the optimizer 1 s.
  CHECK(r.makespan_seconds == Approx(17 + 0.5 + 1));
  CHECK(r.stages[0].end_seconds == Approx(r.stages[1].end_seconds));
  CHECK(r.stages[0].bubble_seconds > r.stages[1].bubble_seconds);
}

TEST_CASE("the parts of a stage's time add up to the makespan", "[sim]") {
  TableCostModel cost = uniform(4, 2, 0.5, 1.0);
  for (int s = 0; s < 4; ++s) {
    cost.chunk(s, 0).grad_reduce_seconds = 0.7;
    cost.chunk(s, 1).send_forward_seconds = 0.05;
    cost.stage(s).optimizer_seconds = 0.2;
    cost.stage(s).param_allgather_seconds = 0.1;
  }
  const SimResult r = simulate(interleaved_one_f_one_b(4, 8, 2), cost);
  for (const auto& st : r.stages) {
    const double sum = st.compute_seconds + st.tp_comm_seconds + st.exposed_comm_seconds + st.bubble_seconds +
                       st.optimizer_seconds + st.offload_seconds;
    CHECK(sum == Approx(r.makespan_seconds));
  }
}

TEST_CASE("the Chrome trace has one process per stage and one thread per stream", "[sim]") {
  auto cost = uniform(2, 1, 1.0, 2.0);
  for (int s = 0; s < 2; ++s) cost.chunk(s, 0).send_forward_seconds = cost.chunk(s, 0).send_backward_seconds = 0.1;
  SimOptions opt;
  opt.record_trace = true;
  const SimResult r = simulate(one_f_one_b(2, 2), cost, opt);
  const auto j = chrome_trace_json(r, "test");
  int complete = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++complete;
      CHECK(e.at("dur").get<double>() > 0);
      CHECK(e.at("pid").get<int>() < 2);
    }
  }
  CHECK(complete == 2 * (2 + 2) + 4);  // F and B on two stages; two activation and two gradient sends
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

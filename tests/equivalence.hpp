#pragma once
// The equivalence fixture: runs k optimizer steps of a strategy with the Engine
// (runtime/engine.hpp) and the same global batch with the plain single-process
// Trainer (tests/reference_trainer.hpp: one flat buffer, its own accumulation
// loop, no step program), and compares what they return: the loss of every
// step and every parameter after the last step (fp32, in ParamStore's layout).
// One process (tests/runtime/) passes no communicator; under mpirun
// (tests/dist/) GridComms holds the world's groups of a rank grid, and
// check_grid runs a list of strategies on a list of models over it.
//
// Include it after every other LibTorch header: it includes catch.hpp last,
// because c10's logging header defines a glog-style CHECK that must not
// replace Catch's.
#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "specs/model_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/data.hpp"
#include "runtime/engine.hpp"
#include "reference_trainer.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/strategy.hpp"
#include "catch.hpp"

namespace planner::test {

struct RunResult {
  std::vector<double> losses;
  at::Tensor params;  // fp32, CPU
};

// The run of model m under s at seq tokens, with options o (the defaults: seed 1234, learned MoE routing).
inline rt::RunConfig run_config(const ModelSpec& m, const Strategy& s, int64_t seq, const rt::RunOptions& o = {}) {
  rt::RunConfig c = rt::make_run_config(m, s, seq);
  c.options = o;
  return c;
}

// One process, dp * gas micro-batches of mbs: the step the dp ranks compute
// together (the cp ranks of a dp index share its samples, whole sequences here;
// the ep ranks are dp ranks).
inline RunResult run_single(const ModelSpec& m, const Strategy& s, int64_t seq, int steps,
                            const rt::RunOptions& o = {}) {
  Strategy one = s;
  one.gas = s.gas * s.dp, one.dp = 1, one.cp = 1, one.ep = 1;
  const rt::RunConfig c = run_config(m, one, seq, o);
  Trainer t(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed));
  RunResult r;
  for (int k = 0; k < steps; ++k) r.losses.push_back(t.step(k).item<double>());
  r.params = t.params().to(at::kFloat).clone();
  return r;
}

inline RunResult run_engine(const ModelSpec& m, const Strategy& s, int64_t seq, int steps, rt::Communicator* dp,
                            rt::Communicator* pp = nullptr, rt::Communicator* tp = nullptr,
                            rt::Communicator* cp = nullptr, rt::Communicator* ep = nullptr,
                            rt::Communicator* edp = nullptr, const rt::RunOptions& o = {}) {
  const rt::RunConfig c = run_config(m, s, seq, o);
  rt::Engine e(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed), dp, pp, tp, cp, ep, edp);
  RunResult r;
  for (int k = 0; k < steps; ++k) r.losses.push_back(e.step(k).item<double>());
  r.params = e.full_params_fp32().to(at::kFloat);
  return r;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// fp32 runs agree to 1e-5 (summation order only); 16-bit ones are looser.
struct Tolerance {
  double loss = 1e-5, params = 1e-5;
};

// `got` follows `want`: as many steps, each loss within tol.loss, as many
// parameters, each within tol.params.
inline void check_close(const RunResult& want, const RunResult& got, Tolerance tol = {}) {
  REQUIRE(want.losses.size() == got.losses.size());
  for (size_t k = 0; k < want.losses.size(); ++k) CHECK(std::abs(want.losses[k] - got.losses[k]) <= tol.loss);
  REQUIRE(got.params.numel() == want.params.numel());
  CHECK(max_abs_diff(got.params, want.params) <= tol.params);
}

// ---- Under mpirun (tests/dist/) ----

// The degrees of a rank grid (RankGrid's order, tp fastest) with expert
// parallelism ep dividing dp.
struct Degrees {
  int dp = 1, pp = 1, tp = 1, cp = 1, ep = 1;
};

// The communicators of grid d over the whole world: every rank calls it with
// the same degrees (each creation is a collective). dp_cp reduces the
// gradients (the dp group when cp = 1); cp, ep and the expert-data-parallel
// group edp exist only when cp > 1 or ep > 1.
struct GridComms {
  Degrees d;
  std::unique_ptr<rt::Communicator> dp_cp, pp, tp, cp, ep, edp;
};

inline GridComms make_grid_comms(const Degrees& d) {
  const RankGrid grid(d.dp, d.pp, d.tp, d.cp);
  const at::Device cpu(at::kCPU);
  const auto timeout = std::chrono::seconds(120);
  GridComms c;
  c.d = d;
  c.dp_cp = rt::make_communicator(grid.all_dp_cp_groups(), "dp", cpu, timeout);
  c.pp = rt::make_communicator(grid.all_pp_groups(), "pp", cpu, timeout);
  c.tp = rt::make_communicator(grid.all_tp_groups(), "tp", cpu, timeout);
  if (d.cp > 1) c.cp = rt::make_communicator(grid.all_cp_groups(), "cp", cpu, timeout);
  if (d.ep > 1) {
    c.ep = rt::make_communicator(grid.all_ep_groups(d.ep), "ep", cpu, timeout);
    c.edp = rt::make_communicator(grid.all_expert_dp_groups(d.ep), "edp", cpu, timeout);
  }
  return c;
}

// The Engine's run of s over the grid, each group passed where its degree is
// above 1 (the Engine checks the groups' sizes against s).
inline RunResult run_engine(const ModelSpec& m, const Strategy& s, int64_t seq, int steps, const GridComms& c,
                            const rt::RunOptions& o = {}) {
  return run_engine(m, s, seq, steps, s.dp_cp() > 1 ? c.dp_cp.get() : nullptr, s.pp > 1 ? c.pp.get() : nullptr,
                    s.tp > 1 ? c.tp.get() : nullptr, s.cp > 1 ? c.cp.get() : nullptr,
                    s.ep > 1 ? c.ep.get() : nullptr, s.ep > 1 ? c.edp.get() : nullptr, o);
}

// s (its degrees those of the grid) for `steps` steps on one process and over
// the grid's ranks (both with options o): the same losses and parameters within tol.
inline void check_equivalent(const ModelSpec& m, const Strategy& s, int64_t seq, const GridComms& c, int steps = 3,
                             Tolerance tol = {}, const rt::RunOptions& o = {}) {
  INFO(m.name << " " << s.to_string() << " moe routing " << rt::to_string(o.moe_routing));
  check_close(run_single(m, s, seq, steps, o), run_engine(m, s, seq, steps, c, o), tol);
}

// Every strategy of `texts` on every model, fp32, with the grid's degrees,
// sequence parallelism off and (with_sp) on, options o: three steps equal one process's.
inline void check_grid(const Degrees& d, const std::vector<ModelSpec>& models, const std::vector<const char*>& texts,
                       bool with_sp, int64_t seq = 16, const rt::RunOptions& o = {}) {
  const GridComms c = make_grid_comms(d);
  for (const ModelSpec& m : models)
    for (const char* text : texts)
      for (int sp = 0; sp <= (with_sp ? 1 : 0); ++sp) {
        Strategy s = Strategy::parse(text);
        s.dp = d.dp, s.pp = d.pp, s.tp = d.tp, s.cp = d.cp, s.ep = d.ep;
        s.sp = sp == 1, s.precision = Precision::FP32;
        check_equivalent(m, s, seq, c, 3, {}, o);
      }
}

}  // namespace planner::test

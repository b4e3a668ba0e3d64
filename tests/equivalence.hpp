#pragma once
// Runs k optimizer steps of a strategy with the Engine (runtime/engine.hpp) and
// the same global batch with the plain single-process Trainer
// (tests/reference_trainer.hpp: one flat buffer, its own accumulation loop, no
// step program), and returns what the tests compare: the loss of every step and
// every parameter after the last step (fp32, in ParamStore's layout).
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "specs/model_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/data.hpp"
#include "runtime/engine.hpp"
#include "reference_trainer.hpp"
#include "strategies/strategy.hpp"

namespace planner::test {

struct RunResult {
  std::vector<double> losses;
  at::Tensor params;  // fp32, CPU
};

// The run of model m under s at seq tokens, with the default options (seed 1234).
inline rt::RunConfig run_config(const ModelSpec& m, const Strategy& s, int64_t seq) {
  return rt::make_run_config(m, s, seq);
}

// One process, dp * gas micro-batches of mbs: the step the dp ranks compute
// together (the cp ranks of a dp index share its samples, whole sequences here).
inline RunResult run_single(const ModelSpec& m, const Strategy& s, int64_t seq, int steps) {
  Strategy one = s;
  one.gas = s.gas * s.dp, one.dp = 1, one.cp = 1;
  const rt::RunConfig c = run_config(m, one, seq);
  Trainer t(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed));
  RunResult r;
  for (int k = 0; k < steps; ++k) r.losses.push_back(t.step(k).item<double>());
  r.params = t.params().to(at::kFloat).clone();
  return r;
}

inline RunResult run_engine(const ModelSpec& m, const Strategy& s, int64_t seq, int steps, rt::Communicator* dp,
                            rt::Communicator* pp = nullptr, rt::Communicator* tp = nullptr,
                            rt::Communicator* cp = nullptr) {
  const rt::RunConfig c = run_config(m, s, seq);
  rt::Engine e(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed), dp, pp, tp, cp);
  RunResult r;
  for (int k = 0; k < steps; ++k) r.losses.push_back(e.step(k).item<double>());
  r.params = e.full_params_fp32().to(at::kFloat);
  return r;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace planner::test

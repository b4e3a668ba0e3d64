#pragma once
// Shared by the Engine's fine-tuning checks (tests/runtime/test_lora_engine.cpp,
// one process; tests/dist/test_lora_engine.cpp, dp/ZeRO/pp under mpirun): a
// run of finetune=lora|qlora through the Engine (runtime/engine.hpp), fp32
// on the CPU, with a learning rate large enough that the adapters move.
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "runtime/data.hpp"
#include "runtime/engine.hpp"
#include "runtime/model/lora.hpp"
#include "specs/model_spec.hpp"
#include "strategies/strategy.hpp"

namespace planner::test {

struct LoraEngineRun {
  std::vector<double> losses;
  at::Tensor adapters;  // every adapter value after the last step (fp32, the one-process layout)
};

inline rt::RunConfig lora_config(const ModelSpec& m, const Strategy& s, int64_t seq) {
  rt::RunConfig c = rt::make_run_config(m, s, seq);
  // The adapters move visibly in a few steps; larger rates magnify fp32
  // rounding of near-zero gradients through AdamW's g / (sqrt(v) + eps)
  // beyond the equivalence checks' 1e-5.
  c.options.optim.lr = 1e-3;
  return c;
}

inline LoraEngineRun run_lora_engine(const ModelSpec& m, const Strategy& s, int64_t seq, int steps,
                                     rt::Communicator* dp = nullptr, rt::Communicator* pp = nullptr,
                                     rt::Communicator* tp = nullptr) {
  const rt::RunConfig c = lora_config(m, s, seq);
  rt::Engine e(c, at::kCPU, std::make_shared<rt::SyntheticTokens>(m.vocab, c.options.seed), dp, pp, tp);
  LoraEngineRun r;
  for (int k = 0; k < steps; ++k) r.losses.push_back(e.step(k).item<double>());
  r.adapters = e.full_params_fp32().to(at::kFloat);
  return r;
}

}  // namespace planner::test

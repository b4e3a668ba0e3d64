#pragma once
// Shared by the LoRA runtime checks (tests/runtime/test_lora.cpp, one process;
// tests/dist/test_lora_dp.cpp, dp = 2 under mpirun): a tiny model with
// adapters, trained a few steps with AdamW over the adapters only, and its
// dense twin with the merged weights W + alpha/r B A.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "runtime/model/lora.hpp"
#include "runtime/model/transformer.hpp"

namespace planner::test {

struct LoraRun {
  std::vector<double> losses;        // adapted model, each step (before its update)
  std::vector<double> dense_losses;  // the dense model with the merged weights, same batches
  at::Tensor adapters;               // all adapter values after the last step, flattened
  double base_change = 0;            // largest change of any base weight over the run
};

// The batch of seed k: `rows` sequences of `seq` tokens, rows [first, first + count).
inline std::pair<at::Tensor, at::Tensor> lora_batch(const ModelSpec& m, int64_t seq, int step, int64_t first,
                                                    int64_t count, int64_t rows) {
  at::manual_seed(1000 + step);
  at::Tensor ids = at::randint(m.vocab, {rows, seq + 1}, at::TensorOptions().dtype(at::kLong));
  ids = ids.narrow(0, first, count);
  return {ids.narrow(1, 0, seq).contiguous(), ids.narrow(1, 1, seq).contiguous()};
}

// `reduce` (optional) sums the adapters' gradients over data-parallel ranks
// (each rank's loss is the mean of its rows; the sum is divided by `ranks`).
inline LoraRun run_lora(const ModelSpec& m, Finetune f, int64_t seq, int steps, int64_t first, int64_t count,
                        int64_t rows, int ranks = 1,
                        const std::function<void(at::Tensor&)>& reduce = nullptr) {
  using namespace planner::rt;
  const auto cpu = at::Device(at::kCPU);
  TransformerModel model(m, seq);
  model.materialize(cpu, at::kFloat, 7);
  TransformerModel dense(m, seq);
  dense.materialize(cpu, at::kFloat, 7);
  const at::Tensor base_before = model.store().params.clone();
  LoraAdapters lora(model, f, 11);
  {
    // B starts at zero (PEFT); make it non-zero so the first step already
    // tests the adapters' forward.
    at::NoGradGuard g;
    at::manual_seed(5);
    for (size_t i = 1; i < lora.parameters().size(); i += 2) lora.parameters()[i].normal_(0, 0.05);
  }
  std::vector<at::Tensor> params = lora.parameters();
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
  LoraRun out;
  for (int k = 0; k < steps; ++k) {
    {
      at::NoGradGuard g;
      for (int id : lora.matrix_ids()) dense.store().get(id).copy_(lora.merged_weight(id));
    }
    // One batch every step: the adapters can only show that they learn by
    // fitting it (fresh random tokens each step have no pattern to learn).
    auto [ids, labels] = lora_batch(m, seq, 0, first, count, rows);
    {
      at::NoGradGuard g;
      auto [all_ids, all_labels] = lora_batch(m, seq, 0, 0, rows, rows);
      out.dense_losses.push_back(dense.loss(all_ids, all_labels, Ckpt::None).item<double>());
    }
    opt.zero_grad();
    at::Tensor loss = model.loss(ids, labels, Ckpt::None);
    loss.backward();
    at::Tensor l = loss.detach().clone().reshape({1});
    if (reduce) {
      reduce(l);
      for (at::Tensor& p : params) {
        at::Tensor g = p.mutable_grad();
        reduce(g);
        g.div_(ranks);
      }
      l.div_(ranks);
    }
    out.losses.push_back(l.item<double>());
    opt.step();
  }
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : params) flat.push_back(p.detach().reshape({-1}));
  out.adapters = at::cat(flat);
  out.base_change = (model.store().params - base_before).abs().max().item<double>();
  return out;
}

}  // namespace planner::test

#pragma once
// The reference of the equivalence tests (tests/equivalence.hpp,
// tests/runtime/test_train.cpp): the plain single-process training step, written
// apart from the runtime's executor on purpose (one flat parameter and one flat
// gradient buffer, its own accumulation loop, no step program), so that the
// Engine's results (runtime/engine.hpp) are checked against an independent
// implementation. Not part of the product: `planner exec` and `planner
// calibrate` run every step through the Engine.
//
// One training step on one device: gas micro-batches of forward + backward with
// the gradients accumulating in the flat gradient buffer, then gradient-norm
// clipping and AdamW on flat buffers.
//
// Precision layout (the one the memory model assumes, ZeRO paper sec. 3.1):
//  - bf16 / fp16: parameters and gradients in the working precision (2 + 2 bytes
//    per parameter); inside the optimizer an fp32 master copy of the parameters
//    and the two fp32 Adam moments (12 bytes per parameter). fp16 uses dynamic
//    loss scaling (initial scale 2^16, halved and the step skipped on inf/nan,
//    doubled after `fp16_scale_window` clean steps).
//  - fp32: parameters, gradients and both moments in fp32 (4 + 4 + 8 bytes); the
//    master copy is the parameters themselves. TF32 matmuls on the GPU.
// Optimizer work buffer: bf16/fp16 gradients are converted to fp32 in chunks of
// at most 2^26 elements (256 MB), one reused buffer; the update is LibTorch's
// fused AdamW kernel (at::_fused_adamw_) per chunk, called once for the decayed
// range [0, decay_numel) and once for the rest; the clip factor and the loss
// scale reach the kernel as one device scalar (its grad_scale), so bf16/fp32
// steps need no host synchronisation.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/data.hpp"
#include "runtime/engine.hpp"
#include "runtime/model/moe.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/run_config.hpp"
#include "strategies/errors.hpp"

namespace planner::test {

using rt::RunConfig;
using rt::TokenSource;
using rt::TransformerModel;

class Trainer {
 public:
  Trainer(const RunConfig& cfg, at::Device device, std::shared_ptr<TokenSource> tokens);
  ~Trainer();

  // One optimizer step (index `step` selects the batches). Returns the mean loss
  // of its micro-batches as a device scalar (no host synchronisation, except for
  // fp16's loss-scale bookkeeping).
  at::Tensor step(int64_t step);

  // Pieces of step(), for tests and measurement.
  void zero_grad();
  // Forward + backward of one micro-batch; gradients accumulate. The loss is
  // multiplied by `grad_multiplier` (1/gas, times the loss scale) before backward.
  at::Tensor forward_backward(const at::Tensor& ids, const at::Tensor& labels, double grad_multiplier);
  // Returns false when the step was skipped (fp16 overflow).
  bool optimizer_step();
  // Inputs and labels of micro-batch `micro` of step `step`: (rows, seq) int64 on the device.
  std::pair<at::Tensor, at::Tensor> batch(int64_t step, int64_t micro, int64_t rows);

  TransformerModel& model() { return *model_; }
  const RunConfig& config() const { return cfg_; }
  at::Device device() const { return device_; }
  const at::Tensor& params() const { return model_->store().params; }
  const at::Tensor& grads() const { return model_->store().grads; }

  int64_t param_bytes() const;
  int64_t grad_bytes() const;
  int64_t optimizer_state_bytes() const;  // master (when separate) + moments
  int64_t optimizer_work_bytes() const;   // the fp32 gradient chunk buffer
  double loss_scale() const { return loss_scale_; }
  int64_t skipped_steps() const { return skipped_; }
  int64_t optimizer_steps() const { return t_; }
  // Called after the last micro-batch's backward, before the optimizer (measurement).
  std::function<void()> after_backward;

 private:
  RunConfig cfg_;
  at::Device device_;
  std::shared_ptr<TokenSource> tokens_;
  std::unique_ptr<TransformerModel> model_;
  bool mixed_ = false;
  at::Tensor master_, exp_avg_, exp_avg_sq_, work_, step_count_;
  int64_t chunk_ = 0;
  int64_t t_ = 0;
  double loss_scale_ = 1.0;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
  std::vector<int64_t> host_batch_;
};

inline Trainer::Trainer(const RunConfig& cfg, at::Device device, std::shared_ptr<TokenSource> tokens)
    : cfg_(cfg), device_(device), tokens_(std::move(tokens)) {
  if (cfg_.strategy().mbs <= 0 || cfg_.strategy().gas <= 0) throw InputError("mbs and gas must be positive");
  if (!tokens_) throw std::invalid_argument("Trainer needs a token source");
  model_ = std::make_unique<TransformerModel>(cfg_.model(), cfg_.seq());
  if (rt::MoeBlock* moe = model_->moe()) moe->set_routing(cfg_.options.moe_routing);
  const at::ScalarType dt = rt::working_dtype(cfg_.strategy().precision);
  mixed_ = dt != at::kFloat;
  at::Tensor init = model_->materialize(device_, dt, cfg_.options.seed);
  const int64_t n = model_->store().numel();
  auto f32 = at::TensorOptions().device(device_).dtype(at::kFloat);
  // Optimizer state: the fp32 master copy is the initial fp32 values (mixed) or
  // the parameters themselves (fp32); moments start at zero.
  master_ = init;
  exp_avg_ = at::zeros({n}, f32);
  exp_avg_sq_ = at::zeros({n}, f32);
  step_count_ = at::zeros({}, f32);
  chunk_ = std::min<int64_t>(n, int64_t(1) << 26);
  if (mixed_) work_ = at::empty({chunk_}, f32);
  loss_scale_ = cfg_.strategy().precision == Precision::FP16 ? cfg_.options.optim.fp16_init_scale : 1.0;
}

inline Trainer::~Trainer() = default;

inline int64_t Trainer::param_bytes() const { return params().numel() * params().element_size(); }
inline int64_t Trainer::grad_bytes() const { return grads().numel() * grads().element_size(); }
inline int64_t Trainer::optimizer_state_bytes() const {
  int64_t b = (exp_avg_.numel() + exp_avg_sq_.numel()) * 4;
  if (mixed_) b += master_.numel() * 4;
  return b;
}
inline int64_t Trainer::optimizer_work_bytes() const { return work_.defined() ? work_.numel() * 4 : 0; }

inline void Trainer::zero_grad() {
  at::NoGradGuard g;
  model_->store().grads.zero_();
}

inline std::pair<at::Tensor, at::Tensor> Trainer::batch(int64_t step, int64_t micro, int64_t rows) {
  return rt::make_batch(*tokens_, model_->spec(), cfg_.seq(), cfg_.options.seed, cfg_.options.mlm_mask_fraction, step, micro, rows, device_,
                    host_batch_);
}

inline at::Tensor Trainer::forward_backward(const at::Tensor& ids, const at::Tensor& labels, double grad_multiplier) {
  at::Tensor loss = model_->loss(ids, labels, cfg_.strategy().ckpt, grad_multiplier);
  torch::autograd::backward({loss * grad_multiplier});
  return loss.detach();
}

inline bool Trainer::optimizer_step() {
  at::NoGradGuard no_grad;
  auto& store = model_->store();
  const at::Tensor& g = store.grads;
  // Global L2 norm of the (loss-scaled) gradients, accumulated in fp32.
  at::Tensor norm = at::linalg_vector_norm(g, 2, std::nullopt, false, at::kFloat);
  if (cfg_.strategy().precision == Precision::FP16) {
    // Dynamic loss scaling (Micikevicius et al. 2018): one host sync per step.
    const bool finite = norm.isfinite().item<bool>();
    if (!finite) {
      loss_scale_ = std::max(1.0, loss_scale_ * 0.5);
      good_steps_ = 0;
      ++skipped_;
      return false;
    }
  }
  // grad_scale of the fused kernel divides the gradients: loss scale times the
  // clipping factor max(1, ||g|| / clip) (torch.nn.utils.clip_grad_norm_'s 1e-6).
  at::Tensor divisor;
  if (cfg_.options.optim.grad_clip > 0) {
    at::Tensor true_norm = norm / loss_scale_;
    divisor = ((true_norm + 1e-6) / cfg_.options.optim.grad_clip).clamp_min(1.0) * loss_scale_;
  } else {
    divisor = at::full({}, loss_scale_, norm.options());
  }
  // A doubling of the loss scale applies from the next step on: this step's
  // gradients were made with the scale above.
  if (cfg_.strategy().precision == Precision::FP16 && ++good_steps_ >= cfg_.options.optim.fp16_scale_window) {
    loss_scale_ *= 2.0;
    good_steps_ = 0;
  }
  ++t_;
  step_count_.fill_(static_cast<double>(t_));
  const int64_t n = store.numel(), nd = store.decay_numel();
  for (int64_t o = 0; o < n; o += chunk_) {
    const int64_t c = std::min(chunk_, n - o);
    at::Tensor gc = mixed_ ? work_.narrow(0, 0, c).copy_(g.narrow(0, o, c)) : g.narrow(0, o, c);
    // [o, o + c) split at the end of the decayed range
    const int64_t split = std::clamp(nd - o, int64_t(0), c);
    for (int part = 0; part < 2; ++part) {
      const int64_t a = part == 0 ? 0 : split, len = part == 0 ? split : c - split;
      if (len == 0) continue;
      at::Tensor p = master_.narrow(0, o + a, len), gg = gc.narrow(0, a, len);
      at::Tensor m = exp_avg_.narrow(0, o + a, len), v = exp_avg_sq_.narrow(0, o + a, len);
      at::_fused_adamw_({p}, {gg}, {m}, {v}, {}, {step_count_}, cfg_.options.optim.lr, cfg_.options.optim.beta1, cfg_.options.optim.beta2,
                        part == 0 ? cfg_.options.optim.weight_decay : 0.0, cfg_.options.optim.eps, /*amsgrad=*/false, /*maximize=*/false,
                        divisor, /*found_inf=*/std::nullopt);
    }
    if (mixed_) store.params.narrow(0, o, c).copy_(master_.narrow(0, o, c));
  }
  return true;
}

inline at::Tensor Trainer::step(int64_t step) {
  zero_grad();
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  const double mult = loss_scale_ / static_cast<double>(cfg_.strategy().gas);
  for (int64_t micro = 0; micro < cfg_.strategy().gas; ++micro) {
    auto [ids, labels] = batch(step, micro, cfg_.strategy().mbs);
    loss_sum.add_(forward_backward(ids, labels, mult));
  }
  if (after_backward) after_backward();
  optimizer_step();
  return loss_sum / static_cast<double>(cfg_.strategy().gas);
}

}  // namespace planner::test

#include "runtime/trainer.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cstring>

#include "runtime/batch.hpp"
#include "runtime/engine.hpp"
#include "strategies/errors.hpp"

namespace planner::rt {

Trainer::Trainer(const RunConfig& cfg, at::Device device, std::shared_ptr<TokenSource> tokens)
    : cfg_(cfg), device_(device), tokens_(std::move(tokens)) {
  if (cfg_.strategy().mbs <= 0 || cfg_.strategy().gas <= 0) throw InputError("mbs and gas must be positive");
  if (!tokens_) throw std::invalid_argument("Trainer needs a token source");
  model_ = std::make_unique<TransformerModel>(cfg_.model(), cfg_.seq());
  const at::ScalarType dt = working_dtype(cfg_.strategy().precision);
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

Trainer::~Trainer() = default;

int64_t Trainer::param_bytes() const { return params().numel() * params().element_size(); }
int64_t Trainer::grad_bytes() const { return grads().numel() * grads().element_size(); }
int64_t Trainer::optimizer_state_bytes() const {
  int64_t b = (exp_avg_.numel() + exp_avg_sq_.numel()) * 4;
  if (mixed_) b += master_.numel() * 4;
  return b;
}
int64_t Trainer::optimizer_work_bytes() const { return work_.defined() ? work_.numel() * 4 : 0; }

void Trainer::zero_grad() {
  at::NoGradGuard g;
  model_->store().grads.zero_();
}

std::pair<at::Tensor, at::Tensor> Trainer::batch(int64_t step, int64_t micro, int64_t rows) {
  return make_batch(*tokens_, model_->spec(), cfg_.seq(), cfg_.options.seed, cfg_.options.mlm_mask_fraction, step, micro, rows, device_,
                    host_batch_);
}

at::Tensor Trainer::forward_backward(const at::Tensor& ids, const at::Tensor& labels, double grad_multiplier) {
  at::Tensor loss = model_->loss(ids, labels, cfg_.strategy().ckpt, grad_multiplier);
  torch::autograd::backward({loss * grad_multiplier});
  return loss.detach();
}

bool Trainer::optimizer_step() {
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

at::Tensor Trainer::step(int64_t step) {
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

}  // namespace planner::rt

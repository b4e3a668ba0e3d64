#pragma once
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

#include <memory>

#include "specs/model_spec.hpp"
#include "runtime/data.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/run_config.hpp"
#include "strategies/strategy.hpp"

namespace planner::rt {


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

}  // namespace planner::rt

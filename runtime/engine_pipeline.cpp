// The Engine's compute and pipeline handlers (runtime/engine_detail.hpp):
// F and B of one unit for one micro-batch, and the pipeline's sends and receives.
#include "runtime/engine_detail.hpp"
#include "runtime/model/context_parallel.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <limits>

namespace planner::rt {

void Engine::forward(int mb, int u, int chunk, int64_t step) {
  Impl& I = *impl_;
  if (I.gather_work[size_t(u)]) I.gather_work[size_t(u)]->wait(), I.gather_work[size_t(u)] = nullptr;
  if (I.gather_mark[size_t(u)]) I.copy->wait(I.gather_mark[size_t(u)]), I.gather_mark[size_t(u)] = nullptr;
  const int head = program_.partition.head_unit();
  // The head's tensors are reserved as one block when the micro-batch enters
  // the head's chunk (or earlier, at its RecvF) and released just before the
  // head (head_reserve_block_bytes).
  if (u == program_.partition.units_of(stage_, chunk).first) reserve_head_block(mb, chunk);
  if (u == 0) {
    std::vector<int64_t> scratch;
    const int64_t micro = int64_t(I.dp_rank / st_.cp) * st_.gas + mb;  // cp ranks share the sample
    auto [ids, labels] = make_batch(*tokens_, spec_, cfg_.seq(), cfg_.options.seed, cfg_.options.mlm_mask_fraction, step, micro, st_.mbs,
                                    device_, scratch);
    if (cp_) ids = cp_->shard(ids), labels = cp_->shard(labels);  // this cp rank's two chunks
    if (program_.partition.owner(head).first == stage_) I.labels[mb] = labels;
    I.out[key(mb, 0)] = model_->embed(ids);
    return;
  }
  const auto [first, last] = program_.partition.units_of(stage_, chunk);
  (void)last;
  at::Tensor x;
  if (u == first) {  // the stage's input: received from the previous stage (RecvF)
    x = I.recv.at(key(mb, first));
    I.recv.erase(key(mb, first));
  } else {
    x = I.out.at(key(mb, u - 1)).detach().requires_grad_(true);
  }
  I.in[key(mb, u)] = x;
  model_->moe_grad_scale = loss_scale_ / double(st_.gas * st_.dp_cp());  // the MoE auxiliary loss's gradient
  if (u == head) {
    I.head_reserve.erase(mb);
    if (before_head) before_head();
    if (!I.labels.count(mb)) {  // the last stage reads its micro-batch's labels itself
      std::vector<int64_t> scratch;
      const int64_t micro = int64_t(I.dp_rank / st_.cp) * st_.gas + mb;  // cp ranks share the sample
      I.labels[mb] = make_batch(*tokens_, spec_, cfg_.seq(), cfg_.options.seed, cfg_.options.mlm_mask_fraction, step, micro, st_.mbs,
                                device_, scratch).second;
      if (cp_) I.labels[mb] = cp_->shard(I.labels[mb]);
    }
    const double mult = loss_scale_ / double(st_.gas * st_.dp_cp());
    at::Tensor loss = model_->head_loss(x, I.labels.at(mb), mult);
    I.loss_sum.add_(loss.detach());
    I.out[key(mb, u)] = loss;
    I.labels.erase(mb);
  } else {
    I.out[key(mb, u)] = model_->block(u - 1, x, st_.ckpt);
  }
}

void Engine::ensure_grad(int u) {
  Impl& I = *impl_;
  if (st_.zero < 2 || I.ugrad[size_t(u)].defined()) return;
  const bool layer = u > 0 && u < program_.partition.head_unit();
  const int64_t n = layer ? I.layer_padded : I.units[size_t(u)].padded;
  I.ugrad[size_t(u)] = acquire(I.grad_pool, u, layer, n, at::TensorOptions().device(device_).dtype(I.dt))
                           .narrow(0, 0, I.units[size_t(u)].padded);
  I.ugrad[size_t(u)].zero_();
  bind_unit_grad(u, I.ugrad[size_t(u)]);
  transient_peak_ = std::max(transient_peak_, transient_bytes());
}

void Engine::backward(int mb, int u, int chunk) {
  Impl& I = *impl_;
  if (I.gather_work[size_t(u)]) I.gather_work[size_t(u)]->wait(), I.gather_work[size_t(u)] = nullptr;
  if (I.gather_mark[size_t(u)]) I.copy->wait(I.gather_mark[size_t(u)]), I.gather_mark[size_t(u)] = nullptr;
  const int head = program_.partition.head_unit();
  ensure_grad(u);
  if (u == head && spec_.tied_embeddings) ensure_grad(0);
  const auto [first, last] = program_.partition.units_of(stage_, chunk);
  if (u == head) {
    const double mult = loss_scale_ / double(st_.gas * st_.dp_cp());
    torch::autograd::backward({I.out.at(key(mb, u)) * mult});
  } else if (u == last - 1) {  // the gradient of the stage's output, received from the next stage (RecvB)
    const at::Tensor& g = I.recv.at(key(mb, -1 - u));
    if (auto e = I.sent_out.find(key(mb, u)); e != I.sent_out.end()) {
      // What torch::autograd::backward({y}, {g}) runs, from y's edge alone.
      torch::autograd::Engine::get_default_engine().execute({e->second}, {g}, false, false, true);
      I.sent_out.erase(e);
    } else {
      torch::autograd::backward({I.out.at(key(mb, u))}, {g});
    }
    I.recv.erase(key(mb, -1 - u));
  } else {
    const at::Tensor& y = I.out.at(key(mb, u));
    at::Tensor g = I.in.at(key(mb, u + 1)).grad();
    // Fine-tuning: a frozen embedding's output needs no backward.
    if (y.requires_grad()) torch::autograd::backward({y}, {g});
    I.in.erase(key(mb, u + 1));
  }
  I.out.erase(key(mb, u));
  if (u == first && u > 0) {
    // The input's gradient waits for SendB (or is the first stage's: none).
  } else if (u == first) {
    I.in.erase(key(mb, 1));
  }
  if (u == program_.partition.units_of(stage_, 0).first && after_backward && mb == st_.gas - 1) after_backward();
}

// Pipeline point-to-point over the links of runtime/comm/pipe_links.hpp:
// activations to the next stage, gradients to the previous one (the next and
// previous stage of the ring under the interleaved schedule). A send's Work
// keeps its tensor alive until it is waited for: sends_in_flight (2) sends
// later on the same link (Impl::bound_sends), or earlier when the host sees it arrived
// (Impl::reap), or at the step's Sync; a receive before
// the tensor is used (on the GPU an event wait on the compute stream: the host
// walks on).
void Engine::send_f(int mb, int chunk) {
  Impl& I = *impl_;
  I.reap();  // the earlier sends that have arrived free their tensors
  const int last = program_.partition.units_of(stage_, chunk).second - 1;
  at::Tensor t = I_out_detached(mb, last);
  I.bound_sends(I.sent_f, links_->f_out->send(t, 1));
  // The chunk's output is no layer's saved input here (the next stage keeps
  // what it received): its backward needs only its gradient edge, so the
  // tensor itself is dropped now and freed once the send is waited for
  // (Impl::bound_sends), as Megatron-LM's deallocate_output_tensor does.
  // Kept until its backward, it held one more (b, s, h) per micro-batch and
  // chunk in flight.
  auto it = I.out.find(key(mb, last));
  if (it->second.requires_grad()) {
    I.sent_out[key(mb, last)] = torch::autograd::impl::gradient_edge(it->second);
    I.out.erase(it);
  }
}

void Engine::reserve_head_block(int mb, int chunk) {
  Impl& I = *impl_;
  if (I.head_reserve_bytes <= 0 || I.head_reserve.count(mb) ||
      program_.partition.owner(program_.partition.head_unit()) != std::pair<int, int>{stage_, chunk})
    return;
  I.head_reserve[mb] = at::empty({I.head_reserve_bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
}

void Engine::recv_f(int mb, int chunk) {
  // The head's block first: the received input lives until the chunk's
  // backward, and allocated first it took the start of the range the
  // previous micro-batch's head had left, so the block no longer fitted
  // there (validation/h200x2/full76: 4.38 GiB more reserved on the last stage
  // of a 1F1B plan under full recomputation).
  reserve_head_block(mb, chunk);
  const int first = program_.partition.units_of(stage_, chunk).first;
  at::Tensor t = at::empty({int64_t(st_.mbs), stage_seq(), spec_.hidden},
                           at::TensorOptions().device(device_).dtype(impl_->dt));
  links_->f_in->recv(t, 0)->wait();
  impl_->recv[key(mb, first)] = t.requires_grad_(true);
}

void Engine::send_b(int mb, int chunk) {
  impl_->reap();
  const int first = program_.partition.units_of(stage_, chunk).first;
  Impl& I = *impl_;
  at::Tensor g = I.in.at(key(mb, first)).grad().contiguous();
  I.in.erase(key(mb, first));
  // Copied into a kept buffer, autograd's gradient is freed now rather than
  // when its send is waited for. Left where autograd made it (in the range the
  // head's tensors had just freed), it split the range the next micro-batch's
  // head block needed: validation/h200x2/full77, 4.6 GiB more reserved on the
  // last stage of a 1F1B plan under full recomputation.
  if (I.grad_buffers && I.sends_in_flight != std::numeric_limits<size_t>::max()) {
    I.grad_ring.resize(I.sends_in_flight + 1);
    at::Tensor& slot = I.grad_ring[I.grad_next++ % I.grad_ring.size()];
    if (!slot.defined() || !slot.sizes().equals(g.sizes()) || slot.scalar_type() != g.scalar_type())
      slot = at::empty(g.sizes(), g.options());
    slot.copy_(g);
    g = slot;
  }
  I.bound_sends(I.sent_b, links_->b_out->send(g, 1));
}

void Engine::recv_b(int mb, int chunk) {
  const int last = program_.partition.units_of(stage_, chunk).second - 1;
  at::Tensor t = at::empty({int64_t(st_.mbs), stage_seq(), spec_.hidden},
                           at::TensorOptions().device(device_).dtype(impl_->dt));
  links_->b_in->recv(t, 0)->wait();
  impl_->recv[key(mb, -1 - last)] = t;  // negative keys: output gradients
}

// The sequence length of what stages exchange: a shard under sequence parallelism.
int64_t Engine::stage_seq() const {
  const int64_t seq = cfg_.seq() / st_.cp;  // cp: this rank's two chunks
  return st_.sp && st_.tp > 1 ? seq / st_.tp : seq;
}

at::Tensor Engine::I_out_detached(int mb, int u) { return impl_->out.at(key(mb, u)).detach().contiguous(); }

}  // namespace planner::rt

#include "runtime/model/context_parallel.hpp"

#include "runtime/model/attention_block.hpp"

#include <torch/autograd.h>

#include <stdexcept>
#include <string>

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

// Merges a block's (o, l) into the running (out, lse), both views of the
// accumulators (fp32): lse' = logaddexp(lse, l), out' = out e^(lse - lse') + o e^(l - lse').
void merge(at::Tensor out, at::Tensor lse, const at::Tensor& o, const at::Tensor& l) {
  const at::Tensor lf = l.to(at::kFloat);
  const at::Tensor next = at::logaddexp(lse, lf);
  // addcmul_ reads o in its own dtype: no fp32 copy of the block's output.
  out.mul_(at::exp(lse - next).unsqueeze(-1)).addcmul_(o, at::exp(lf - next).unsqueeze(-1));
  lse.copy_(next);
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t self) {
    const auto* cp = reinterpret_cast<const ContextParallel*>(self);
    auto [out, lse] = cp->ring_forward(q, k, v);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["cp"] = self;
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto* cp = reinterpret_cast<const ContextParallel*>(ctx->saved_data["cp"].toInt());
    const auto s = ctx->get_saved_variables();
    auto g = cp->ring_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4]);
    return {g[0], g[1], g[2], at::Tensor()};
  }
};

}  // namespace

ContextParallel::ContextParallel(Communicator* cp, int64_t seq)
    : comm_(cp), size_(cp ? cp->size() : 1), rank_(cp ? cp->rank() : 0) {
  if (size_ < 2) throw std::invalid_argument("ContextParallel needs a cp group of at least 2 ranks");
  if (seq % (2 * size_) != 0)
    throw std::invalid_argument("ContextParallel: seq=" + std::to_string(seq) + " is not a multiple of 2*cp = " +
                                std::to_string(2 * size_));
  chunk_ = seq / (2 * size_);
}

at::Tensor ContextParallel::positions(at::Device device) const {
  const auto opt = at::TensorOptions().dtype(at::kLong).device(device);
  const int64_t a = rank_ * chunk_, b = (2 * size_ - 1 - rank_) * chunk_;
  return at::cat({at::arange(a, a + chunk_, opt), at::arange(b, b + chunk_, opt)});
}

at::Tensor ContextParallel::shard(const at::Tensor& x, int64_t dim) const {
  return at::cat({x.narrow(dim, rank_ * chunk_, chunk_), x.narrow(dim, (2 * size_ - 1 - rank_) * chunk_, chunk_)}, dim);
}

at::Tensor ContextParallel::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const {
  if (q.is_cuda() && q.scalar_type() == at::kFloat)  // costmodel/compat.cpp refuses such plans first
    throw std::invalid_argument("context parallelism on CUDA runs the flash kernels, which take bf16 or fp16, not fp32");
  return RingAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), reinterpret_cast<int64_t>(this));
}

std::vector<WorkPtr> ContextParallel::exchange(const std::vector<at::Tensor>& out,
                                               const std::vector<at::Tensor>& in) const {
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  std::vector<WorkPtr> w;
  auto sends = [&] { for (const auto& t : out) w.push_back(comm_->send(t, next)); };
  auto recvs = [&] { for (const auto& t : in) w.push_back(comm_->recv(t, prev)); };
  if (rank_ % 2 == 0) sends(), recvs();
  else recvs(), sends();
  return w;
}

std::pair<at::Tensor, at::Tensor> ContextParallel::ring_forward(const at::Tensor& q, const at::Tensor& k,
                                                                const at::Tensor& v) const {
  const int64_t c = chunk_, groups = q.size(1) / k.size(1);
  const BlockKernel kernel = choose_block_kernel(q);
  // cuDNN's blocks take the kv heads as they are (attention_block.hpp); the others see them repeated.
  const bool own_heads = block_takes_kv_heads(kernel, q, k);
  auto expand = [&](const at::Tensor& t) { return groups == 1 || own_heads ? t : t.repeat_interleave(groups, 1); };
  at::Tensor kc = k, vc = v, out, lse;
  for (int j = 0; j < size_; ++j) {
    std::vector<WorkPtr> work;
    at::Tensor kn, vn;
    if (j + 1 < size_) {  // the next K/V travels while this block computes
      kn = at::empty_like(kc), vn = at::empty_like(vc);
      work = exchange({kc, vc}, {kn, vn});
    }
    const int src = (rank_ - j + size_) % size_;
    if (j == 0) {  // own K/V: causal over the two local chunks
      auto [o, l] = block_forward(kernel, q, expand(kc), expand(vc), true);
      out = o.to(at::kFloat), lse = l.to(at::kFloat).contiguous();
    } else if (src < rank_) {  // an earlier rank's: its first chunk, for every query
      auto [o, l] = block_forward(kernel, q, expand(kc.narrow(2, 0, c).contiguous()), expand(vc.narrow(2, 0, c).contiguous()),
                                  false);
      merge(out, lse, o, l);
    } else {  // a later rank's: all of it, for the second query chunk
      auto [o, l] = block_forward(kernel, q.narrow(2, c, c).contiguous(), expand(kc), expand(vc), false);
      merge(out.narrow(2, c, c), lse.narrow(2, c, c), o, l);
    }
    for (auto& w : work) w->wait();
    if (j + 1 < size_) kc = kn, vc = vn;
  }
  return {out.to(q.scalar_type()), lse};
}

std::vector<at::Tensor> ContextParallel::ring_backward(const at::Tensor& dout, const at::Tensor& q,
                                                       const at::Tensor& k, const at::Tensor& v,
                                                       const at::Tensor& out, const at::Tensor& lse) const {
  const int64_t c = chunk_, b = k.size(0), nkv = k.size(1), d = k.size(3), groups = q.size(1) / nkv;
  const BlockKernel kernel = choose_block_kernel(q);
  const bool own_heads = block_takes_kv_heads(kernel, q, k);
  auto expand = [&](const at::Tensor& t) { return groups == 1 || own_heads ? t : t.repeat_interleave(groups, 1); };
  // A block's kv gradient on the kv heads, in fp32: converted where the kernel
  // returned it per kv head, else the expanded heads summed over each group.
  // Contiguous: it is sent around the ring (the kernel's gradients may be strided views).
  // (The sum converts as it reduces: one pass over the expanded gradient.)
  auto heads = [&](const at::Tensor& t) {
    return t.size(1) == nkv ? t.to(at::kFloat).contiguous()
                            : t.reshape({b, nkv, groups, t.size(2), d}).sum(2, /*keepdim=*/false, at::kFloat);
  };
  const auto f32 = k.options().dtype(at::kFloat);
  at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  at::Tensor kc = k, vc = v, dk_in, dv_in;
  std::vector<WorkPtr> dkv_work;
  for (int j = 0; j < size_; ++j) {
    std::vector<WorkPtr> work;
    at::Tensor kn, vn;
    if (j + 1 < size_) {
      kn = at::empty_like(kc), vn = at::empty_like(vc);
      work = exchange({kc, vc}, {kn, vn});
    }
    const int src = (rank_ - j + size_) % size_;
    at::Tensor dk, dv;  // this block's contribution to the held K/V's gradient (fp32, kv heads)
    if (j == 0) {
      auto [gq, gk, gv] = block_backward(kernel, dout, q, expand(kc), expand(vc), out, lse, true);
      dq.add_(gq), dk = heads(gk), dv = heads(gv);
    } else if (src < rank_) {
      auto [gq, gk, gv] = block_backward(kernel, dout, q, expand(kc.narrow(2, 0, c).contiguous()),
                                         expand(vc.narrow(2, 0, c).contiguous()), out, lse, false);
      dq.add_(gq);
      dk = at::zeros(kc.sizes(), f32), dv = at::zeros(vc.sizes(), f32);
      dk.narrow(2, 0, c).copy_(heads(gk)), dv.narrow(2, 0, c).copy_(heads(gv));
    } else {
      auto [gq, gk, gv] = block_backward(kernel, dout.narrow(2, c, c).contiguous(), q.narrow(2, c, c).contiguous(),
                                         expand(kc), expand(vc), out.narrow(2, c, c).contiguous(),
                                         lse.narrow(2, c, c).contiguous(), false);
      dq.narrow(2, c, c).add_(gq), dk = heads(gk), dv = heads(gv);
    }
    // The gradient accumulated for this K/V by the ranks that held it before
    // arrived one step behind it; add ours and pass it on (after the last
    // step, the next rank is the K/V's owner).
    if (j > 0) {
      for (auto& w : dkv_work) w->wait();
      dk.add_(dk_in), dv.add_(dv_in);
    }
    dk_in = at::empty(kc.sizes(), f32), dv_in = at::empty(vc.sizes(), f32);
    dkv_work = exchange({dk, dv}, {dk_in, dv_in});
    for (auto& w : work) w->wait();
    if (j + 1 < size_) kc = kn, vc = vn;
  }
  for (auto& w : dkv_work) w->wait();  // our own K/V's gradient, from every rank
  return {dq.to(q.scalar_type()), dk_in.to(k.scalar_type()), dv_in.to(v.scalar_type())};
}

}  // namespace planner::rt

// The Engine's step tail (runtime/engine_detail.hpp): ToHost, Sync, the tied,
// replicated and loss reductions, Norm and its reductions, Clip, Opt (fused
// AdamW on the device, or the host's unit by unit under offload), ToDevice.
#include "runtime/engine_detail.hpp"

namespace planner::rt {

namespace {

AdamHyper hyper(const RunConfig& c) {
  const OptimizerSettings& o = c.options.optim;
  return {o.lr, o.beta1, o.beta2, o.weight_decay, o.eps};
}

}  // namespace

void Engine::to_host(int u) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  WorkPtr w = I.reduce_work[size_t(u)];
  I.copy->run([&] {
    if (w) w->wait();  // the copy stream waits for the unit's reduction
    for (const Piece& p : un.pieces) {
      at::Tensor src = shard_grad(u, p);
      I.host_grad.narrow(0, un.sbase + p.soff, p.chunk).copy_(src, /*non_blocking=*/cuda_);
      I.keep.push_back(src);
    }
  });
}

void Engine::sync() {
  Impl& I = *impl_;
  issue_deferred();
  I.wait_all();
  std::fill(I.reduce_work.begin(), I.reduce_work.end(), nullptr);
  I.copy->join();
  if (I.offload) I.copy->host_wait();
  I.keep.clear();
  // The step's loss: the mean over this rank's micro-batches (LossReduce
  // makes it the global batch's).
  I.loss_sum.div_(double(st_.gas));
}

// The gradient of this stage's copy of the tied word matrix (the first stage's
// own, the last stage's copy), or undefined. ZeRO-0/1 only (pp > 1 excludes
// ZeRO-2/3), so the whole gradient is in I.grads.
at::Tensor Engine::tied_grad() {
  Impl& I = *impl_;
  if (I.tied_id < 0 || !I.grads.defined()) return {};
  for (int u : {0, program_.partition.head_unit()}) {
    const Unit& un = I.units[size_t(u)];
    if (!un.owned) continue;
    for (size_t k = 0; k < un.ids.size(); ++k)
      if (un.ids[k] == I.tied_id)
        return I.grads.narrow(0, un.base + un.offs[k], tstore().infos()[size_t(I.tied_id)].numel);
  }
  return {};
}

void Engine::tied_reduce() {
  Impl& I = *impl_;
  if (at::Tensor g = tied_grad(); g.defined()) {
    I.emb_comm->all_reduce(g)->wait();  // both copies get the sum
    if (I.offload)  // the unit's gradient went to the host before the sum: send its chunk again
      for (int u : {0, program_.partition.head_unit()})
        if (const Unit& un = I.units[size_t(u)]; un.owned)
          for (const Piece& p : un.pieces) I.host_grad.narrow(0, un.sbase + p.soff, p.chunk).copy_(shard_grad(u, p));
  }
}

void Engine::loss_reduce(CommGroup g) {
  Impl& I = *impl_;
  if (g == CommGroup::Pp && pp_) pp_->all_reduce(I.loss_sum)->wait();  // only the last stage has it
  if (g == CommGroup::Dp && dp_) {
    dp_->all_reduce(I.loss_sum)->wait();
    I.loss_sum.div_(double(st_.dp_cp()));
  }
}

void Engine::norm() {
  Impl& I = *impl_;
  at::NoGradGuard ng;
  // ZeRO-0/1: every rank holds the whole reduced gradient; ZeRO-2/3: each its
  // chunks, and the squares are summed over the dp group.
  at::Tensor g = st_.zero >= 2 ? I.gshard : I.grads;
  at::Tensor sq = at::linalg_vector_norm(g, 2, std::nullopt, false, at::kFloat).square();
  if (stage_ > 0 && I.tied_id >= 0) {  // the copy of the word matrix counts once (on the first stage)
    if (at::Tensor c = tied_grad(); c.defined())
      sq.sub_(at::linalg_vector_norm(c, 2, std::nullopt, false, at::kFloat).square());
  }
  if (tp_) {
    // Each tp rank holds its part of the split parameters and a whole copy of
    // the replicated ones (equal gradients: summed by ReplicaReduce under sp),
    // which the sum over the tp group must count once.
    at::Tensor r = replicated_grads(g);
    if (r.defined()) sq = sq - at::linalg_vector_norm(r, 2, std::nullopt, false, at::kFloat).square() * (1.0 - 1.0 / st_.tp);
  }
  if (ep_ && st_.zero < 2) {
    // Each ep rank holds other experts whole: their squares are summed over
    // the ep group. (ZeRO-2/3: each rank's chunks, the experts' included,
    // are its own; NormReduce's sum over dp counts every expert once.)
    at::Tensor e = at::zeros({}, sq.options());
    for (const Unit& un : I.units)
      for (const Piece& p : un.pieces)
        if (un.owned && p.experts)
          e = e + at::linalg_vector_norm(g.narrow(0, un.base + p.off, p.padded), 2, std::nullopt, false, at::kFloat).square();
    at::Tensor all = e.clone();
    ep_->all_reduce(all)->wait();
    sq = sq - e + all;
  }
  I.norm_sq = sq;
}

void Engine::norm_reduce(CommGroup g) {
  // The sum of squares over tp (split parameters), dp (ZeRO-2/3: each rank its
  // chunks) and pp (every stage its share of the model).
  Communicator* c = g == CommGroup::Tp ? tp_ : g == CommGroup::Dp ? dp_ : g == CommGroup::Pp ? pp_ : nullptr;
  if (c) c->all_reduce(impl_->norm_sq)->wait();
}

void Engine::clip() {
  Impl& I = *impl_;
  at::NoGradGuard ng;
  at::Tensor nrm = I.norm_sq.sqrt();
  if (st_.precision == Precision::FP16) {
    // Dynamic loss scaling (Micikevicius et al. 2018): one host sync.
    if (!nrm.isfinite().item<bool>()) {
      loss_scale_ = std::max(1.0, loss_scale_ * 0.5);
      good_steps_ = 0;
      ++skipped_;
      I.skip = true;
      return;
    }
  }
  // The divisor uses the loss scale the gradients were made with; a doubling
  // applies from the next step on.
  const double made_with = loss_scale_;
  if (st_.precision == Precision::FP16 && ++good_steps_ >= cfg_.options.optim.fp16_scale_window) loss_scale_ *= 2.0, good_steps_ = 0;
  if (cfg_.options.optim.grad_clip > 0) I.divisor = ((nrm / made_with + 1e-6) / cfg_.options.optim.grad_clip).clamp_min(1.0) * made_with;
  else I.divisor = at::full({}, made_with, nrm.options());
  if (I.offload) I.divisor_host = I.divisor.item<double>();
}

at::Tensor Engine::replicated_grads(const at::Tensor& g) const {
  std::vector<at::Tensor> parts;
  for (const auto& r : impl_->repl) parts.push_back(g.narrow(0, r.dev, r.len));
  return parts.empty() ? at::Tensor() : at::cat(parts);
}

void Engine::reduce_replicated() {
  // Sequence parallelism (Korthikanti et al. 2022): norms, the row-parallel
  // layers' biases and the position tables saw only this rank's sequence
  // shard, so each tp rank holds a partial gradient. One all-reduce over the tp
  // group of all of them (coalesced; the ranges are alike on every tp rank),
  // after the dp reduction (the order does not matter: both are sums).
  Impl& I = *impl_;
  at::NoGradGuard ng;
  at::Tensor g = st_.zero >= 2 ? I.gshard : I.grads;
  at::Tensor flat = replicated_grads(g);
  if (!flat.defined()) return;
  tp_->all_reduce(flat)->wait();
  int64_t o = 0;
  for (const auto& r : I.repl) g.narrow(0, r.dev, r.len).copy_(flat.narrow(0, o, r.len)), o += r.len;
  // Offload: the host copies left before this sum; copy the summed ranges again.
  if (I.offload)
    for (const auto& r : I.repl_host) I.host_grad.narrow(0, r.host, r.len).copy_(g.narrow(0, r.dev, r.len));
}

void Engine::opt() {
  Impl& I = *impl_;
  if (I.skip) return;
  at::NoGradGuard ng;
  ++t_;
  I.step_count.fill_(double(t_));
  const int U = int(I.units.size());
  // The decayed elements of the rank's chunk of a piece.
  auto decay_len = [](const Piece& p) { return std::clamp<int64_t>(p.decay - int64_t(p.rank) * p.chunk, 0, p.chunk); };
  if (!I.offload) {
    for (int u = 0; u < U; ++u) {
      const Unit& un = I.units[size_t(u)];
      if (!un.owned) continue;  // another stage's
      for (const Piece& p : un.pieces) {
        if (p.chunk == 0) continue;  // empty (fine-tuning's embedding, head)
        // Where the rank's updated working-precision parameters go.
        at::Tensor w = st_.zero == 3 ? I.pshard.narrow(0, un.sbase + p.soff, p.chunk)
                                     : I.params.narrow(0, un.base + p.mine(), p.chunk);
        const int64_t s0 = un.sbase + p.soff;
        at::Tensor master = I.master_is_param ? w : I.master.narrow(0, s0, p.chunk);
        adam_range(master, I.m.narrow(0, s0, p.chunk), I.v.narrow(0, s0, p.chunk), shard_grad(u, p), I.work,
                   decay_len(p), hyper(cfg_), I.step_count, I.divisor);
        if (!I.master_is_param) w.copy_(master);
      }
    }
    return;
  }
  // Offload: the CPU updates unit after unit on a worker thread, so that each
  // updated unit can travel back (ToDevice) while the next is computed.
  I.adam_done.clear();
  std::vector<std::promise<void>> promises(static_cast<size_t>(U));
  for (auto& pr : promises) I.adam_done.push_back(pr.get_future());
  const at::Tensor divisor = at::full({}, I.divisor_host, at::TensorOptions().dtype(at::kFloat));
  I.adam_thread = std::thread([this, promises = std::move(promises), divisor, decay_len]() mutable {
    Impl& J = *impl_;
    at::NoGradGuard ng2;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t u = 0; u < J.units.size(); ++u) {
      try {
        const Unit& un = J.units[u];
        for (const Piece& p : un.pieces) {
          if (!un.owned) break;
          const int64_t s0 = un.sbase + p.soff;
          adam_range(J.master.narrow(0, s0, p.chunk), J.m.narrow(0, s0, p.chunk), J.v.narrow(0, s0, p.chunk),
                     J.host_grad.narrow(0, s0, p.chunk), J.host_work, decay_len(p), hyper(cfg_), J.step_count, divisor,
                     J.host_param.narrow(0, s0, p.chunk));
        }
        promises[u].set_value();
      } catch (...) {
        promises[u].set_exception(std::current_exception());
      }
    }
    cpu_adam_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
}

void Engine::to_device(int u) {
  Impl& I = *impl_;
  if (I.skip) return;
  const Unit& un = I.units[size_t(u)];
  I.adam_done.at(size_t(u)).get();  // the CPU has updated this unit
  for (const Piece& p : un.pieces) {
    at::Tensor src = I.host_param.narrow(0, un.sbase + p.soff, p.chunk);
    at::Tensor dst = st_.zero == 3 ? I.pshard.narrow(0, un.sbase + p.soff, p.chunk)
                                   : I.params.narrow(0, un.base + p.mine(), p.chunk);
    I.copy->run([&] { dst.copy_(src, /*non_blocking=*/cuda_); });
    I.keep.push_back(src);
  }
}

}  // namespace planner::rt

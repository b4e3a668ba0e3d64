// The Engine's ZeRO handlers (runtime/engine_detail.hpp): the unit buffer
// pool, Gather/Release (ZeRO-3), Reduce (all-reduce or reduce-scatter, held
// for the Sync without overlap_grad_reduce), AllGather (ZeRO-1/2), and the
// full parameters gathered for the tests.
#include "runtime/engine_detail.hpp"

namespace planner::rt {

// A buffer of `numel` elements for unit u: its own (unit 0, the head) or a free
// layer slot. The stream that uses it next waits for the collective that last
// read it.
at::Tensor acquire(BufferPool& p, int u, bool layer, int64_t numel, const at::TensorOptions& o) {
  if (!layer) {
    at::Tensor& t = p.own[u];
    if (!t.defined()) t = at::empty({numel}, o);
    if (WorkPtr& w = p.own_busy[u]) w->wait(), w = nullptr;
    return t;
  }
  // Two slots from the start, taken first-in first-out: the slot a unit just
  // gave back (its collective maybe still running) is the last to be reused,
  // so the compute stream rarely waits for it.
  while (p.slots.size() < 2 || p.free.empty()) {
    p.free.push_back(int(p.slots.size()));
    p.slots.push_back(at::empty({numel}, o));
    p.slot_busy.push_back(nullptr);
    if (p.slots.size() >= 2 && !p.free.empty()) break;
  }
  const int k = p.free.front();
  p.free.erase(p.free.begin());
  if (WorkPtr& w = p.slot_busy[size_t(k)]) w->wait(), w = nullptr;
  p.slot_of[u] = k;
  return p.slots[size_t(k)];
}

void give_back(BufferPool& p, int u, bool layer, WorkPtr busy) {
  if (!layer) {
    p.own_busy[u] = std::move(busy);
    return;
  }
  const int k = p.slot_of.at(u);
  p.slot_of.erase(u);
  p.slot_busy[size_t(k)] = std::move(busy);
  p.free.push_back(k);
}

void Engine::gather(int u) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  const bool layer = u > 0 && u < program_.partition.head_unit();
  at::Tensor buf = acquire(I.gather_pool, u, layer, layer ? I.layer_padded : un.padded,
                           at::TensorOptions().device(device_).dtype(I.dt))
                       .narrow(0, 0, un.padded);
  // Each piece's shard into its place, then all-gathered over its group.
  const bool from_host = st_.offload == Offload::All && cuda_;
  std::vector<WorkPtr> ws;
  auto issue = [&] {
    for (const Piece& p : un.pieces) {
      at::Tensor src = I.pshard.narrow(0, un.sbase + p.soff, p.chunk);
      at::Tensor mine = buf.narrow(0, p.mine(), p.chunk), whole = buf.narrow(0, p.off, p.padded);
      if (from_host) I.keep.push_back(src);
      if (p.chunk == 0) continue;  // an empty unit (fine-tuning's embedding and head): nothing to gather
      if (p.world > 1 && !from_host) ws.push_back(p.comm->all_gather(src, whole));
      else mine.copy_(src, /*non_blocking=*/from_host);
      if (p.world > 1 && from_host) ws.push_back(p.comm->all_gather(mine, whole));
    }
  };
  if (from_host) {
    // The shards come from pinned host memory on the copy stream; the
    // all-gathers are issued from that stream so they wait for the copies,
    // not for compute.
    I.copy->run(issue);
    if (WorkPtr w = all_of(ws)) I.gather_work[size_t(u)] = w;
    else I.gather_mark[size_t(u)] = I.copy->mark();
  } else {
    issue();
    I.gather_work[size_t(u)] = all_of(ws);
  }
  I.gathered[size_t(u)] = buf;
  bind_unit(u, buf);
  transient_peak_ = std::max(transient_peak_, transient_bytes());
}

void Engine::release(int u) {
  Impl& I = *impl_;
  bind_unit(u, at::Tensor());
  I.gathered[size_t(u)] = at::Tensor();
  // The next all-gather into this buffer is ordered after the compute that read
  // it (a collective waits for the caller's stream when issued).
  give_back(I.gather_pool, u, u > 0 && u < program_.partition.head_unit(), nullptr);
}

// Reduce: each piece of the unit's gradient over its group (the local
// experts' over the expert-data-parallel group, the rest over dp-cp),
// all-reduced (ZeRO-0/1) or reduce-scattered into the rank's chunks (ZeRO-2/3).
void Engine::reduce(int u, bool scatter) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  at::NoGradGuard ng;
  std::vector<WorkPtr> ws;
  if (!scatter) {
    for (const Piece& p : un.pieces)  // an empty unit (fine-tuning's embedding, head): none
      if (p.comm && p.padded > 0) ws.push_back(p.comm->all_reduce(I.grads.narrow(0, un.base + p.off, p.padded)));
    if (WorkPtr w = all_of(std::move(ws))) I.reduce_work[size_t(u)] = w, I.pending.push_back(w);
    return;
  }
  // Reduce-scatter into the rank's gradient chunks. From the second
  // micro-batch on, the chunks accumulated so far are added into this rank's
  // parts of the unit's gradient first, so the reduce-scatter leaves the
  // running sum.
  at::Tensor g = I.ugrad[size_t(u)];
  if (I.reduces_done[size_t(u)] > 0) {
    if (WorkPtr& prev = I.reduce_work[size_t(u)]) {
      prev->wait();
      // Waited for: drop it from the outstanding list, so that the unit
      // gradient it holds is freed now, not at the step's Sync (the NCCL
      // backend records its tensors on its stream, so the memory is reused
      // only after the collective).
      I.pending.erase(std::remove(I.pending.begin(), I.pending.end(), prev), I.pending.end());
    }
    for (const Piece& p : un.pieces) g.narrow(0, p.mine(), p.chunk).add_(I.gshard.narrow(0, un.sbase + p.soff, p.chunk));
  }
  // Finished collectives hold nothing worth keeping.
  I.reap();
  for (const Piece& p : un.pieces) {
    at::Tensor acc = I.gshard.narrow(0, un.sbase + p.soff, p.chunk), whole = g.narrow(0, p.off, p.padded);
    if (p.world > 1 && p.padded > 0) ws.push_back(p.comm->reduce_scatter(whole, acc));
    else acc.copy_(whole);
  }
  const WorkPtr w = all_of(std::move(ws));
  I.reduce_work[size_t(u)] = w;
  if (w) I.pending.push_back(w);
  ++I.reduces_done[size_t(u)];
  bind_unit_grad(u, at::Tensor());
  I.ugrad[size_t(u)] = at::Tensor();
  give_back(I.grad_pool, u, u > 0 && u < program_.partition.head_unit(), w);
}

at::Tensor Engine::shard_grad(int u, const Piece& p) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  if (st_.zero >= 2) return I.gshard.narrow(0, un.sbase + p.soff, p.chunk);
  return I.grads.narrow(0, un.base + p.mine(), p.chunk);
}

// overlap_grad_reduce off: the reductions and copies to the host held for
// the Sync, issued now in program order. A unit reduced after every backward
// (ZeRO-2/3 with accumulation) is reduced once, for its last: its unit
// gradient kept accumulating in its buffer meanwhile, so the one
// reduce-scatter leaves the step's sum (as the simulator prices it: each
// Reduce at the Sync).
void Engine::issue_deferred() {
  std::vector<StepAction> d;
  d.swap(impl_->deferred);
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i].op == StepOp::ToHost) {
      to_host(d[i].unit);
      continue;
    }
    bool later = false;
    for (size_t j = i + 1; j < d.size() && !later; ++j) later = d[j].op == StepOp::Reduce && d[j].unit == d[i].unit;
    if (!later) reduce(d[i].unit, d[i].scatter);
  }
}

// AllGather (ZeRO-1/2): every piece's updated chunks over its group.
void Engine::all_gather(int u) {
  Impl& I = *impl_;
  if (I.skip) return;
  const Unit& un = I.units[size_t(u)];
  std::vector<WorkPtr> ws;
  auto issue = [&] {
    for (const Piece& p : un.pieces) {
      if (p.world < 2 || p.padded == 0) continue;  // unsharded, or empty (fine-tuning's embedding, head)
      at::Tensor whole = I.params.narrow(0, un.base + p.off, p.padded);
      ws.push_back(p.comm->all_gather(I.params.narrow(0, un.base + p.mine(), p.chunk), whole));
    }
  };
  if (I.offload) I.copy->run(issue);  // after the unit's copy to the device
  else issue();
  const WorkPtr w = all_of(std::move(ws));
  if (!w) return;
  // overlap_param_gather: the step ends without it; the unit's next forward
  // (or backward) waits for it, as for a ZeRO-3 Gather.
  if (program_.options.overlap_param_gather) I.gather_work[size_t(u)] = w;
  else I.pending.push_back(w);
}

at::Tensor Engine::full_params_fp32() {
  Impl& I = *impl_;
  for (WorkPtr& w : I.gather_work)  // overlap_param_gather: the last step's all-gathers
    if (w) w->wait(), w = nullptr;
  at::NoGradGuard ng;
  const ParamStore& store = tstore();
  at::Tensor out = at::zeros({store.numel()}, at::TensorOptions().device(device_).dtype(at::kFloat));
  for (size_t u = 0; u < I.units.size(); ++u) {
    const Unit& un = I.units[u];
    if (!un.owned) continue;  // another stage's (summed in below)
    at::Tensor unit;
    if (st_.zero < 3) {
      unit = I.params.narrow(0, un.base, un.padded);
    } else {
      unit = at::empty({un.padded}, at::TensorOptions().device(device_).dtype(I.dt));
      for (const Piece& p : un.pieces) {
        at::Tensor src = I.pshard.narrow(0, un.sbase + p.soff, p.chunk).to(device_);
        at::Tensor whole = unit.narrow(0, p.off, p.padded);
        if (p.world > 1 && p.padded > 0) p.comm->all_gather(src, whole)->wait();
        else whole.copy_(src);
      }
    }
    for (size_t k = 0; k < un.ids.size(); ++k) {
      const ParamInfo& info = store.infos()[size_t(un.ids[k])];
      if (info.group != int(u)) continue;  // the last stage's copy of the tied word matrix
      out.narrow(0, info.offset, info.numel).copy_(unit.narrow(0, un.offs[k], info.numel));
    }
  }
  if (tp_ || ep_) {
    // The full tensors in the single-process layout: each split one gathered
    // from the tp group and put together (tp_assemble), the others as they are.
    at::Tensor whole = at::zeros({store.full_numel()}, out.options());
    for (const ParamInfo& info : store.infos()) {
      if (!I.units[size_t(info.group)].owned) continue;
      at::Tensor mine = out.narrow(0, info.offset, info.numel);
      at::Tensor t = mine;
      std::vector<int64_t> full_here = info.full_shape;  // this ep rank's experts, whole over tp
      if (info.ep > 1) full_here[0] /= info.ep;
      if (tp_ && info.split.split()) {
        std::vector<int64_t> shape{st_.tp};
        shape.insert(shape.end(), info.shape.begin(), info.shape.end());
        at::Tensor all = at::empty(shape, out.options());
        tp_->all_gather(mine, all)->wait();
        t = tp_assemble(all, info.split, full_here);
      }
      if (ep_ && info.ep > 1) {  // the ep ranks' blocks of experts, in rank order
        at::Tensor local = t.contiguous();
        at::Tensor all = at::empty({local.numel() * st_.ep}, out.options());
        ep_->all_gather(local.reshape({-1}), all)->wait();
        t = all;
      }
      whole.narrow(0, info.full_offset, info.full_numel).copy_(t.reshape({-1}));
    }
    out = whole;
  }
  if (pp_ && st_.pp > 1) pp_->all_reduce(out)->wait();  // each stage filled its own units, zeros elsewhere
  synchronize(cuda_);
  return out;
}

}  // namespace planner::rt

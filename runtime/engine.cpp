#include "runtime/engine.hpp"

#include "runtime/model/context_parallel.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "runtime/batch.hpp"
#include "runtime/comm/pipe_links.hpp"
#include "runtime/device.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/buffers/streams.hpp"
#include "runtime/model/tensor_parallel.hpp"
#include "strategies/errors.hpp"
#include "strategies/shard.hpp"

namespace planner::rt {

namespace {
int64_t key(int mb, int u) { return int64_t(mb) * 1000003 + u; }
}  // namespace

struct Engine::Unit {
  int64_t numel = 0, padded = 0, chunk = 0;  // chunk = padded / optimizer world
  int64_t decay = 0;                         // decayed elements at the unit's start
  std::vector<int> ids;                      // parameters of the unit, in layout order
  std::vector<int64_t> offs;                 // their offsets inside the unit
  bool owned = true;                         // held by this rank's pipeline stage
  int64_t base = 0;                          // offset in the full flat buffers (ZeRO-0/1/2)
  int64_t sbase = 0;                         // offset in the shard buffers
};

// Reused device buffers for ZeRO-2/3 units (DeepSpeed keeps fixed buffers the
// same way): the embedding and the head each have their own, allocated at first
// use; the layers, all of one size, share a pool that grows to the most units in
// use at once (the unit computing and the one prefetched or still reducing).
// Allocating once keeps the caching allocator from fragmenting under the churn
// of unit-sized blocks freed while a collective still reads them.
struct BufferPool {
  std::map<int, at::Tensor> own;          // unit 0 and the head
  std::map<int, WorkPtr> own_busy;        // a collective still reading it
  std::vector<at::Tensor> slots;          // layer-sized
  std::vector<WorkPtr> slot_busy;
  std::vector<int> free;
  std::map<int, int> slot_of;             // unit -> slot (layers)
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& [u, t] : own) b += t.numel() * t.element_size();
    for (const auto& t : slots) b += t.numel() * t.element_size();
    return b;
  }
};

struct Engine::Impl {
  BufferPool gather_pool, grad_pool;
  std::vector<Unit> units;
  int ow = 1, orank = 0, dp_rank = 0;
  at::ScalarType dt = at::kFloat;
  bool mixed = false, offload = false, master_is_param = false;
  at::Tensor params, grads, pshard, gshard, master, m, v, work, step_count, empty;
  at::Tensor host_grad, host_param, host_work;  // offload (pinned)
  std::vector<at::Tensor> gathered, ugrad;  // the pool buffer each unit uses now, or undefined
  std::vector<WorkPtr> gather_work, reduce_work;
  // Offload=all without a dp all-gather: where on the copy stream each unit's
  // parameters have arrived (the compute stream waits for that point only, not
  // for the next unit's prefetch queued behind it).
  std::vector<SideStream::Mark> gather_mark;
  std::vector<int> reduces_done;
  std::vector<WorkPtr> pending;
  int64_t layer_padded = 0;  // the padded size of a layer unit (the pool's slot size)
  std::vector<at::Tensor> keep;
  std::unordered_map<int64_t, at::Tensor> in, out;
  std::unordered_map<int64_t, at::Tensor> recv;  // received activations (key(mb, first unit)) and gradients (key(mb, -1 - last unit))
  std::unordered_map<int, at::Tensor> labels;
  at::Tensor loss_sum, divisor;
  at::Tensor norm_sq;  // Norm: the sum of squares of the gradients, summed over the groups by NormReduce
  double divisor_host = 1.0;
  bool skip = false;
  std::unique_ptr<SideStream> copy;
  std::vector<std::future<void>> adam_done;
  std::thread adam_thread;
  std::map<StepOp, std::unique_ptr<IntervalTimer>> timers;
  int tied_id = -1;                   // the word matrix, when the last stage keeps a copy (tied, pp > 1)
  std::unique_ptr<Communicator> emb;  // first and last stage (tied embeddings, pp > 2)
  Communicator* emb_comm = nullptr;   // emb, or the pp group when pp == 2
  // tp > 1: the replicated parameters' ranges in the gradient buffer that Norm
  // measures (the whole units' in `grads` for ZeRO-0/1, the rank's chunks' in
  // `gshard` for ZeRO-2/3), adjacent ones merged; with offload, the same
  // gradients' places in the device buffer and in `host_grad`.
  struct Range {
    int64_t dev = 0, len = 0, host = 0;  // repl: host = dev (unused)
  };
  std::vector<Range> repl, repl_host;

  // Drops the outstanding collectives and sends that have finished (a
  // finished Work releases the tensors it held), except the units' latest
  // reductions, which later actions still order themselves after. A
  // pipeline stage's sends were otherwise held to the step's Sync: each
  // activation sent on (and each gradient sent back) stayed allocated after
  // its backward, about 1 GiB on rank 0 of GPT-Neo-1.3B's interleaved pp=2
  // plan on two H200s (validation/h200x2/heldout18).
  void reap() {
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const WorkPtr& w) {
                                   for (const auto& r : reduce_work)
                                     if (r == w) return false;  // still needed for ordering
                                   return w->done();
                                 }),
                  pending.end());
  }
};

namespace {

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

}  // namespace

Engine::Engine(const ModelSpec& spec, const Strategy& s, const TrainConfig& cfg, at::Device device,
               std::shared_ptr<TokenSource> tokens, Communicator* dp, Communicator* pp, Communicator* tp,
               Communicator* cp)
    : spec_(spec), st_(s), cfg_(cfg), device_(device), cuda_(device.is_cuda()), tokens_(std::move(tokens)), dp_(dp),
      pp_(pp), tp_(s.tp > 1 ? tp : nullptr), stage_(pp ? pp->rank() : 0),
      program_(build_step_program(s, spec.layers, StepOptions{spec.tied_embeddings})),
      impl_(std::make_unique<Impl>()) {
  if (s.tp > 1) {
    if (!tp || tp->size() != s.tp)
      throw std::invalid_argument("Engine: the plan has tp=" + std::to_string(s.tp) + " but the tp group has " +
                                  std::to_string(tp ? tp->size() : 1) + " ranks");
  }
  if (s.pp > 1) {
    if (!pp || pp->size() != s.pp)
      throw std::invalid_argument("Engine: the plan has pp=" + std::to_string(s.pp) + " but the pp group has " +
                                  std::to_string(pp ? pp->size() : 1) + " ranks");
  }
  if (s.dp_cp() > 1 && (!dp || dp->size() != s.dp_cp()))
    throw std::invalid_argument("Engine: the plan has dp*cp=" + std::to_string(s.dp_cp()) + " but the dp group has " +
                                std::to_string(dp ? dp->size() : 1) + " ranks");
  if (s.cp > 1 && (!cp || cp->size() != s.cp))
    throw std::invalid_argument("Engine: the plan has cp=" + std::to_string(s.cp) + " but the cp group has " +
                                std::to_string(cp ? cp->size() : 1) + " ranks");
  if (!tokens_) throw std::invalid_argument("Engine needs a token source");
  Impl& I = *impl_;
  I.dp_rank = dp ? dp->rank() : 0;
  I.ow = s.zero >= 1 ? s.dp_cp() : 1;
  I.orank = s.zero >= 1 ? I.dp_rank : 0;
  I.dt = working_dtype(s.precision);
  I.mixed = I.dt != at::kFloat;
  I.offload = s.offload != Offload::None;
  I.master_is_param = !I.mixed && !I.offload;
  loss_scale_ = s.precision == Precision::FP16 ? cfg_.fp16_init_scale : 1.0;
  if (I.offload && cuda_) I.copy = std::make_unique<SideStream>(true);
  else I.copy = std::make_unique<SideStream>(false);

  if (s.pp > 1)
    links_ = std::make_unique<PipeLinks>(make_pipe_links(*pp, program_.partition.vpp() > 1, device_));
  model_ = std::make_unique<TransformerModel>(spec_, cfg_.seq, tp_, s.sp);
  ParamStore& store = model_->store();
  store.make_leaves(device_, I.dt);
  model_->prepare(device_, I.dt);
  if (s.cp > 1) {
    cp_ = std::make_unique<ContextParallel>(cp, cfg_.seq);
    model_->set_context_parallel(cp_.get());
  }

  // Units and their layout: decayed tensors first, declaration order within each class.
  const int U = program_.partition.units();
  I.units.assign(size_t(U), Unit{});
  const auto& infos = store.infos();
  for (int pass = 0; pass < 2; ++pass)
    for (size_t k = 0; k < infos.size(); ++k) {
      if (infos[k].decay != (pass == 0)) continue;
      Unit& un = I.units.at(size_t(infos[k].group));
      un.ids.push_back(int(k));
      un.offs.push_back(un.numel);
      un.numel += infos[k].numel;
      if (pass == 0) un.decay = un.numel;
    }
  for (Unit& un : I.units) un.owned = false;
  for (int u : program_.partition.stage_units(stage_)) I.units[size_t(u)].owned = true;
  // Tied embeddings over a pipeline (Megatron-LM's scheme, Shoeybi et al.
  // 2019): the last stage keeps its own copy of the word matrix, first in its
  // head unit (a matrix: weight decay), with the same initial values; after the
  // backward the two copies' gradients are summed over the first and the last
  // stage (Sync), so both apply the same update; the global gradient norm
  // counts the copy once.
  const int head_u = program_.partition.head_unit();
  if (spec.tied_embeddings && s.pp > 1) {
    for (size_t k = 0; k < infos.size(); ++k)
      if (infos[k].name == "wte") I.tied_id = int(k);
    if (I.tied_id < 0) throw std::logic_error("Engine: tied embeddings but no word matrix");
    const int64_t n = infos[size_t(I.tied_id)].numel;
    if (I.units[size_t(head_u)].owned) {
      Unit& hu = I.units[size_t(head_u)];
      for (int64_t& o : hu.offs) o += n;
      hu.ids.insert(hu.ids.begin(), I.tied_id);
      hu.offs.insert(hu.offs.begin(), 0);
      hu.numel += n;
      hu.decay += n;
    }
    // Two stages: the first and the last are the pp group itself (no second
    // communicator, whose NCCL buffers would cost about 1 GiB).
    const std::vector<int>& m = pp->members();
    const bool ends = stage_ == 0 || stage_ == s.pp - 1;
    if (s.pp == 2) I.emb_comm = pp;
    else {
      I.emb = make_group_communicator(ends ? std::vector<int>{m.front(), m.back()} : std::vector<int>{m[size_t(stage_)]},
                                      "embedding", device_, pp->timeout());
      I.emb_comm = I.emb.get();
    }
  }
  int64_t base = 0, sbase = 0;
  for (Unit& un : I.units) {
    un.padded = (un.numel + I.ow - 1) / I.ow * I.ow;
    un.chunk = un.padded / I.ow;
    if (!un.owned) continue;  // another stage's
    un.base = base, un.sbase = sbase;
    base += un.padded, sbase += un.chunk;
  }
  shard_numel_ = sbase;
  if (U > 2) I.layer_padded = I.units[1].padded;
  const int64_t full = base;
  if (tp_) {
    auto add = [](std::vector<Impl::Range>& v, Impl::Range r) {
      if (!v.empty() && v.back().dev + v.back().len == r.dev && v.back().host + v.back().len == r.host)
        v.back().len += r.len;
      else
        v.push_back(r);
    };
    for (const Unit& un : I.units) {
      if (!un.owned) continue;
      const int64_t c0 = int64_t(I.orank) * un.chunk, c1 = c0 + un.chunk;  // the rank's chunk
      for (size_t k = 0; k < un.ids.size(); ++k) {
        const ParamInfo& info = infos[size_t(un.ids[k])];
        if (info.split.split()) continue;
        const int64_t a = un.offs[k], e = a + info.numel;
        if (s.zero < 2) add(I.repl, {un.base + a, info.numel, un.base + a});
        const int64_t lo = std::max(a, c0), hi = std::min(e, c1);
        if (lo >= hi) continue;
        const int64_t in_shard = un.sbase + lo - c0;
        if (s.zero >= 2) add(I.repl, {in_shard, hi - lo, in_shard});
        add(I.repl_host, {s.zero >= 2 ? in_shard : un.base + lo, hi - lo, in_shard});
      }
    }
  }

  auto dev = [&](at::ScalarType t) { return at::TensorOptions().device(device_).dtype(t); };
  auto host_zeros = [&](int64_t n, at::ScalarType t) { return pinned_empty(n, t, cuda_).zero_(); };
  I.empty = at::empty({0}, dev(I.dt));
  if (s.zero < 3) I.params = at::zeros({full}, dev(I.dt));
  if (s.zero < 2) I.grads = at::zeros({full}, dev(I.dt));
  if (s.zero == 3) I.pshard = s.offload == Offload::All ? host_zeros(sbase, I.dt) : at::zeros({sbase}, dev(I.dt));
  if (s.zero >= 2) I.gshard = at::zeros({sbase}, dev(I.dt));
  auto state = [&](int64_t n) { return I.offload ? host_zeros(n, at::kFloat) : at::zeros({n}, dev(at::kFloat)); };
  if (!I.master_is_param) I.master = state(sbase);
  {
    I.m = state(sbase);
    I.v = state(sbase);
    I.step_count = at::zeros({}, I.offload ? at::TensorOptions().dtype(at::kFloat) : dev(at::kFloat));
  }
  if (I.offload) {
    I.host_grad = host_zeros(sbase, I.dt);
    I.host_param = s.offload == Offload::All ? I.pshard : host_zeros(sbase, I.dt);
    // Only PLANNER_HOST_ADAM=libtorch writes into it (host_adamw converts in
    // cache); pageable and untouched otherwise, so it holds no pages.
    if (I.mixed) I.host_work = at::empty({std::min(sbase, kOptChunk)}, at::TensorOptions().dtype(at::kFloat));
  } else if (I.mixed) {
    I.work = at::empty({std::min(sbase, kOptChunk)}, dev(at::kFloat));
  }

  // Initial values, unit by unit in declaration order (the order of
  // TransformerModel::materialize, so the values are the same as one process's).
  at::manual_seed(cfg_.seed);
  {
    at::NoGradGuard ng;
    at::Tensor tied_init;
    for (int u = 0; u < U; ++u) {
      const Unit& un = I.units[size_t(u)];
      at::Tensor tmp = at::zeros({un.padded}, dev(at::kFloat));
      std::vector<size_t> order(un.ids.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return un.ids[a] < un.ids[b]; });
      for (size_t k : order) {
        const ParamInfo& info = infos[size_t(un.ids[k])];
        if (info.group != u) {  // the last stage's copy of the tied word matrix: unit 0's values
          tmp.narrow(0, un.offs[k], info.numel).copy_(tied_init);
          continue;
        }
        model_->init_tensor(info, tmp.narrow(0, un.offs[k], info.numel));
        if (un.ids[k] == I.tied_id) tied_init = tmp.narrow(0, un.offs[k], info.numel).clone();
      }
      if (!un.owned) continue;  // drawn all the same: the generator's sequence is the model's
      at::Tensor mine = tmp.narrow(0, int64_t(I.orank) * un.chunk, un.chunk);
      if (s.zero < 3) I.params.narrow(0, un.base, un.padded).copy_(tmp);
      else I.pshard.narrow(0, un.sbase, un.chunk).copy_(mine);
      if (!I.master_is_param) I.master.narrow(0, un.sbase, un.chunk).copy_(mine);
    }
  }
  I.gathered.assign(size_t(U), at::Tensor());
  I.ugrad.assign(size_t(U), at::Tensor());
  I.gather_work.assign(size_t(U), nullptr);
  I.reduce_work.assign(size_t(U), nullptr);
  I.gather_mark.assign(size_t(U), nullptr);
  I.reduces_done.assign(size_t(U), 0);
  for (int u = 0; u < U; ++u) {
    const Unit& un = I.units[size_t(u)];
    if (!un.owned) continue;
    bind_unit(u, s.zero < 3 ? I.params.narrow(0, un.base, un.padded) : at::Tensor());
    if (s.zero < 2) bind_unit_grad(u, I.grads.narrow(0, un.base, un.padded));
  }
}

Engine::~Engine() {
  if (impl_ && impl_->adam_thread.joinable()) impl_->adam_thread.join();
}

void Engine::bind_unit(int u, const at::Tensor& data) {
  const Unit& un = impl_->units[size_t(u)];
  ParamStore& store = model_->store();
  for (size_t k = 0; k < un.ids.size(); ++k) {
    const ParamInfo& info = store.infos()[size_t(un.ids[k])];
    store.bind(un.ids[k], data.defined() ? data.narrow(0, un.offs[k], info.numel).view(info.shape) : impl_->empty);
  }
}

void Engine::bind_unit_grad(int u, const at::Tensor& grad) {
  const Unit& un = impl_->units[size_t(u)];
  ParamStore& store = model_->store();
  for (size_t k = 0; k < un.ids.size(); ++k) {
    const ParamInfo& info = store.infos()[size_t(un.ids[k])];
    store.bind_grad(un.ids[k], grad.defined() ? grad.narrow(0, un.offs[k], info.numel).view(info.shape) : at::Tensor());
  }
}

int64_t Engine::param_bytes() const {
  const Impl& I = *impl_;
  if (I.params.defined()) return I.params.numel() * I.params.element_size();
  return I.pshard.is_cuda() || !cuda_ ? I.pshard.numel() * I.pshard.element_size() : 0;
}
int64_t Engine::grad_bytes() const {
  const Impl& I = *impl_;
  return I.grads.defined() ? I.grads.numel() * I.grads.element_size() : I.gshard.numel() * I.gshard.element_size();
}
int64_t Engine::optimizer_state_bytes() const {
  const Impl& I = *impl_;
  if (I.offload) return 0;
  return (I.m.numel() + I.v.numel() + (I.master.defined() ? I.master.numel() : 0)) * 4;
}
int64_t Engine::host_state_bytes() const {
  const Impl& I = *impl_;
  if (!I.offload) return 0;
  int64_t b = (I.m.numel() + I.v.numel() + (I.master.defined() ? I.master.numel() : 0)) * 4;
  b += I.host_grad.numel() * I.host_grad.element_size() + I.host_param.numel() * I.host_param.element_size();
  if (I.host_work.defined()) b += I.host_work.numel() * 4;
  return b;
}
int64_t Engine::optimizer_work_bytes() const { return impl_->work.defined() ? impl_->work.numel() * 4 : 0; }

// ---- the walk ----------------------------------------------------------------

at::Tensor Engine::step(int64_t step) {
  Impl& I = *impl_;
  if (I.grads.defined()) {
    at::NoGradGuard ng;
    I.grads.zero_();
  }
  std::fill(I.reduces_done.begin(), I.reduces_done.end(), 0);
  I.loss_sum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  I.skip = false;
  if (trace_next_step) trace_ = std::make_unique<IntervalTimer>(cuda_), trace_next_step = false;
  IntervalTimer* tr = trace_.get();
  for (const StepAction& a : program_.stages[size_t(stage_)]) {
    if (tr) tr->start();
    if (time_actions) {
      auto& t = I.timers[a.op];
      if (!t) t = std::make_unique<IntervalTimer>(cuda_);
      t->start();
      run_action(a, step);
      t->stop();
    } else {
      run_action(a, step);
    }
    if (tr) tr->stop();
  }
  // The step ends when the updated parameters are in place.
  for (auto& w : I.pending) w->wait();
  I.pending.clear();
  I.copy->join();
  I.keep.clear();
  if (I.adam_thread.joinable()) I.adam_thread.join();
  return I.loss_sum;
}

void Engine::run_action(const StepAction& a, int64_t step) {
  switch (a.op) {
    case StepOp::Forward: return forward(a.microbatch, a.unit, a.chunk, step);
    case StepOp::Backward: return backward(a.microbatch, a.unit, a.chunk);
    case StepOp::Gather: return gather(a.unit);
    case StepOp::Release: return release(a.unit);
    case StepOp::Reduce: return reduce(a.unit, a.scatter);
    case StepOp::ToHost: return to_host(a.unit);
    case StepOp::Sync: return sync();
    case StepOp::TiedReduce: return tied_reduce();
    case StepOp::ReplicaReduce: return reduce_replicated();
    case StepOp::LossReduce: return loss_reduce(a.group);
    case StepOp::Norm: return norm();
    case StepOp::NormReduce: return norm_reduce(a.group);
    case StepOp::Clip: return clip();
    case StepOp::CpRingF:
    case StepOp::CpRingB: return;  // cp: the ring runs inside the attention of the F/B that follows
                                   // (runtime/model/context_parallel.cpp); the action carries its price
    case StepOp::Opt: return opt();
    case StepOp::ToDevice: return to_device(a.unit);
    case StepOp::AllGather: return all_gather(a.unit);
    case StepOp::SendF: return send_f(a.microbatch, a.chunk);
    case StepOp::RecvF: return recv_f(a.microbatch, a.chunk);
    case StepOp::SendB: return send_b(a.microbatch, a.chunk);
    case StepOp::RecvB: return recv_b(a.microbatch, a.chunk);
  }
}

void Engine::forward(int mb, int u, int chunk, int64_t step) {
  Impl& I = *impl_;
  if (I.gather_work[size_t(u)]) I.gather_work[size_t(u)]->wait(), I.gather_work[size_t(u)] = nullptr;
  if (I.gather_mark[size_t(u)]) I.copy->wait(I.gather_mark[size_t(u)]), I.gather_mark[size_t(u)] = nullptr;
  const int head = program_.partition.head_unit();
  if (u == 0) {
    std::vector<int64_t> scratch;
    const int64_t micro = int64_t(I.dp_rank / st_.cp) * st_.gas + mb;  // cp ranks share the sample
    auto [ids, labels] = make_batch(*tokens_, spec_, cfg_.seq, cfg_.seed, cfg_.mlm_mask_fraction, step, micro, st_.mbs,
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
  if (u == head) {
    if (before_head) before_head();
    if (!I.labels.count(mb)) {  // the last stage reads its micro-batch's labels itself
      std::vector<int64_t> scratch;
      const int64_t micro = int64_t(I.dp_rank / st_.cp) * st_.gas + mb;  // cp ranks share the sample
      I.labels[mb] = make_batch(*tokens_, spec_, cfg_.seq, cfg_.seed, cfg_.mlm_mask_fraction, step, micro, st_.mbs,
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

// Pipeline point-to-point over the links of runtime/comm/pipe_links.hpp:
// activations to the next stage, gradients to the previous one (the next and
// previous stage of the ring under the interleaved schedule). A send is waited
// for at the step's Sync (its Work keeps the tensor alive), or dropped before
// the next send once it has arrived (Impl::reap); a receive before
// the tensor is used (on the GPU an event wait on the compute stream: the host
// walks on).
void Engine::send_f(int mb, int chunk) {
  impl_->reap();  // the earlier sends that have arrived free their tensors
  const int last = program_.partition.units_of(stage_, chunk).second - 1;
  at::Tensor t = I_out_detached(mb, last);
  impl_->pending.push_back(links_->f_out->send(t, 1));
}

void Engine::recv_f(int mb, int chunk) {
  const int first = program_.partition.units_of(stage_, chunk).first;
  at::Tensor t = at::empty({int64_t(st_.mbs), stage_seq(), spec_.hidden},
                           at::TensorOptions().device(device_).dtype(impl_->dt));
  links_->f_in->recv(t, 0)->wait();
  impl_->recv[key(mb, first)] = t.requires_grad_(true);
}

void Engine::send_b(int mb, int chunk) {
  impl_->reap();
  const int first = program_.partition.units_of(stage_, chunk).first;
  at::Tensor g = impl_->in.at(key(mb, first)).grad();
  impl_->in.erase(key(mb, first));
  impl_->pending.push_back(links_->b_out->send(g.contiguous(), 1));
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
  const int64_t seq = cfg_.seq / st_.cp;  // cp: this rank's two chunks
  return st_.sp && st_.tp > 1 ? seq / st_.tp : seq;
}

at::Tensor Engine::I_out_detached(int mb, int u) { return impl_->out.at(key(mb, u)).detach().contiguous(); }

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
  at::Tensor y = I.out.at(key(mb, u));
  if (u == head) {
    const double mult = loss_scale_ / double(st_.gas * st_.dp_cp());
    torch::autograd::backward({y * mult});
  } else if (u == last - 1) {  // the gradient of the stage's output, received from the next stage (RecvB)
    torch::autograd::backward({y}, {I.recv.at(key(mb, -1 - u))});
    I.recv.erase(key(mb, -1 - u));
  } else {
    at::Tensor g = I.in.at(key(mb, u + 1)).grad();
    torch::autograd::backward({y}, {g});
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

void Engine::gather(int u) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  const bool layer = u > 0 && u < program_.partition.head_unit();
  at::Tensor buf = acquire(I.gather_pool, u, layer, layer ? I.layer_padded : un.padded,
                           at::TensorOptions().device(device_).dtype(I.dt))
                       .narrow(0, 0, un.padded);
  at::Tensor src = I.pshard.narrow(0, un.sbase, un.chunk);
  at::Tensor mine = buf.narrow(0, int64_t(I.dp_rank) * un.chunk, un.chunk);
  if (st_.offload == Offload::All && cuda_) {
    // The shard comes from pinned host memory on the copy stream; the all-gather
    // is issued from that stream so it waits for the copy, not for compute.
    WorkPtr w;
    I.copy->run([&] {
      mine.copy_(src, /*non_blocking=*/true);
      if (dp_ && st_.dp_cp() > 1) w = dp_->all_gather(mine, buf);
    });
    I.keep.push_back(src);
    if (w) I.gather_work[size_t(u)] = w;
    else I.gather_mark[size_t(u)] = I.copy->mark();
  } else if (dp_ && st_.dp_cp() > 1) {
    I.gather_work[size_t(u)] = dp_->all_gather(src, buf);
  } else {
    mine.copy_(src);
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

void Engine::reduce(int u, bool scatter) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  at::NoGradGuard ng;
  if (!scatter) {
    if (dp_ && st_.dp_cp() > 1) {
      I.reduce_work[size_t(u)] = dp_->all_reduce(I.grads.narrow(0, un.base, un.padded));
      I.pending.push_back(I.reduce_work[size_t(u)]);
    }
    return;
  }
  // Reduce-scatter into the rank's gradient chunk. From the second micro-batch
  // on, the chunk accumulated so far is added into this rank's part of the
  // unit's gradient first, so the reduce-scatter leaves the running sum.
  at::Tensor g = I.ugrad[size_t(u)];
  at::Tensor acc = I.gshard.narrow(0, un.sbase, un.chunk);
  if (I.reduces_done[size_t(u)] > 0) {
    if (WorkPtr& prev = I.reduce_work[size_t(u)]) {
      prev->wait();
      // Waited for: drop it from the outstanding list, so that the unit
      // gradient it holds is freed now, not at the step's Sync (the NCCL
      // backend records its tensors on its stream, so the memory is reused
      // only after the collective).
      I.pending.erase(std::remove(I.pending.begin(), I.pending.end(), prev), I.pending.end());
    }
    g.narrow(0, int64_t(I.dp_rank) * un.chunk, un.chunk).add_(acc);
  }
  // Finished collectives hold nothing worth keeping.
  I.reap();
  if (dp_ && st_.dp_cp() > 1) {
    I.reduce_work[size_t(u)] = dp_->reduce_scatter(g, acc);
    I.pending.push_back(I.reduce_work[size_t(u)]);
  } else {
    acc.copy_(g);
  }
  ++I.reduces_done[size_t(u)];
  bind_unit_grad(u, at::Tensor());
  I.ugrad[size_t(u)] = at::Tensor();
  give_back(I.grad_pool, u, u > 0 && u < program_.partition.head_unit(),
            dp_ && st_.dp_cp() > 1 ? I.reduce_work[size_t(u)] : nullptr);
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
        return I.grads.narrow(0, un.base + un.offs[k], model_->store().infos()[size_t(I.tied_id)].numel);
  }
  return {};
}

at::Tensor Engine::shard_grad(int u) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  if (st_.zero >= 2) return I.gshard.narrow(0, un.sbase, un.chunk);
  return I.grads.narrow(0, un.base + int64_t(I.orank) * un.chunk, un.chunk);
}

void Engine::to_host(int u) {
  Impl& I = *impl_;
  const Unit& un = I.units[size_t(u)];
  at::Tensor src = shard_grad(u);
  WorkPtr w = I.reduce_work[size_t(u)];
  I.copy->run([&] {
    if (w) w->wait();  // the copy stream waits for the unit's reduction
    I.host_grad.narrow(0, un.sbase, un.chunk).copy_(src, /*non_blocking=*/cuda_);
  });
  I.keep.push_back(src);
}

void Engine::sync() {
  Impl& I = *impl_;
  for (auto& w : I.pending) w->wait();
  I.pending.clear();
  std::fill(I.reduce_work.begin(), I.reduce_work.end(), nullptr);
  I.copy->join();
  if (I.offload) I.copy->host_wait();
  I.keep.clear();
  // The step's loss: the mean over this rank's micro-batches (LossReduce
  // makes it the global batch's).
  I.loss_sum.div_(double(st_.gas));
}

void Engine::tied_reduce() {
  Impl& I = *impl_;
  if (at::Tensor g = tied_grad(); g.defined()) {
    I.emb_comm->all_reduce(g)->wait();  // both copies get the sum
    if (I.offload)  // the unit's gradient went to the host before the sum: send its chunk again
      for (int u : {0, program_.partition.head_unit()})
        if (I.units[size_t(u)].owned)
          I.host_grad.narrow(0, I.units[size_t(u)].sbase, I.units[size_t(u)].chunk).copy_(shard_grad(u));
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
    // Dynamic loss scaling (Micikevicius et al. 2018), as Trainer: one host sync.
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
  if (st_.precision == Precision::FP16 && ++good_steps_ >= cfg_.fp16_scale_window) loss_scale_ *= 2.0, good_steps_ = 0;
  if (cfg_.grad_clip > 0) I.divisor = ((nrm / made_with + 1e-6) / cfg_.grad_clip).clamp_min(1.0) * made_with;
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

namespace {

AdamHyper hyper(const TrainConfig& c) { return {c.lr, c.beta1, c.beta2, c.weight_decay, c.eps}; }

}  // namespace

void Engine::opt() {
  Impl& I = *impl_;
  if (I.skip) return;
  at::NoGradGuard ng;
  ++t_;
  I.step_count.fill_(double(t_));
  const int U = int(I.units.size());
  auto decay_len = [&](const Unit& un) {
    return std::clamp<int64_t>(un.decay - int64_t(I.orank) * un.chunk, 0, un.chunk);
  };
  // Where the rank's updated working-precision parameters go.
  auto param_chunk = [&](const Unit& un) {
    if (st_.zero == 3) return I.pshard.narrow(0, un.sbase, un.chunk);
    return I.params.narrow(0, un.base + int64_t(I.orank) * un.chunk, un.chunk);
  };
  if (!I.offload) {
    for (int u = 0; u < U; ++u) {
      const Unit& un = I.units[size_t(u)];
      if (!un.owned) continue;
      at::Tensor p = param_chunk(un);
      at::Tensor master = I.master_is_param ? p : I.master.narrow(0, un.sbase, un.chunk);
      adam_range(master, I.m.narrow(0, un.sbase, un.chunk), I.v.narrow(0, un.sbase, un.chunk), shard_grad(u), I.work,
                 decay_len(un), hyper(cfg_), I.step_count, I.divisor);
      if (!I.master_is_param) p.copy_(master);
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
        if (!un.owned) {
          promises[u].set_value();
          continue;
        }
        at::Tensor master = J.master.narrow(0, un.sbase, un.chunk);
        adam_range(master, J.m.narrow(0, un.sbase, un.chunk), J.v.narrow(0, un.sbase, un.chunk),
                   J.host_grad.narrow(0, un.sbase, un.chunk), J.host_work, decay_len(un), hyper(cfg_), J.step_count, divisor,
                   J.host_param.narrow(0, un.sbase, un.chunk));
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
  at::Tensor src = I.host_param.narrow(0, un.sbase, un.chunk);
  at::Tensor dst = st_.zero == 3 ? I.pshard.narrow(0, un.sbase, un.chunk)
                                 : I.params.narrow(0, un.base + int64_t(I.orank) * un.chunk, un.chunk);
  I.copy->run([&] { dst.copy_(src, /*non_blocking=*/cuda_); });
  I.keep.push_back(src);
}

void Engine::all_gather(int u) {
  Impl& I = *impl_;
  if (I.skip || !dp_ || st_.dp_cp() < 2) return;
  const Unit& un = I.units[size_t(u)];
  at::Tensor full = I.params.narrow(0, un.base, un.padded);
  at::Tensor mine = full.narrow(0, int64_t(I.dp_rank) * un.chunk, un.chunk);
  if (I.offload) {
    WorkPtr w;
    I.copy->run([&] { w = dp_->all_gather(mine, full); });  // after the unit's copy to the device
    I.pending.push_back(w);
  } else {
    I.pending.push_back(dp_->all_gather(mine, full));
  }
}

// ---- inspection ----------------------------------------------------------------

std::vector<std::pair<double, double>> Engine::traced_spans() {
  if (!trace_) return {};
  auto out = trace_->spans();
  trace_.reset();
  return out;
}

void Engine::collect_action_times() {
  times_ = {};
  for (auto& [op, timer] : impl_->timers) {
    const std::vector<double> t = timer->seconds();
    double sum = 0;
    for (double x : t) sum += x;
    times_.seconds[op] = sum;
    times_.count[op] = int(t.size());
  }
}

int64_t Engine::transient_bytes() const {
  return impl_->gather_pool.bytes() + impl_->grad_pool.bytes();
}

at::Tensor Engine::full_params_fp32() {
  Impl& I = *impl_;
  at::NoGradGuard ng;
  const ParamStore& store = model_->store();
  at::Tensor out = at::zeros({store.numel()}, at::TensorOptions().device(device_).dtype(at::kFloat));
  for (size_t u = 0; u < I.units.size(); ++u) {
    const Unit& un = I.units[u];
    if (!un.owned) continue;  // another stage's (summed in below)
    at::Tensor unit;
    if (st_.zero < 3) {
      unit = I.params.narrow(0, un.base, un.padded);
    } else {
      unit = at::empty({un.padded}, at::TensorOptions().device(device_).dtype(I.dt));
      at::Tensor src = I.pshard.narrow(0, un.sbase, un.chunk).to(device_);
      if (dp_ && st_.dp_cp() > 1) dp_->all_gather(src, unit)->wait();
      else unit.copy_(src);
    }
    for (size_t k = 0; k < un.ids.size(); ++k) {
      const ParamInfo& info = store.infos()[size_t(un.ids[k])];
      if (info.group != int(u)) continue;  // the last stage's copy of the tied word matrix
      out.narrow(0, info.offset, info.numel).copy_(unit.narrow(0, un.offs[k], info.numel));
    }
  }
  if (tp_) {
    // The full tensors in the single-process layout: each split one gathered
    // from the tp group and put together (tp_assemble), the others as they are.
    at::Tensor whole = at::zeros({store.full_numel()}, out.options());
    for (const ParamInfo& info : store.infos()) {
      if (!I.units[size_t(info.group)].owned) continue;
      at::Tensor mine = out.narrow(0, info.offset, info.numel);
      at::Tensor t = mine;
      if (info.split.split()) {
        std::vector<int64_t> shape{st_.tp};
        shape.insert(shape.end(), info.shape.begin(), info.shape.end());
        at::Tensor all = at::empty(shape, out.options());
        tp_->all_gather(mine, all)->wait();
        t = tp_assemble(all, info.split, info.full_shape);
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

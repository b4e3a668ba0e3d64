// The executor (runtime/engine.hpp): construction, the walk of the step
// program and inspection. The handlers are in engine_pipeline.cpp,
// engine_zero.cpp and engine_tail.cpp (engine_detail.hpp lists them).
#include "runtime/engine_detail.hpp"

#include <cstdlib>
#include <limits>
#include "runtime/model/context_parallel.hpp"
#include "runtime/model/lora.hpp"
#include "runtime/model/moe.hpp"
#include "runtime/model/fp8_linear.hpp"
#include "specs/runtime_gap.hpp"

namespace planner::rt {

// What the head allocates for one micro-batch, in the order it does, reserved
// as one block from the moment the micro-batch enters the head's chunk until
// just before the head (Engine::forward): the final norm's output (gathered
// under sp, and projected where the model projects), the padded copy of the
// output matrix where the vocabulary needs padding (LinearAccum), the logits
// and their gradient in the working precision, and Gemma-2's capped logits.
// Allocated at the head itself, after the chunk's activations, the two
// logits-sized tensors found the space the previous micro-batch's had left
// taken by this one's activations, and the caching allocator mapped a new
// logits-sized range that then stayed reserved and unused: 5.8-7.8 GiB above
// the allocated peak on llama-3.2-3b (vocabulary 128256; validation/h200/
// alloc65). Reserved first, the block takes the same free range every
// micro-batch, and the head's tensors fill it in order. The forward's memory
// with the block held stays at or below the head's peak, which holds the same
// bytes but the padded copy. Without the norm's output and the padded copy in
// the block, gpt2-xl's head put them at the block's start and the gradient
// no longer fitted (validation/h200x2/alloc66: 1.3 GiB more reserved). Only
// where the head runs one micro-batch at a time, its backward before the next
// one's forward (pp = 1, and the last stage of 1F1B): where the gradients of
// several wait for their backward (GPipe, interleaved), each leaves its
// logits' part of the block free beside it, too small for the next whole
// block (alloc66: 1.4-3.6 GiB more reserved on three interleaved plans). Only
// on CUDA (the CPU has no caching allocator), and only where the logits are
// large enough to matter (128 MiB).
int64_t head_reserve_block_bytes(const ModelSpec& m, const Strategy& s, int64_t seq, int64_t padded_vocab,
                                 int64_t vocab_rows, bool cuda) {
  const int64_t e = int64_t(at::elementSize(working_dtype(s.precision)));
  const int64_t rows = int64_t(s.mbs) * seq / std::max(1, s.cp);
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden;
  const int64_t logits = rows * padded_vocab * e;
  if (!cuda || !runtime_reserves_head_block(m, s, double(logits))) return 0;
  int64_t input = rows / (s.sp && s.tp > 1 ? s.tp : 1) * m.hidden * e;  // the final norm's output
  if (s.sp && s.tp > 1) input += rows * width * e;                      // gathered for the GEMM
  if (width != m.hidden) input += rows * width * e;                     // projected
  const int64_t padded_copy = padded_vocab > vocab_rows ? padded_vocab * width * e : 0;
  return input + padded_copy + logits * (m.logit_softcap > 0 ? 3 : 2);
}

// Under GPipe the last stage runs every micro-batch's head before any
// backward, and the block above does not help: each head leaves its logits'
// range free beside its kept gradient, and smaller tensors (the next
// micro-batch's received input among them) land in it before the next head
// asks for the whole range again. Written into one tensor kept across
// micro-batches and steps (TransformerModel::keep_head_logits), the logits
// never leave such a range. The stage's peak is at its last head, where the
// logits are alive anyway, so keeping them costs nothing there: on
// llama3.2-1b-pp2-gpipe-mbs4 the last stage's footprint went from 128.32 to
// 124.38 GiB (predicted 123.61; validation/h200x2/pp73). Not under
// interleaving: there the last stage's peak can fall where no logits are
// alive, so the kept tensor added up to 2.2 GiB to it, and the holes moved to
// the logits' gradients, freed at each head chunk's backward (pp73's trace:
// still a 4.46 GiB hole).
bool keeps_head_logits(const ModelSpec& m, const Strategy& s, int64_t seq, int64_t padded_vocab, bool cuda) {
  if (!cuda || m.mlm_head || s.pp == 1 || s.schedule != Schedule::GPipe) return false;
  const int64_t e = int64_t(at::elementSize(working_dtype(s.precision)));
  return int64_t(s.mbs) * seq / std::max(1, s.cp) * padded_vocab * e >= (int64_t(128) << 20);
}

at::ScalarType working_dtype(Precision p) {
  switch (p) {
    case Precision::FP32: return at::kFloat;
    case Precision::FP16: return at::kHalf;
    case Precision::BF16:
    case Precision::FP8: return at::kBFloat16;  // fp8: bf16 except the layers' linear GEMMs (fp8_linear.hpp)
  }
  return at::kFloat;
}

namespace {

// The program's options: the model's tied embeddings and the run's overlap choices.
StepOptions step_options(const RunConfig& c) {
  StepOptions o;
  o.tied_embeddings = c.model().tied_embeddings;
  o.overlap_grad_reduce = c.options.overlap_grad_reduce;
  o.overlap_param_gather = c.options.overlap_param_gather;
  return o;
}

}  // namespace

Engine::Engine(const RunConfig& config, at::Device device, std::shared_ptr<TokenSource> tokens, Communicator* dp,
               Communicator* pp, Communicator* tp, Communicator* cp, Communicator* ep, Communicator* edp)
    : cfg_(config), device_(device), cuda_(device.is_cuda()), tokens_(std::move(tokens)), dp_(dp),
      pp_(pp), tp_(config.strategy().tp > 1 ? tp : nullptr), ep_(config.strategy().ep > 1 ? ep : nullptr),
      edp_(ep_ && edp && edp->size() > 1 ? edp : nullptr), stage_(pp ? pp->rank() : 0),
      program_(build_step_program(config.strategy(), config.model().layers, step_options(config))),
      impl_(std::make_unique<Impl>()) {
  const Strategy& s = st_;
  // The rules strategies/strategy.cpp's legality gives fine-tuning, again
  // here for runs built without a parsed plan (tests, calibrate).
  if (s.finetune.frozen_base() && ((s.tp > 1 && s.sp) || s.cp > 1 || s.offload != Offload::None))
    throw InputError("Engine: finetune=" + std::string(to_string(s.finetune.mode)) +
                     " runs with sp=0, cp=1 and offload=none only (adapters on sequence shards are not executed)");
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
  if (s.ep > 1) {
    if (!ep || ep->size() != s.ep)
      throw std::invalid_argument("Engine: the plan has ep=" + std::to_string(s.ep) + " but the ep group has " +
                                  std::to_string(ep ? ep->size() : 1) + " ranks");
  }
  // The runtime's own limits beyond legality (specs/runtime_gap.hpp: what plan
  // and predict say is predicted but not run).
  if (const std::string gap = runtime_gap(spec_, s, cfg_.seq()); !gap.empty()) throw InputError(gap);
  if (!tokens_) throw std::invalid_argument("Engine needs a token source");
  Impl& I = *impl_;
  I.dp_rank = dp ? dp->rank() : 0;
  I.ow = s.zero >= 1 ? s.dp_cp() : 1;
  I.orank = s.zero >= 1 ? I.dp_rank : 0;
  I.dt = working_dtype(s.precision);
  I.mixed = I.dt != at::kFloat;
  I.offload = s.offload != Offload::None;
  I.master_is_param = !I.mixed && !I.offload;
  loss_scale_ = s.precision == Precision::FP16 ? cfg_.options.optim.fp16_init_scale : 1.0;
  if (I.offload && cuda_) I.copy = std::make_unique<SideStream>(true);
  else I.copy = std::make_unique<SideStream>(false);

  if (s.pp > 1) {
    links_ = std::make_unique<PipeLinks>(make_pipe_links(*pp, program_.partition.vpp() > 1, device_));
    // PLANNER_PP_SENDS_IN_FLIGHT=N (runtime/README.md): a link's sends left
    // unwaited (Impl::bound_sends); 0 holds them to the Sync.
    if (auto v = env_integer("PLANNER_PP_SENDS_IN_FLIGHT", 0, 1000000, "a count of sends (0 = to the step's end)"))
      I.sends_in_flight = *v == 0 ? std::numeric_limits<size_t>::max() : size_t(*v);
    // PLANNER_PP_GRAD_BUFFERS=0 sends autograd's input gradient itself, not a
    // copy in the kept buffers (Engine::send_b).
    if (auto v = env_integer("PLANNER_PP_GRAD_BUFFERS", 0, 1, "0 or 1")) I.grad_buffers = *v == 1;
  }
  model_ = std::make_unique<TransformerModel>(spec_, cfg_.seq(), tp_, s.sp, ep_);
  if (MoeBlock* moe = model_->moe()) moe->set_routing(cfg_.options.moe_routing);
  ParamStore& store = model_->store();
  store.make_leaves(device_, I.dt);
  if (s.finetune.frozen_base()) {  // the adapters are what the units hold
    lora_ = std::make_unique<LoraAdapters>(*model_, s.finetune, tp_);
    lora_->store().make_leaves(device_, I.dt);
  }
  model_->prepare(device_, I.dt);
  if (s.cp > 1) {
    cp_ = std::make_unique<ContextParallel>(cp, cfg_.seq());
    model_->set_context_parallel(cp_.get());
  }
  if (s.precision == Precision::FP8) fp8_ = std::make_unique<Fp8Linears>(*model_, tp_);

  I.head_reserve_bytes =
      head_reserve_block_bytes(spec_, s, cfg_.seq(), model_->padded_vocab(), model_->vocab_rows(), cuda_);
  model_->keep_head_logits = keeps_head_logits(spec_, s, cfg_.seq(), model_->padded_vocab(), cuda_);
  const int64_t full = lay_out_units();
  if (tp_) replicated_ranges();
  allocate_buffers(full);
  initial_values();
  const int U = program_.partition.units();
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
  lora_.reset();  // unhooks the model's linears before the model goes
}

ParamStore& Engine::tstore() { return lora_ ? lora_->store() : model_->store(); }

void Engine::bind_unit(int u, const at::Tensor& data) {
  const Unit& un = impl_->units[size_t(u)];
  ParamStore& store = tstore();
  for (size_t k = 0; k < un.ids.size(); ++k) {
    const ParamInfo& info = store.infos()[size_t(un.ids[k])];
    store.bind(un.ids[k], data.defined() ? data.narrow(0, un.offs[k], info.numel).view(info.shape) : impl_->empty);
  }
}

void Engine::bind_unit_grad(int u, const at::Tensor& grad) {
  const Unit& un = impl_->units[size_t(u)];
  ParamStore& store = tstore();
  for (size_t k = 0; k < un.ids.size(); ++k) {
    const ParamInfo& info = store.infos()[size_t(un.ids[k])];
    store.bind_grad(un.ids[k], grad.defined() ? grad.narrow(0, un.offs[k], info.numel).view(info.shape) : at::Tensor());
  }
}

int64_t Engine::param_bytes() const {
  const Impl& I = *impl_;
  if (I.params.defined()) return base_bytes_ + I.params.numel() * I.params.element_size();
  return base_bytes_ + (I.pshard.is_cuda() || !cuda_ ? I.pshard.numel() * I.pshard.element_size() : 0);
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

void Engine::zero_grad() {
  Impl& I = *impl_;
  if (!I.grads.defined()) return;
  at::NoGradGuard ng;
  I.grads.zero_();
}

void Engine::compute_pass(int64_t step, int mb) {
  if (st_.world() > 1 || st_.zero >= 2)
    throw std::logic_error("Engine::compute_pass: one process with ZeRO-0/1 only, got " + st_.to_string());
  Impl& I = *impl_;
  if (!I.loss_sum.defined()) I.loss_sum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  for (const StepAction& a : program_.stages[size_t(stage_)])
    if (is_compute(a.op) && a.microbatch == mb) run_action(a, step);
}

at::Tensor Engine::step(int64_t step) {
  Impl& I = *impl_;
  zero_grad();
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
  I.wait_all();
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
    case StepOp::Reduce:
      if (!program_.options.overlap_grad_reduce) return impl_->deferred.push_back(a);
      return reduce(a.unit, a.scatter);
    case StepOp::ToHost:
      if (!program_.options.overlap_grad_reduce) return impl_->deferred.push_back(a);
      return to_host(a.unit);
    case StepOp::Sync: return sync();
    case StepOp::TiedReduce: return tied_reduce();
    case StepOp::ReplicaReduce: return reduce_replicated();
    case StepOp::LossReduce: return loss_reduce(a.group);
    case StepOp::Norm: return norm();
    case StepOp::NormReduce: return norm_reduce(a.group);
    case StepOp::Clip: return clip();
    case StepOp::CpRingF:
    case StepOp::CpRingB: return;  // cp: the ring runs inside the attention of the F/B that follows
    case StepOp::MoeATAF:
    case StepOp::MoeATAB: return;  // ep: the all-to-alls run inside the MoE layer of the F/B that follows
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

}  // namespace planner::rt

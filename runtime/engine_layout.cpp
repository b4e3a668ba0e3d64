// The Engine's layout (runtime/engine_detail.hpp): units, the last stage's
// copy of a tied word matrix, tp's replicated ranges, the flat buffers of the
// ZeRO stage and offload, and their initial values.
#include "runtime/engine_detail.hpp"
#include "runtime/model/lora.hpp"

namespace planner::rt {

namespace {

// Rounds n up to a multiple of w.
int64_t round_up(int64_t n, int w) { return (n + w - 1) / w * w; }

// A unit's pieces (engine_detail.hpp) for its numel elements, the first
// `decay` decayed and the first `local` its local experts: `dense` (its group
// filled in) over all but the experts, which `experts` covers when there are
// any; the offsets `offs` after the experts move by the experts' padding.
std::vector<Piece> lay_out_pieces(int64_t numel, int64_t decay, int64_t local, std::vector<int64_t>& offs, Piece dense,
                                  Piece experts) {
  std::vector<Piece> out;
  if (local > 0) {
    experts.experts = true;
    experts.padded = round_up(local, experts.world);
    experts.chunk = experts.padded / experts.world;
    experts.decay = local;  // stacked matrices: all decayed
    for (int64_t& o : offs)
      if (o >= local) o += experts.padded - local;
    dense.off = experts.padded, dense.soff = experts.chunk;
    out.push_back(experts);
  }
  dense.padded = round_up(numel - local, dense.world);
  dense.chunk = dense.padded / dense.world;
  dense.decay = decay - local;
  out.push_back(dense);
  return out;
}

}  // namespace

// Units and their layout: decayed tensors first, declaration order within
// each class; with ep > 1 a MoE layer's local experts before them all (one
// range for the expert-data-parallel group, engine_detail.hpp's Piece); the
// last stage's copy of a tied word matrix; each unit's pieces padded to a
// multiple of their optimizer world, this stage's units laid out one after
// another. Returns the full buffers' length.
int64_t Engine::lay_out_units() {
  const Strategy& s = st_;
  const ModelSpec& spec = spec_;
  Impl& I = *impl_;
  const ParamStore& store = tstore();
  const int U = program_.partition.units();
  I.units.assign(size_t(U), Unit{});
  const auto& infos = store.infos();
  // Classes in layout order: 0 the local experts (ep > 1 only), 1 the other
  // decayed tensors, 2 the rest.
  auto cls = [&](const ParamInfo& info) { return ep_ && info.expert ? 0 : info.decay ? 1 : 2; };
  for (int pass = 0; pass < 3; ++pass)
    for (size_t k = 0; k < infos.size(); ++k) {
      if (cls(infos[k]) != pass) continue;
      if (pass == 0 && !infos[k].decay) throw std::logic_error("Engine: an expert tensor without weight decay");
      Unit& un = I.units.at(size_t(infos[k].group));
      un.ids.push_back(int(k));
      un.offs.push_back(un.numel);
      un.numel += infos[k].numel;
      if (pass == 0) un.experts = un.numel;
      if (pass <= 1) un.decay = un.numel;
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
  // Fine-tuning: the word matrix is frozen base, no unit's (init_base keeps
  // it on the last stage too; there is no gradient to sum).
  if (spec.tied_embeddings && s.pp > 1 && !lora_) {
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
    const std::vector<int>& m = pp_->members();
    const bool ends = stage_ == 0 || stage_ == s.pp - 1;
    if (s.pp == 2) I.emb_comm = pp_;
    else {
      I.emb = make_group_communicator(ends ? std::vector<int>{m.front(), m.back()} : std::vector<int>{m[size_t(stage_)]},
                                      "embedding", device_, pp_->timeout());
      I.emb_comm = I.emb.get();
    }
  }
  // The dense piece over dp-cp (ZeRO's shards at ZeRO >= 1); the local
  // experts' over the expert-data-parallel group (null when dp == ep: each
  // rank alone holds its experts).
  Piece dense, experts;
  dense.world = I.ow, dense.rank = I.orank, dense.comm = dp_ && s.dp_cp() > 1 ? dp_ : nullptr;
  experts.comm = edp_;
  if (edp_ && s.zero >= 1) experts.world = edp_->size(), experts.rank = edp_->rank();
  int64_t base = 0, sbase = 0;
  for (Unit& un : I.units) {
    un.pieces = lay_out_pieces(un.numel, un.decay, un.experts, un.offs, dense, experts);
    un.padded = un.chunk = 0;
    for (const Piece& p : un.pieces) un.padded += p.padded, un.chunk += p.chunk;
    if (!un.owned) continue;  // another stage's
    un.base = base, un.sbase = sbase;
    base += un.padded, sbase += un.chunk;
  }
  shard_numel_ = sbase;
  // The largest layer (dense first layers and MoE layers differ in size).
  for (int u = 1; u + 1 < U; ++u) I.layer_padded = std::max(I.layer_padded, I.units[size_t(u)].padded);
  return base;  // the full buffers' length (this stage's units)
}

// tp > 1: the replicated parameters' ranges in the gradient buffer that Norm
// measures and ReplicaReduce sums (Impl::repl, repl_host).
void Engine::replicated_ranges() {
  const Strategy& s = st_;
  Impl& I = *impl_;
  const auto& infos = tstore().infos();
  auto add = [](std::vector<Impl::Range>& v, Impl::Range r) {
    if (!v.empty() && v.back().dev + v.back().len == r.dev && v.back().host + v.back().len == r.host)
      v.back().len += r.len;
    else
      v.push_back(r);
  };
  for (const Unit& un : I.units) {
    if (!un.owned) continue;
    for (size_t k = 0; k < un.ids.size(); ++k) {
      const ParamInfo& info = infos[size_t(un.ids[k])];
      if (info.split.split()) continue;
      const int64_t a = un.offs[k], e = a + info.numel;
      if (s.zero < 2) add(I.repl, {un.base + a, info.numel, un.base + a});
      for (const Piece& p : un.pieces) {
        const int64_t c0 = p.mine(), c1 = c0 + p.chunk;  // the rank's chunk of the piece
        const int64_t lo = std::max(a, c0), hi = std::min(e, c1);
        if (lo >= hi) continue;
        const int64_t in_shard = un.sbase + p.soff + lo - c0;
        if (s.zero >= 2) add(I.repl, {in_shard, hi - lo, in_shard});
        add(I.repl_host, {s.zero >= 2 ? in_shard : un.base + lo, hi - lo, in_shard});
      }
    }
  }
}

// The flat buffers of the strategy's ZeRO stage and offload (engine.hpp's
// comment lists them).
void Engine::allocate_buffers(int64_t full) {
  const Strategy& s = st_;
  Impl& I = *impl_;
  const int64_t sbase = shard_numel_;
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
}

// Initial values, unit by unit in declaration order (the order of
// TransformerModel::materialize, so the values are the same as one process's).
void Engine::initial_values() {
  const Strategy& s = st_;
  Impl& I = *impl_;
  const auto& infos = tstore().infos();
  const int U = program_.partition.units();
  auto dev = [&](at::ScalarType t) { return at::TensorOptions().device(device_).dtype(t); };
  at::manual_seed(cfg_.options.seed);
  if (lora_) init_base();  // then the adapters, from the same generator
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
        init_trained(info, tmp.narrow(0, un.offs[k], info.numel));
        if (un.ids[k] == I.tied_id) tied_init = tmp.narrow(0, un.offs[k], info.numel).clone();
      }
      if (!un.owned) continue;  // drawn all the same: the generator's sequence is the model's
      if (s.zero < 3) I.params.narrow(0, un.base, un.padded).copy_(tmp);
      for (const Piece& p : un.pieces) {  // the rank's chunks
        at::Tensor mine = tmp.narrow(0, p.mine(), p.chunk);
        if (s.zero == 3) I.pshard.narrow(0, un.sbase + p.soff, p.chunk).copy_(mine);
        if (!I.master_is_param) I.master.narrow(0, un.sbase + p.soff, p.chunk).copy_(mine);
      }
    }
  }
}

void Engine::init_trained(const ParamInfo& info, at::Tensor t) const {
  if (lora_) lora_->init_tensor(info, t);
  else model_->init_tensor(info, t);
}

// Fine-tuning: the frozen base, drawn tensor by tensor in declaration order
// (the generator's sequence of TransformerModel::materialize, on every rank),
// kept in the working precision for the tensors of this stage's units (and the
// word matrix on the last stage when the head is tied to it); QLoRA keeps its
// layer matrices in NF4 only, quantised from the drawn fp32 values, the
// model's tensor left unbound (the adapters' hook computes those layers).
void Engine::init_base() {
  at::NoGradGuard ng;
  ParamStore& store = model_->store();
  const auto& infos = store.infos();
  const int head = program_.partition.head_unit();
  const bool last = program_.partition.owner(head).first == stage_;
  std::vector<bool> owned(size_t(program_.partition.units()), false);
  for (int u : program_.partition.stage_units(stage_)) owned[size_t(u)] = true;
  const auto f32 = at::TensorOptions().device(device_).dtype(at::kFloat);
  base_.assign(infos.size(), at::Tensor());
  for (size_t k = 0; k < infos.size(); ++k) {
    const ParamInfo& info = infos[k];
    at::Tensor v = at::empty(info.shape, f32);
    model_->init_tensor(info, v);
    const bool tied_head = spec_.tied_embeddings && last && info.name == "wte";
    if (!owned[size_t(info.group)] && !tied_head) continue;  // another stage's: drawn, not kept
    if (st_.finetune.quantized_base() && lora_->is_matrix(int(k))) {
      lora_->quantize(int(k), v);
      continue;
    }
    base_[k] = v.to(impl_->dt);
    store.bind(int(k), base_[k]);
    base_bytes_ += base_[k].numel() * base_[k].element_size();
  }
  base_bytes_ += lora_->nf4_bytes();
}

}  // namespace planner::rt

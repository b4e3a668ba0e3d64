#include "runtime/model/moe.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <numeric>
#include <string>

#include "runtime/model/tensor_parallel.hpp"
#include "runtime/model/transformer.hpp"
#include "strategies/errors.hpp"

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

std::vector<int64_t> scaled(const std::vector<int64_t>& v, int64_t by) {
  std::vector<int64_t> out(v);
  for (auto& x : out) x *= by;
  return out;
}

// Rows exchanged over the ep group; a collective every member calls in the same order.
at::Tensor exchange(const at::Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                    Communicator& c) {
  const at::Tensor in = x.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = sum(recv_rows);
  int64_t w = 1;  // elements per row
  for (size_t d = 1; d < shape.size(); ++d) w *= shape[d];
  at::Tensor out = at::empty(shape, in.options());
  c.all_to_all_v(in, scaled(send_rows, w), out, scaled(recv_rows, w))->wait();
  return out;
}

struct AllToAllRows : public torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> send_rows,
                            std::vector<int64_t> recv_rows, int64_t comm) {
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    ctx->saved_data["comm"] = comm;
    return exchange(x, send_rows, recv_rows, *reinterpret_cast<Communicator*>(comm));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    auto* c = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    return {exchange(g[0], recv, send, *c), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct AuxLossGrad : public torch::autograd::Function<AuxLossGrad> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& aux, double scale) {
    ctx->saved_data["scale"] = scale;
    return y.clone();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const double scale = ctx->saved_data["scale"].toDouble();
    return {g[0], at::full({}, scale, g[0].options().dtype(at::kFloat)), at::Tensor()};
  }
};

}  // namespace

at::Tensor route_topk(const at::Tensor& probs, int64_t k) {
  // A stable descending sort keeps equal probabilities in index order: ties go to the lower index.
  return std::get<1>(at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true)).narrow(-1, 0, k).contiguous();
}

at::Tensor load_balancing_loss(const at::Tensor& probs, const at::Tensor& idx) {
  const int64_t T = probs.size(0), E = probs.size(1), k = idx.size(1);
  at::Tensor counts = at::bincount(idx.reshape({-1}), {}, E).to(at::kFloat);  // assignments per expert
  at::Tensor f = counts / double(T * k);
  at::Tensor P = probs.to(at::kFloat).mean(0);
  return (f * P).sum() * double(E);
}

at::Tensor all_to_all_rows(const at::Tensor& x, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, Communicator* ep) {
  if (!ep || ep->size() == 1) return x;
  return AllToAllRows::apply(x, send_rows, recv_rows, reinterpret_cast<int64_t>(ep));
}

at::Tensor attach_aux_loss(const at::Tensor& y, const at::Tensor& aux, double scale) {
  return AuxLossGrad::apply(y, aux, scale);
}

MoeBlock::MoeBlock(const ModelSpec& spec, Communicator* tp, Communicator* ep, bool sp)
    : spec_(spec), tp_(tp && tp->size() > 1 ? tp : nullptr), ep_(ep && ep->size() > 1 ? ep : nullptr),
      tp_size_(tp_ ? tp_->size() : 1), ep_size_(ep_ ? ep_->size() : 1), ep_rank_(ep_ ? ep_->rank() : 0) {
  const MoeSpec& m = spec_.moe;
  auto refuse = [&](const std::string& what) {
    throw InputError("the runtime does not execute mixture of experts with " + what + " (" + spec_.name + ")");
  };
  if (spec_.arch != Arch::Decoder) refuse("an encoder");
  if (spec_.parallel_block) refuse("the parallel attention/MLP block");
  if (spec_.mlp_bias) refuse("MLP biases");
  if (m.capacity_factor > 0) refuse("a capacity factor (token dropping); dropless routing (capacity_factor 0) runs");
  if (sp && tp_) refuse("sequence parallelism (sp=1)");
  if (m.experts % ep_size_ != 0)
    refuse(std::to_string(m.experts) + " experts over ep=" + std::to_string(ep_size_) + " (not a multiple)");
  if (m.expert_ffn % tp_size_ != 0 || m.shared_ffn % tp_size_ != 0)
    refuse("expert widths not divisible by tp=" + std::to_string(tp_size_));
  if (m.top_k < 1 || m.top_k > m.experts) refuse("top_k outside [1, experts]");
  local_experts_ = m.experts / ep_size_;
  ids_.resize(size_t(spec_.layers));
  last_aux.resize(size_t(spec_.layers));
}

void MoeBlock::declare(ParamStore& S, int64_t layer, const std::string& pre, int g) {
  const MoeSpec& m = spec_.moe;
  const int64_t h = spec_.hidden, E = m.experts, f = m.expert_ffn, fs = m.shared_ffn;
  const bool glu = spec_.mlp == MlpKind::SwiGlu;
  auto pieces = [&](int64_t w) { return glu ? std::vector<int64_t>{w, w} : std::vector<int64_t>{w}; };
  MoeLayerIds& l = ids_[size_t(layer)];
  // Declared consecutively, the stacked experts are one contiguous range of
  // the layer's unit (the Engine reduces it over the expert-data-parallel group).
  l.fc1 = S.add(pre + "moe.experts.fc1.w", {E, glu ? 2 * f : f, h}, Init::Normal, g, TpSplit{1, pieces(f)}, tp_size_,
                ep_size_, ep_rank_);
  l.fc2 = S.add(pre + "moe.experts.fc2.w", {E, h, f}, Init::OutputNormal, g, TpSplit{2, {f}}, tp_size_, ep_size_,
                ep_rank_);
  l.router = S.add(pre + "moe.router.w", {E, h}, Init::Normal, g);
  if (fs > 0) {
    l.sh_fc1 = S.add(pre + "moe.shared.fc1.w", {glu ? 2 * fs : fs, h}, Init::Normal, g, TpSplit{0, pieces(fs)}, tp_size_);
    l.sh_fc2 = S.add(pre + "moe.shared.fc2.w", {h, fs}, Init::OutputNormal, g, TpSplit{1, {fs}}, tp_size_);
    if (m.shared_gate) l.sh_gate = S.add(pre + "moe.shared.gate.w", {1, h}, Init::Normal, g);
  }
}

at::Tensor MoeBlock::activation(const at::Tensor& u, int64_t f) const {
  switch (spec_.mlp) {
    case MlpKind::Gelu: return at::gelu(u, "tanh");
    case MlpKind::Relu: return at::relu(u);
    case MlpKind::SwiGlu: break;
  }
  return at::silu(u.narrow(-1, 0, f)) * u.narrow(-1, f, f);
}

// Rows grouped by local expert (rows[j] of expert j, in order): each expert's
// MLP on its own rows; the result is partial over tp (the inner width is split).
at::Tensor MoeBlock::experts(const ParamStore& S, const MoeLayerIds& l, const at::Tensor& x,
                             const std::vector<int64_t>& rows) const {
  const int64_t f = spec_.moe.expert_ffn / tp_size_;
  std::vector<at::Tensor> parts;
  int64_t at_row = 0;
  for (int64_t j = 0; j < local_experts_; ++j) {
    const int64_t n = rows[size_t(j)];
    if (n == 0) continue;
    at::Tensor xj = x.narrow(0, at_row, n);
    at::Tensor u = at::matmul(xj, S.get(l.fc1).select(0, j).t());
    parts.push_back(at::matmul(activation(u, f), S.get(l.fc2).select(0, j).t()));
    at_row += n;
  }
  // No rows at all: an empty result that still depends on x, so that the
  // backward reaches the dispatch exchange as on every other ep rank.
  if (parts.empty()) return x * 0;
  return parts.size() == 1 ? parts[0] : at::cat(parts, 0);
}

// The routed experts' outputs, one row per assignment in `order` (the
// assignments sorted by expert, stably), partial over tp.
at::Tensor MoeBlock::routed(const ParamStore& S, const MoeLayerIds& l, const at::Tensor& xt, const at::Tensor& idx,
                            at::Tensor& order) const {
  const int64_t k = idx.size(1), E = spec_.moe.experts, El = local_experts_;
  const at::Tensor flat = idx.reshape({-1});
  order = std::get<1>(at::sort(flat, std::optional<bool>(true), 0, false));
  at::Tensor xs = xt.index_select(0, order.div(k, "floor"));  // (T k, h), grouped by expert
  const at::Tensor counts = at::bincount(flat, {}, E);           // int64 (E)
  if (!ep_) {
    const at::Tensor c = counts.cpu();
    return experts(S, l, xs, std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + E));
  }
  // Every rank learns how many rows each peer sends to each of its local experts.
  at::Tensor peer_counts = at::empty({E}, counts.options());
  ep_->all_to_all_v(counts, std::vector<int64_t>(size_t(ep_size_), El), peer_counts,
                    std::vector<int64_t>(size_t(ep_size_), El))
      ->wait();
  const at::Tensor sc = counts.view({ep_size_, El}).sum(1).cpu(), rc = peer_counts.view({ep_size_, El}).cpu();
  std::vector<int64_t> send(static_cast<size_t>(ep_size_), 0), recv(static_cast<size_t>(ep_size_), 0),
      per_expert(static_cast<size_t>(El), 0);
  for (int p = 0; p < ep_size_; ++p) {
    send[size_t(p)] = sc[p].item<int64_t>();
    for (int64_t j = 0; j < El; ++j) {
      const int64_t n = rc[p][j].item<int64_t>();
      recv[size_t(p)] += n, per_expert[size_t(j)] += n;
    }
  }
  at::Tensor xr = all_to_all_rows(xs, send, recv, ep_);  // peer-major, expert-minor
  // Group the received rows by local expert (stably: peer order within an expert).
  const at::Tensor expert_of_row =
      at::repeat_interleave(at::arange(El, counts.options()).repeat({ep_size_}), rc.reshape({-1}).to(counts.device()));
  const at::Tensor perm = std::get<1>(at::sort(expert_of_row, std::optional<bool>(true), 0, false));
  at::Tensor yg = experts(S, l, xr.index_select(0, perm), per_expert);
  at::Tensor yr = yg.index_select(0, at::argsort(perm));  // back to peer-major
  return all_to_all_rows(yr, recv, send, ep_);
}

at::Tensor MoeBlock::forward(const ParamStore& S, int64_t layer, const at::Tensor& xn_in, double grad_scale) const {
  const MoeLayerIds& l = ids_[size_t(layer)];
  const int64_t h = spec_.hidden, k = spec_.moe.top_k;
  const auto shape = xn_in.sizes().vec();
  const at::Tensor xn = xn_in.reshape({-1, h});  // (T, h), whole on every tp rank
  const int64_t T = xn.size(0);
  // Router on the replicated input (its gradient is whole on every tp rank).
  const at::Tensor probs = at::softmax(at::matmul(xn, S.get(l.router).t()).to(at::kFloat), -1);  // (T, E)
  const at::Tensor idx = route_topk(probs.detach(), k);                                            // (T, k)
  at::Tensor w = probs.gather(1, idx);
  w = w / w.sum(-1, true);
  const at::Tensor aux = load_balancing_loss(probs, idx);
  last_aux[size_t(layer)] = aux.detach();
  w = attach_aux_loss(w, aux, kAuxLossCoeff * grad_scale);
  // Experts and shared MLP on tp-partial outputs: the input's gradient summed over tp.
  const at::Tensor xt = copy_to_tp(xn, tp_);
  at::Tensor order;
  at::Tensor y = routed(S, l, xt, idx, order);  // (T k, h), sorted by expert
  const at::Tensor ws = copy_to_tp(w.reshape({-1}).index_select(0, order).to(y.scalar_type()), tp_);
  at::Tensor out = at::zeros({T, h}, y.options()).index_add(0, order.div(k, "floor"), y * ws.unsqueeze(1));
  if (l.sh_fc1 >= 0) {
    const int64_t fs = spec_.moe.shared_ffn / tp_size_;
    at::Tensor sh = at::matmul(activation(at::matmul(xt, S.get(l.sh_fc1).t()), fs), S.get(l.sh_fc2).t());
    if (l.sh_gate >= 0) sh = sh * copy_to_tp(at::sigmoid(at::matmul(xn, S.get(l.sh_gate).t())), tp_);
    out = out + sh;
  }
  return reduce_from_tp(out, tp_).view(shape);
}

}  // namespace planner::rt

#include "runtime/model/moe.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/model/fused_ops.hpp"
#include "runtime/model/moe_gemm.hpp"
#include "runtime/model/tensor_parallel.hpp"
#include "runtime/model/transformer.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

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

// x's rows in the order `perm` (a permutation of them); the backward puts the
// gradient back with the inverse permutation `inv`: a gather both ways, where
// index_select's own backward would scatter-add (atomics) into zeros.
struct PermuteRows : public torch::autograd::Function<PermuteRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& perm, const at::Tensor& inv) {
    ctx->save_for_backward({inv});
    return x.index_select(0, perm);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const at::Tensor inv = ctx->get_saved_variables()[0];
    return {g[0].index_select(0, inv), at::Tensor(), at::Tensor()};
  }
};

at::Tensor permute_rows(const at::Tensor& x, const at::Tensor& perm, const at::Tensor& inv) {
  return PermuteRows::apply(x, perm, inv);
}

// The inverse of the permutation p (int64, on its device, no host sync).
at::Tensor inverse_permutation(const at::Tensor& p) {
  return at::empty_like(p).scatter_(0, p, at::arange(p.size(0), p.options()));
}

// Assignments per expert (int64 (E)), counted on the device: bincount would
// sync the host to size its output.
at::Tensor expert_counts(const at::Tensor& flat_idx, int64_t experts) {
  return at::zeros({experts}, flat_idx.options()).scatter_add_(0, flat_idx, at::ones_like(flat_idx));
}

// A host vector on `device`: through pinned memory and a non-blocking copy on
// CUDA, so that the host does not wait for the queued kernels.
// PLANNER_MOE_HOST_TIMING=1: the host's seconds in the MoE layers' forward,
// by phase, printed on stderr by each rank at exit (a diagnosis of the MoE
// steps' idle GPU time, validation/x2/moe_trace; off by default, no cost).
struct MoeHostTiming {
  bool on = std::getenv("PLANNER_MOE_HOST_TIMING") != nullptr;
  double forward = 0, sync_wait = 0, host_index = 0, experts = 0;
  int64_t calls = 0;
  // With ep > 1: the rows this rank's experts received and the rows it sent,
  // over all layer forwards, and the largest per-layer ratio (the routing's
  // imbalance on this rank; the cost model's --moe-imbalance assumes 1).
  double rows_received = 0, rows_sent = 0, max_ratio = 0;
  ~MoeHostTiming() {
    if (on && calls > 0)
      std::fprintf(stderr,
                   "moe host timing: %lld layer forwards, host seconds: forward %.4f (sync wait %.4f, host "
                   "index build %.4f, experts' launches %.4f)\n",
                   static_cast<long long>(calls), forward, sync_wait, host_index, experts);
    if (on && rows_sent > 0)
      std::fprintf(stderr, "moe routing: rows received / sent %.3f over all layer forwards, largest in one %.3f\n",
                   rows_received / rows_sent, max_ratio);
  }
};
MoeHostTiming g_moe_timing;
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

at::Tensor to_device(const std::vector<int64_t>& v, const at::Device& device) {
  const auto n = static_cast<int64_t>(v.size());
  at::Tensor h = at::empty({n}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  std::copy(v.begin(), v.end(), h.data_ptr<int64_t>());
  return device.is_cuda() ? h.to(device, /*non_blocking=*/true) : h;
}

// A 0/1 switch from the environment (unset or empty: `unset`); any other value
// is refused, naming what each one means.
bool env_switch(const char* name, bool unset, const std::string& meanings) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  const std::string s(v);
  if (s != "0" && s != "1")
    throw InputError(std::string(name) + "='" + s.substr(0, 40) + "' is not an accepted value: " + meanings);
  return s == "1";
}

}  // namespace

MoeGemm moe_gemm_from_env() {
  MoeGemm g;
  if (const char* v = std::getenv("PLANNER_MOE_PAD_ROWS"); v && *v)
    g.pad_rows = parse_capped(v, "PLANNER_MOE_PAD_ROWS (rows)", 65536);  // a whole number from 1
  g.host_counts = env_switch("PLANNER_MOE_HOST_COUNTS", false,
                             "1 (ep = 1 brings the routed counts to the host each layer, a diagnosis), or 0 or unset "
                             "(the grouped GEMM takes them on the device)");
  g.grouped = env_switch("PLANNER_MOE_GROUPED_MM", true,
                         "1 or unset (one grouped GEMM for all local experts in bf16), or 0 (one GEMM per expert)");
  return g;
}

at::Tensor route_topk(const at::Tensor& probs, int64_t k) {
  // A stable descending sort keeps equal probabilities in index order: ties go to the lower index.
  return std::get<1>(at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true)).narrow(-1, 0, k).contiguous();
}

at::Tensor route_balanced(int64_t T, int64_t k, int64_t E, const at::TensorOptions& options) {
  return at::arange(T * k, options.dtype(at::kLong)).remainder(E).view({T, k});
}

at::Tensor load_balancing_loss(const at::Tensor& probs, const at::Tensor& counts, int64_t k) {
  const int64_t T = probs.size(0), E = probs.size(1);
  at::Tensor f = counts.to(at::kFloat) / double(T * k);  // the share of assignments per expert
  at::Tensor P = probs.to(at::kFloat).mean(0);
  return (f * P).sum() * double(E);
}

at::Tensor load_balancing_loss(const at::Tensor& probs, const at::Tensor& idx) {
  return load_balancing_loss(probs, expert_counts(idx.reshape({-1}), probs.size(1)), idx.size(1));
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
      tp_size_(tp_ ? tp_->size() : 1), ep_size_(ep_ ? ep_->size() : 1), ep_rank_(ep_ ? ep_->rank() : 0),
      sp_(sp && tp_ != nullptr),
      gemm_(moe_gemm_from_env()) {
  const MoeSpec& m = spec_.moe;
  // What the layer does not execute (specs/runtime_gap.hpp, which plan and predict also say).
  if (const std::string gap = moe_runtime_gap(spec_, tp_size_, ep_size_); !gap.empty()) throw InputError(gap);
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
  // The stacked experts: with ep > 1 the Engine lays them out first in the
  // layer's unit, one piece reduced and sharded over the expert-data-parallel
  // group (runtime/engine_detail.hpp).
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

at::Tensor MoeBlock::activation(const at::Tensor& u) const {
  switch (spec_.mlp) {
    case MlpKind::Gelu: return at::gelu(u, "tanh");
    case MlpKind::Relu: return at::relu(u);
    case MlpKind::SwiGlu: break;
  }
  // [gate | up] of this rank's width: the dense MLP's gated unit, one
  // autograd node that saves u only (runtime/model/fused_ops.hpp).
  return glu(u, spec_.gelu_gate);
}

namespace {

// at::_grouped_mm refused this device once (said on stderr): one GEMM per
// expert from then on.
bool g_grouped_refused = false;

void note_grouped_refused(const c10::Error& e) {
  g_grouped_refused = true;
  std::fprintf(stderr, "moe: at::_grouped_mm refused this device (%s); one GEMM per expert from here on\n",
               e.what_without_backtrace());
}

}  // namespace

bool MoeBlock::grouped_on(const at::Tensor& x) const {
  return gemm_.grouped && x.scalar_type() == at::kBFloat16 && !g_grouped_refused;
}

// Rows grouped by local expert (rows[j] of expert j, in order): each expert's
// MLP on its own rows; the result is partial over tp (the inner width is split).
at::Tensor MoeBlock::experts(const ParamStore& S, const MoeLayerIds& l, const at::Tensor& x,
                             const std::vector<int64_t>& rows) const {
  // No rows at all: an empty result that still depends on x, so that the
  // backward reaches the dispatch exchange as on every other ep rank.
  if (sum(rows) == 0) return x * 0;
  if (grouped_on(x)) {
    try {
      return grouped_experts(S, l, x, rows);
    } catch (const c10::Error& e) {
      note_grouped_refused(e);
    }
  }
  // One GEMM per expert both ways, each expert's rows optionally padded
  // (PLANNER_MOE_PAD_ROWS: the GEMMs then see a few shapes instead of a new
  // one per expert and layer); the weights are read through their leaves in
  // the backward too (runtime/model/moe_gemm.hpp: ZeRO-3).
  const at::Tensor u = expert_gemm(x, S.get(l.fc1), rows, gemm_.pad_rows);
  return expert_gemm(activation(u), S.get(l.fc2), rows, gemm_.pad_rows);
}

// The same with one grouped GEMM per stack (PLANNER_MOE_GROUPED_MM=1): rows
// [ends[j-1], ends[j]) of x times expert j's matrix, for all local experts in
// one launch (at::_grouped_mm, int32 group ends on x's device; its backward
// the same grouped GEMMs as LibTorch's, on the weights bound then:
// runtime/model/moe_gemm.hpp).
at::Tensor MoeBlock::grouped_mlp(const ParamStore& S, const MoeLayerIds& l, const at::Tensor& x,
                                 const at::Tensor& ends) const {
  const at::Tensor u = grouped_expert_gemm(x, S.get(l.fc1), ends);
  return grouped_expert_gemm(activation(u), S.get(l.fc2), ends);
}

// grouped_mlp with the group ends from row counts the host has (ep > 1).
at::Tensor MoeBlock::grouped_experts(const ParamStore& S, const MoeLayerIds& l, const at::Tensor& x,
                                     const std::vector<int64_t>& rows) const {
  at::Tensor ends = at::empty({local_experts_}, at::TensorOptions().dtype(at::kInt).pinned_memory(x.is_cuda()));
  int32_t* e = ends.data_ptr<int32_t>();
  int64_t at_row = 0;
  for (int64_t j = 0; j < local_experts_; ++j) e[j] = int32_t(at_row += rows[size_t(j)]);
  if (x.is_cuda()) ends = ends.to(x.device(), /*non_blocking=*/true);
  return grouped_mlp(S, l, x, ends);
}

// The routed experts' outputs for xs, the assignments' rows grouped by
// expert (counts: int64 (E) on the device), in the same order, partial over
// tp. With ep > 1, one host sync: the row counts, which the all-to-all sizes
// need. With every expert here (ep = 1) and the grouped GEMM, none: its group
// ends are the counts' running sum on the device, so the host runs on into
// the next layer while the GPU routes (PLANNER_MOE_HOST_COUNTS=1 brings the
// counts to the host anyway, as before 2026-11-28: a diagnosis).
at::Tensor MoeBlock::routed(const ParamStore& S, const MoeLayerIds& l, const at::Tensor& xs,
                            const at::Tensor& counts) const {
  const int64_t E = spec_.moe.experts, El = local_experts_;
  if (!ep_) {
    if (!gemm_.host_counts && grouped_on(xs)) {
      try {
        return grouped_mlp(S, l, xs, counts.cumsum(0).to(at::kInt));
      } catch (const c10::Error& e) {
        note_grouped_refused(e);
      }
    }
    const at::Tensor c = counts.cpu();
    return experts(S, l, xs, std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + E));
  }
  // Every rank learns how many rows each peer sends to each of its local experts.
  at::Tensor peer_counts = at::empty({E}, counts.options());
  ep_->all_to_all_v(counts, std::vector<int64_t>(size_t(ep_size_), El), peer_counts,
                    std::vector<int64_t>(size_t(ep_size_), El))
      ->wait();
  const double t_sync = g_moe_timing.on ? now_s() : 0;
  const at::Tensor both = at::cat({counts, peer_counts}).cpu();
  const double t_index = g_moe_timing.on ? now_s() : 0;
  if (g_moe_timing.on) g_moe_timing.sync_wait += t_index - t_sync;
  const int64_t* sc = both.data_ptr<int64_t>();     // (ep, El): what this rank sends to each peer's experts
  const int64_t* rc = sc + E;                         // (ep, El): what each peer sends to this rank's experts
  std::vector<int64_t> send(size_t(ep_size_), 0), recv(size_t(ep_size_), 0), per_expert(size_t(El), 0);
  for (int p = 0; p < ep_size_; ++p)
    for (int64_t j = 0; j < El; ++j) {
      send[size_t(p)] += sc[p * El + j];
      recv[size_t(p)] += rc[p * El + j], per_expert[size_t(j)] += rc[p * El + j];
    }
  received_rows.push_back(double(sum(recv)));
  if (g_moe_timing.on && sum(send) > 0) {
    g_moe_timing.rows_received += double(sum(recv)), g_moe_timing.rows_sent += double(sum(send));
    g_moe_timing.max_ratio = std::max(g_moe_timing.max_ratio, double(sum(recv)) / double(sum(send)));
  }
  at::Tensor xr = all_to_all_rows(xs, send, recv, ep_);  // peer-major, expert-minor
  // Group the received rows by local expert (peer order within an expert),
  // computed on the host from the counts it already has.
  std::vector<int64_t> perm, start(size_t(ep_size_ * El), 0);
  perm.reserve(size_t(xr.size(0)));
  for (int64_t i = 0, at_row = 0; i < ep_size_ * El; ++i) start[size_t(i)] = at_row, at_row += rc[i];
  for (int64_t j = 0; j < El; ++j)
    for (int p = 0; p < ep_size_; ++p)
      for (int64_t r = 0; r < rc[p * El + j]; ++r) perm.push_back(start[size_t(p * El + j)] + r);
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  const at::Tensor perm_t = to_device(perm, xr.device()), inv_t = to_device(inv, xr.device());
  const double t_experts = g_moe_timing.on ? now_s() : 0;
  if (g_moe_timing.on) g_moe_timing.host_index += t_experts - t_index;
  at::Tensor yg = experts(S, l, permute_rows(xr, perm_t, inv_t), per_expert);
  if (g_moe_timing.on) g_moe_timing.experts += now_s() - t_experts;
  at::Tensor yr = permute_rows(yg, inv_t, perm_t);  // back to peer-major
  return all_to_all_rows(yr, recv, send, ep_);
}

// Under tp with sp, xn is this rank's sequence shard (b, s/tp, h) and so is the
// result. The router and the shared gate run on the shard and their outputs
// are all-gathered: every tp rank then routes the same full token set, the
// router's and the gate's weight gradients are this shard's part (summed over
// tp with the other replicated parameters, the Engine's ReplicaReduce), and
// the auxiliary loss, computed alike on every tp rank, reaches the router
// once through each rank's shard of the logits' gradient (gather_seq_whole).
// The experts' and the shared MLP's input is the gathered sequence, its
// tp-partial gradient reduce-scattered (gather_seq), and the tp-partial
// output is reduce-scattered instead of all-reduced.
at::Tensor MoeBlock::forward(const ParamStore& S, int64_t layer, const at::Tensor& xn_in, double grad_scale) const {
  const double t_forward = g_moe_timing.on ? now_s() : 0;
  const MoeLayerIds& l = ids_[size_t(layer)];
  const int64_t h = spec_.hidden, k = spec_.moe.top_k;
  // Router (and shared gate) on the replicated input (whole gradient on every tp rank), or sp's gathered shard.
  // Every GEMM against the layer's weights is a moe_gemm.hpp function (ZeRO-3's contract).
  const at::Tensor logits = weight_linear(xn_in, S.get(l.router));  // (b, s, E); sp: (b, s/tp, E)
  const at::Tensor probs =
      at::softmax((sp_ ? gather_seq_whole(logits, tp_) : logits).reshape({-1, logits.size(-1)}).to(at::kFloat), -1);
  const int64_t T = probs.size(0);
  const at::Tensor idx = routing_ == MoeRouting::Balanced
                             ? route_balanced(T, k, spec_.moe.experts, probs.options())
                             : route_topk(probs.detach(), k);  // (T, k)
  at::Tensor w = probs.gather(1, idx);
  w = w / w.sum(-1, true);
  // The T k assignments (token t's j-th at t k + j) and how many each expert got.
  const at::Tensor flat = idx.reshape({-1});
  const at::Tensor counts = expert_counts(flat, spec_.moe.experts);
  const at::Tensor aux = load_balancing_loss(probs, counts, k);
  last_aux[size_t(layer)] = aux.detach();
  w = attach_aux_loss(w, aux, kAuxLossCoeff * grad_scale);
  // Experts and shared MLP on tp-partial outputs: the input's gradient summed
  // over tp (copy_to_tp), or under sp reduce-scattered to the shards.
  const at::Tensor xt = sp_ ? gather_seq(xn_in, tp_).reshape({T, h}) : copy_to_tp(xn_in.reshape({T, h}), tp_);
  // The assignments sorted by expert, stably.
  const at::Tensor order = std::get<1>(at::sort(flat, std::optional<bool>(true), 0, false));
  const at::Tensor inv_order = inverse_permutation(order);
  // Each token's row k times (the backward sums them), then grouped by expert.
  const at::Tensor xk = xt.unsqueeze(1).expand({T, k, h}).reshape({T * k, h});
  at::Tensor y = routed(S, l, permute_rows(xk, order, inv_order), counts);
  const at::Tensor ws = copy_to_tp(w.reshape({-1, 1}).to(y.scalar_type()), tp_);
  // Back to assignment order, weighted, and each token's k outputs summed.
  at::Tensor out = (permute_rows(y, inv_order, order) * ws).view({T, k, h}).sum(1);
  if (l.sh_fc1 >= 0) {
    at::Tensor sh = weight_linear(activation(weight_linear(xt, S.get(l.sh_fc1))), S.get(l.sh_fc2));
    if (l.sh_gate >= 0) {
      // The gate's gradient is tp-partial (sh is): summed over tp, or under sp reduce-scattered.
      const at::Tensor g = at::sigmoid(weight_linear(xn_in, S.get(l.sh_gate)));
      sh = sh * (sp_ ? gather_seq(g, tp_).reshape({T, 1}) : copy_to_tp(g.reshape({T, 1}), tp_));
    }
    out = out + sh;
  }
  std::vector<int64_t> shape = xn_in.sizes().vec();
  if (sp_) shape[1] *= tp_size_;  // the gathered sequence
  at::Tensor result = sp_ ? scatter_seq(out.view(shape), tp_) : reduce_from_tp(out, tp_).view(shape);
  if (g_moe_timing.on) g_moe_timing.forward += now_s() - t_forward, ++g_moe_timing.calls;
  return result;
}

}  // namespace planner::rt

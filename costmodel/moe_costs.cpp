#include "costmodel/moe_costs.hpp"

#include <algorithm>
#include <cmath>

#include "costmodel/collectives.hpp"
#include "costmodel/mlp_ops.hpp"
#include "costmodel/op_costs.hpp"

namespace planner {

namespace {

// Capacity (GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021): an
// expert computes at most capacity_factor times its balanced load; dropless
// routing (0) computes every token, the busiest expert `imbalance` times it.
double load_factor(const ModelSpec& m) {
  const double imb = std::max(1.0, m.moe.imbalance);
  return m.moe.capacity_factor > 0 ? std::min(imb, m.moe.capacity_factor) : imb;
}

// One MLP's parameters on a rank of tp: the weights split, the row-parallel
// output bias replicated (as stage_params_per_rank splits the dense MLP).
int64_t mlp_per_rank(const ModelSpec& m, int64_t params, int tp) {
  const int64_t repl = m.mlp_bias ? m.hidden : 0;
  return params > 0 ? (params - repl) / tp + repl : 0;
}

}  // namespace

// The MoE block's memory-bound kernels around its GEMMs, as the runtime runs
// them (runtime/model/moe.cpp MoeBlock::forward, routed; R routed rows of
// width h from T tokens, e bytes per element). Forward: each token's row
// copied top_k times (an expand made contiguous: a non-vectorized copy), the
// rows gathered into expert order and back (plus, with ep > 1, into local
// expert order after the dispatch and back before the combine: gathers
// that read and write every row), the weighted combine (a broadcast multiply,
// non-vectorized) and the sum of each token's top_k outputs; with a shared
// MLP its output added (and its gate multiplied in). Backward: the gathers
// again, the combine multiply's two gradients (one reduced over h for the
// routing weights), the top_k copies summed back per token, and the input's
// gradients from the experts, the shared MLP and the router added up.
void add_moe_dispatch_ops(double e, double T, double R, double h, int ep, bool shared, bool gate, MemoryOps& fm,
                          MemoryOps& bm) {
  using MK = MemKernel;
  const int gathers = ep > 1 ? 4 : 2;
  fm.add(MK::Strided, e * (T + R) * h);                // the top_k copies
  fm.add(MK::Streaming, gathers * 2 * e * R * h, gathers);
  fm.add(MK::Strided, 2 * e * R * h);                  // rows times their routing weights
  fm.add(MK::Reduction, e * (R + T) * h);              // each token's top_k outputs summed
  bm.add(MK::Streaming, gathers * 2 * e * R * h, gathers);
  bm.add(MK::Strided, e * (T + R) * h + 3 * e * R * h, 2);  // the multiply's gradients: rows', weights'
  bm.add(MK::Reduction, e * R * h + e * (R + T) * h, 2);    // the weights' over h; the top_k copies'
  bm.add(MK::Streaming, 3 * e * T * h);                     // the input's gradient: router's + experts'
  if (shared) {
    fm.add(MK::Streaming, 3 * e * T * h);  // routed + shared
    bm.add(MK::Streaming, 3 * e * T * h);  // the input's gradient: + the shared MLP's
    if (gate) fm.add(MK::Strided, 3 * e * T * h), bm.add(MK::Strided, 2 * 3 * e * T * h, 2);
  }
}

double routed_tokens_per_rank(const ModelSpec& m, int64_t tokens) {
  return double(tokens) * double(m.moe.top_k) * load_factor(m);
}

int64_t tokens_per_local_expert(const ModelSpec& m, int64_t tokens, int ep) {
  if (!m.moe.enabled()) return 0;
  const double balanced = double(tokens) * ep * double(m.moe.top_k) / double(m.moe.experts);
  return int64_t(std::ceil(balanced * load_factor(m) - 1e-9));
}

MoeLayerParams moe_layer_params_per_rank(const ModelSpec& m, int tp, int ep) {
  MoeLayerParams out;
  if (!m.moe.enabled()) return out;
  const int64_t dense_layer = stage_params_per_rank(m, 1, false, false, 1, tp);
  // The router (experts x hidden) is replicated over tp (Megatron's TopKRouter
  // weight is not split); the shared MLP is split like the dense one, its
  // gate (hidden -> 1) replicated.
  const int64_t gate = m.moe.shared_gate ? m.hidden : 0;
  out.shared = dense_layer - mlp_per_rank(m, m.mlp_params(), tp) + m.router_params() +
               mlp_per_rank(m, m.shared_expert_params() - gate, tp) + gate;
  out.experts = (m.moe.experts / ep) * mlp_per_rank(m, m.expert_params(), tp);
  return out;
}

MoeStageParams moe_stage_params(const ModelSpec& m, const Strategy& s, int stage, const std::vector<int>& chunk_layers,
                                int64_t stage_params) {
  MoeStageParams out;
  out.dense = stage_params;
  if (!m.moe.enabled()) return out;
  // The stage's chunks are chunk_layers[v * pp + stage]; layer i is dense when
  // i < dense_layers (the first layers, DeepSeek's first_k_dense_replace).
  const int chunks = int(chunk_layers.size());
  int64_t first = 0;
  for (int c = 0; c < chunks; ++c) {
    const int64_t n = chunk_layers[size_t(c)];
    if (c % s.pp == stage) out.moe_layers += int(n - std::clamp<int64_t>(m.moe.dense_layers - first, 0, n));
    first += n;
  }
  const int64_t dense_layer = stage_params_per_rank(m, 1, false, false, s.pp, s.tp);
  const MoeLayerParams lp = moe_layer_params_per_rank(m, s.tp, s.ep);
  out.dense += int64_t(out.moe_layers) * (lp.shared - dense_layer);
  out.experts = int64_t(out.moe_layers) * lp.experts;
  return out;
}

int64_t moe_extra_layer_params_per_rank(const ModelSpec& m, const Strategy& s) {
  if (!m.moe.enabled()) return 0;
  const MoeLayerParams lp = moe_layer_params_per_rank(m, s.tp, s.ep);
  return std::max<int64_t>(0, lp.shared + lp.experts - stage_params_per_rank(m, 1, false, false, s.pp, s.tp));
}

Strategy expert_data_parallel(const Strategy& s) {
  Strategy x = s;
  x.dp = std::max(1, s.dp / std::max(1, s.ep));
  x.ep = 1;
  return x;
}

void add_model_states(ModelStateBytes& into, const ModelStateBytes& more) {
  into.gpu_params += more.gpu_params;
  into.gpu_grads += more.gpu_grads;
  into.gpu_optimizer += more.gpu_optimizer;
  into.host_bytes += more.host_bytes;
}

LayerActivationBytes mlp_activation_bytes(const ModelSpec& m, double s, double b, double e, bool fused_glu) {
  // The MLP: activation-function input(s) and the second GEMM's input
  // (`rows` x `cols` tokens, evaluated as the dense model always was). The
  // runtime's fused GLU (runtime/model/fused_ops.hpp; its experts' and shared
  // MLPs too since 2026-11-28, runtime/model/moe.cpp) saves [gate | up] and
  // the product; eager code also silu(gate).
  auto mlp = [&](double rows, double cols, double f, bool fused) {
    LayerActivationBytes a;
    if (m.mlp == MlpKind::SwiGlu) a.split = (fused ? 3 : 4) * e * rows * cols * f;
    else if (m.mlp == MlpKind::Relu) a.split = e * rows * cols * f;   // ReLU's output serves both
    else a.split = 2 * e * rows * cols * f;                           // GeLU input and output
    return a;
  };
  LayerActivationBytes dense = mlp(s, b, double(m.ffn), fused_glu);
  if (!m.moe.enabled()) return dense;
  const double T = s * b, h = double(m.hidden), routed = routed_tokens_per_rank(m, int64_t(T));
  LayerActivationBytes moe = mlp(routed, 1.0, double(m.moe.expert_ffn), fused_glu);
  moe.split += mlp(T, 1.0, double(m.moe.shared_ffn), fused_glu).split;
  // Router probabilities in fp32 (softmax backward), the permuted expert
  // inputs (the first expert GEMM's input) and the expert outputs the
  // weighted combine keeps for its backward: whole on every tp rank.
  moe.replicated += 4 * T * double(m.moe.experts) + 2 * e * routed * h;
  if (m.moe.shared_gate) moe.replicated += e * T;  // the gate's sigmoid output
  const double L = double(m.layers), k = double(m.moe_layers());
  return {(dense.replicated * (L - k) + moe.replicated * k) / L, (dense.split * (L - k) + moe.split * k) / L};
}

double moe_dispatch_buffer_bytes(const ModelSpec& m, const Strategy& s, int64_t seq) {
  if (!m.moe.enabled() || s.ep <= 1) return 0;
  // Send and receive buffers of the dispatch (the combine reuses them).
  const double e = bytes_per_element(s.precision);
  return 2 * e * routed_tokens_per_rank(m, seq * s.mbs) * double(m.hidden);
}

PassTimes moe_mean_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                               const GroupLink& tp_link, int ep) {
  const PassTimes dense = transformer_layer_times(p, m, s, tp_link);
  if (!m.moe.enabled()) return dense;
  // The layer without its MLP (attention, norms, residuals, TP collectives:
  // the MoE block's output is reduced over tp as the MLP's is).
  ModelSpec bare = m;
  bare.ffn = 0;
  bare.mlp_bias = false;
  PassTimes moe = transformer_layer_times(p, bare, s, tp_link);
  const Precision pr = s.precision;
  const double e = bytes_per_element(pr);
  const int64_t T = s.seq * s.mbs, h = m.hidden, t = s.tp;
  // Router: T x hidden -> experts, replicated over tp; softmax and top-k read
  // and write the T x experts scores.
  add_linear_times(p, pr, T, m.moe.experts, h, moe);
  MemoryOps fm, bm;
  fm.add(MemKernel::Reduction, 3 * 4.0 * double(T) * double(m.moe.experts), 2);
  bm.add(MemKernel::Reduction, 3 * 4.0 * double(T) * double(m.moe.experts), 2);
  add_moe_dispatch_ops(e, double(T), routed_tokens_per_rank(m, T), double(h), ep, m.moe.shared_ffn > 0,
                       m.moe.shared_gate, fm, bm);
  moe.forward.memory_seconds += p.memory_in_step_factor * fm.seconds(p);
  moe.backward.memory_seconds += p.memory_in_step_factor * bm.seconds(p);
  // Each local expert's GEMMs at its own token count (one GEMM per expert, as
  // a sequential loop or a grouped GEMM of equal groups runs them).
  const int64_t local = m.moe.experts / ep, Te = tokens_per_local_expert(m, T, ep);
  // Their gated unit is the dense MLP's (fused where the profile has the kernels).
  for (int64_t x = 0; x < local; ++x) add_mlp_times(p, m, pr, Te, m.moe.expert_ffn / t, moe, true);
  if (m.moe.shared_ffn > 0) add_mlp_times(p, m, pr, T, m.moe.shared_ffn / t, moe, true);
  if (m.moe.shared_gate) add_linear_times(p, pr, T, 1, h, moe);
  if (s.ckpt == Ckpt::Full) moe.recompute = moe.forward;
  // The mean layer: dense and MoE layers by their counts.
  const double L = double(m.layers), k = double(m.moe_layers());
  PassTimes out;
  out.forward = ((L - k) / L) * dense.forward;
  out.forward += (k / L) * moe.forward;
  out.backward = ((L - k) / L) * dense.backward;
  out.backward += (k / L) * moe.backward;
  out.recompute = ((L - k) / L) * dense.recompute;
  out.recompute += (k / L) * moe.recompute;
  return out;
}

double moe_all_to_all_seconds(const ModelSpec& m, const LayerShape& s, int ep, const GroupLink& ep_link,
                              double base_latency_s) {
  if (!m.moe.enabled() || ep <= 1) return 0;
  // Dispatch sends each routed token's hidden vector to its expert's rank and
  // combine brings it back: two all-to-alls of the rank's routed tokens (the
  // busiest rank's, imbalance included), on every tp rank of the group at once
  // (expert tensor parallelism = tp: each tp rank exchanges the whole hidden
  // vectors of its ep group). Mean over the layers, as the layer times.
  const double bytes = bytes_per_element(s.precision) * routed_tokens_per_rank(m, s.seq * s.mbs) * double(m.hidden);
  const double share = double(m.moe_layers()) / double(m.layers);
  return share * 2 * all_to_all_seconds(bytes, ep_link, base_latency_s);
}

MoeLayerParams mean_layer_params_per_rank(const ModelSpec& m, const Strategy& s, int64_t dense_layer) {
  if (!m.moe.enabled()) return {dense_layer, 0};
  const MoeLayerParams lp = moe_layer_params_per_rank(m, s.tp, s.ep);
  const double L = double(m.layers), k = double(m.moe_layers());
  return {int64_t(((L - k) * double(dense_layer) + k * double(lp.shared)) / L), int64_t(k * double(lp.experts) / L)};
}

MoeHostSeconds moe_host_seconds(const HardwareProfile& p, int ep, double rows, bool shared) {
  MoeHostSeconds h;
  const bool from_ep = ep > 1 && p.moe_host_ep_size >= 2;
  const double f = from_ep ? p.moe_host_ep_forward_seconds : p.moe_host_forward_seconds;
  const double fr = from_ep ? p.moe_host_ep_forward_row_seconds : p.moe_host_forward_row_seconds;
  const double b = from_ep ? p.moe_host_ep_backward_seconds : p.moe_host_backward_seconds;
  const double br = from_ep ? p.moe_host_ep_backward_row_seconds : p.moe_host_backward_row_seconds;
  h.forward = f + fr * rows;
  h.backward = b + br * rows;
  h.measured = h.forward > 0 || h.backward > 0;
  if (h.measured && shared) h.forward += p.moe_host_shared_forward_seconds, h.backward += p.moe_host_shared_backward_seconds;
  h.ep_unmeasured = h.measured && ep > 1 && !from_ep;
  return h;
}

void add_moe_unit_costs(UnitCost& u, const MoeUnitContext& c, const GroupLink& ep_link, const GroupLink& el,
                        double Pe, double dense_shard) {
  const Strategy& s = c.s;
  const double base = c.base_latency_s, e = c.e, eg = c.eg;
  const int expert_dp = std::max(1, s.dp / std::max(1, s.ep)) * s.cp;  // the cp ranks hold the same experts
  const bool offload = s.offload != Offload::None;
  const double a2a = moe_all_to_all_seconds(c.m, c.shape, s.ep, ep_link, base);
  const double again = s.ckpt == Ckpt::Full ? a2a : 0.0;
  // Their own actions of the step program (ATAF/ATAB), outside F and B.
  u.moe_a2a_forward_seconds += a2a;
  u.moe_a2a_backward_seconds += a2a + again;
  // The host floor, for the MoE layers' share of the mean layer.
  const MoeHostSeconds host =
      moe_host_seconds(c.p, s.ep, routed_tokens_per_rank(c.m, c.shape.seq * c.shape.mbs), c.m.moe.shared_ffn > 0);
  if (host.measured && c.m.layers > 0) {
    const double share = double(c.m.layers - c.m.moe.dense_layers) / double(c.m.layers);
    const double host_b = host.backward + (s.ckpt == Ckpt::Full ? host.forward : 0.0);
    u.moe_host_forward_seconds = share * std::max(0.0, host.forward - (u.forward_seconds + a2a));
    u.moe_host_backward_seconds = share * std::max(0.0, host_b - (u.backward_seconds + a2a + again));
    u.forward_seconds += u.moe_host_forward_seconds;
    u.backward_seconds += u.moe_host_backward_seconds;
  }
  const double shard_e = s.zero >= 1 ? Pe / expert_dp : Pe;
  u.all_reduce_seconds += all_reduce_seconds(Pe * eg, el, base);
  u.reduce_scatter_seconds += reduce_scatter_seconds(Pe * eg, el, base);
  if (s.zero == 3) u.gather_seconds += all_gather_seconds(Pe * e, el, base);
  if (s.offload == Offload::All) u.fetch_seconds += host_copy_seconds(c.p, Pe * e / expert_dp, c.host_Bps);
  if (offload) {
    u.to_host_seconds += host_copy_seconds(c.p, shard_e * eg, c.host_Bps);
    u.cpu_adam_seconds = cpu_adam_seconds(c.p, c.cluster, dense_shard + shard_e, std::max(1, c.cluster.gpus_per_node));
  }
  if (offload && !(s.offload == Offload::All && s.zero == 3))
    u.to_device_seconds += host_copy_seconds(c.p, shard_e * e, c.host_Bps);
  if ((s.zero == 1 || s.zero == 2) && !c.p.overlap_param_gather)
    u.all_gather_seconds += all_gather_seconds(Pe * e, el, base);
}

MoeLinks moe_links(const Topology& topo, const Strategy& s, int gpus_per_node) {
  MoeLinks out;
  const RankGrid grid(s.dp, s.pp, s.tp, s.cp);
  const int g = std::max(1, gpus_per_node);
  // Every group of a kind with a member on the representative's node runs at
  // once; each is found through one of its members there.
  auto link = [&](int rep, auto group_of) {
    const int first = (rep / g) * g, last = std::min(grid.world(), first + g);
    std::vector<std::vector<int>> groups;
    int rep_index = 0;
    std::vector<bool> seen(size_t(last - first), false);
    for (int x = first; x < last; ++x) {
      if (seen[size_t(x - first)]) continue;
      std::vector<int> grp = group_of(x);
      for (int r : grp)
        if (r >= first && r < last) seen[size_t(r - first)] = true;
      if (std::find(grp.begin(), grp.end(), rep) != grp.end()) rep_index = int(groups.size());
      groups.push_back(std::move(grp));
    }
    return topo.ring(groups, rep_index);
  };
  for (int st = 0; st < s.pp; ++st) {
    const int rep = grid.rank({0, st, 0});
    out.ep.push_back(s.ep > 1 ? link(rep, [&](int r) { return grid.ep_group(r, s.ep); }) : GroupLink{});
    out.expert_dp.push_back(s.dp / s.ep * s.cp > 1 ? link(rep, [&](int r) { return grid.expert_dp_group(r, s.ep); })
                                                    : GroupLink{});
  }
  return out;
}

}  // namespace planner

#include "costmodel/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "costmodel/collectives.hpp"
#include "costmodel/finetune.hpp"
#include "costmodel/moe_costs.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"
#include "costmodel/cp_costs.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/step_program.hpp"

namespace planner {

void TableCostModel::resize(const LayerPartition& part) {
  const size_t n = size_t(part.units());
  index_.resize(n);
  for (size_t u = 0; u < n; ++u) index_[u] = uint32_t(u);
  reset_shared(part, n, index_);
}

void TableCostModel::reset_shared(const LayerPartition& part, size_t entries, const std::vector<uint32_t>& index) {
  if (&part != &part_) part_ = part;
  units_.assign(entries, UnitCost{});
  if (&index != &index_) index_ = index;
  sends_.assign(size_t(part.pp()) * part.vpp(), SendCost{});
  stages_.assign(size_t(part.pp()), StageCost{});
}

UnitCost& TableCostModel::unit(int u) {
  if (units_.size() != index_.size()) {  // unshare: one entry per unit
    std::vector<UnitCost> own(index_.size());
    for (size_t i = 0; i < index_.size(); ++i) own[i] = units_[index_[i]], index_[i] = uint32_t(i);
    units_ = std::move(own);
  }
  return units_[size_t(u)];
}

void TableCostModel::set_chunk(int stage, int chunk, const UnitCost& t) {
  const auto [b, e] = part_.units_of(stage, chunk);
  const double k = 1.0 / (e - b);
  for (int u = b; u < e; ++u) {
    UnitCost& c = unit(u);
    c.forward_seconds = k * t.forward_seconds;
    c.backward_seconds = k * t.backward_seconds;
    c.forward_comm_seconds = k * t.forward_comm_seconds;
    c.backward_comm_seconds = k * t.backward_comm_seconds;
    c.recompute_seconds = k * t.recompute_seconds;
    c.gather_seconds = k * t.gather_seconds;
    c.fetch_seconds = k * t.fetch_seconds;
    c.all_reduce_seconds = k * t.all_reduce_seconds;
    c.reduce_scatter_seconds = k * t.reduce_scatter_seconds;
    c.to_host_seconds = k * t.to_host_seconds;
    c.cpu_adam_seconds = k * t.cpu_adam_seconds;
    c.to_device_seconds = k * t.to_device_seconds;
    c.all_gather_seconds = k * t.all_gather_seconds;
  }
}

namespace {

struct LayerSet {
  PassTimes layer, embedding, head;
  PassTimes layer_block;  // cp > 1: a layer with one block of attention (the ring's overlap); else unused
};

// Units that cost the same share one table entry: per stage, the embedding, a
// layer and the head.
enum UnitKind { kEmbedding, kLayer, kHead, kKinds };

struct Layout {
  LayerPartition part;
  std::vector<uint32_t> entry;  // per unit: stage * kKinds + kind
};

struct Links {
  std::vector<GroupLink> dp;       // per stage, the DP group of the stage's representative rank
  std::vector<GroupLink> next;     // per stage, the link to stage (s + 1) mod pp
  std::vector<GroupLink> tp;       // per stage, the TP group of the representative (beside its node's others)
  std::vector<GroupLink> cp;       // per stage, the representative's send to the next rank of its CP ring
  GroupLink pp;                    // the representatives' pipeline group (alone: it carries one float)
};

// The layer times depend on mbs, tp, sp, precision, ckpt and fine-tuning
// (first), and on cp and ep (second: each at most 2^20, so both fit without overlap).
std::pair<int64_t, int64_t> layer_key(const Strategy& s) {
  const Finetune& f = s.finetune;  // below 2^36: mode, targets, rank above it
  const int64_t ft = f.frozen_base() ? (int64_t(f.r) * 32 + f.targets) * 4 + int(f.mode) : 0;
  return {((((int64_t(s.mbs) * 1024 + s.tp) * 2 + s.sp) * 4 + int(s.precision)) * 4) + int(s.ckpt) + (ft << 36),
          (int64_t(s.cp) << 21) | s.ep};
}
int64_t grid_key(const Strategy& s) { return ((int64_t(s.dp) * 65536 + s.tp) * 65536 + s.pp) * 1024 + s.cp; }

}  // namespace

struct CostContext::Impl {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t seq;
  HardwareProfile profile;
  Topology topo;
  std::unordered_map<int, GroupLink> tp_links;
  std::map<std::pair<int64_t, int64_t>, LayerSet> layers;
  std::unordered_map<int64_t, Links> links;
  std::unordered_map<int64_t, Layout> layouts;
  std::unordered_map<int64_t, std::vector<StepList>> step_ends;
  std::map<std::pair<int64_t, int>, MoeLinks> moe_links_by_grid;  // mixture of experts: (grid, ep)
  double host_Bps;

  Impl(const ModelSpec& m, const ClusterSpec& c, int64_t s, const HardwareProfile& p)
      : model(m), cluster(c), seq(s), profile(p), topo(c, p) {
    host_Bps = topo.host_copy_Bps(c.gpus_per_node);
  }

  // Each stage's step-end reductions (TiedReduce, ReplicaReduce, LossReduce,
  // NormReduce) as add_step_tail emits them, per shape: which ones a stage has
  // depends on pp, whether dp and tp exceed 1, sp and ZeRO-2/3 only.
  const std::vector<StepList>& step_end_reductions(const Strategy& s, const LayerPartition& part) {
    const int64_t key = (int64_t(s.pp) << 8) | (s.dp_cp() > 1) << 3 | (s.tp > 1) << 2 | int(s.sp) << 1 | (s.zero >= 2);
    auto it = step_ends.find(key);
    if (it != step_ends.end()) return it->second;
    std::vector<StepList> out(size_t(s.pp));
    for (int st = 0; st < s.pp; ++st)
      for (const StepAction& a : add_step_tail({}, s, part, st, StepOptions{model.tied_embeddings}))
        if (a.op == StepOp::TiedReduce || a.op == StepOp::ReplicaReduce || a.op == StepOp::LossReduce ||
            a.op == StepOp::NormReduce)
          out[size_t(st)].push_back(a);
    return step_ends[key] = std::move(out);
  }

  const GroupLink& tp_link(int tp) {
    auto it = tp_links.find(tp);
    if (it != tp_links.end()) return it->second;
    // Every TP group of the first node runs at once: ranks [k tp, (k+1) tp).
    std::vector<std::vector<int>> groups;
    const int g = std::max(1, cluster.gpus_per_node);
    for (int first = 0; first < std::max(g, tp); first += tp) {
      std::vector<int> grp(tp);
      for (int i = 0; i < tp; ++i) grp[i] = first + i;
      groups.push_back(std::move(grp));
    }
    return tp_links[tp] = topo.ring(groups, 0);
  }

  const LayerSet& layer_set(const Strategy& s) {
    const auto key = layer_key(s);
    auto it = layers.find(key);
    if (it != layers.end()) return it->second;
    // Context parallelism: each rank computes seq/cp tokens (its two chunks),
    // and its attention is cp blocks of that size (costmodel/cp_costs.hpp).
    const LayerShape shape{seq / s.cp, s.mbs, s.tp, s.sp && s.tp > 1, s.precision, s.ckpt};
    const GroupLink& l = tp_link(s.tp);
    // A mixture of experts' mean layer (moe_costs.hpp; the dense layer itself otherwise).
    LayerSet set{model.moe.enabled() ? moe_mean_layer_times(profile, model, shape, l, s.ep)
                                     : transformer_layer_times(profile, model, shape, l),
                 embedding_times(profile, model, shape, l), head_times(profile, model, shape, l), {}};
    if (s.finetune.frozen_base()) {  // LoRA/QLoRA (costmodel/finetune.hpp)
      apply_finetune_layer_times(profile, model, shape, s.finetune, set.layer);
      apply_finetune_embedding_times(set.embedding);
      apply_finetune_head_times(profile, model, shape, set.head);
    }
    if (s.cp > 1) {
      set.layer_block = set.layer;
      // Selective recomputation reruns only the attention core, and ring
      // attention is not rerun: the runtime keeps its output and log-sum-exp
      // (runtime/model/transformer.cpp attention(); cp_costs.cpp).
      if (s.ckpt == Ckpt::Selective) set.layer.recompute = {};
      scale_attention_for_cp(set.layer, s.cp);
      add_cp_ring_memory(set.layer, profile, model, seq, s);
    }
    return layers[key] = set;
  }

  const MoeLinks& moe_links_for(const Strategy& s) {
    const auto key = std::make_pair(grid_key(s), s.ep);
    auto it = moe_links_by_grid.find(key);
    if (it != moe_links_by_grid.end()) return it->second;
    return moe_links_by_grid[key] = moe_links(topo, s, cluster.gpus_per_node);
  }

  const Layout& layout(int pp, int vpp) {
    const int64_t key = int64_t(pp) * 65536 + vpp;
    auto it = layouts.find(key);
    if (it != layouts.end()) return it->second;
    Layout l{LayerPartition(model.layers, pp, vpp), {}};
    l.entry.resize(size_t(l.part.units()));
    for (int u = 0; u < l.part.units(); ++u) {
      const int kind = u == 0 ? kEmbedding : u == l.part.head_unit() ? kHead : kLayer;
      l.entry[size_t(u)] = uint32_t(l.part.owner(u).first * kKinds + kind);
    }
    return layouts.emplace(key, std::move(l)).first->second;
  }

  const Links& grid_links(const Strategy& s) {
    const int64_t key = grid_key(s);
    auto it = links.find(key);
    if (it != links.end()) return it->second;
    Links out;
    const RankGrid grid(s.dp, s.pp, s.tp, s.cp);
    const int g = std::max(1, cluster.gpus_per_node);
    std::vector<std::vector<int>> groups;
    int groups_node = -1;  // the node whose DP groups `groups` holds
    int rep_group = 0;     // the representative's index in `groups`
    std::vector<std::pair<int, int>> pairs;
    const int64_t block = int64_t(s.pp) * s.cp * s.tp;  // ranks of one DP index
    // Stages on one node share its DP groups and find their sends among their
    // own ranks: a deep pipeline on a large node was a scan of the node per
    // stage (and of the ranks before each rank for the DP groups).
    for (int st = 0; st < s.pp; ++st) {
      const int rep = grid.rank({0, st, 0, 0});
      const int node_first = (rep / g) * g, node_last = std::min(grid.world(), node_first + g);
      // DP (the gradients' dp-cp group): every such group with a member on
      // the representative's node, each through its first rank there. A
      // dp-cp group is a (pp, tp) pair: the first pp*cp*tp ranks of the node
      // bring in each group once per cp index, in rank order; the first
      // (cp index 0) stands for it (with cp = 1, every rank of that block:
      // RankGrid: rank = ((dp_i pp + pp_i) cp + cp_i) tp + tp_i). Stages on
      // the same node share them.
      if (s.dp_cp() > 1) {
        if (groups_node != node_first) {
          groups.clear();
          const int groups_end = int(std::min<int64_t>(node_last, node_first + block));
          for (int x = node_first; x < groups_end; ++x)
            if (s.cp == 1 || grid.coord(x).cp == 0) groups.push_back(grid.dp_cp_group(x));
          groups_node = node_first;
        }
        rep_group = rep - node_first;  // cp = 1: every rank of the block is its own group's first
        if (s.cp > 1) {
          const std::vector<int> mine = grid.dp_cp_group(rep);
          for (size_t k = 0; k < groups.size(); ++k)
            if (groups[k] == mine) rep_group = int(k);
        }
        out.dp.push_back(topo.ring(groups, rep_group));
      } else {
        out.dp.push_back(GroupLink{});
      }
      // PP: every rank of this stage on the node sends to its next stage at
      // once; in rank order, the ranks ((d pp + st) cp + c) tp + t of each DP index d.
      if (s.pp > 1) {
        pairs.clear();
        int rep_pair = 0;
        for (int64_t d = node_first / block; d * block < node_last; ++d)
          for (int c = 0; c < s.cp; ++c)
            for (int t = 0; t < s.tp; ++t) {
              const int64_t x = ((d * s.pp + st) * s.cp + c) * s.tp + t;
              if (x < node_first || x >= node_last) continue;
              if (x == rep) rep_pair = int(pairs.size());
              pairs.push_back({int(x), grid.rank({int(d), (st + 1) % s.pp, t, c})});
            }
        out.next.push_back(topo.p2p(pairs, rep_pair));
      } else {
        out.next.push_back(GroupLink{});
      }
      // CP: every rank of the node sends its K/V to the next rank of its
      // context-parallel ring at once (ring attention, one step).
      if (s.cp > 1) {
        pairs.clear();
        int rep_pair = 0;
        for (int x = node_first; x < node_last; ++x) {
          RankCoord rc = grid.coord(x);
          if (rc.pp != st) continue;
          if (x == rep) rep_pair = int(pairs.size());
          rc.cp = (rc.cp + 1) % s.cp;
          pairs.push_back({x, grid.rank(rc)});
        }
        out.cp.push_back(topo.p2p(pairs, rep_pair));
      } else {
        out.cp.push_back(GroupLink{});
      }
      // TP: every TP group with a member on the node at once (consecutive ranks).
      if (s.tp > 1) {
        std::vector<std::vector<int>> tps;
        const int start = node_first / s.tp * s.tp;
        for (int x = start; x < node_last; x += s.tp) tps.push_back(grid.tp_group(x));
        out.tp.push_back(topo.ring(tps, (rep - start) / s.tp));
      } else {
        out.tp.push_back(GroupLink{});
      }
    }
    if (s.pp > 1) out.pp = topo.ring({grid.pp_group(0)}, 0);
    return links[key] = std::move(out);
  }
};

CostContext::CostContext(const ModelSpec& m, const ClusterSpec& c, int64_t seq, const HardwareProfile& p)
    : impl_(std::make_unique<Impl>(m, c, seq, p)) {}
CostContext::~CostContext() = default;
const HardwareProfile& CostContext::profile() const { return impl_->profile; }
const Topology& CostContext::topology() const { return impl_->topo; }
const PassTimes& CostContext::layer_times(const Strategy& s) { return impl_->layer_set(s).layer; }

namespace {

// The parameters every tp rank of a stage holds whole under sequence
// parallelism (stage_params_per_rank): a layer's norms and row-parallel
// biases, the embedding's position tables on the first stage, the final norm
// on the last.
double replicated_params(const ModelSpec& m, int layers, bool first, bool last) {
  int64_t repl = (m.parallel_block ? 1 : 2) * m.norm_params();
  if (m.out_bias) repl += m.hidden;
  if (m.mlp_bias) repl += m.hidden;
  double params = double(layers) * double(repl);
  const int64_t width = m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden;
  if (first) params += double(m.embedding_params() - m.vocab * width);
  if (last) params += double(m.norm_params());
  return params;
}

// Pipeline sends, per virtual stage: one micro-batch's activation of
// `act_bytes` to the next virtual stage and its gradient back.
void price_sends(const Strategy& s, int chunks, double act_bytes, const Links& links, double base, TableCostModel& out) {
  for (int v = 0; v < chunks; ++v) {
    const int st = v % s.pp, c = v / s.pp;
    SendCost& sc = out.send(st, c);
    sc.forward_seconds = v < chunks - 1 ? send_recv_seconds(act_bytes, links.next[st], base) : 0;
    sc.backward_seconds = v > 0 ? send_recv_seconds(act_bytes, links.next[(st + s.pp - 1) % s.pp], base) : 0;
  }
}

// The ring's send/recv runs beside the blocks: slowed as the profile measured
// collectives beside compute, for the cp group's size.
double cp_comm_slowdown(const HardwareProfile& p, int cp) {
  const CollectiveGroupAt cg = collective_group_at(p.collective_groups, cp);
  return cg.found ? cg.value.comm_slowdown_beside_compute : p.comm_slowdown_beside_compute;
}

}  // namespace

void CostContext::build(const Strategy& s, TableCostModel& out) {
  Impl& x = *impl_;
  const HardwareProfile& p = x.profile;
  const ModelSpec& m = x.model;
  const double base = p.collective_base_latency_seconds;
  const double e = bytes_per_element(s.precision);
  const double eg = p.grad_reduce_bytes_per_element > 0 ? p.grad_reduce_bytes_per_element : e;
  const LayerSet& ls = x.layer_set(s);
  const Links& links = x.grid_links(s);
  const int vpp = s.schedule == Schedule::Interleaved ? s.vpp : 1;
  const int chunks = s.pp * vpp;
  const Layout& layout = x.layout(s.pp, vpp);
  out.reset_shared(layout.part, size_t(s.pp) * kKinds, layout.entry);

  // Pipeline sends. Megatron scatter/gather: 1/t per rank; a cp rank sends its seq/cp tokens.
  price_sends(s, chunks, e * double(x.seq / s.cp) * s.mbs * m.hidden / s.tp, links, base, out);

  // Parameters per rank of each kind of unit (their sum over a stage's units is
  // stage_params_per_rank of the stage).
  // Under fine-tuning only the adapters have gradients and optimizer states.
  const bool ft = s.finetune.frozen_base();
  const double P_layer = ft ? trainable_params_per_rank(m, s, 0, 1) : double(stage_params_per_rank(m, 1, false, false, s.pp, s.tp));
  const double P_emb = ft ? 0.0 : double(stage_params_per_rank(m, 0, true, false, s.pp, s.tp));
  const double P_head = ft ? 0.0 : double(stage_params_per_rank(m, 0, false, true, s.pp, s.tp));
  // Mixture of experts: the mean layer's parameters, those ZeRO shards over
  // dp-cp and the local experts' over the expert-data-parallel group (dp/ep x cp),
  // whose gradients are reduced there; the all-to-all in each layer's passes.
  const MoeLinks* moe_links = m.moe.enabled() ? &x.moe_links_for(s) : nullptr;
  const MoeLayerParams mean = mean_layer_params_per_rank(m, s, int64_t(P_layer));
  const double P_layer_dense = moe_links ? double(mean.shared) : P_layer, P_layer_experts = double(mean.experts);
  const int expert_dp = std::max(1, s.dp / s.ep) * s.cp;  // the cp ranks hold the same experts
  const bool offload = s.offload != Offload::None;
  const int procs = std::max(1, x.cluster.gpus_per_node);
  const MoeUnitContext moe_unit{m, s, p, x.cluster, LayerShape{x.seq / s.cp, s.mbs, s.tp, s.sp && s.tp > 1, s.precision, s.ckpt},
                                e, eg, base, x.host_Bps};
  for (int st = 0; st < s.pp; ++st) {
    const GroupLink& dl = links.dp[st];
    double stage_params = 0, stage_expert_params = 0;
    for (int kind = 0; kind < kKinds; ++kind) {
      const bool here = kind == kLayer || (kind == kEmbedding && st == 0) || (kind == kHead && st == s.pp - 1);
      if (!here) continue;
      const PassTimes& t = kind == kEmbedding ? ls.embedding : kind == kHead ? ls.head : ls.layer;
      const double P = kind == kEmbedding ? P_emb : kind == kHead ? P_head : P_layer_dense;
      UnitCost& u = out.entry(size_t(st) * kKinds + kind);
      u.forward_seconds = t.forward.total_seconds();
      u.recompute_seconds = t.recompute.total_seconds();
      u.backward_seconds = t.backward.total_seconds() + u.recompute_seconds;
      u.forward_comm_seconds = t.forward.tp_comm_seconds;
      u.backward_comm_seconds = t.backward.tp_comm_seconds + t.recompute.tp_comm_seconds;
      const double grad_bytes = P * eg, shard = s.zero >= 1 ? P / s.dp_cp() : P;
      u.all_reduce_seconds = all_reduce_seconds(grad_bytes, dl, base);
      u.reduce_scatter_seconds = reduce_scatter_seconds(grad_bytes, dl, base);
      if (s.zero == 3) u.gather_seconds = all_gather_seconds(P * e, dl, base);
      if (s.offload == Offload::All) u.fetch_seconds = host_copy_seconds(p, P * e / s.dp_cp(), x.host_Bps);
      if (offload) {
        u.to_host_seconds = host_copy_seconds(p, shard * eg, x.host_Bps);
        u.cpu_adam_seconds = cpu_adam_seconds(p, x.cluster, shard, procs);
      }
      // offload=all under ZeRO-3 keeps the updated shard on the host (the next
      // step's Gather fetches it): no ToDevice in the program, none priced here
      // (makespan_lower_bound counts every priced one).
      if (offload && !(s.offload == Offload::All && s.zero == 3))
        u.to_device_seconds = host_copy_seconds(p, shard * e, x.host_Bps);
      // Hidden under the next forward with overlap_param_gather (the program's
      // option, which the simulator reads too): priced 0 here as well, so
      // that makespan_lower_bound stays a bound.
      if ((s.zero == 1 || s.zero == 2) && !p.overlap_param_gather) u.all_gather_seconds = all_gather_seconds(P * e, dl, base);
      if (kind == kLayer && s.cp > 1) {
        const CpRingSeconds ring =
            cp_ring_seconds(ls.layer_block, m, x.seq, s, links.cp[size_t(st)], base, cp_comm_slowdown(p, s.cp));
        u.cp_ring_forward_seconds = ring.forward;
        u.cp_ring_backward_seconds = ring.backward;
      }
      if (moe_links && kind == kLayer)
        add_moe_unit_costs(u, moe_unit, moe_links->ep[size_t(st)], moe_links->expert_dp[size_t(st)], P_layer_experts, shard);
      if (kind == kLayer) {
        int layers = 0;  // the stage's layers over its chunks
        for (int c = 0; c < vpp; ++c) layers += layout.part.chunk_layers()[size_t(c) * s.pp + st];
        stage_params += layers * P;
        stage_expert_params += layers * P_layer_experts;
      } else {
        stage_params += P;
      }
    }
    StageCost& sc = out.stage(st);
    // The DP/ZeRO collectives' group size (the dp-cp group) picks the
    // slowdowns where the profile measured them per group size (collective_groups).
    const CollectiveGroupAt at = collective_group_at(p.collective_groups, s.dp_cp());
    sc.compute_slowdown_beside_comm = at.found ? at.value.compute_slowdown_beside_comm : p.compute_slowdown_beside_comm;
    sc.comm_slowdown_beside_compute = at.found ? at.value.comm_slowdown_beside_compute : p.comm_slowdown_beside_compute;
    const double shard = s.zero >= 1 ? stage_params / s.dp_cp() + stage_expert_params / expert_dp
                                     : stage_params + stage_expert_params;
    sc.cpu_optimizer = offload;  // per unit above (cpu_adam_seconds is linear in the parameters)
    if (!offload) sc.optimizer_seconds = gpu_adam_seconds(p, shard, s.precision);
    if (!ft && m.tied_embeddings && s.pp > 1 && (st == 0 || st == s.pp - 1)) {  // frozen under fine-tuning
      const double emb_bytes = eg * double(m.vocab) * double(m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden) / s.tp;
      sc.tied_grad_seconds = send_recv_seconds(emb_bytes, links.next[s.pp - 1], base);
    }
    // Sequence parallelism: the gradients of the parameters every tp rank
    // holds whole (stage_params_per_rank: a layer's norms and row-parallel
    // biases, the embedding's position tables, the final norm) summed over tp.
    if (!ft && s.sp && s.tp > 1) {  // norms and biases are frozen under fine-tuning
      int layers = 0;
      for (int c = 0; c < vpp; ++c) layers += layout.part.chunk_layers()[size_t(c) * s.pp + st];
      const double params = replicated_params(m, layers, st == 0, st == s.pp - 1);
      sc.replica_reduce_seconds = all_reduce_seconds(params * eg, links.tp[size_t(st)], base);
    }
    // Loss and gradient-norm reductions: one float over a group, a tree of
    // its slowest hops (latency-bound).
    auto scalar = [&](const GroupLink& g) {
      const double launch = g.base_latency_seconds >= 0 ? g.base_latency_seconds : base;  // the group size's, if measured
      return g.size > 1 ? launch + 2 * std::ceil(std::log2(double(g.size))) * g.hop_latency_seconds : 0.0;
    };
    sc.scalar_reduce_seconds[size_t(CommGroup::Tp)] = scalar(links.tp[size_t(st)]);
    sc.scalar_reduce_seconds[size_t(CommGroup::Dp)] = scalar(links.dp[size_t(st)]);
    sc.scalar_reduce_seconds[size_t(CommGroup::Pp)] = scalar(links.pp);
    sc.step_end_reductions = x.step_end_reductions(s, layout.part)[size_t(st)];
  }
}

OpTimes CostContext::stage_op_times(const Strategy& s, int stage) {
  const LayerSet& ls = impl_->layer_set(s);
  const int vpp = s.schedule == Schedule::Interleaved ? s.vpp : 1;
  const Layout& layout = impl_->layout(s.pp, vpp);
  OpTimes out;
  for (int u : layout.part.stage_units(stage)) {
    const PassTimes& t = u == 0 ? ls.embedding : u == layout.part.head_unit() ? ls.head : ls.layer;
    out += t.forward;
    out += t.backward;
    out += t.recompute;
  }
  return out;
}

OpTimes step_op_times(const Plan& plan, const HardwareProfile& p, int stage) {
  CostContext ctx(plan.model, plan.cluster, plan.seq, p);
  return double(plan.strategy.gas) * ctx.stage_op_times(plan.strategy, stage);
}

TableCostModel build_cost_model(const Plan& plan, const HardwareProfile& p) {
  CostContext ctx(plan.model, plan.cluster, plan.seq, p);
  TableCostModel t;
  ctx.build(plan.strategy, t);
  return t;
}

}  // namespace planner

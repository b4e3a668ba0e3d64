#include "costmodel/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "costmodel/collectives.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"
#include "strategies/rank_grid.hpp"

namespace planner {

void TableCostModel::resize(int pp, int vpp) {
  pp_ = pp, vpp_ = vpp;
  chunks_.assign(size_t(pp) * vpp, ChunkCost{});
  stages_.assign(pp, StageCost{});
  sync_ = 0;
}

namespace {

struct LayerSet {
  PassTimes layer, embedding, head;
};

struct Links {
  std::vector<GroupLink> dp;       // per stage, the DP group of the stage's representative rank
  std::vector<GroupLink> next;     // per stage, the link to stage (s + 1) mod pp
};

int64_t layer_key(const Strategy& s) {
  return ((((int64_t(s.mbs) * 1024 + s.tp) * 2 + s.sp) * 4 + int(s.precision)) * 4) + int(s.ckpt);
}
int64_t grid_key(const Strategy& s) { return (int64_t(s.dp) * 65536 + s.tp) * 65536 + s.pp; }

}  // namespace

struct CostContext::Impl {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t seq;
  HardwareProfile profile;
  Topology topo;
  std::unordered_map<int, GroupLink> tp_links;
  std::unordered_map<int64_t, LayerSet> layers;
  std::unordered_map<int64_t, Links> links;
  std::unordered_map<int, std::vector<int>> partitions;
  double host_Bps;

  Impl(const ModelSpec& m, const ClusterSpec& c, int64_t s, const HardwareProfile& p)
      : model(m), cluster(c), seq(s), profile(p), topo(c, p) {
    host_Bps = topo.host_copy_Bps(c.gpus_per_node);
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
    const int64_t key = layer_key(s);
    auto it = layers.find(key);
    if (it != layers.end()) return it->second;
    const LayerShape shape{seq, s.mbs, s.tp, s.sp && s.tp > 1, s.precision, s.ckpt};
    const GroupLink& l = tp_link(s.tp);
    LayerSet set{transformer_layer_times(profile, model, shape, l), embedding_times(profile, model, shape, l),
                 head_times(profile, model, shape, l)};
    return layers[key] = set;
  }

  const std::vector<int>& partition(int chunks) {
    auto it = partitions.find(chunks);
    if (it != partitions.end()) return it->second;
    return partitions[chunks] = partition_layers(model, chunks);
  }

  const Links& grid_links(const Strategy& s) {
    const int64_t key = grid_key(s);
    auto it = links.find(key);
    if (it != links.end()) return it->second;
    Links out;
    const RankGrid grid(s.dp, s.pp, s.tp);
    const int g = std::max(1, cluster.gpus_per_node);
    std::vector<std::vector<int>> groups;
    std::vector<std::pair<int, int>> pairs;
    for (int st = 0; st < s.pp; ++st) {
      const int rep = grid.rank({0, st, 0});
      const int node_first = (rep / g) * g, node_last = std::min(grid.world(), node_first + g);
      // DP: every DP group with a member on the representative's node.
      groups.clear();
      int rep_index = 0;
      for (int x = node_first; x < node_last; ++x) {
        const RankCoord c = grid.coord(x);
        bool seen = false;  // its group came in through an earlier rank of the node
        for (int y = node_first; y < x && !seen; ++y) {
          const RankCoord cy = grid.coord(y);
          seen = cy.pp == c.pp && cy.tp == c.tp;
        }
        if (seen) continue;
        if (x == rep) rep_index = int(groups.size());
        groups.push_back(grid.dp_group(x));
      }
      out.dp.push_back(s.dp > 1 ? topo.ring(groups, rep_index) : GroupLink{});
      // PP: every rank of this stage on the node sends to its next stage at once.
      pairs.clear();
      int rep_pair = 0;
      for (int x = node_first; x < node_last; ++x) {
        const RankCoord c = grid.coord(x);
        if (c.pp != st) continue;
        if (x == rep) rep_pair = int(pairs.size());
        pairs.push_back({x, grid.rank({c.dp, (st + 1) % s.pp, c.tp})});
      }
      out.next.push_back(s.pp > 1 ? topo.p2p(pairs, rep_pair) : GroupLink{});
    }
    return links[key] = std::move(out);
  }
};

CostContext::CostContext(const ModelSpec& m, const ClusterSpec& c, int64_t seq, const HardwareProfile& p)
    : impl_(std::make_unique<Impl>(m, c, seq, p)) {}
CostContext::~CostContext() = default;
const HardwareProfile& CostContext::profile() const { return impl_->profile; }
const Topology& CostContext::topology() const { return impl_->topo; }
const PassTimes& CostContext::layer_times(const Strategy& s) { return impl_->layer_set(s).layer; }

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
  const std::vector<int>& part = x.partition(chunks);
  out.resize(s.pp, vpp);

  const double act_bytes = e * double(x.seq) * s.mbs * m.hidden / s.tp;  // Megatron scatter/gather: 1/t per rank
  std::vector<double> stage_params(s.pp, 0.0);
  for (int v = 0; v < chunks; ++v) {
    const int st = v % s.pp, c = v / s.pp;
    const bool emb = v == 0, head = v == chunks - 1;
    const int L = part[v];
    ChunkCost& cc = out.chunk(st, c);
    OpTimes f = double(L) * ls.layer.forward, b = double(L) * ls.layer.backward, r = double(L) * ls.layer.recompute;
    if (emb) f += ls.embedding.forward, b += ls.embedding.backward;
    if (head) f += ls.head.forward, b += ls.head.backward;
    cc.forward_seconds = f.total_seconds();
    cc.recompute_seconds = r.total_seconds();
    cc.backward_seconds = b.total_seconds() + cc.recompute_seconds;
    cc.forward_comm_seconds = f.tp_comm_seconds;
    cc.backward_comm_seconds = b.tp_comm_seconds + r.tp_comm_seconds;
    cc.layers = std::max(1, L);
    const GroupLink& to_next = links.next[st];
    const GroupLink& to_prev = links.next[(st + s.pp - 1) % s.pp];
    cc.send_forward_seconds = v < chunks - 1 ? send_recv_seconds(act_bytes, to_next, base) : 0;
    cc.send_backward_seconds = v > 0 ? send_recv_seconds(act_bytes, to_prev, base) : 0;

    const double P = double(stage_params_per_rank(m, L, emb, head, s.pp, s.tp));
    stage_params[st] += P;
    const GroupLink& dl = links.dp[st];
    const double grad_bytes = P * eg;
    cc.grad_buckets = std::max(1, int(std::ceil(grad_bytes / p.grad_bucket_bytes)));
    const double bucket = grad_bytes / cc.grad_buckets;
    cc.grad_reduce_seconds = cc.grad_buckets * (s.zero == 0 ? all_reduce_seconds(bucket, dl, base)
                                                            : reduce_scatter_seconds(bucket, dl, base));
    cc.reduce_every_microbatch = s.zero >= 2;
    cc.overlap_grad_reduce = p.overlap_grad_reduce;
    if (s.zero == 3) cc.param_gather_seconds = cc.layers * all_gather_seconds(P * e / cc.layers, dl, base);
    if (s.offload == Offload::All) cc.param_fetch_seconds = host_copy_seconds(p, P * e / s.dp, x.host_Bps);
  }
  const int procs = std::max(1, x.cluster.gpus_per_node);
  for (int st = 0; st < s.pp; ++st) {
    StageCost& sc = out.stage(st);
    const double P = stage_params[st];
    const double shard = s.zero >= 1 ? P / s.dp : P;
    if (s.offload != Offload::None) {
      sc.cpu_optimizer_seconds = cpu_adam_seconds(p, x.cluster, shard, procs);
      sc.grad_offload_seconds = host_copy_seconds(p, shard * eg, x.host_Bps);
      sc.param_upload_seconds = host_copy_seconds(p, shard * e, x.host_Bps);
    } else {
      sc.optimizer_seconds = gpu_adam_seconds(p, shard, s.precision);
    }
    if ((s.zero == 1 || s.zero == 2) && !p.overlap_param_gather)
      sc.param_allgather_seconds = all_gather_seconds(P * e, links.dp[st], base);
    if (m.tied_embeddings && s.pp > 1 && (st == 0 || st == s.pp - 1)) {
      const double emb_bytes = eg * double(m.vocab) * double(m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden) / s.tp;
      sc.tied_grad_seconds = send_recv_seconds(emb_bytes, links.next[s.pp - 1], base);
    }
  }
  // Gradient-norm all-reduce of one float over every rank (tree), latency-bound.
  const int world = s.world();
  const Link net = x.cluster.nodes > 1 ? x.cluster.network : x.cluster.gpu_link;
  out.set_grad_norm_sync_seconds(world > 1 ? base + 2 * std::ceil(std::log2(double(world))) * net.latency_s : 0);
}

TableCostModel build_cost_model(const Plan& plan, const HardwareProfile& p) {
  CostContext ctx(plan.model, plan.cluster, plan.seq, p);
  TableCostModel t;
  ctx.build(plan.strategy, t);
  return t;
}

}  // namespace planner

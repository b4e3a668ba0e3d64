#include "planner/suggest.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "costmodel/compat.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/predict_detail.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

// The plan with twice the GPUs: twice the nodes, or a full node first; dp
// doubles and gas halves so that the global batch stays (nullopt when gas is odd).
std::optional<Plan> doubled(const Plan& p) {
  if (p.strategy.gas % 2 != 0) return std::nullopt;
  Plan q = p;
  ClusterSpec& c = q.cluster;
  if (c.nodes == 1 && c.gpus_per_node * 2 <= c.gpu.default_gpus_per_node) c.gpus_per_node *= 2;
  else c.nodes *= 2;
  c.name = c.nodes > 1 ? fmt::format("{}x{}x{}", c.nodes, c.gpus_per_node, c.gpu.name)
                       : fmt::format("1x{}x{}", c.gpus_per_node, c.gpu.name);
  q.strategy.dp *= 2;
  q.strategy.gas /= 2;
  return q;
}

}  // namespace

// The keys of `b` that differ from `a`, as strategy text ("ckpt=full,zero=3").
std::string changed_keys(const Strategy& a, const Strategy& b) {
  std::string out;
  auto add = [&](bool differs, std::string kv) {
    if (differs) out += (out.empty() ? "" : ",") + kv;
  };
  add(a.ckpt != b.ckpt, fmt::format("ckpt={}", to_string(b.ckpt)));
  add(a.zero != b.zero, fmt::format("zero={}", b.zero));
  add(a.offload != b.offload, fmt::format("offload={}", to_string(b.offload)));
  add(a.mbs != b.mbs, fmt::format("mbs={} (gas={})", b.mbs, b.gas));
  return out;
}

std::vector<FitChange> cheapest_fixes(const Plan& plan, const HardwareProfile& profile, Engine engine, size_t n) {
  // Checkpointing x ZeRO stage x optimizer offload x micro-batch (halved down
  // to 1, gas up to keep the global batch), on this cluster and on two and
  // four times the GPUs.
  std::vector<std::pair<std::string, Plan>> tries;
  std::vector<std::pair<std::string, Plan>> bases{{"", plan}};
  for (int k = 0; k < 2; ++k)
    if (auto q = doubled(bases.back().second))
      bases.emplace_back(fmt::format("{} GPUs ({}; dp={}, gas={})", q->cluster.world(), q->cluster.name,
                                     q->strategy.dp, q->strategy.gas), *q);
  for (const auto& [where, base] : bases) {
    const Strategy& s = base.strategy;
    std::vector<int> mbs;
    for (int m = s.mbs; m >= 1; m /= 2) {
      if (s.mbs % m == 0) mbs.push_back(m);
      if (m == 1) break;
    }
    for (Ckpt ck : {s.ckpt, Ckpt::Selective, Ckpt::Full}) {
      if (ck != s.ckpt && int(ck) < int(s.ckpt)) continue;
      for (int z = s.zero; z <= 3; ++z) {
        if (z != s.zero && s.dp == 1) continue;  // ZeRO shards over data-parallel ranks only
        for (Offload off : {s.offload, Offload::Optimizer}) {
          if (off != s.offload && (s.offload != Offload::None || z == 0)) continue;
          for (int m : mbs) {
            Plan q = base;
            q.strategy.ckpt = ck, q.strategy.zero = z, q.strategy.offload = off;
            q.strategy.mbs = m, q.strategy.gas = s.gas * (s.mbs / m);
            if (q.strategy == plan.strategy && where.empty()) continue;
            const std::string keys = changed_keys(s, q.strategy);
            tries.emplace_back(where.empty() ? keys : keys.empty() ? where : where + " with " + keys, std::move(q));
          }
        }
      }
    }
  }

  std::vector<FitChange> out;
  PlanUse use;
  use.engine = engine;
  use.simulate = true;
  for (auto& [what, q] : tries) {
    try {
      check_compat(q, use);
      const MemoryReport m = estimate_memory(q, engine, &profile);
      if (!m.fits()) continue;
      const StepPrediction p = predict(q, profile);
      out.push_back({what, q, m.per_gpu_peak_bytes, p.step_seconds});
    } catch (const InputError&) {  // illegal for this model or GPU, or not simulable: not a way out
    }
  }
  // Cheapest: the least GPU time per step (more GPUs cost GPU-hours too).
  std::stable_sort(out.begin(), out.end(), [](const FitChange& a, const FitChange& b) {
    return a.step_seconds * a.plan.cluster.world() < b.step_seconds * b.plan.cluster.world();
  });
  if (out.size() > n) out.resize(n);
  return out;
}

std::string fixes_text(const Plan& plan, const std::vector<FitChange>& fixes, double step_seconds) {
  if (fixes.empty())
    return fmt::format("No change of checkpointing, ZeRO, offload or micro-batch fits, on up to four times the GPUs; "
                       "try planner plan --model {} --gpus CLUSTER to search every strategy\n", plan.model.name);
  std::string out = fmt::format("Cheapest changes that fit, least GPU time per step first (this plan: {:.4f} s):\n",
                                step_seconds);
  for (size_t i = 0; i < fixes.size(); ++i) {
    const auto& f = fixes[i];
    const double cost = step_seconds > 0 ? 100 * (f.step_seconds / step_seconds - 1) : 0;
    const double gpus = double(f.plan.cluster.world()) / double(plan.cluster.world());
    out += fmt::format("  {}. {:<44} step {:.4f} s ({:+.1f}%), peak {}{}\n", i + 1, f.change, f.step_seconds, cost,
                       format_bytes(double(f.peak_bytes)),
                       gpus != 1 && step_seconds > 0
                           ? fmt::format(", GPU-hours {:+.1f}%", 100 * (gpus * f.step_seconds / step_seconds - 1))
                           : std::string());
  }
  return out;
}

std::optional<LargerCluster> smallest_cluster_that_fits(SearchRequest req, int64_t batch_per_gpu) {
  req.top_k = 1;
  req.explain = false;
  req.progress = nullptr;
  const int64_t start = req.cluster.world();
  Plan p{req.model, req.cluster, Strategy{}, req.seq, req.global_batch};
  for (int step = 0; step < 6; ++step) {
    p.strategy.gas = 2;  // doubled() halves gas; the strategy is the search's
    const std::optional<Plan> q = doubled(p);
    if (!q || q->cluster.world() > (int64_t(1) << 20) || q->cluster.world() > 64 * start) break;
    p = *q;
    req.cluster = p.cluster;
    if (batch_per_gpu > 0) req.global_batch = batch_per_gpu * p.cluster.world();
    SearchResult r = search_plans(req);
    if (!r.plans.empty()) return LargerCluster{p.cluster, req.global_batch, std::move(r.plans.front())};
  }
  return std::nullopt;
}

std::string larger_cluster_text(const SearchRequest& req, const std::optional<LargerCluster>& found) {
  if (!found)
    return fmt::format("way out: nothing fits on up to 64 times the GPUs ({} GPUs) at seq {}; try a smaller --seq or "
                       "planner max-model --gpus {} for the largest model that fits\n",
                       64 * req.cluster.world(), req.seq, req.cluster.name);
  return fmt::format("way out: the smallest cluster that fits is {} ({} GPUs): {} at global batch {}, {:.3f} s per "
                     "step (planner plan --model {} --gpus {} --seq {} --global-batch {})\n",
                     found->cluster.name, found->cluster.world(), short_strategy(found->best.plan.strategy),
                     found->global_batch, found->best.prediction.step_seconds, req.model.name, found->cluster.name,
                     req.seq, found->global_batch);
}

}  // namespace planner

#include "planner/max_model.hpp"

#include "costmodel/predict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "costmodel/compat.hpp"
#include "planner/finetune_render.hpp"
#include "planner/render.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

std::vector<Strategy> fit_strategies(const ModelSpec& m, const ClusterSpec& c, Offload max_offload, int mbs) {
  std::vector<Strategy> out;
  const int world = c.world();
  const Precision prec = c.gpu.supports_bf16() ? Precision::BF16 : Precision::FP16;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp || m.heads % tp || m.kv_heads % tp || m.ffn % tp) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp || pp > m.layers) continue;
      const int dp = world / tp / pp;
      for (int zero = 0; zero <= 3; ++zero) {
        if (zero > 0 && dp == 1) continue;  // nothing to shard
        if (zero >= 2 && pp > 1) continue;
        for (int off = 0; off <= int(max_offload); ++off) {
          const Offload offload = Offload(off);
          if (offload == Offload::Optimizer && zero < 1) continue;
          if (offload == Offload::All && zero != 3) continue;
          for (Ckpt ckpt : {Ckpt::None, Ckpt::Selective, Ckpt::Full}) {
            for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
              Strategy s;
              s.dp = dp, s.tp = tp, s.pp = pp, s.zero = zero, s.offload = offload, s.ckpt = ckpt;
              s.mbs = mbs, s.gas = pp, s.precision = prec, s.sp = sp;
              out.push_back(s);
            }
          }
        }
      }
    }
  }
  return out;
}

namespace {

// Lexicographic preference for training speed at equal model size.
auto preference_key(const Strategy& s) {
  return std::make_tuple(int(s.ckpt), int(s.offload), s.tp * s.pp, s.pp, s.zero, s.sp ? 0 : 1);
}

}  // namespace

FitCandidate choose_fit(const ModelSpec& m, const ClusterSpec& c, const std::vector<Strategy>& strategies, int64_t seq,
                        bool* fits, const HardwareProfile* profile_in) {
  const HardwareProfile profile = profile_in ? *profile_in : default_profile(c.gpu);
  std::optional<FitCandidate> best_fit, closest;
  double closest_ratio = 0;
  for (const Strategy& s : strategies) {
    Plan p{m, c, s, seq, s.global_batch()};
    MemoryReport r = estimate_memory(p, Engine::Ours, &profile);
    if (r.fits()) {
      if (!best_fit || preference_key(s) < preference_key(best_fit->plan.strategy)) best_fit = FitCandidate{p, r};
    } else if (!best_fit) {
      const double ratio = std::max(double(r.per_gpu_peak_bytes) / double(std::max<int64_t>(1, r.gpu_usable_bytes())),
                                    double(r.host_peak_bytes) / double(r.host_capacity_bytes));
      if (!closest || ratio < closest_ratio) closest = FitCandidate{p, r}, closest_ratio = ratio;
    }
  }
  *fits = best_fit.has_value();
  if (best_fit) return *best_fit;
  if (!closest) throw InputError(fmt::format("max-model: no legal strategy for {} on {}", m.name, c.name));
  return *closest;
}

MaxModelResult find_max_model(const MaxModelRequest& req) {
  MaxModelResult res;
  res.family = req.family;
  res.cluster = resolve_cluster(req.gpus);
  if (req.host_memory_bytes) res.cluster.host_memory_bytes = *req.host_memory_bytes;
  HardwareProfile profile = load_profile(req.profile_path, res.cluster.gpu);
  check_profile_gpu(profile, res.cluster.gpu, req.profile_any);
  if (!req.headroom.empty()) apply_headroom(req.headroom, profile);
  std::vector<ModelSpec> family = model_family(req.family);
  // Scan from the largest down: the first size that fits is the answer, and the
  // one above it is the size that does not.
  for (int i = int(family.size()) - 1; i >= 0; --i) {
    ModelSpec m = family[i];
    if (m.pos == PosEmbed::Learned && m.max_positions < req.seq) m.max_positions = req.seq;
    auto strategies = fit_strategies(m, res.cluster, req.max_offload, req.mbs);
    if (req.finetune.frozen_base()) {
      // Only the adapters train: ZeRO-1 at most (2/3 save almost nothing), no
      // offload; tp without sp (Strategy::validate).
      std::erase_if(strategies, [](const Strategy& s) {
        return s.zero >= 2 || s.offload != Offload::None || (s.tp > 1 && s.sp);
      });
      for (Strategy& s : strategies) s.finetune = req.finetune;
    }
    // Each candidate goes through the rules that every command applies (the
    // limits on tokens per micro-batch, say, which the enumeration ignores).
    std::erase_if(strategies, [&](const Strategy& s) {
      try {
        check_compat(Plan{m, res.cluster, s, req.seq, s.global_batch()});
        return false;
      } catch (const InputError& e) {
        if (res.refused.empty()) res.refused = e.what();
        return true;
      }
    });
    res.strategies_per_model = std::max<int>(res.strategies_per_model, int(strategies.size()));
    ++res.models_tried;
    if (strategies.empty()) continue;
    bool fits = false;
    FitCandidate cand = choose_fit(m, res.cluster, strategies, req.seq, &fits, &profile);
    if (fits) {
      res.best = cand;
      break;
    }
    res.next_up = cand;  // overwritten until the first that fits: ends as the size just above it
  }
  return res;
}

nlohmann::json max_model_json(const MaxModelResult& r) {
  nlohmann::json j;
  j["cluster"] = r.cluster.name;
  j["family"] = r.family;
  j["models_tried"] = r.models_tried;
  j["strategies_per_model"] = r.strategies_per_model;
  if (!r.refused.empty()) j["refused"] = r.refused;
  if (r.best) {
    const auto& b = *r.best;
    j["model"] = b.plan.model.name;
    j["params"] = b.plan.model.total_params();
    j["strategy"] = b.plan.strategy.to_string();
    j["per_gpu_peak_bytes"] = b.memory.per_gpu_peak_bytes;
    j["memory"] = memory_report_json(b.memory);
    if (b.plan.strategy.finetune.frozen_base()) j["finetune"] = finetune_arithmetic_json(b.plan, b.memory);
    j["model_spec"] = b.plan.model;
  } else {
    j["model"] = nullptr;
    j["params"] = 0;
    j["strategy"] = nullptr;
    j["per_gpu_peak_bytes"] = 0;
  }
  if (r.next_up) {
    const auto& n = *r.next_up;
    j["next_up"] = {{"model", n.plan.model.name},
                    {"params", n.plan.model.total_params()},
                    {"closest_strategy", n.plan.strategy.to_string()},
                    {"per_gpu_peak_bytes", n.memory.per_gpu_peak_bytes},
                    {"gpu_capacity_bytes", n.memory.gpu_capacity_bytes},
                    {"gpu_usable_bytes", n.memory.gpu_usable_bytes()},
                    {"host_peak_bytes", n.memory.host_peak_bytes},
                    {"host_capacity_bytes", n.memory.host_capacity_bytes},
                    {"why", why_not_fits(n.memory)}};
  }
  return j;
}

std::string max_model_table(const MaxModelResult& r) {
  std::string out;
  if (!r.best) {
    out += fmt::format("No model of family '{}' fits on {} with any strategy.\n", r.family, r.cluster.name);
  } else {
    const auto& b = *r.best;
    out += fmt::format("Largest {} model on {}: {} ({} parameters)\n", r.family, r.cluster.name, b.plan.model.name,
                       format_count(double(b.plan.model.total_params())));
    out += fmt::format("  shape: {} layers, hidden {}, {} heads, ffn {}, vocab {}, seq {}\n", b.plan.model.layers,
                       b.plan.model.hidden, b.plan.model.heads, b.plan.model.ffn, b.plan.model.vocab, b.plan.seq);
    out += fmt::format("  strategy: {}\n\n", b.plan.strategy.to_string());
    out += memory_table(b.plan, b.memory);
    out += finetune_arithmetic_text(b.plan, b.memory);
  }
  if (!r.best && !r.refused.empty()) out += fmt::format("Strategies were refused: {}\n", r.refused);
  if (r.best && !r.next_up)
    out += fmt::format("\nThis is the largest size of family '{}'; a larger model may fit too.\n", r.family);
  if (r.next_up) {
    const auto& n = *r.next_up;
    out += fmt::format("\nNext size up, {} ({} parameters), does not fit: {}\n", n.plan.model.name,
                       format_count(double(n.plan.model.total_params())), why_not_fits(n.memory));
    out += fmt::format("  closest strategy: {}\n", n.plan.strategy.to_string());
  }
  out += fmt::format("\n({} sizes tried, up to {} strategies each)\n", r.models_tried, r.strategies_per_model);
  return out;
}

}  // namespace planner

#include "planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "costmodel/compat.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/engines.hpp"
#include "costmodel/long_run.hpp"
#include "costmodel/predict_detail.hpp"
#include "costmodel/simulator.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#include "strategies/search_space.hpp"
#include "strategies/step_program.hpp"

namespace planner {

namespace {

enum Family { kPureDP, kZero3, kTP, kPP, kOffload, kFamilies };

constexpr const char* kFamilyName[kFamilies] = {"pure DP", "ZeRO-3", "TP", "PP", "offload"};
constexpr const char* kFamilyDef[kFamilies] = {
    "tp=1, pp=1, zero=0, no offload: plain data parallelism",
    "zero=3 without offload: fully sharded data parallelism",
    "tp>1, pp=1: tensor parallelism (with DP/ZeRO)",
    "pp>1: pipeline parallelism (with TP/DP)",
    "offload=optimizer or all: optimizer (and parameters) in host memory",
};

uint8_t families_of(const Strategy& s) {
  uint8_t f = 0;
  if (s.tp == 1 && s.pp == 1 && s.cp == 1 && s.zero == 0 && s.offload == Offload::None) f |= 1 << kPureDP;
  if (s.zero == 3 && s.offload == Offload::None) f |= 1 << kZero3;
  if (s.tp > 1 && s.pp == 1) f |= 1 << kTP;
  if (s.pp > 1) f |= 1 << kPP;
  if (s.offload != Offload::None) f |= 1 << kOffload;
  return f;
}

struct Candidate {
  double bound;
  Strategy strategy;
  uint8_t families;
};

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string gap_reason(const StepPrediction& mine, const StepPrediction& best) {
  const double gap = mine.step_seconds - best.step_seconds;
  const std::array<std::pair<const char*, double>, 5> parts{{
      {"compute (recomputation, smaller GEMMs)", mine.compute_seconds - best.compute_seconds},
      {"exposed communication", mine.exposed_comm_seconds - best.exposed_comm_seconds},
      {"pipeline bubble", mine.bubble_seconds - best.bubble_seconds},
      {"optimizer step", mine.optimizer_seconds - best.optimizer_seconds},
      {"host offload copies", mine.offload_seconds - best.offload_seconds},
  }};
  auto worst = std::max_element(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return fmt::format("{:.0f}% slower than the best ({:.3f} s vs {:.3f} s per step), mostly {} (+{:.3f} s)",
                     100 * gap / best.step_seconds, mine.step_seconds, best.step_seconds, worst->first, worst->second);
}

std::string no_fit_reason(const RankedPlan& p) {
  const MemoryReport& m = p.prediction.memory;
  if (!m.gpu_fits)
    return fmt::format("does not fit: even its smallest configuration ({}) needs {} per GPU of {} (largest: {})",
                       p.plan.strategy.to_string(), format_bytes(double(m.per_gpu_peak_bytes)),
                       format_bytes(double(m.gpu_usable_bytes())), to_string(m.binding));
  return fmt::format("does not fit: its smallest configuration ({}) needs {} of host memory per node of {}",
                     p.plan.strategy.to_string(), format_bytes(double(m.host_peak_bytes)),
                     format_bytes(double(m.host_capacity_bytes)));
}

// How far over capacity a plan is (<= 1 fits), for picking a family's "smallest" member.
double overcommit(const MemoryReport& m) {
  const double g = double(m.per_gpu_peak_bytes) / std::max<double>(1, double(m.gpu_usable_bytes()));
  const double h = double(m.host_peak_bytes) / std::max<double>(1, double(m.host_capacity_bytes));
  return std::max(g, h);
}

// Step programs depend on a few of the strategy's fields only; the search
// simulates many strategies of one shape (tp, mbs, ckpt, precision vary).
class ProgramCache {
 public:
  ProgramCache(int64_t layers, bool tied, const HardwareProfile& p) : layers_(layers) {
    opt_.tied_embeddings = tied;
    opt_.overlap_grad_reduce = p.overlap_grad_reduce;
    opt_.overlap_param_gather = p.overlap_param_gather;
  }
  const StepProgram& get(const Strategy& s) {
    const int vpp = s.schedule == Schedule::Interleaved ? s.vpp : 1;
    // The step's end has a reduction over tp (and under sp of the replicated ranges): tp > 1 and sp count too.
    const auto key = std::make_tuple(s.pp, vpp, s.gas, s.zero, int(s.offload), s.dp_cp() > 1, int(s.schedule), s.tp > 1,
                                     s.sp && s.tp > 1, s.cp > 1, s.ep > 1);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(key, build_step_program(s, layers_, opt_)).first->second;
  }

 private:
  int64_t layers_;
  StepOptions opt_;
  std::map<std::tuple<int, int, int, int, int, bool, int, bool, bool, bool, bool>, StepProgram> cache_;
};

}  // namespace

// Settings that change nothing on their plan: ZeRO without data parallelism to
// shard over, SP without TP.
static int needless(const Strategy& s) {
  return (s.dp_cp() == 1 ? s.zero : 0) + (s.tp == 1 && s.sp ? 1 : 0);
}

// `s` with those settings at their least (ZeRO at dp=1 to 0, or 1 where
// offload needs it; SP at tp=1 off): two strategies equal so differ only there.
static Strategy normalized(Strategy s) {
  if (s.dp_cp() == 1) s.zero = s.offload == Offload::None ? 0 : s.offload == Offload::All ? 3 : 1;
  if (s.tp == 1) s.sp = false;
  return s;
}

void apply_allow_option(const std::string& allow, SearchRequest& req) {
  if (allow.empty()) return;  // not given
  for (const std::string& item : split(allow, ',')) {
    const std::string v = to_lower(item);
    if (v == "fp8") req.search_fp8 = true;
    else throw InputError(fmt::format("--allow: '{}' is not one of: fp8", item));
  }
}

namespace {

// The search space's limits: the GPUs, the batch and the model's divisibility.
SpaceLimits space_limits(const SearchRequest& req) {
  SpaceLimits L;
  L.world = req.cluster.world();
  L.global_batch = req.global_batch;
  L.layers = req.model.layers, L.heads = req.model.heads, L.kv_heads = req.model.kv_heads, L.ffn = req.model.ffn;
  L.experts = req.model.moe.experts, L.expert_ffn = req.model.moe.expert_ffn, L.shared_ffn = req.model.moe.shared_ffn;
  L.bf16 = req.cluster.gpu.supports_bf16();
  L.fp16 = req.cluster.gpu.peak_fp16 > 0;
  L.fp32 = req.search_fp32;
  // fp8 where asked and the GPU has it, for what it is modelled for (compat.cpp).
  L.fp8 = req.search_fp8 && req.cluster.gpu.supports_fp8() && req.model.moe.experts == 0 &&
          !req.finetune.frozen_base() && req.engine == Engine::Ours;
  L.max_vpp = req.max_vpp;
  // Context parallelism is searched at long sequences only (seq >= 8192,
  // kCpSearchMinSeq): below, attention is a small share of a layer and cp only
  // adds ring traffic, so the space stays as it was (and as fast).
  L.seq = req.seq;
  if (req.seq >= kCpSearchMinSeq) L.max_cp = L.world;
  return L;
}

// Phase 1: a lower bound for every candidate, sorted by it.
std::vector<Candidate> bound_candidates(const SearchRequest& req, const SpaceLimits& L, CostContext& ctx,
                                        TableCostModel& table) {
  std::vector<Candidate> cands;
  cands.reserve(size_t(count_strategies(L)));
  for_each_strategy(L, [&](const Strategy& full) {
    // Fine-tuning: the same space less what it does not model or run
    // (Strategy::validate: sp, offload, ep); ZeRO-2/3 of the small adapters
    // are legal but not searched (they save almost nothing).
    if (req.finetune.frozen_base() &&
        (full.zero >= 2 || full.offload != Offload::None || full.ep > 1 || (full.tp > 1 && full.sp)))
      return;
    Strategy s = full;
    s.finetune = req.finetune;
    ctx.build(s, table);
    cands.push_back({makespan_lower_bound(table, s.gas), s, families_of(s)});
    if (req.progress && (cands.size() & 0xFFFF) == 0) req.progress(0.5 * cands.size() / cands.capacity(), "bounding");
  });
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; });
  return cands;
}

// What phase 2 keeps: the top plans and, per family (--explain), its fastest
// fitting member and its least over-committed one.
struct Ranking {
  std::vector<std::pair<double, size_t>> top;  // (step seconds, candidate), sorted
  std::array<double, kFamilies> fam_best, fam_small;
  std::array<size_t, kFamilies> fam_best_idx{}, fam_small_idx{};
  std::array<int64_t, kFamilies> fam_count{};
  double run_best = kInf;  // Engine::Ours: the fastest simulated strategy `planner exec` runs
  size_t run_best_idx = 0;
  Ranking() {
    fam_best.fill(kInf);
    fam_small.fill(kInf);
  }
};

// One search's shared state for phase 2 and the winners.
struct Searcher {
  const SearchRequest& req;
  const HardwareProfile& profile;
  const std::vector<Candidate>& cands;
  CostContext& ctx;
  TableCostModel& table;
  SearchResult& out;
  Plan plan;
  PlanUse use;

  Searcher(const SearchRequest& r, const HardwareProfile& p, const std::vector<Candidate>& c, CostContext& x,
           TableCostModel& t, SearchResult& o)
      : req(r), profile(p), cands(c), ctx(x), table(t), out(o),
        plan{r.model, r.cluster, Strategy{}, r.seq, r.global_batch} {
    use.engine = r.engine;
    use.engine_env = r.engine_env;
    use.simulate = true;
  }

  void skip_too_long() {
    if (out.stats.too_long++ == 0)
      out.notes.push_back(fmt::format("skipped strategies with pp*vpp*gas above the simulator's limit of {} "
                                      "micro-batch chunks that could not be extrapolated within it",
                                      kMaxSimulatedChunks));
  }

  // Phase 2: in increasing bound, memory check and simulate while the bound can still win.
  Ranking rank() {
    Ranking k;
    Simulator sim;
    ProgramCache programs(req.model.layers, req.model.tied_embeddings, profile);
    std::vector<int64_t> peaks(cands.size(), -1);  // GPU peak of each simulated candidate
    for (const auto& c : cands)
      for (int f = 0; f < kFamilies; ++f) k.fam_count[f] += (c.families >> f) & 1;
    for (size_t i = 0; i < cands.size(); ++i) {
      const Candidate& c = cands[i];
      const double threshold = k.top.size() < size_t(req.top_k) ? kInf : k.top.back().first;
      bool needed = !req.prune || c.bound < threshold;
      if (!needed && req.explain)
        for (int f = 0; f < kFamilies && !needed; ++f) needed = ((c.families >> f) & 1) && c.bound < k.fam_best[f];
      if (!needed) {
        ++out.stats.pruned;
        if (!req.explain) {  // sorted by bound: nothing after this can win either
          out.stats.pruned += int64_t(cands.size() - i - 1);
          break;
        }
        continue;
      }
      if (req.progress && (i & 0x3FF) == 0) req.progress(0.5 + 0.5 * double(i) / cands.size(), "simulating");
      // check_compat's rule from the runtime: sp splits the sequence over tp.
      if (c.strategy.sp && c.strategy.tp > 1 && c.strategy.cp == 1 && req.seq % c.strategy.tp != 0) continue;
      plan.strategy = c.strategy;
      if (c.strategy.cp > 1 && !context_parallel_problem(plan).empty()) continue;
      // The rules every plan obeys hold by construction (search_space.hpp); the
      // limits of simulating it and of the engine are check_compat's (check_use).
      if (const UseCheck u = check_use(plan, use); u.broken == UseLimit::Simulation) {
        skip_too_long();
        continue;
      } else if (u.broken != UseLimit::None ||
                 (req.runnable && !runtime_gap(req.model, c.strategy, req.seq).empty())) {
        ++out.stats.engine_refused;
        continue;
      }
      const MemoryReport mem = estimate_memory(plan, req.engine, &profile, req.engine_env);
      ++out.stats.memory_checked;
      if (!mem.fits()) {
        ++out.stats.not_fitting;
        const double over = overcommit(mem);
        for (int f = 0; f < kFamilies; ++f)
          if (((c.families >> f) & 1) && over < k.fam_small[f]) k.fam_small[f] = over, k.fam_small_idx[f] = i;
        continue;
      }
      ctx.build(c.strategy, table);
      SimResult r;
      try {
        r = simulate_step(c.strategy, table, [&](int m) -> const StepProgram& {
          Strategy s = c.strategy;
          s.gas = m;
          return programs.get(s);
        }, sim);
      } catch (const InputError&) {  // no periodic regime within the budget (long_run.hpp)
        skip_too_long();
        continue;
      }
      ++out.stats.simulated;
      if (r.deadlock) continue;
      keep(k, peaks, i, r.makespan_seconds, mem.per_gpu_peak_bytes);
    }
    return k;
  }

  // Distinct plans only (issue 28): one whose time coincides with a kept
  // one's and whose memory does too, or which differs from it only on an axis
  // without effect here (zero=1..3 at dp=1, sp at tp=1), is the same plan;
  // the one with fewer such settings stays.
  void keep(Ranking& k, std::vector<int64_t>& peaks, size_t i, double t, int64_t peak) {
    const Candidate& c = cands[i];
    auto same = std::find_if(k.top.begin(), k.top.end(), [&](const auto& e) {
      return std::abs(e.first - t) <= 1e-9 * t &&
             (peaks[e.second] == peak || normalized(cands[e.second].strategy) == normalized(c.strategy));
    });
    peaks[i] = peak;
    if (same != k.top.end()) {
      if (needless(c.strategy) < needless(cands[same->second].strategy)) same->second = i;
    } else if (k.top.size() < size_t(req.top_k) || t < k.top.back().first) {
      k.top.insert(std::upper_bound(k.top.begin(), k.top.end(), std::make_pair(t, i)), {t, i});
      if (k.top.size() > size_t(req.top_k)) k.top.pop_back();
    }
    for (int f = 0; f < kFamilies; ++f)
      if (((c.families >> f) & 1) && t < k.fam_best[f]) k.fam_best[f] = t, k.fam_best_idx[f] = i;
    if (req.engine == Engine::Ours && t < k.run_best && runtime_gap(req.model, c.strategy, req.seq).empty())
      k.run_best = t, k.run_best_idx = i;
  }

  // Engine::Ours ranks what the cost model prices, some of which the runtime
  // does not run (specs/runtime_gap.hpp): each shown plan carries why, and a
  // note names them and the fastest simulated plan `planner exec` runs.
  void exec_note(const Ranking& k) {
    if (req.engine != Engine::Ours) return;
    std::vector<std::string> ranks;
    std::string why;
    int first_run = 0;
    for (size_t r = 0; r < out.plans.size(); ++r) {
      RankedPlan& p = out.plans[r];
      p.exec_gap = runtime_gap(p.plan.model, p.plan.strategy, p.plan.seq);
      if (p.exec_gap.empty()) {
        if (first_run == 0) first_run = int(r + 1);
        continue;
      }
      ranks.push_back(fmt::format("#{}", r + 1));
      if (why.empty()) why = p.exec_gap;
    }
    if (ranks.empty()) return;
    std::string which = ranks[0];
    for (size_t r = 1; r < ranks.size(); ++r) which += (r + 1 == ranks.size() ? " and " : ", ") + ranks[r];
    std::string runs;
    if (first_run > 0) {
      runs = fmt::format("#{} is the fastest shown that it runs", first_run);
    } else if (k.run_best < kInf) {
      const std::optional<RankedPlan> b = full(k.run_best_idx);
      runs = b ? fmt::format("the fastest of the {} simulated that it runs: {} at {:.3f} s", out.stats.simulated,
                             short_strategy(b->plan.strategy), b->prediction.step_seconds)
               : "";
    } else {
      runs = fmt::format("none of the {} simulated strategies is one it runs", out.stats.simulated);
    }
    if (first_run != 1) runs += "; plan --runnable ranks only what it runs";
    const bool one = ranks.size() == 1;
    out.notes.push_back(fmt::format("planner exec does not run {} ({}{}): {} predicted as the cost model prices {}{}{}",
                                    which, why, one ? "" : ", the first's reason", one ? "it is" : "they are",
                                    one ? "it" : "them", runs.empty() ? "" : "; ", runs));
  }

  // A winner, predicted in full (memory, breakdown) and checked against the rules.
  std::optional<RankedPlan> full(size_t i) {
    plan.strategy = cands[i].strategy;
    try {
      check_compat(plan, use);
    } catch (const InputError& e) {
      ++out.stats.rejected;
      out.notes.push_back(fmt::format("rejected {}: {}", plan.strategy.to_string(), e.what()));
      return std::nullopt;
    }
    RankedPlan ranked{plan, {}};
    try {
      ranked.prediction = predict(plan, profile);
    } catch (const InputError& e) {  // not physical (check_physical): never ranked
      ++out.stats.rejected;
      out.notes.push_back(fmt::format("rejected {}: {}", plan.strategy.to_string(), e.what()));
      return std::nullopt;
    }
    if (req.engine != Engine::Ours) {
      ranked.prediction.memory = estimate_memory(plan, req.engine, &profile, req.engine_env);
      if (std::string n = collective_extrapolation_note(profile, plan.strategy); !n.empty())
        ranked.prediction.memory.notes.push_back(n);
      if (std::string n = engine_memory_note(req.engine, req.engine_env); !n.empty())
        ranked.prediction.memory.notes.push_back(std::move(n));
    }
    return ranked;
  }

  // --explain: each family's best member, or why it has none.
  void explain(const Ranking& k, const SpaceLimits& L) {
    const Strategy* winner = out.plans.empty() ? nullptr : &out.plans.front().plan.strategy;
    for (int f = 0; f < kFamilies; ++f) {
      FamilyExplanation e;
      e.family = kFamilyName[f];
      e.definition = kFamilyDef[f];
      e.candidates = k.fam_count[f];
      if (k.fam_count[f] == 0) {
        e.reason = empty_family_reason(f, L);
      } else if (k.fam_best[f] < kInf) {
        e.fits = true;
        e.best = full(k.fam_best_idx[f]);
        e.is_winner = winner && (families_of(*winner) >> f & 1) && e.best && e.best->plan.strategy == *winner;
        if (e.is_winner) e.reason = "holds the best plan";
        else if (e.best && !out.plans.empty()) e.reason = gap_reason(e.best->prediction, out.plans.front().prediction);
      } else if (k.fam_small[f] < kInf) {
        e.smallest = full(k.fam_small_idx[f]);
        if (e.smallest) e.reason = no_fit_reason(*e.smallest);
      } else {
        e.reason = "no member was needed to decide";
      }
      out.families.push_back(std::move(e));
    }
  }

  static std::string empty_family_reason(int f, const SpaceLimits& L) {
    switch (f) {
      case kTP:
        return fmt::format("no strategy: tp>1 must divide the GPUs ({}), the heads ({}), the kv-heads ({}) "
                           "and the FFN width ({})", L.world, L.heads, L.kv_heads, L.ffn);
      case kPP:
        return fmt::format("no strategy: pp>1 must divide the GPUs ({}) with dp dividing the global batch ({})",
                           L.world, L.global_batch);
      case kZero3:  // the search leaves out ZeRO where it shards nothing
        if (L.world == 1)
          return "no strategy: zero=3 without offload shards over data-parallel ranks and there is one GPU "
                 "(zero with offload is the offload family)";
        [[fallthrough]];
      default:
        return fmt::format("no strategy of this family for {} GPUs and a global batch of {}", L.world, L.global_batch);
    }
  }
};

}  // namespace

SearchResult search_plans(const SearchRequest& req) {
  const auto t0 = Clock::now();
  if (req.seq < 1) throw InputError("plan: seq must be at least 1");
  if (req.global_batch < 1) throw InputError("plan: the global batch must be at least 1");
  if (req.top_k < 1) throw InputError("plan: --top must be at least 1");
  req.model.validate();
  req.cluster.validate();
  HardwareProfile profile = req.profile ? *req.profile : load_profile(req.profile_path, req.cluster.gpu);
  const std::string profile_note = req.profile ? "" : check_profile_gpu(profile, req.cluster.gpu, req.profile_any);
  if (!req.headroom.empty()) apply_headroom(req.headroom, profile);
  SearchResult out;
  if (!profile_note.empty()) out.notes.push_back(profile_note);

  const SpaceLimits L = space_limits(req);
  CostContext ctx(req.model, req.cluster, req.seq, profile);
  TableCostModel table;
  const std::vector<Candidate> cands = bound_candidates(req, L, ctx, table);
  out.stats.enumerated = int64_t(cands.size());
  if (cands.empty()) {
    out.notes.push_back(fmt::format("no legal strategy: {} GPUs, global batch {}, {} heads, {} layers",
                                    L.world, L.global_batch, L.heads, L.layers));
    out.stats.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return out;
  }
  Searcher searcher(req, profile, cands, ctx, table, out);
  const Ranking k = searcher.rank();
  for (const auto& [t, i] : k.top)
    if (auto p = searcher.full(i)) out.plans.push_back(std::move(*p));
  searcher.exec_note(k);
  if (req.explain) searcher.explain(k, L);
  // The shown plan with the largest collective group names the extrapolation once.
  {
    const RankedPlan* widest = nullptr;
    auto width = [](const Strategy& s) { return std::max({s.dp_cp(), s.tp, s.pp > 1 ? 2 : 1}); };
    for (const auto& rp : out.plans)
      if (!widest || width(rp.plan.strategy) > width(widest->plan.strategy)) widest = &rp;
    if (widest)
      if (std::string n = collective_extrapolation_note(profile, widest->plan.strategy); !n.empty())
        out.notes.push_back(n);
  }
  if (out.stats.engine_refused > 0)
    out.notes.push_back(fmt::format("{} of the strategies checked were skipped: {} cannot run them",
                                    out.stats.engine_refused, engine_version(req.engine)));
  if (out.plans.empty())
    out.notes.push_back(fmt::format("nothing fits: {} strategies checked, none within {} per GPU", out.stats.enumerated,
                                    format_bytes(double(req.cluster.gpu.memory_bytes))));
  if (req.progress) req.progress(1.0, "done");
  out.stats.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace planner

// `planner plan` (search every strategy, rank what fits) and `planner bench`
// (how fast that search is).
#include <memory>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "costmodel/compat.hpp"
#include "costmodel/engines.hpp"
#include "planner/bench.hpp"
#include "planner/cli.hpp"
#include "planner/plan_rank.hpp"
#include "planner/render.hpp"
#include "planner/search.hpp"
#include "planner/suggest.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

struct PlanCmdOpts {
  PlanOptions plan;
  TrainCostCli cost;
  ProfileCli profile;
  std::string top = "5", output, rank, engine, objective = "throughput", finetune, allow;
  bool explain = false, json = false, quiet = false, with_te = false, runnable = false;
};

// Checks every option before the first search and before anything is written;
// the request (all but the cluster and batch) and the parsed choices.
struct PlanSetup {
  SearchRequest req;
  std::vector<ClusterSpec> clusters;
  int64_t top = 5, rank = 1;
  Objective objective = Objective::Throughput;
  TrainCostOptions cost;
};

PlanSetup plan_setup(const PlanCmdOpts& o) {
  PlanSetup ps;
  SearchRequest& req = ps.req;
  req.model = resolve_model(o.plan.model);
  ps.clusters = resolve_clusters(o.plan.gpus, o.plan.host_memory);
  req.seq = o.plan.seq.empty() ? default_seq(req.model) : parse_seq(o.plan.seq);
  if (ps.clusters.size() > 1 && o.plan.global_batch.empty())
    throw InputError("several --gpus clusters need one --global-batch, so that every plan trains alike");
  if (ps.clusters.size() > 1 && o.explain) throw InputError("--explain takes one --gpus cluster");
  ps.top = parse_capped(o.top, "--top", 1000);
  ps.rank = o.rank.empty() ? 1 : parse_capped(o.rank, "--rank", 1000);
  if (!o.rank.empty() && o.output.empty()) throw InputError("--rank picks the plan that -o writes; give -o too");
  req.engine = o.engine.empty() ? Engine::Ours : parse_engine(o.engine);
  req.engine_env.transformer_engine = o.with_te;
  req.finetune = parse_finetune_option(o.finetune);
  if (o.runnable && req.engine != Engine::Ours)
    throw InputError("--runnable keeps what planner exec runs: it goes with --engine ours, not --engine " + o.engine);
  req.runnable = o.runnable;
  apply_allow_option(o.allow, req);
  ps.objective = parse_objective(o.objective);
  ps.cost = parse_train_cost_options(o.cost.tokens, o.cost.price, o.cost.prices);
  check_objective(ps.objective, ps.cost, ps.clusters);
  if (!o.output.empty()) check_writable(o.output);
  req.top_k = int(std::max(ps.top, ps.rank));
  req.explain = o.explain;
  req.profile_path = o.profile.profile;
  req.profile_any = o.profile.any;
  check_headroom(o.profile.headroom);
  req.headroom = o.profile.headroom;
  if (!o.quiet) {
    // Progress only once the search has run for half a second: quick searches stay quiet.
    req.progress = [last = -1, start = std::chrono::steady_clock::now()](double fraction,
                                                                          std::string_view phase) mutable {
      const int pct = int(fraction * 100);
      if (pct / 10 == last / 10) return;
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500)) return;
      last = pct;
      std::cerr << fmt::format("planner: {} {}%\n", phase, pct) << std::flush;
    };
  }
  return ps;
}

void run_plan_command(const PlanCmdOpts& o, int& exit_code) {
  PlanSetup ps = plan_setup(o);
  SearchRequest& req = ps.req;
  const auto& clusters = ps.clusters;
  const int64_t top = ps.top, rank = ps.rank;
  const Objective objective = ps.objective;
  const TrainCostOptions& cost = ps.cost;
  // The default batch: about 2M tokens per step for a pretraining question
  // (--tokens), else one sequence per GPU; either way listed as assumed.
  const bool pretrain = !o.cost.tokens.empty();
  GivenInputs given = given_inputs(o.plan);
  given.global_batch_rule = pretrain ? fmt::format("about {} tokens per step for pretraining, a multiple of the GPUs",
                                                   format_count(double(kPretrainTokensPerStep)))
                                     : "one sequence per GPU";
  std::vector<ClusterSearch> searches;
  std::vector<std::string> assumed;
  for (const auto& c : clusters) {
    req.cluster = c;
    req.global_batch = !o.plan.global_batch.empty() ? parse_global_batch(o.plan.global_batch)
                       : pretrain                     ? pretrain_batch(req.seq, c.world())
                                                      : c.world();
    Strategy shown;
    shown.finetune = req.finetune;
    for (auto& a : assumed_defaults(Plan{req.model, c, shown, req.seq, req.global_batch}, given))
      if (std::find(assumed.begin(), assumed.end(), a) == assumed.end()) assumed.push_back(std::move(a));
    searches.push_back({c, search_plans(req)});
    if (const std::string n = cluster_notation_note(c); !n.empty()) searches.back().result.notes.push_back(n);
  }
  // Nothing fits on one cluster: name the smallest one that does.
  std::string way_out;
  if (searches.size() == 1 && searches.front().result.plans.empty()) {
    req.cluster = clusters.front();
    const int64_t per_gpu = o.plan.global_batch.empty() && !pretrain ? 1 : 0;
    way_out = larger_cluster_text(req, smallest_cluster_that_fits(req, per_gpu));
  }
  std::vector<RankedEntry> ranked = rank_by_objective(searches, objective, cost);
  if (!o.output.empty()) {
    if (ranked.empty()) throw std::runtime_error("plan: no strategy fits, so no plan was written");
    if (size_t(rank) > ranked.size())
      throw std::runtime_error(fmt::format("plan: only {} plan(s) fit; --rank {} does not exist, nothing written",
                                           ranked.size(), rank));
    save_plan(ranked[size_t(rank) - 1].plan->plan, o.output);
  }
  // The tables show --top plans even when --rank asked the search for more.
  std::vector<ClusterSearch> shown = searches;
  for (auto& s : shown)
    if (s.result.plans.size() > size_t(top)) s.result.plans.resize(size_t(top));
  const std::vector<RankedEntry> shown_ranked = rank_by_objective(shown, objective, cost);
  // Each GPU's calibration: its held-out error, or the band of an uncalibrated GPU.
  std::vector<std::string> calibration;
  for (const auto& c : clusters)
    if (std::string t = step_time_band(c.gpu, band_kind(req.model, req.finetune)).text; std::find(calibration.begin(), calibration.end(), t) == calibration.end())
      calibration.push_back(std::move(t));
  // --engine: what that engine's measured peaks showed against its memory here.
  if (std::string n = engine_memory_note(req.engine, req.engine_env); !n.empty()) calibration.push_back(std::move(n));
  if (o.json) {
    nlohmann::json j = ranked_json(shown, shown_ranked, objective, size_t(top));
    j["calibration_notes"] = calibration;
    j["assumed"] = assumed;
    if (!way_out.empty()) j["way_out"] = way_out.substr(0, way_out.size() - 1);
    emit_report(o.output, j.dump(2) + "\n");
  } else {
    std::string text = assumed_line(assumed) + ranked_table(shown, shown_ranked, objective, size_t(top), o.explain);
    text += way_out;
    for (const auto& note : calibration) text += "note: " + note + "\n";
    emit_report(o.output, text);
  }
  if (!o.output.empty() && o.output != "-" && !o.json)
    std::cout << fmt::format("Wrote the {} plan to {}\n", rank == 1 ? std::string("best")
                                                                      : fmt::format("#{}", rank), o.output);
  exit_code = 0;
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("plan", "Search every strategy, drop what does not fit, rank the rest by throughput, time or cost");
  cmd->footer(
      "Examples:\n"
      "  planner plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --explain\n"
      "  planner plan --model llama-2-70b --gpus 128x8xH100 --seq 4096 --global-batch 1024 --top 10\n"
      "  planner plan --model examples/models/llama-2-7b.json --gpus examples/clusters/4x8xA100.json -o plan.json\n"
      "  planner plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --rank 3 -o third.json\n"
      "  planner plan --model llama-2-7b --gpus 8xH100 --global-batch 512 --tokens 1T --price 2.5\n"
      "  planner plan --model llama-2-7b --gpus 8xA100-80GB,8xH100,32xV100-32GB --global-batch 512 --tokens 1T "
      "--prices prices.json --objective cost\n"
      "  planner plan --model llama-2-7b --gpus 8xA100-80GB --global-batch 512 --engine megatron\n"
      "  planner plan --model mistralai/Mixtral-8x7B-v0.1 --gpus 4x8xH100 --runnable   # only what planner exec runs\n"
      "The space: every dp*tp*pp factorization, ZeRO 0-3, offload, checkpointing, micro-batch size and count,\n"
      "schedule and virtual stages, sequence parallelism and precision where the GPU supports it; context\n"
      "parallelism (cp, ring attention) from --seq 8192 on, every cp with seq a multiple of 2*cp.\n"
      "--objective: throughput (default), time (days to train --tokens) or cost (with --price/--prices). For a\n"
      "fixed token count time ranks as throughput; within one cluster cost does too, so cost differs only across\n"
      "several clusters given as --gpus A,B,C (searched one by one, ranked in one list; needs --global-batch).\n"
      "--engine keeps the strategies that engine can run, judged by the memory it allocates. The default\n"
      "engine, this runtime, is ranked on every strategy the cost model prices; a note names the shown plans\n"
      "planner exec does not run (--json: their exec_gap), and --runnable keeps only the ones it runs.\n"
      "-o writes the best plan, or the --rank K-th of the list.");
  auto o = std::make_shared<PlanCmdOpts>();  // owned by the callback, which the app owns
  cmd->add_option("--model,-m", o->plan.model, "model preset or Hugging Face config.json")->required();
  cmd->add_option("--gpus,-g", o->plan.gpus,
                  "GPUs: NxTYPE or NODESxNxTYPE, or a cluster JSON; several clusters separated by commas")
      ->required();
  cmd->add_option("--seq", o->plan.seq, "sequence length (default: the model's training length, at most 4096)");
  cmd->add_option("--global-batch", o->plan.global_batch,
                  "sequences per step (default: the GPU count; with --tokens about 2M tokens per step)");
  cmd->add_option("--host-memory", o->plan.host_memory, "host memory per node, e.g. 256GiB");
  cmd->add_option("--top", o->top, "how many plans to show (default 5)");
  add_profile_options(cmd, o->profile);
  add_ignore_unmodelled_flag(cmd);
  cmd->add_flag("--explain", o->explain, "say why the best of each family (pure DP, ZeRO-3, TP, PP, offload) lost");
  cmd->add_option("-o,--output", o->output, "write the best plan (or the --rank K-th) to this plan.json");
  cmd->add_option("--rank", o->rank, "with -o: write the K-th plan of the list instead of the best (default 1)");
  cmd->add_option("--objective", o->objective, "rank by throughput (default), time or cost");
  add_engine_option(cmd, o->engine, &o->with_te);
  add_train_cost_options(cmd, o->cost);
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_flag("--quiet,-q", o->quiet, "no progress on stderr");
  cmd->add_option("--allow", o->allow,
                  "also search these choices, comma-separated: fp8 (FP8 linear GEMMs where the GPU has FP8)");
  cmd->add_option("--finetune", o->finetune,
                  "lora or qlora: adapters on a frozen base (with lora_* keys: qlora,lora_r=64,lora_targets=q+v)");
  cmd->add_flag("--runnable", o->runnable,
                "rank only strategies planner exec runs (without it, plans the cost model prices but the runtime does "
                "not run are ranked too, and a note names them)");
  cmd->callback([o, &exit_code] { run_plan_command(*o, exit_code); });
  return cmd;
}

CLI::App* add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Time the strategy search (candidates per second, wall time)");
  cmd->footer(
      "Examples:\n"
      "  planner bench\n"
      "  planner bench --model gpt2-xl --gpus 2xRTX3090 --seq 1024 --global-batch 32 --repeats 10 --json\n"
      "Default: the full search for llama-2-70b on 128x8xH100, seq 4096, global batch 1024.");
  struct Opts {
    std::string model = "llama-2-70b", gpus = "128x8xH100", seq = "4096", global_batch = "1024", repeats = "3";
    bool explain = false, no_prune = false, json = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("--model,-m", o->model, "model (default llama-2-70b)");
  cmd->add_option("--gpus,-g", o->gpus, "GPUs (default 128x8xH100)");
  cmd->add_option("--seq", o->seq, "sequence length (default 4096)");
  cmd->add_option("--global-batch", o->global_batch, "global batch (default 1024)");
  cmd->add_option("--repeats", o->repeats, "searches to time (default 3)");
  cmd->add_flag("--explain", o->explain, "time the search with --explain");
  cmd->add_flag("--no-prune", o->no_prune,
                "time the search without the lower-bound pruning (every fitting strategy simulated)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    BenchRequest req;
    req.model = o->model;
    req.gpus = o->gpus;
    req.seq = parse_seq(o->seq);
    req.global_batch = parse_global_batch(o->global_batch);
    req.repeats = int(parse_capped(o->repeats, "--repeats", 1000));
    req.explain = o->explain;
    req.prune = !o->no_prune;
    BenchResult r = run_bench(req);
    emit("", o->json ? bench_json(r).dump(2) + "\n" : bench_text(r));
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

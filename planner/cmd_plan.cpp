// `planner plan` (search every strategy, rank what fits) and `planner bench`
// (how fast that search is).
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "costmodel/compat.hpp"
#include "planner/bench.hpp"
#include "planner/cli.hpp"
#include "planner/search.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

CLI::App* add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("plan", "Search every strategy, drop what does not fit, rank the rest by throughput");
  cmd->footer(
      "Examples:\n"
      "  planner plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --explain\n"
      "  planner plan --model llama-2-70b --gpus 128x8xH100 --seq 4096 --global-batch 1024 --top 10\n"
      "  planner plan --model examples/models/llama-2-7b.json --gpus examples/clusters/4x8xA100.json -o plan.json\n"
      "The space: every dp*tp*pp factorization, ZeRO 0-3, offload, checkpointing, micro-batch size and count,\n"
      "schedule and virtual stages, sequence parallelism and precision where the GPU supports it.");
  struct Opts {
    PlanOptions plan;
    std::string top = "5", profile, output;
    bool explain = false, json = false, quiet = false;
  };
  auto* o = new Opts;
  cmd->add_option("--model,-m", o->plan.model, "model preset or Hugging Face config.json")->required();
  cmd->add_option("--gpus,-g", o->plan.gpus, "GPUs: NxTYPE or NODESxNxTYPE, or a cluster JSON")->required();
  cmd->add_option("--seq", o->plan.seq, "sequence length (default: the model's training length)");
  cmd->add_option("--global-batch", o->plan.global_batch, "sequences per step (default: the GPU count)");
  cmd->add_option("--host-memory", o->plan.host_memory, "host memory per node, e.g. 256GiB");
  cmd->add_option("--top", o->top, "how many plans to show (default 5)");
  cmd->add_option("--profile", o->profile, "hardware profile JSON (default: the GPU catalog's)");
  cmd->add_flag("--explain", o->explain, "say why the best of each family (pure DP, ZeRO-3, TP, PP, offload) lost");
  cmd->add_option("-o,--output", o->output, "write the best plan to this plan.json (for predict --plan and exec)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_flag("--quiet,-q", o->quiet, "no progress on stderr");
  cmd->callback([o, &exit_code] {
    SearchRequest req;
    req.model = resolve_model(o->plan.model);
    req.cluster = resolve_cluster(o->plan.gpus);
    if (!o->plan.host_memory.empty()) req.cluster.host_memory_bytes = parse_bytes(o->plan.host_memory, "--host-memory");
    req.seq = o->plan.seq.empty() ? (req.model.default_seq > 0 ? req.model.default_seq : 1024)
                                  : parse_seq(o->plan.seq);
    req.global_batch = o->plan.global_batch.empty() ? req.cluster.world() : parse_global_batch(o->plan.global_batch);
    const int64_t top = parse_int(o->top, "--top");
    req.top_k = int(std::min<int64_t>(top, 1000));
    req.explain = o->explain;
    req.profile_path = o->profile;
    if (!o->quiet) {
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
    SearchResult r = search_plans(req);
    if (!o->output.empty()) {
      if (r.plans.empty()) throw std::runtime_error("plan: no strategy fits, so no plan was written");
      save_plan(r.plans.front().plan, o->output);
    }
    emit("", o->json ? search_result_json(r).dump(2) + "\n" : search_result_table(r, o->explain));
    if (!o->output.empty() && !o->json) std::cout << fmt::format("Wrote the best plan to {}\n", o->output);
    exit_code = 0;
  });
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
    bool explain = false, json = false;
  };
  auto* o = new Opts;
  cmd->add_option("--model,-m", o->model, "model (default llama-2-70b)");
  cmd->add_option("--gpus,-g", o->gpus, "GPUs (default 128x8xH100)");
  cmd->add_option("--seq", o->seq, "sequence length (default 4096)");
  cmd->add_option("--global-batch", o->global_batch, "global batch (default 1024)");
  cmd->add_option("--repeats", o->repeats, "searches to time (default 3)");
  cmd->add_flag("--explain", o->explain, "time the search with --explain");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    BenchRequest req;
    req.model = o->model;
    req.gpus = o->gpus;
    req.seq = parse_seq(o->seq);
    req.global_batch = parse_global_batch(o->global_batch);
    req.repeats = int(std::min<int64_t>(parse_int(o->repeats, "--repeats"), 1000));
    req.explain = o->explain;
    BenchResult r = run_bench(req);
    emit("", o->json ? bench_json(r).dump(2) + "\n" : bench_text(r));
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

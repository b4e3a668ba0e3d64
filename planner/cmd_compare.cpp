// `planner compare`: the best plan of each cluster in one table, ranked by cost
// or time to train (planner/compare.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "costmodel/compat.hpp"
#include "planner/cli.hpp"
#include "planner/compare.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

CLI::App* add_compare_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("compare", "Best plan on each of several clusters, in one table ranked by cost or time");
  cmd->footer(
      "Examples:\n"
      "  planner compare --model llama-2-7b --gpus 8xA100-80GB,8xH100,32xV100-32GB --tokens 1T "
      "--prices examples/prices/v100-a100-h100.json\n"
      "  planner compare --model llama-2-7b --gpus 8xA100-80GB,2x8xH100,16xV100-32GB --tokens 300B --price 2.0 --json\n"
      "  planner compare --model gpt2-xl --gpus 2xRTX3090,2xRTX4090,1xA100-80GB --global-batch 32 --seq 1024\n"
      "Each cluster is searched as 'planner plan' does and its best plan kept. Ranked by cost with --price or\n"
      "--prices (per GPU-hour; prices.json: {\"H100\": 2.5, \"A100-80GB\": 1.8}), else by time to train --tokens,\n"
      "else by throughput. Every cluster trains the same --global-batch at the same --seq (default: the model's\n"
      "training length, at most 4096). The default batch is about 2M tokens per step (a pretraining question),\n"
      "a multiple of every cluster's GPU count, or of each cluster's own count when they have no common multiple\n"
      "near that; the assumed: line says which. headroom = GPU memory - predicted peak.");
  struct Opts {
    std::string model, gpus, seq, global_batch, host_memory, profile, engine, finetune, allow;
    TrainCostCli cost;
    bool json = false, profile_any = false, with_te = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("--model,-m", o->model, "model preset or Hugging Face config.json")->required();
  cmd->add_option("--gpus,-g", o->gpus, "clusters separated by commas, each NxTYPE or NODESxNxTYPE (or one cluster JSON)")->required();
  cmd->add_option("--seq", o->seq, "sequence length (default: the model's training length, at most 4096)");
  cmd->add_option("--global-batch", o->global_batch,
                  "sequences per step on every cluster (default: about 2M tokens per step, see below)");
  cmd->add_option("--host-memory", o->host_memory, "host memory per node, e.g. 256GiB");
  cmd->add_option("--profile", o->profile, "hardware profile JSON (default: each GPU's catalog profile)");
  cmd->add_flag("--profile-any", o->profile_any, "apply a --profile measured on another GPU or the CPU (refused otherwise)");
  add_engine_option(cmd, o->engine, &o->with_te);
  cmd->add_option("--allow", o->allow, "also search: fp8 (FP8 linear GEMMs on the GPUs that have FP8)");
  cmd->add_option("--finetune", o->finetune, "lora or qlora: compare fine-tuning with adapters on a frozen base");
  add_ignore_unmodelled_flag(cmd);
  add_train_cost_options(cmd, o->cost);
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    SearchRequest req;
    req.model = resolve_model(o->model);
    const std::vector<ClusterSpec> clusters = resolve_clusters(o->gpus, o->host_memory);
    req.seq = o->seq.empty() ? default_seq(req.model) : parse_seq(o->seq);
    GivenInputs given;
    given.seq = !o->seq.empty();
    given.global_batch = !o->global_batch.empty();
    given.host_memory = !o->host_memory.empty();
    const std::vector<int64_t> batches =
        given.global_batch ? std::vector<int64_t>(clusters.size(), parse_global_batch(o->global_batch))
                           : default_compare_batches(clusters, req.seq, &given.global_batch_rule);
    req.engine = o->engine.empty() ? Engine::Ours : parse_engine(o->engine);
    req.engine_env.transformer_engine = o->with_te;
    req.finetune = parse_finetune_option(o->finetune);
    apply_allow_option(o->allow, req);
    req.profile_path = o->profile;
    req.profile_any = o->profile_any;
    const TrainCostOptions cost = parse_train_cost_options(o->cost.tokens, o->cost.price, o->cost.prices);
    CompareResult r = compare_clusters(req, clusters, batches, cost);
    for (size_t i = 0; i < clusters.size(); ++i)
      for (auto& a : assumed_defaults(Plan{req.model, clusters[i], [&] { Strategy t; t.finetune = req.finetune; return t; }(),
                                           req.seq, batches[i]}, given))
        if (std::find(r.assumed.begin(), r.assumed.end(), a) == r.assumed.end()) r.assumed.push_back(std::move(a));
    emit("", o->json ? compare_json(r).dump(2) + "\n" : compare_table(r));
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

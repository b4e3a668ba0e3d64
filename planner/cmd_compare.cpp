// `planner compare`: the best plan of each cluster in one table, ranked by cost
// or time to train (planner/compare.hpp).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

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
      "else by throughput. Every cluster trains the same --global-batch (default: the least common multiple\n"
      "of the GPU counts) at the same --seq (default: the model's). headroom = GPU memory - predicted peak.");
  struct Opts {
    std::string model, gpus, seq, global_batch, host_memory, profile, engine;
    TrainCostCli cost;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("--model,-m", o->model, "model preset or Hugging Face config.json")->required();
  cmd->add_option("--gpus,-g", o->gpus, "clusters separated by commas, each NxTYPE or NODESxNxTYPE (or one cluster JSON)")->required();
  cmd->add_option("--seq", o->seq, "sequence length (default: the model's training length)");
  cmd->add_option("--global-batch", o->global_batch,
                  "sequences per step on every cluster (default: least common multiple of the GPU counts)");
  cmd->add_option("--host-memory", o->host_memory, "host memory per node, e.g. 256GiB");
  cmd->add_option("--profile", o->profile, "hardware profile JSON (default: each GPU's catalog profile)");
  add_engine_option(cmd, o->engine);
  add_train_cost_options(cmd, o->cost);
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    SearchRequest req;
    req.model = resolve_model(o->model);
    const std::vector<ClusterSpec> clusters = resolve_clusters(o->gpus, o->host_memory);
    req.seq = o->seq.empty() ? (req.model.default_seq > 0 ? req.model.default_seq : 1024) : parse_seq(o->seq);
    const int64_t global_batch =
        o->global_batch.empty() ? default_compare_batch(clusters) : parse_global_batch(o->global_batch);
    req.engine = o->engine.empty() ? Engine::Ours : parse_engine(o->engine);
    req.profile_path = o->profile;
    const TrainCostOptions cost = parse_train_cost_options(o->cost.tokens, o->cost.price, o->cost.prices);
    const CompareResult r = compare_clusters(req, clusters, global_batch, cost);
    emit("", o->json ? compare_json(r).dump(2) + "\n" : compare_table(r));
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

// `planner max-model`: the largest model of a family that fits.
#include <memory>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/finetune.hpp"
#include "planner/cli.hpp"
#include "planner/max_model.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

CLI::App* add_max_model_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("max-model", "The largest model of a family that fits on the GPUs with any strategy");
  cmd->footer(
      "Examples:\n"
      "  planner max-model --gpus 2xRTX3090\n"
      "  planner max-model --gpus 2xRTX3090 --offload all --host-memory 256GiB\n"
      "  planner max-model --gpus 8xA100-80GB --family llama-2 --seq 4096 --json\n"
      "  planner max-model --gpus 2xRTX3090 --headroom 1GiB --profile rtx3090.json\n"
      "  planner max-model --gpus 2xRTX3090 --finetune qlora --seq 512\n"
      "Families: gpt (width and depth scaled together), gpt2, gpt-neo, opt, llama-2.");
  struct Opts {
    std::string gpus, family = "gpt", offload = "none", seq = "2048", mbs = "1", host_memory, finetune;
    ProfileCli profile;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("--gpus,-g", o->gpus, "GPUs: NxTYPE or NODESxNxTYPE, or a cluster JSON")->required();
  cmd->add_option("--family,-f", o->family, "model family (default gpt)");
  cmd->add_option("--offload", o->offload, "the most offload allowed: none, optimizer or all (default none)");
  cmd->add_option("--seq", o->seq, "sequence length (default 2048)");
  cmd->add_option("--mbs", o->mbs, "micro-batch size (default 1)");
  cmd->add_option("--host-memory", o->host_memory, "host memory per node, e.g. 256GiB");
  cmd->add_option("--finetune", o->finetune,
                  "lora or qlora: the largest model to fine-tune with adapters on a frozen base (default: full training)");
  add_profile_options(cmd, o->profile);
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    MaxModelRequest req;
    req.gpus = o->gpus;
    req.family = o->family;
    const std::string off = to_lower(o->offload);
    if (off == "none") req.max_offload = Offload::None;
    else if (off == "optimizer") req.max_offload = Offload::Optimizer;
    else if (off == "all") req.max_offload = Offload::All;
    else throw InputError(fmt::format("--offload '{}' is not one of none, optimizer, all", o->offload));
    req.seq = parse_seq(o->seq);
    const int64_t mbs = parse_int(o->mbs, "--mbs");
    if (mbs > 65536) throw InputError(fmt::format("--mbs {} is too large", mbs));
    req.mbs = int(mbs);
    if (!o->host_memory.empty()) req.host_memory_bytes = parse_bytes(o->host_memory, "--host-memory");
    check_headroom(o->profile.headroom);
    req.profile_path = o->profile.profile;
    req.profile_any = o->profile.any;
    req.headroom = o->profile.headroom;
    req.finetune = parse_finetune_option(o->finetune);
    MaxModelResult r = find_max_model(req);
    // The same training every answer models (compat.hpp assumed_defaults).
    Strategy trained;
    trained.finetune = req.finetune;
    const std::string training = finetune_assumed(trained);
    if (o->json) {
      nlohmann::json j = max_model_json(r);
      j["assumed"] = {training};
      emit("", j.dump(2) + "\n");
    } else {
      emit("", "assumed: " + training + "\n" + max_model_table(r));
    }
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

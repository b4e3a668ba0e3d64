// `planner export plan.json --to deepspeed|megatron|fsdp`: the engine's
// configuration for the plan and its launch line.
#include <memory>
#include <fmt/format.h>

#include <iostream>

#include "costmodel/compat.hpp"
#include "planner/cli.hpp"
#include "planner/render.hpp"
#include "planner/export.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

std::string default_export_file(Engine e) {
  switch (e) {
    case Engine::DeepSpeed: return "ds_config.json";
    case Engine::Megatron: return "megatron_args.txt";
    case Engine::Fsdp: return "fsdp_config.json";
    case Engine::Ours: break;
  }
  return "plan.json";
}

std::string torchrun_prefix(const ClusterSpec& c) {
  if (c.nodes == 1) return fmt::format("torchrun --nproc-per-node {}", c.gpus_per_node);
  return fmt::format("torchrun --nnodes {} --nproc-per-node {} --node-rank $NODE_RANK --master-addr $MASTER_ADDR "
                     "--master-port 29500",
                     c.nodes, c.gpus_per_node);
}

ExportResult export_plan(const Plan& plan, Engine engine, const std::string& file, const std::string& plan_file,
                         const EngineEnv& env) {
  if (engine == Engine::Ours)
    throw InputError("export: --to takes deepspeed, megatron or fsdp (the plan file itself is what ours runs)");
  PlanUse use;
  use.engine = engine;
  use.engine_env = env;
  check_compat(plan, use);  // an engine's gap names the search that finds a plan it runs
  ExportResult r;
  switch (engine) {
    case Engine::DeepSpeed: r = export_deepspeed(plan, file, plan_file); break;
    case Engine::Megatron: r = export_megatron(plan, file); break;
    default: r = export_fsdp(plan, file); break;
  }
  // A configuration of a plan predicted not to fit is still written (the
  // prediction may be wrong), but says so.
  const MemoryReport m = estimate_memory(plan, engine, nullptr, env);
  if (!m.fits())
    r.notes.insert(r.notes.begin(), fmt::format("this plan is predicted NOT to fit as {} allocates it: {}",
                                                engine_version(engine), why_not_fits(m)));
  return r;
}

CLI::App* add_export_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("export", "Write a plan as a DeepSpeed, Megatron-LM or PyTorch FSDP configuration");
  cmd->footer(
      "Examples:\n"
      "  planner export plan.json --to deepspeed -o ds_config.json\n"
      "  planner export plan.json --to megatron -o megatron_args.txt\n"
      "  planner export plan.json --to fsdp --json\n"
      "  planner export qlora_plan.json --to peft -o peft_config.json\n"
      "  planner predict --model llama-2-7b --gpus 8xH100 --strategy tp=2,zero=1,mbs=2 --global-batch 256 -o p.json"
      " && planner export p.json --to megatron\n"
      "deepspeed: a DeepSpeed config (ZeRO stage, offload, micro-batch, accumulation, precision, checkpointing)\n"
      "  and its deepspeed launcher line; megatron: pretrain_gpt.py arguments (TP, PP, virtual stages, sequence\n"
      "  parallel, recompute, distributed optimizer or Megatron-FSDP, batch, precision, model shape) and a\n"
      "  torchrun line; fsdp: PyTorch DDP/FSDP2 settings (sharding, mixed precision, offload, TP plan,\n"
      "  checkpointing) as JSON and a torchrun line. Versions: DeepSpeed 0.19.8, Megatron-LM core_v0.19.0,\n"
      "  PyTorch 2.13. Without -o the configuration goes to stdout, then the launch line.\n"
      "Exit codes: 0 written, 2 bad input or a strategy the engine cannot express (one line naming what it lacks).");
  struct Opts {
    std::string plan, to, output;
    bool json = false, with_te = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("plan", o->plan, "plan.json (from plan -o, predict -o or memory -o)")->required();
  cmd->add_option("--to", o->to, "deepspeed, megatron, fsdp or peft (LoRA/QLoRA plans)")->required();
  cmd->add_option("-o,--output", o->output, "write the configuration here (the launch line refers to it)");
  cmd->add_flag("--with-te", o->with_te,
                 "Transformer Engine (or apex) is installed where Megatron runs: sequence parallelism is exported "
                 "(without, megatron-core's local layers refuse it: exit 2)");
  cmd->add_flag("--json", o->json, "machine-readable: {engine, version, file, config, args, launch, notes}");
  cmd->callback([o, &exit_code] {
    if (to_lower(o->to) == "peft") {  // not an engine of its own: a configuration for the user's PEFT script
      const Plan plan = load_plan(o->plan);
      check_compat(plan);
      if (!o->output.empty()) check_writable(o->output);
      const ExportResult r = export_peft(plan, o->output);
      if (!o->output.empty()) write_file_atomically(o->output, r.file_text);
      std::string out = o->json ? nlohmann::json{{"engine", "peft"}, {"file", r.file}, {"config", r.config},
                                                 {"launch", r.launch}, {"notes", r.notes}}.dump(2) + "\n"
                                : (o->output.empty() ? fmt::format("# PEFT configuration ({}; -o writes it)\n{}\n", r.file, r.file_text)
                                                     : fmt::format("Wrote the PEFT configuration to {}\n", o->output)) +
                                      fmt::format("launch: {}\n", r.launch);
      if (!o->json)
        for (const auto& n : r.notes) out += fmt::format("note: {}\n", n);
      emit_report(o->output, out);
      exit_code = 0;
      return;
    }
    const Engine engine = parse_engine(o->to);
    const Plan plan = load_plan(o->plan);
    if (!o->output.empty()) check_writable(o->output);
    EngineEnv env;
    env.transformer_engine = o->with_te;
    const ExportResult r = export_plan(plan, engine, o->output, o->plan, env);
    if (!o->output.empty()) write_file_atomically(o->output, r.file_text);
    if (o->json) {
      nlohmann::json j{{"engine", to_string(engine)}, {"version", engine_version(engine)}, {"file", r.file},
                       {"config", r.config},          {"launch", r.launch},                 {"notes", r.notes}};
      if (engine == Engine::Megatron) j["args"] = r.args;
      if (!o->output.empty()) j["written"] = o->output;
      emit_report(o->output, j.dump(2) + "\n");
    } else {
      std::string out;
      if (o->output.empty()) {
        out += fmt::format("# {} configuration ({}; -o writes it)\n{}\n", engine_version(engine), r.file, r.file_text);
      } else {
        out += fmt::format("Wrote the {} configuration to {}\n", engine_version(engine), o->output);
      }
      out += fmt::format("launch: {}\n", r.launch);
      for (const auto& n : r.notes) out += fmt::format("note: {}\n", n);
      emit_report(o->output, out);
    }
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

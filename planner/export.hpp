#pragma once
// `planner export plan.json --to deepspeed|megatron|fsdp`: what that engine
// needs to run the plan's strategy, and a one-line launch command.
//
//   deepspeed  a DeepSpeed config JSON (ZeRO stage, offload, micro-batch,
//              accumulation, precision, activation checkpointing, AutoTP size,
//              pipeline stages) and its `deepspeed` launcher line
//   megatron   Megatron-LM arguments for pretrain_gpt.py (model shape, TP, PP,
//              virtual stages, sequence parallel, recompute, distributed
//              optimizer / Megatron-FSDP, batch, precision) and a torchrun line
//   fsdp       PyTorch settings (device mesh, DDP / ZeroRedundancyOptimizer /
//              FSDP2 fully_shard with its mixed precision and offload policy,
//              tensor parallel plan, activation checkpointing) as JSON and a
//              torchrun line for scripts/engines/fsdp_train.py (the model
//              spec rides along under "model")
// The launch lines name this repository's trainers (scripts/engines/), which
// run each export as written on synthetic tokens.
//
// Versions targeted: costmodel/engines.hpp. A strategy or model the engine
// cannot express is refused with engine_gap's one line (InputError).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "costmodel/engines.hpp"
#include "specs/plan.hpp"

namespace planner {

struct ExportResult {
  Engine engine = Engine::DeepSpeed;
  std::string file;                 // where the launch line expects the file (-o, or a default name)
  std::string file_text;            // what -o writes
  nlohmann::json config;            // deepspeed/fsdp: the JSON written; megatron: {"args": [...]}
  std::vector<std::string> args;    // megatron: the arguments, one flag or value each
  std::string launch;               // one line
  std::vector<std::string> notes;   // what the user's side must do
};

// The default file name for an engine ("ds_config.json", "megatron_args.txt", "fsdp_config.json").
std::string default_export_file(Engine e);

// Throws InputError (exit 2) naming what the engine lacks. `file` is where the
// config will be written (for the launch line); empty: the default name.
// `plan_file`: the plan's path, which the DeepSpeed launch line passes to
// scripts/engines/deepspeed_train.py (--plan; empty: "plan.json").
ExportResult export_plan(const Plan& plan, Engine engine, const std::string& file = "", const std::string& plan_file = "",
                         const EngineEnv& env = {});

// One engine each (export_deepspeed.cpp, export_megatron.cpp, export_fsdp.cpp);
// the plan is known to be expressible.
ExportResult export_deepspeed(const Plan& plan, const std::string& file, const std::string& plan_file = "");
ExportResult export_megatron(const Plan& plan, const std::string& file);
ExportResult export_fsdp(const Plan& plan, const std::string& file);
// `--to peft` (export_peft.cpp): a LoRA/QLoRA plan as PEFT's LoraConfig, for
// QLoRA a BitsAndBytesConfig, and the Trainer's batch settings; peft_gap says
// what PEFT under the Trainer cannot express ("" when it can).
std::string peft_gap(const Plan& plan);
ExportResult export_peft(const Plan& plan, const std::string& file);

// The torch dtype name of a working precision ("bfloat16", "float16", "float32").
const char* torch_dtype(Precision p);

// "torchrun --nproc-per-node 8 [--nnodes N --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port 29500]"
std::string torchrun_prefix(const ClusterSpec& c);

}  // namespace planner

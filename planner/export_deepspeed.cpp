// DeepSpeed 0.19.8 config for a plan. Keys as DeepSpeed's config parser reads
// them (deepspeed/runtime/config.py, runtime/zero/config.py, runtime/
// tensor_parallel/config.py, get_pipeline_config); tests/cli/export_deepspeed.sh
// feeds the result to DeepSpeedConfig itself.
#include <fmt/format.h>

#include "planner/export.hpp"

namespace planner {

ExportResult export_deepspeed(const Plan& plan, const std::string& file, const std::string& plan_file) {
  const Strategy& s = plan.strategy;
  const ClusterSpec& c = plan.cluster;
  ExportResult r;
  r.engine = Engine::DeepSpeed;
  r.file = file;
  nlohmann::json& j = r.config;
  j["train_batch_size"] = plan.global_batch;  // = micro-batch x accumulation x dp, which DeepSpeed checks
  j["train_micro_batch_size_per_gpu"] = s.mbs;
  j["gradient_accumulation_steps"] = s.gas;
  j["gradient_clipping"] = 1.0;
  // The runtime's optimizer: AdamW; with offload DeepSpeed swaps in its DeepSpeedCPUAdam.
  j["optimizer"] = {{"type", "AdamW"},
                    {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1}}}};
  if (s.precision == Precision::BF16) j["bf16"] = {{"enabled", true}};
  if (s.precision == Precision::FP16)
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16}};  // dynamic loss scaling
  // Buckets at DeepSpeed's defaults, written out because --engine deepspeed
  // counts them; overlap_comm keeps gradient reduction behind the backward as
  // this planner's simulator assumes (it costs a second reduce buffer).
  nlohmann::json z = {{"stage", s.zero}};
  if (s.zero >= 1) {
    z["overlap_comm"] = true;
    z["contiguous_gradients"] = true;
    z["reduce_bucket_size"] = 500000000;
    z["allgather_bucket_size"] = 500000000;
  }
  if (s.zero == 3) {
    z["stage3_prefetch_bucket_size"] = 50000000;
    z["stage3_param_persistence_threshold"] = 100000;
  }
  if (s.offload != Offload::None) z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (s.offload == Offload::All) z["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  j["zero_optimization"] = z;
  if (s.ckpt == Ckpt::Full) {
    // Used by deepspeed.checkpointing.checkpoint, which the model calls per layer.
    j["activation_checkpointing"] = {{"partition_activations", false},
                                     {"cpu_checkpointing", false},
                                     {"contiguous_memory_optimization", false},
                                     {"synchronize_checkpoint_boundary", false}};
    r.notes.push_back(
        "activation checkpointing: recompute every layer - call model.gradient_checkpointing_enable() "
        "(Hugging Face) or wrap each layer in deepspeed.checkpointing.checkpoint");
  }
  if (s.tp > 1) {
    j["tensor_parallel"] = {{"autotp_size", s.tp}};
    r.notes.push_back(fmt::format("tensor parallelism: AutoTP shards a Hugging Face model {} ways "
                                  "(tensor_parallel.autotp_size)", s.tp));
  }
  if (s.pp > 1) {
    j["pipeline"] = {{"stages", s.pp}, {"partition", "uniform"},
                     {"activation_checkpoint_interval", s.ckpt == Ckpt::Full ? 1 : 0}};
    r.notes.push_back(fmt::format("pipeline: build the model as deepspeed.pipe.PipelineModule(layers, num_stages={}, "
                                  "partition_method=\"uniform\") and train with engine.train_batch()", s.pp));
  }
  if (r.file.empty()) r.file = default_export_file(Engine::DeepSpeed);
  r.file_text = j.dump(2) + "\n";
  std::string launcher = fmt::format("deepspeed --num_gpus {}", c.gpus_per_node);
  if (c.nodes > 1) launcher = fmt::format("deepspeed --hostfile hostfile --num_nodes {} --num_gpus {}", c.nodes,
                                          c.gpus_per_node);
  r.launch = fmt::format("{} scripts/engines/deepspeed_train.py --plan {} --deepspeed --deepspeed_config {}", launcher,
                         plan_file.empty() ? "plan.json" : plan_file, r.file);
  r.notes.insert(r.notes.begin(), "scripts/engines/deepspeed_train.py (this repository) builds the plan's model and "
                                  "passes this config to deepspeed.initialize() on synthetic tokens; your own "
                                  "train.py does the same with your data (DeepSpeed has no stock trainer)");
  if (s.tp > 1 || s.pp > 1)
    r.notes.push_back("scripts/engines/deepspeed_train.py refuses AutoTP and pipeline configs (they need a Hugging "
                      "Face model or a PipelineModule)");
  if (c.nodes > 1) r.notes.push_back("hostfile lists the nodes, one line each: 'host slots=N'");
  return r;
}

}  // namespace planner

// PyTorch 2.13 settings for a plan: DDP (zero=0), DDP with
// ZeroRedundancyOptimizer (zero=1), FSDP2 fully_shard (zero=2: keep the
// unsharded weights from forward to backward, reshard_after_forward=False;
// zero=3: reshard after forward), MixedPrecisionPolicy, CPUOffloadPolicy
// (offload=all), DTensor tensor/sequence parallelism on a 2-D device mesh.
// Argument names are those of torch.distributed.fsdp.fully_shard,
// MixedPrecisionPolicy, CPUOffloadPolicy, DistributedDataParallel and
// torch.distributed.tensor.parallel; the user's train.py applies them.
#include <fmt/format.h>

#include "planner/export.hpp"

namespace planner {

const char* torch_dtype(Precision p) {
  switch (p) {
    case Precision::BF16:
    case Precision::FP8: return "bfloat16";  // engine_gap refuses fp8 exports; its working dtype
    case Precision::FP16: return "float16";
    case Precision::FP32: return "float32";
  }
  return "float32";
}

ExportResult export_fsdp(const Plan& plan, const std::string& file) {
  const Strategy& s = plan.strategy;
  ExportResult r;
  r.engine = Engine::Fsdp;
  r.file = file.empty() ? default_export_file(Engine::Fsdp) : file;
  nlohmann::json& j = r.config;
  j["format"] = "planner-fsdp";
  j["torch"] = ">=2.6 (fully_shard in torch.distributed.fsdp); written for 2.13";
  j["world_size"] = plan.cluster.world();
  j["device_mesh"] = s.tp > 1 ? nlohmann::json{{"shape", {s.dp, s.tp}}, {"dim_names", {"dp", "tp"}}}
                              : nlohmann::json{{"shape", {s.dp}}, {"dim_names", {"dp"}}};
  j["global_batch_size"] = plan.global_batch;
  j["micro_batch_size"] = s.mbs;
  j["gradient_accumulation_steps"] = s.gas;
  j["seq_length"] = plan.seq;
  // The model itself (the plan's spec), so scripts/engines/fsdp_train.py builds it from this file alone.
  j["model"] = plan.model;
  j["optimizer"] = {{"class", "torch.optim.AdamW"}, {"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1},
                    {"fused", true}};
  j["zero_stage"] = s.zero;
  const bool low = s.precision != Precision::FP32;
  if (s.zero <= 1) {
    // fp32 weights (their own master copy) under torch.autocast; gradient
    // buckets as views of the gradients, which saves a gradient-sized copy.
    j["data_parallel"] = s.zero == 0 ? "DistributedDataParallel" : "DistributedDataParallel+ZeroRedundancyOptimizer";
    j["ddp"] = {{"gradient_as_bucket_view", true}, {"bucket_cap_mb", 25}};
    if (s.zero == 1) j["zero_redundancy_optimizer"] = {{"optimizer_class", "torch.optim.AdamW"}};
    j["autocast"] = low ? nlohmann::json{{"dtype", torch_dtype(s.precision)}} : nlohmann::json(nullptr);
    if (s.precision == Precision::FP16) j["grad_scaler"] = "torch.amp.GradScaler";
  } else {
    j["data_parallel"] = "fully_shard";
    nlohmann::json fs = {{"reshard_after_forward", s.zero == 3},
                         {"units", "each transformer block, then the root module"}};
    fs["mp_policy"] = low ? nlohmann::json{{"param_dtype", torch_dtype(s.precision)}, {"reduce_dtype", "float32"}}
                          : nlohmann::json(nullptr);
    fs["offload_policy"] = s.offload == Offload::All
                               ? nlohmann::json{{"class", "CPUOffloadPolicy"}, {"pin_memory", true}}
                               : nlohmann::json(nullptr);
    j["fully_shard"] = fs;
    if (s.precision == Precision::FP16)
      j["grad_scaler"] = "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler";
  }
  if (s.tp > 1) {
    // torch.distributed.tensor.parallel styles with the layouts between them
    // written out: without them the default Replicate output of a row-wise
    // layer meets a sequence-sharded residual under sp and the add fails on
    // its shapes. Under sp the residual stream stays sharded on the sequence
    // (Shard(1)); each block gathers it in front of its column-wise layers and
    // its row-wise layers reduce-scatter back (Korthikanti et al. 2022, sec. 4.2.2).
    const char* seq_sharded = "Shard(1)";
    nlohmann::json plan_styles;
    if (s.sp) {
      plan_styles = {
          {"embedding", fmt::format("RowwiseParallel(input_layouts=Replicate(), output_layouts={})", seq_sharded)},
          {"norms", "SequenceParallel()"},
          {"attention", fmt::format("PrepareModuleInput(input_layouts=({},), desired_input_layouts=(Replicate(),))",
                                    seq_sharded)},
          {"attention.q/k/v", "ColwiseParallel()"},
          {"attention.out", fmt::format("RowwiseParallel(output_layouts={})", seq_sharded)},
          {"mlp", fmt::format("PrepareModuleInput(input_layouts=({},), desired_input_layouts=(Replicate(),))",
                              seq_sharded)},
          {"mlp.up/gate", "ColwiseParallel()"},
          {"mlp.down", fmt::format("RowwiseParallel(output_layouts={})", seq_sharded)},
          {"lm_head", fmt::format("ColwiseParallel(input_layouts={}, output_layouts=Replicate())", seq_sharded)}};
    } else {
      plan_styles = {{"embedding", "RowwiseParallel(input_layouts=Replicate())"},
                     {"attention.q/k/v", "ColwiseParallel()"},
                     {"attention.out", "RowwiseParallel()"},
                     {"mlp.up/gate", "ColwiseParallel()"},
                     {"mlp.down", "RowwiseParallel()"},
                     {"lm_head", "ColwiseParallel(output_layouts=Replicate())"}};
    }
    j["tensor_parallel"] = {{"size", s.tp}, {"sequence_parallel", s.sp}, {"parallelize_module_plan", plan_styles}};
    r.notes.push_back("tensor_parallel: attention modules must use the local head count (heads / tp) when they "
                      "reshape q, k and v");
  }
  j["activation_checkpointing"] = s.ckpt == Ckpt::Full        ? "full"
                                  : s.ckpt == Ckpt::Selective ? "selective"
                                                              : "none";
  if (s.ckpt == Ckpt::Full)
    r.notes.push_back("activation_checkpointing full: wrap each transformer block in "
                      "torch.utils.checkpoint.checkpoint(..., use_reentrant=False)");
  if (s.ckpt == Ckpt::Selective)
    r.notes.push_back("activation_checkpointing selective: checkpoint only the attention core "
                      "(scaled_dot_product_attention), as Megatron's selective recompute");
  r.file_text = j.dump(2) + "\n";
  r.launch = fmt::format("{} scripts/engines/fsdp_train.py --fsdp-config {}", torchrun_prefix(plan.cluster), r.file);
  r.notes.insert(r.notes.begin(), "scripts/engines/fsdp_train.py (this repository) builds the model and device mesh "
                                  "and applies these settings on synthetic tokens; your own train.py can read the "
                                  "same file (PyTorch has no stock trainer)");
  return r;
}

}  // namespace planner

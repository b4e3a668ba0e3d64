// A LoRA/QLoRA plan as Hugging Face PEFT and bitsandbytes settings: a
// LoraConfig (peft.LoraConfig: r, lora_alpha, lora_dropout, target_modules,
// bias, task_type; the fields of the adapter_config.json it saves), for QLoRA
// a BitsAndBytesConfig (transformers: load_in_4bit, bnb_4bit_quant_type "nf4",
// bnb_4bit_use_double_quant, bnb_4bit_compute_dtype; the QLoRA paper's
// recipe), and the Trainer's batch settings. PEFT under the Trainer runs data
// parallelism (DDP) only: tp, pp, ZeRO and selective recomputation are refused.
#include <fmt/format.h>

#include "planner/export.hpp"
#include "strategies/errors.hpp"

namespace planner {


std::string peft_gap(const Plan& plan) {
  const Strategy& s = plan.strategy;
  if (!s.finetune.frozen_base()) return "--to peft needs a plan with finetune=lora or finetune=qlora";
  if (s.tp > 1 || s.pp > 1)
    return fmt::format("PEFT with the Trainer runs data parallelism only (DDP), not tp={} pp={}", s.tp, s.pp);
  if (s.zero >= 1 && s.dp > 1) return "PEFT with the Trainer's DDP does not shard the adapters' optimizer states (zero=0)";
  if (s.ckpt == Ckpt::Selective)
    return "the Trainer's gradient_checkpointing recomputes whole layers (ckpt=full or none), not selective";
  return "";
}

ExportResult export_peft(const Plan& plan, const std::string& file) {
  if (const std::string gap = peft_gap(plan); !gap.empty()) throw InputError("export: " + gap);
  const Strategy& s = plan.strategy;
  const ModelSpec& m = plan.model;
  ExportResult r;
  r.file = file.empty() ? "peft_config.json" : file;
  // Module names of the Hugging Face implementations: LLaMA-style (q_proj, ...,
  // gate_proj, up_proj, down_proj) for gated MLPs, OPT-style (out_proj, fc1,
  // fc2) otherwise.
  const bool gated = m.mlp == MlpKind::SwiGlu;
  std::vector<std::string> modules;
  const Finetune& f = s.finetune;
  if (f.targets & kLoraQ) modules.push_back("q_proj");
  if (f.targets & kLoraK) modules.push_back("k_proj");
  if (f.targets & kLoraV) modules.push_back("v_proj");
  if (f.targets & kLoraO) modules.push_back(gated ? "o_proj" : "out_proj");
  if (f.targets & kLoraMlp) {
    if (gated) modules.insert(modules.end(), {"gate_proj", "up_proj", "down_proj"});
    else modules.insert(modules.end(), {"fc1", "fc2"});
  }
  nlohmann::json& j = r.config;
  j["format"] = "planner-peft";
  j["lora_config"] = {{"peft_type", "LORA"},     {"task_type", "CAUSAL_LM"}, {"r", f.r},
                      {"lora_alpha", f.alpha},   {"lora_dropout", 0.0},      {"bias", "none"},
                      {"target_modules", modules}};
  if (f.quantized_base())
    j["bnb_config"] = {{"load_in_4bit", true},
                       {"bnb_4bit_quant_type", "nf4"},
                       {"bnb_4bit_use_double_quant", true},
                       {"bnb_4bit_compute_dtype", torch_dtype(s.precision)}};
  j["training_arguments"] = {{"per_device_train_batch_size", s.mbs},
                             {"gradient_accumulation_steps", s.gas},
                             {"gradient_checkpointing", s.ckpt == Ckpt::Full},
                             {"bf16", s.precision == Precision::BF16},
                             {"fp16", s.precision == Precision::FP16},
                             {"optim", "adamw_torch"}};
  j["max_seq_length"] = plan.seq;
  j["world_size"] = plan.cluster.world();
  r.file_text = j.dump(2) + "\n";
  r.launch = fmt::format("{} train.py --peft-config {}", torchrun_prefix(plan.cluster), r.file);
  r.notes.push_back(fmt::format("target_modules follow the Hugging Face {} module names; check them against "
                                "model.named_modules() of {}", gated ? "LLaMA" : "OPT", m.name));
  r.notes.push_back("train.py (yours) builds LoraConfig(**lora_config)" +
                    std::string(f.quantized_base() ? ", loads the model with BitsAndBytesConfig(**bnb_config)" : "") +
                    " and TrainingArguments(**training_arguments)");
  return r;
}

}  // namespace planner

#include "planner/finetune_render.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/finetune.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

FinetuneArithmetic finetune_arithmetic(const Plan& plan, const MemoryReport& r) {
  const Strategy& s = plan.strategy;
  const StageMemory& sm = r.stages.at(r.peak_stage);
  FinetuneArithmetic a;
  a.stage = sm.stage;
  a.layers = sm.layers;
  a.base_params = double(sm.params);
  a.nf4_params = s.finetune.quantized_base() ? double(sm.layers) * double(matrix_params_per_layer(plan.model, s.tp)) : 0;
  a.base_bytes = frozen_base_bytes(plan.model, s, a.base_params, sm.layers);
  a.dequant_bytes = s.finetune.quantized_base() && sm.layers > 0
                        ? double(bytes_per_element(s.precision)) * double(largest_matrix_per_rank(plan.model, s.tp))
                        : 0;
  a.adapter_params = trainable_params_per_rank(plan.model, s, a.base_params, sm.layers);
  const auto& g = sm.gpu;
  a.adapter_state_bytes = double(g[int(MemCategory::Parameters)]) - a.base_bytes - a.dequant_bytes +
                          double(g[int(MemCategory::Gradients)]) + double(g[int(MemCategory::OptimizerStates)]);
  a.activation_bytes = double(g[int(MemCategory::Activations)]);
  a.logits_bytes = double(g[int(MemCategory::LogitsLoss)]);
  a.other_bytes = double(g[int(MemCategory::CommBuffers)]) + double(g[int(MemCategory::Overhead)]);
  a.peak_bytes = double(sm.gpu_peak_bytes);
  a.usable_bytes = double(r.gpu_usable_bytes());
  return a;
}

std::string finetune_arithmetic_text(const Plan& plan, const MemoryReport& r) {
  const Strategy& s = plan.strategy;
  if (!s.finetune.frozen_base()) return "";
  const FinetuneArithmetic a = finetune_arithmetic(plan, r);
  const char* prec = to_string(s.precision);
  std::string out = fmt::format("Fine-tuning arithmetic ({}, one GPU of stage {}: {} layers{}):\n",
                                to_string(s.finetune.mode), a.stage, a.layers,
                                s.tp > 1 ? fmt::format(", 1/{} of each matrix", s.tp) : "");
  if (s.finetune.quantized_base()) {
    out += fmt::format("  frozen base     {} params: {} in layer matrices x {:.3f} bits (NF4, double-quantized absmax) "
                       "+ {} others (embedding, head, norms) x {} bytes ({}) = {}\n",
                       format_count(a.base_params), format_count(a.nf4_params), kNf4BitsPerParam,
                       format_count(a.base_params - a.nf4_params), bytes_per_element(s.precision), prec,
                       format_bytes(a.base_bytes));
    out += fmt::format("  dequantisation  one layer matrix at a time in {}: {}\n", prec, format_bytes(a.dequant_bytes));
  } else {
    out += fmt::format("  frozen base     {} params x {} bytes ({}) = {}, no gradients, no optimizer states\n",
                       format_count(a.base_params), bytes_per_element(s.precision), prec, format_bytes(a.base_bytes));
  }
  const double opt_shard = s.zero >= 1 ? double(s.dp) : 1.0;
  out += fmt::format("  adapters        r={} on {}: {} params x ({} + {} + {}{} bytes: weight, gradient, AdamW states) = {}\n",
                     s.finetune.r, targets_to_string(s.finetune.targets), format_count(a.adapter_params),
                     bytes_per_element(s.precision), bytes_per_element(s.precision),
                     s.precision == Precision::FP32 ? 8 : 12, opt_shard > 1 ? fmt::format("/{}", s.dp) : "",
                     format_bytes(a.adapter_state_bytes));
  out += fmt::format("  activations     seq {} x mbs {}, ckpt={}, {} micro-batches in flight: {}\n", plan.seq, s.mbs,
                     to_string(s.ckpt), r.stages.at(size_t(a.stage)).inflight_microbatches,
                     format_bytes(a.activation_bytes));
  if (a.logits_bytes > 0) out += fmt::format("  logits and loss {}\n", format_bytes(a.logits_bytes));
  out += fmt::format("  buffers, CUDA context, workspaces: {}\n", format_bytes(a.other_bytes));
  out += fmt::format("  total           {} of {} usable ({})\n", format_bytes(a.peak_bytes), format_bytes(a.usable_bytes),
                     a.peak_bytes <= a.usable_bytes ? "fits" : "does not fit");
  return out;
}

nlohmann::json finetune_arithmetic_json(const Plan& plan, const MemoryReport& r) {
  const FinetuneArithmetic a = finetune_arithmetic(plan, r);
  const Finetune& f = plan.strategy.finetune;
  return nlohmann::json{{"mode", to_string(f.mode)},
                        {"lora_r", f.r},
                        {"lora_alpha", f.alpha},
                        {"lora_targets", targets_to_string(f.targets)},
                        {"stage", a.stage},
                        {"frozen_params", a.base_params},
                        {"nf4_params", a.nf4_params},
                        {"nf4_bits_per_param", f.quantized_base() ? kNf4BitsPerParam : 0.0},
                        {"frozen_base_bytes", a.base_bytes},
                        {"dequant_buffer_bytes", a.dequant_bytes},
                        {"adapter_params", a.adapter_params},
                        {"adapter_state_bytes", a.adapter_state_bytes},
                        {"activation_bytes", a.activation_bytes},
                        {"logits_bytes", a.logits_bytes},
                        {"other_bytes", a.other_bytes},
                        {"peak_bytes", a.peak_bytes},
                        {"usable_bytes", a.usable_bytes}};
}

}  // namespace planner

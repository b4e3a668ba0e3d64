// predict(): first version, a roofline stand-in until the step simulator lands.
#include "costmodel/predict.hpp"

#include <nlohmann/json.hpp>

#include "costmodel/flops.hpp"

namespace planner {

StepPrediction predict(const Plan& plan, const std::string& /*profile_path*/) {
  StepPrediction p;
  const auto& g = plan.cluster.gpu;
  double peak = plan.strategy.precision == Precision::FP32 ? g.peak_fp32
                : plan.strategy.precision == Precision::FP16 ? g.peak_fp16 : g.peak_bf16;
  if (peak <= 0) peak = g.peak_fp16 > 0 ? g.peak_fp16 : g.peak_fp32;
  const double tokens = double(plan.global_batch) * double(plan.seq);
  p.model_flops_per_step = model_flops(plan.model, plan.seq, int64_t(tokens));
  p.hardware_flops_per_step = hardware_flops(plan.model, plan.seq, int64_t(tokens), plan.strategy.ckpt);
  const double world = plan.strategy.world();
  const double eff = g.gemm_efficiency > 0 ? g.gemm_efficiency : 0.7;
  p.compute_seconds = p.hardware_flops_per_step / (world * peak * eff);
  p.step_seconds = p.compute_seconds;
  p.samples_per_second = double(plan.global_batch) / p.step_seconds;
  p.tokens_per_second = tokens / p.step_seconds;
  p.tflops_per_gpu = p.model_flops_per_step / p.step_seconds / world / 1e12;
  p.hw_tflops_per_gpu = p.hardware_flops_per_step / p.step_seconds / world / 1e12;
  p.mfu = p.model_flops_per_step / p.step_seconds / world / peak;
  p.memory = estimate_memory(plan);
  return p;
}

nlohmann::json prediction_json(const StepPrediction& p) {
  nlohmann::json j;
  j["step_seconds"] = p.step_seconds;
  j["samples_per_second"] = p.samples_per_second;
  j["tokens_per_second"] = p.tokens_per_second;
  j["model_flops_per_step"] = p.model_flops_per_step;
  j["hardware_flops_per_step"] = p.hardware_flops_per_step;
  j["tflops_per_gpu"] = p.tflops_per_gpu;
  j["hw_tflops_per_gpu"] = p.hw_tflops_per_gpu;
  j["mfu"] = p.mfu;
  j["fits"] = p.memory.fits();
  j["per_gpu_peak_bytes"] = p.memory.per_gpu_peak_bytes;
  j["breakdown"] = {{"compute_seconds", p.compute_seconds},
                    {"exposed_comm_seconds", p.exposed_comm_seconds},
                    {"bubble_seconds", p.bubble_seconds},
                    {"optimizer_seconds", p.optimizer_seconds},
                    {"offload_seconds", p.offload_seconds}};
  j["memory"] = memory_report_json(p.memory);
  return j;
}

}  // namespace planner

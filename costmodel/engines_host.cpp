#include "costmodel/engines_host.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "costmodel/engines.hpp"
#include "costmodel/engines_time.hpp"
#include "specs/plan.hpp"
#include "strategies/errors.hpp"

namespace planner {

#define PLANNER_ENGINE_HOST_FIELDS(X)                                                                          \
  X(eager_layer_swiglu_s) X(eager_layer_gelu_s) X(eager_outer_gelu_s) X(deepspeed_z1_tensor_s)                \
  X(deepspeed_z2_tensor_s) X(deepspeed_z12_tail_tensor_s) X(deepspeed_z3_module_pass_s)                       \
  X(deepspeed_z3_tensor_pass_s) X(deepspeed_z3_tail_tensor_s) X(fsdp_z2_tensor_s) X(fsdp_z3_tensor_s)         \
  X(fsdp_z2_tail_tensor_s) X(fsdp_z3_tail_tensor_s) X(dtensor_z2_linear_s) X(dtensor_z3_linear_s)             \
  X(dtensor_z2_tail_tensor_s) X(dtensor_z3_tail_tensor_s) X(megatron_layer_s) X(megatron_tail_s)

nlohmann::json engine_host_to_json(const EngineHostConstants& c) {
  nlohmann::json j;
  j["source"] = c.source;
#define X(f) j[#f] = c.f;
  PLANNER_ENGINE_HOST_FIELDS(X)
#undef X
  return j;
}

EngineHostConstants engine_host_from_json(const nlohmann::json& j, const EngineHostConstants& base) {
  if (!j.is_object()) throw InputError("profile: 'engine_host' must be an object");
  EngineHostConstants c = base;
  c.from_profile = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "source") {
      if (!it->is_string()) throw InputError("profile: engine_host.source must be a string");
      c.source = it->get<std::string>();
      continue;
    }
    double* field = nullptr;
#define X(f) if (k == #f) field = &c.f;
    PLANNER_ENGINE_HOST_FIELDS(X)
#undef X
    if (!field) throw InputError(fmt::format("profile: engine_host has an unknown key '{}'", k));
    if (!it->is_number() || it->get<double>() < 0)
      throw InputError(fmt::format("profile: engine_host.{} must be a number of seconds >= 0", k));
    *field = it->get<double>();
  }
  return c;
}

double eager_host_seconds(const ModelSpec& m, const EngineHostConstants& c) {
  if (m.mlp == MlpKind::SwiGlu) return c.eager_layer_swiglu_s * double(m.layers);
  return c.eager_layer_gelu_s * double(m.layers) + c.eager_outer_gelu_s;
}

namespace {

// Full recomputation runs each layer's forward again in the backward: half
// of the eager host work is taken as the forward's (not measured apart).
double eager_with_recompute(const Plan& plan, const EngineHostConstants& c) {
  const double eager = eager_host_seconds(plan.model, c);
  return plan.strategy.ckpt == Ckpt::Full ? eager * 1.5 : eager;
}

EngineHostWork deepspeed_host(const Plan& plan, const EngineHostConstants& c) {
  const Strategy& s = plan.strategy;
  const double tensors = double(torch_model_param_tensors(plan.model));
  const double modules = double(torch_model_param_modules(plan.model));
  const double eager = eager_with_recompute(plan, c);
  EngineHostWork h;
  if (s.zero == 3) {
    const double passes = s.ckpt == Ckpt::Full ? 3 : 2;
    h.micro_batch_seconds =
        eager + passes * (c.deepspeed_z3_module_pass_s * modules + c.deepspeed_z3_tensor_pass_s * tensors);
    h.tail_seconds = c.deepspeed_z3_tail_tensor_s * tensors;
    h.formula = fmt::format("eager {:.4f} s + {:g} passes x ({:.3g} ms x {:g} submodules + {:.3g} ms x {:g} tensors); "
                            "tail {:.3g} ms x {:g} tensors", eager, passes, 1e3 * c.deepspeed_z3_module_pass_s,
                            modules, 1e3 * c.deepspeed_z3_tensor_pass_s, tensors,
                            1e3 * c.deepspeed_z3_tail_tensor_s, tensors);
    return h;
  }
  const double per_tensor = s.zero == 2 ? c.deepspeed_z2_tensor_s : c.deepspeed_z1_tensor_s;
  h.micro_batch_seconds = eager + per_tensor * tensors;
  h.tail_seconds = c.deepspeed_z12_tail_tensor_s * tensors;
  h.formula = fmt::format("eager {:.4f} s + {:.3g} ms x {:g} tensors; tail {:.3g} ms x {:g} tensors", eager,
                          1e3 * per_tensor, tensors, 1e3 * c.deepspeed_z12_tail_tensor_s, tensors);
  return h;
}

EngineHostWork fsdp_host(const Plan& plan, const EngineHostConstants& c) {
  const Strategy& s = plan.strategy;
  const double tensors = double(torch_model_param_tensors(plan.model));
  const double eager = eager_with_recompute(plan, c);
  EngineHostWork h;
  if (s.zero < 2) {  // DDP / ZeroRedundancyOptimizer: no probe; the eager model's host alone
    h.micro_batch_seconds = eager;
    h.formula = fmt::format("eager {:.4f} s (DDP's hooks run in C++; not probed)", eager);
    return h;
  }
  const bool z3 = s.zero == 3;
  const double per_tensor = z3 ? c.fsdp_z3_tensor_s : c.fsdp_z2_tensor_s;
  h.micro_batch_seconds = eager + per_tensor * tensors;
  double tail_tensor = z3 ? c.fsdp_z3_tail_tensor_s : c.fsdp_z2_tail_tensor_s;
  h.formula = fmt::format("eager {:.4f} s + {:.3g} ms x {:g} tensors", eager, 1e3 * per_tensor, tensors);
  if (s.tp > 1) {
    const double linears = double(dtensor_module_calls(plan.model, false));
    const double per_linear = z3 ? c.dtensor_z3_linear_s : c.dtensor_z2_linear_s;
    h.micro_batch_seconds += per_linear * linears;
    tail_tensor = z3 ? c.dtensor_z3_tail_tensor_s : c.dtensor_z2_tail_tensor_s;
    h.formula += fmt::format(" + DTensor {:.3g} ms x {:g} linears", 1e3 * per_linear, linears);
  }
  h.tail_seconds = tail_tensor * tensors;
  h.formula += fmt::format("; tail {:.3g} ms x {:g} tensors", 1e3 * tail_tensor, tensors);
  return h;
}

EngineHostWork megatron_host(const Plan& plan, const EngineHostConstants& c) {
  const double layers = double(plan.model.layers) / plan.strategy.pp;
  EngineHostWork h;
  h.micro_batch_seconds = c.megatron_layer_s * layers;
  h.tail_seconds = c.megatron_tail_s;
  h.formula = fmt::format("{:.3g} ms x {:g} layers of the stage (eager included); tail {:.3g} s",
                          1e3 * c.megatron_layer_s, layers, c.megatron_tail_s);
  return h;
}

}  // namespace

EngineHostWork engine_host_work(const Plan& plan, const EngineHostConstants& c, Engine engine) {
  switch (engine) {
    case Engine::DeepSpeed: return deepspeed_host(plan, c);
    case Engine::Fsdp: return fsdp_host(plan, c);
    case Engine::Megatron: return megatron_host(plan, c);
    case Engine::Ours: break;
  }
  return {};
}

// stage_1_and_2.py (0.19.8): with overlap_comm, independent_gradient_partition_epilogue
// synchronizes the device after each micro-batch's backward at ZeRO-2 (and at
// the accumulation boundary at ZeRO-1, whose micro-batches are alike): the
// host's enqueueing and the GPU's work overlap within a micro-batch, never
// across the sync. The step then runs the host's tail (norm, bookkeeping)
// and the GPU's optimizer and parameter all-gather, which the step's closing
// sync waits for (host time equals wall time in every DeepSpeed run, probe6).
double deepspeed_zero12_step(int gas, const EngineHostWork& h, const EngineGpuWork& g) {
  return double(gas) * std::max(h.micro_batch_seconds, g.micro_batch_seconds(gas)) + h.tail_seconds +
         g.tail_seconds;
}

// fsdp_train.py's step has no host sync (clip_grads stays on the GPU; FSDP2
// orders its streams by events): the host enqueues ahead, and the step ends
// when the GPU has run what the host enqueued last, the optimizer (probe6:
// wall - host = 0.01-0.08 s), or when the GPU finishes its own work where
// that is longer.
double fsdp_step(int gas, const EngineHostWork& h, const EngineGpuWork& g) {
  const double host = double(gas) * h.micro_batch_seconds + h.tail_seconds + g.tail_seconds;
  return std::max(host, g.step_seconds);
}

// megatron-core's train_step: forward_backward_func enqueues the micro-batches
// (under pp each batched p2p exchange synchronizes, config.batch_p2p_sync),
// then the optimizer's grad-norm reads back a value (a host sync) before
// the update; per micro-batch the longer of the two, the tail after.
double megatron_step(int gas, double bubble_scale, const EngineHostWork& h, const EngineGpuWork& g) {
  return double(gas) * std::max(h.micro_batch_seconds * bubble_scale, g.micro_batch_seconds(gas)) + h.tail_seconds +
         g.tail_seconds;
}

double windowed_passes_seconds(const std::vector<ModuleWork>& modules, int events) {
  const size_t lag = size_t(events) + 2;  // fetch i waits for the GPU to finish module i - (events + 2)
  std::vector<double> gpu_end(modules.size(), 0);
  double host = 0, gpu = 0;
  for (size_t i = 0; i < modules.size(); ++i) {
    if (i >= lag) host = std::max(host, gpu_end[i - lag]);
    host += modules[i].host;
    gpu = std::max(gpu + modules[i].gpu, host);  // its kernels start as enqueued, end no earlier than the enqueue
    gpu_end[i] = gpu;
  }
  return std::max(host, gpu);
}

namespace {

// torch_model.py's submodules with parameters in forward order, each with
// its parameter tensors and its GEMM work per token (weights' elements;
// attention's core, causal: about seq x hidden, taken with the output
// projection that follows it).
struct ModuleShape {
  double tensors = 0, gemm = 0;
};

std::vector<ModuleShape> forward_modules(const Plan& plan) {
  const ModelSpec& m = plan.model;
  const double h = double(m.hidden), kv = double(m.kv_dim()), f = double(m.ffn);
  const double norm = m.norm == NormKind::RmsNorm ? 1 : 2;
  std::vector<ModuleShape> out{{1, 0}};  // embedding
  if (m.pos == PosEmbed::Learned) out.push_back({1, 0});
  const double qkv_b = m.qkv_bias ? 1 : 0, mlp_b = m.mlp_bias ? 1 : 0;
  for (int64_t l = 0; l < m.layers; ++l) {
    out.push_back({norm, 0});
    out.push_back({1 + qkv_b, h * h});
    out.push_back({1 + qkv_b, h * kv});
    out.push_back({1 + qkv_b, h * kv});
    out.push_back({1 + (m.out_bias ? 1.0 : 0.0), h * h + double(plan.seq) * h / 2});
    for (int n = 2; n < m.norms_per_layer() + 1; ++n) out.push_back({norm, 0});
    if (m.mlp == MlpKind::SwiGlu) out.push_back({1 + mlp_b, h * f});
    out.push_back({1 + mlp_b, h * f});
    out.push_back({1 + mlp_b, h * f});
  }
  if (m.final_norm) out.push_back({norm, 0});
  out.push_back({(m.tied_embeddings ? 0.0 : 1.0) + (m.lm_head_bias ? 1 : 0), h * double(m.vocab)});
  return out;
}

}  // namespace

std::vector<ModuleWork> zero3_module_work(const Plan& plan, const EngineHostConstants& c, double gpu_micro_batch) {
  const std::vector<ModuleShape> fwd = forward_modules(plan);
  double gemm = 0;
  for (const auto& s : fwd) gemm += s.gemm;
  const bool recompute = plan.strategy.ckpt == Ckpt::Full;
  const double n = double(fwd.size());
  const double eager_pass = eager_host_seconds(plan.model, c) / 2 / n;  // per module per pass
  // GPU: forward one third of the micro-batch, backward two thirds (a
  // recomputed forward one more third of the forward's share).
  const double fwd_share = recompute ? 0.25 : 1.0 / 3, bwd_share = recompute ? 0.5 : 2.0 / 3;
  auto pass = [&](std::vector<ModuleWork>& out, double share, bool reverse) {
    for (size_t k = 0; k < fwd.size(); ++k) {
      const ModuleShape& s = fwd[reverse ? fwd.size() - 1 - k : k];
      const double host = eager_pass + c.deepspeed_z3_module_pass_s + c.deepspeed_z3_tensor_pass_s * s.tensors;
      out.push_back({host, gemm > 0 ? gpu_micro_batch * share * s.gemm / gemm : 0});
    }
  };
  std::vector<ModuleWork> out;
  pass(out, fwd_share, false);
  if (recompute) pass(out, fwd_share, false);
  pass(out, bwd_share, true);
  return out;
}

double deepspeed_zero3_step(const Plan& plan, const EngineHostConstants& c, const EngineHostWork& h,
                            const EngineGpuWork& g) {
  const int gas = plan.strategy.gas;
  const double mb = windowed_passes_seconds(zero3_module_work(plan, c, g.micro_batch_seconds(gas)), kZero3FetchEvents);
  return double(gas) * mb + h.tail_seconds + g.tail_seconds;
}

}  // namespace planner

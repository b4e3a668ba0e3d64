// predict --engine X's step time (costmodel/engines_time.hpp,
// engines_host.hpp): each term and each composition by hand, the counts from
// torch_model.py's modules, and the profile's engine_host section.
#include <cmath>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/engines_host.hpp"
#include "costmodel/engines_time.hpp"
#include "costmodel/hardware_profile.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"
#include "costmodel/predict_detail.hpp"
#include "specs/model_spec.hpp"

using namespace planner;

namespace {

std::string repo(const std::string& rel) { return std::string(PLANNER_SOURCE_DIR) + "/" + rel; }

Plan run1_plan(const std::string& name) { return load_plan(repo("validation/engines/plans/" + name + ".json")); }

HardwareProfile calib20(const Plan& p) {
  return load_profile(repo("validation/h100x4/calib20/profile-4gpu.json"), p.cluster.gpu);
}

double term(const EngineStep& e, const std::string& name) {
  for (const auto& t : e.terms)
    if (t.name == name) return t.seconds;
  FAIL("no term " << name);
  return 0;
}

}  // namespace

TEST_CASE("engine time: torch_model.py's module and tensor counts", "[engine_time]") {
  // llama-3.2-1b: 16 layers of q, k, v, out, gate, up, down and two RMSNorms
  // (9 modules, 9 tensors); embedding, final norm, lm_head (tied: no tensor of
  // its own).
  const ModelSpec llama = model_preset("llama-3.2-1b");
  CHECK(torch_model_param_modules(llama) == 16 * 9 + 3);
  CHECK(torch_model_param_tensors(llama) == 16 * 9 + 2);
  // GPT-2 (124M): per layer q, k, v, out, up, down with biases (12) and two
  // LayerNorms (weight + bias: 4); wte, wpe and ln_f (2): 12 * 16 + 4.
  const ModelSpec gpt2 = model_preset("gpt2");
  CHECK(torch_model_param_tensors(gpt2) == 12 * 16 + 4);
  CHECK(torch_model_param_modules(gpt2) == 12 * 8 + 4);
  // DTensor calls: 7 linears, 2 norms (SequenceParallel), 2 PrepareModuleInput
  // per layer; embedding, lm_head, final norm. Without sp only the linears.
  CHECK(dtensor_module_calls(llama, true) == 16 * 11 + 3);
  CHECK(dtensor_module_calls(llama, false) == 16 * 7 + 2);
}

TEST_CASE("engine time: each engine's profile", "[engine_time]") {
  const Plan p = run1_plan("mg-pp2-vpp2-dp2-dopt");
  const HardwareProfile base = calib20(p);
  const HardwareProfile mg = engine_profile(p, base, Engine::Megatron);
  CHECK_FALSE(mg.flash_attention);
  CHECK(mg.dropout);
  CHECK(mg.grad_reduce_bytes_per_element == 4);
  CHECK_FALSE(mg.overlap_grad_reduce);
  const HardwareProfile ds = engine_profile(p, base, Engine::DeepSpeed);
  CHECK(ds.flash_attention);
  CHECK(ds.grad_bucket_bytes == 1e9);  // reduce_bucket_size 5e8 elements of bf16
  CHECK_FALSE(ds.overlap_param_gather);
  const HardwareProfile ours = engine_profile(p, base, Engine::Ours);
  CHECK(ours.flash_attention == base.flash_attention);
  CHECK(ours.grad_bucket_bytes == base.grad_bucket_bytes);
}

TEST_CASE("engine time: ours is the simulated step unchanged", "[engine_time]") {
  const Plan p = run1_plan("ds-z1");
  const HardwareProfile prof = calib20(p);
  const EngineStep e = engine_step_time(p, prof, Engine::Ours);
  CHECK(e.step_seconds == predict(p, prof).step_seconds);
  CHECK(e.terms.empty());
}

TEST_CASE("engine time: the GPU's terms by hand", "[engine_time]") {
  SECTION("DeepSpeed: the eager factor on the simulated compute") {
    const Plan p = run1_plan("ds-z3");
    const HardwareProfile prof = calib20(p);
    const EngineStep e = engine_step_time(p, prof, Engine::DeepSpeed);
    const StepPrediction sim = predict(p, engine_profile(p, prof, Engine::DeepSpeed));
    CHECK(e.simulated_seconds == Approx(sim.step_seconds));
    CHECK(term(e, "eager kernels") == Approx(sim.compute_seconds * (0.3083 / 0.2891 - 1)));
    double sum = e.simulated_seconds;
    for (const auto& t : e.terms) sum += t.seconds;
    CHECK(e.step_seconds == Approx(sum));  // the last term is the composition's share
  }
  SECTION("Megatron local: main_grad accumulation, 10 bytes per stage parameter per micro-batch") {
    const Plan p = run1_plan("mg-pp2-vpp2-dp2-dopt");  // pp2 vpp2 dp2 mbs2: gas 4
    const HardwareProfile prof = calib20(p);
    const EngineStep e = engine_step_time(p, prof, Engine::Megatron);
    // The larger stage: 8 layers + the embedding (first) or 8 layers + final
    // norm + a tied head's copy (last, as Megatron keeps under pp).
    const int64_t first = stage_params_per_rank(p.model, 8, true, false, 2, 1);
    const int64_t last = stage_params_per_rank(p.model, 8, false, true, 2, 1);
    const double bytes = 10.0 * double(std::max(first, last));
    CHECK(term(e, "main_grad accumulation") == Approx((bytes / prof.memory_Bps() + prof.kernel_overhead_seconds) * 4));
    // masked_fill + softmax: scores = 2 * 32 * 2048^2 per layer; 8 layers of
    // the stage, 4 micro-batches, times (1 + bubble/compute).
    const StepPrediction sim = predict(p, engine_profile(p, prof, Engine::Megatron));
    const double scores = 2.0 * 32 * 2048 * 2048, e2 = 2;
    const double mask = memory_kernel_seconds(prof, 4 * e2 * scores, MemKernel::Strided);
    const double sm = memory_kernel_seconds(prof, 5 * e2 * scores, MemKernel::Reduction) -
                      memory_kernel_seconds(prof, 5 * e2 * scores, MemKernel::Streaming);
    const double scale = 1 + sim.bubble_seconds / sim.compute_seconds;
    CHECK(term(e, "unfused mask + softmax") == Approx((mask + sm) * 8 * 4 * scale));
  }
}

TEST_CASE("engine host: the host work per engine from probe6's constants", "[engine_host]") {
  const EngineHostConstants c;
  const ModelSpec llama = model_preset("llama-3.2-1b");  // 16 SwiGLU layers, 146 tensors, 147 submodules
  const ModelSpec gpt2 = model_preset("gpt2");           // 12 GELU layers
  CHECK(eager_host_seconds(llama, c) == Approx(16 * 3.42e-3));          // 0.0547 s
  CHECK(eager_host_seconds(gpt2, c) == Approx(12 * 1.65e-3 + 1.4e-3));  // 0.0212 s
  Plan p = run1_plan("ds-z2");  // llama-3.2-1b
  const EngineHostWork z2 = engine_host_work(p, c, Engine::DeepSpeed);
  CHECK(z2.micro_batch_seconds == Approx(16 * 3.42e-3 + 0.153e-3 * 146));  // 0.0760 s
  CHECK(z2.tail_seconds == Approx(0.076e-3 * 146));                       // 0.0111 s
  p.strategy.zero = 3;
  const EngineHostWork z3 = engine_host_work(p, c, Engine::DeepSpeed);
  CHECK(z3.micro_batch_seconds == Approx(16 * 3.42e-3 + 2 * (0.338e-3 * 147 + 0.288e-3 * 146)));  // 0.2381 s
  CHECK(z3.tail_seconds == Approx(0.24e-3 * 146));
  const EngineHostWork f3 = engine_host_work(run1_plan("fsdp-z3"), c, Engine::Fsdp);
  CHECK(f3.micro_batch_seconds == Approx(16 * 3.42e-3 + 0.375e-3 * 146));
  CHECK(f3.tail_seconds == Approx(0.67e-3 * 146));
  // DTensor: 16 x 7 linears + embedding and lm_head per micro-batch; its tail replaces FSDP2's.
  const EngineHostWork tp = engine_host_work(run1_plan("fsdp-z2-tp2-sp"), c, Engine::Fsdp);
  CHECK(tp.micro_batch_seconds == Approx(16 * 3.42e-3 + 0.43e-3 * 146 + 1.69e-3 * 114));
  CHECK(tp.tail_seconds == Approx(1.47e-3 * 146));
  // Megatron: per layer of the stage (pp 2: 8 layers), eager included; a fixed tail.
  const EngineHostWork mg = engine_host_work(run1_plan("mg-pp2-vpp2-dp2-dopt"), c, Engine::Megatron);
  CHECK(mg.micro_batch_seconds == Approx(6.62e-3 * 8));
  CHECK(mg.tail_seconds == Approx(0.020));
}

TEST_CASE("engine host: each engine's composition by hand", "[engine_host]") {
  EngineHostWork h;
  h.micro_batch_seconds = 0.075, h.tail_seconds = 0.02;
  SECTION("DeepSpeed ZeRO-1/2: per micro-batch the longer, then both tails") {
    // GPU 0.3 s a step, 0.01 s of it the optimizer: 0.0725 s per micro-batch at gas 4.
    CHECK(deepspeed_zero12_step(4, h, {0.3, 0.01}) == Approx(4 * 0.075 + 0.02 + 0.01));  // host-bound: 0.33
    CHECK(deepspeed_zero12_step(4, h, {0.81, 0.01}) == Approx(4 * 0.2 + 0.02 + 0.01));   // GPU-bound: 0.83
  }
  SECTION("FSDP2: host + the optimizer's drain, or the GPU's step") {
    CHECK(fsdp_step(2, h, {0.12, 0.01}) == Approx(2 * 0.075 + 0.02 + 0.01));  // 0.18 > 0.12
    CHECK(fsdp_step(2, h, {0.5, 0.01}) == Approx(0.5));
  }
  SECTION("Megatron: the host's micro-batch stretched by the bubble like the GPU's") {
    // GPU 0.92 s, tail 0.02: 0.225 per micro-batch at gas 4; host 0.075 x 1.5 = 0.1125.
    CHECK(megatron_step(4, 1.5, h, {0.92, 0.02}) == Approx(0.92 + 0.02));
    CHECK(megatron_step(4, 4.0, h, {0.92, 0.02}) == Approx(4 * 0.3 + 0.02 + 0.02));  // host 0.3 per micro-batch
  }
}

TEST_CASE("engine host: ZeRO-3's fetch window", "[engine_host]") {
  SECTION("six modules, host 1 each, the first holding 5 s of GPU work") {
    // events = 2: fetch i waits for the GPU to finish module i - 4.
    // host ends modules 0-3 at 1, 2, 3, 4; the GPU runs module 0's kernels
    // from 0 to 5 (then nothing: 5 through module 3); fetch 4 waits until 5,
    // host 6; fetch 5 waits for module 1 (5), host 7; the GPU ends with it: 7.
    const std::vector<ModuleWork> m{{1, 5}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}};
    CHECK(windowed_passes_seconds(m, 2) == Approx(7));
    // A wider window lets the host run on: the larger of its 6 and the GPU's 5.
    CHECK(windowed_passes_seconds(m, 10) == Approx(6));
  }
  SECTION("no GPU work: the host's sum; no host work: the GPU's sum") {
    CHECK(windowed_passes_seconds({{0.5, 0}, {0.25, 0}, {1, 0}}, 2) == Approx(1.75));
    CHECK(windowed_passes_seconds({{0, 0.5}, {0, 0.25}, {0, 1}}, 2) == Approx(1.75));
  }
  SECTION("one micro-batch's modules: the host's and the GPU's totals are kept") {
    const Plan p = run1_plan("ds-z3");  // llama-3.2-1b: 147 submodules forward, 147 backward
    const EngineHostConstants c;
    const std::vector<ModuleWork> m = zero3_module_work(p, c, 0.09);
    REQUIRE(m.size() == 2 * 147);
    double host = 0, gpu = 0, gpu_fwd = 0;
    for (size_t i = 0; i < m.size(); ++i) host += m[i].host, gpu += m[i].gpu, gpu_fwd += i < 147 ? m[i].gpu : 0;
    CHECK(host == Approx(engine_host_work(p, c, Engine::DeepSpeed).micro_batch_seconds));
    CHECK(gpu == Approx(0.09));
    CHECK(gpu_fwd == Approx(0.03));  // a third forward
    CHECK(m[0].gpu == 0);            // the embedding: no GEMM
    CHECK(m[146].gpu > m[3].gpu);    // the lm_head (vocab x hidden) over k (hidden x kv)
  }
}

TEST_CASE("engine host: the step is the engine's composition of its host and GPU work", "[engine_host]") {
  const Plan p = run1_plan("ds-z2");  // gas 2
  const HardwareProfile prof = calib20(p);
  const EngineStep e = engine_step_time(p, prof, Engine::DeepSpeed);
  const StepPrediction sim = predict(p, engine_profile(p, prof, Engine::DeepSpeed));
  const EngineGpuWork gpu{sim.step_seconds + term(e, "eager kernels"), sim.optimizer_seconds};
  const EngineHostWork h = engine_host_work(p, prof.engine_host, Engine::DeepSpeed);
  CHECK(e.host_seconds == Approx(2 * h.micro_batch_seconds + h.tail_seconds));
  CHECK(e.step_seconds == Approx(deepspeed_zero12_step(2, h, gpu)));
  CHECK(term(e, "host work and its syncs") == Approx(e.step_seconds - gpu.step_seconds));
}

TEST_CASE("engine host: a profile's engine_host section", "[engine_host]") {
  const Plan p = run1_plan("ds-z2");
  const HardwareProfile base = calib20(p);
  SECTION("a profile without it keeps probe6's constants and writes none") {
    CHECK(base.engine_host.deepspeed_z2_tensor_s == 0.153e-3);
    CHECK_FALSE(profile_to_json(base).contains("engine_host"));
  }
  SECTION("read over the base, written back, and used by predict --engine") {
    const nlohmann::json j = {{"engine_host", {{"source", "probe on host X"}, {"deepspeed_z2_tensor_s", 1e-3},
                                               {"eager_layer_swiglu_s", 0}}}};
    const HardwareProfile probed = profile_from_json(j, base);
    CHECK(probed.engine_host.deepspeed_z2_tensor_s == 1e-3);
    CHECK(probed.engine_host.fsdp_z3_tensor_s == 0.375e-3);  // not given: the base's
    CHECK(profile_to_json(probed)["engine_host"]["source"] == "probe on host X");
    CHECK(engine_step_time(p, probed, Engine::DeepSpeed).host_seconds == Approx(2 * 146 * 1e-3 + 0.076e-3 * 146));
  }
  SECTION("an unknown key or a negative number is refused, naming it") {
    CHECK_THROWS_WITH(profile_from_json({{"engine_host", {{"deepspeed_z9_s", 1}}}}, base),
                      PLANNER_CONTAINS("deepspeed_z9_s"));
    CHECK_THROWS_WITH(profile_from_json({{"engine_host", {{"megatron_tail_s", -1}}}}, base),
                      PLANNER_CONTAINS("megatron_tail_s"));
  }
}

// Memory at the edge (issue 10, item 5): capacity is what a process can
// allocate, a headroom is kept free, and the memory model follows the profile
// it is given (attention kernel, dropout, measured overheads).
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/compat.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/predict_detail.hpp"

using namespace planner;

namespace {

Plan gpt2_plan(const std::string& gpus = "1xH100", const std::string& strategy = "mbs=1,gas=1,precision=bf16") {
  PlanRequest r;
  r.model = "gpt2";
  r.gpus = gpus;
  r.strategy = strategy;
  r.seq = 1024;
  return build_plan(r, nullptr);
}

int64_t cat(const MemoryReport& r, MemCategory c) { return r.peak_breakdown()[int(c)]; }

}  // namespace

TEST_CASE("capacity is the GPU's allocatable memory, less a 2% headroom by default", "[memory][edge]") {
  const Plan p = gpt2_plan();
  const HardwareProfile sheet = datasheet_profile(p.cluster.gpu);
  const MemoryReport r = estimate_memory(p, Engine::Ours, &sheet);
  CHECK(r.gpu_capacity_bytes == 85'017'493'504);  // H100: cudaMemGetInfo total, not 80 GiB
  CHECK(r.gpu_headroom_bytes == 1'700'349'870);   // round(0.02 * 85,017,493,504)
  CHECK(r.gpu_usable_bytes() == 85'017'493'504 - 1'700'349'870);
  CHECK(r.capacity_source == "GPU spec (H100-SXM)");
  // By default the H100's shipped calibrate profile says what a process could
  // really allocate there (costmodel/profiles/H100-SXM.json).
  const MemoryReport d = estimate_memory(p);
  CHECK(d.gpu_capacity_bytes == measured_profile_json("H100-SXM")->at("gpu_memory_bytes").get<int64_t>());
  CHECK(d.capacity_source == "profile (measured by planner calibrate)");
}

TEST_CASE("fits flips exactly at capacity less headroom", "[memory][edge]") {
  const Plan p = gpt2_plan();
  HardwareProfile prof = default_profile(p.cluster.gpu);
  const int64_t peak = estimate_memory(p, Engine::Ours, &prof).per_gpu_peak_bytes;
  // A calibrated capacity replaces the GPU spec's.
  prof.gpu_memory_bytes = peak;
  prof.memory_headroom = 0;
  MemoryReport r = estimate_memory(p, Engine::Ours, &prof);
  CHECK(r.gpu_capacity_bytes == peak);
  CHECK(r.capacity_source == "profile (measured by planner calibrate)");
  CHECK(r.fits());
  prof.memory_headroom_bytes = 1;  // one byte kept free: no longer fits
  CHECK_FALSE(estimate_memory(p, Engine::Ours, &prof).fits());
  prof.memory_headroom_bytes = 0;
  prof.gpu_memory_bytes = int64_t(double(peak) / 0.98) + 1;  // 2% headroom leaves exactly the peak, and a byte
  prof.memory_headroom = 0.02;
  r = estimate_memory(p, Engine::Ours, &prof);
  CHECK(r.gpu_usable_bytes() >= peak);
  CHECK(r.gpu_usable_bytes() - peak < 3);
  CHECK(r.fits());
}

TEST_CASE("the memory model honours the profile's attention kernel and dropout", "[memory][edge]") {
  // gpt2: 12 layers, 12 heads, hidden 768; seq 1024, mbs 1, bf16, one micro-batch in flight.
  const Plan p = gpt2_plan();
  HardwareProfile flash = default_profile(p.cluster.gpu);
  const MemoryReport a = estimate_memory(p, Engine::Ours, &flash);
  HardwareProfile mat = flash;
  mat.flash_attention = false;
  const MemoryReport b = estimate_memory(p, Engine::Ours, &mat);
  // Materialized softmax: e a s^2 b saved instead of the fp32 log-sum-exp 4 a s b, per layer.
  const int64_t per_layer = 2LL * 12 * 1024 * 1024 - 4LL * 12 * 1024;
  CHECK(cat(b, MemCategory::Activations) - cat(a, MemCategory::Activations) == 12 * per_layer);
  HardwareProfile drop = flash;
  drop.dropout = true;
  const MemoryReport c = estimate_memory(p, Engine::Ours, &drop);
  // Two one-byte masks of s b h per layer.
  CHECK(cat(c, MemCategory::Activations) - cat(a, MemCategory::Activations) == 12 * 2LL * 1024 * 768);
  // predict() takes the same profile.
  CHECK(predict(p, mat).memory.per_gpu_peak_bytes == b.per_gpu_peak_bytes);
}

TEST_CASE("measured context, workspace and NCCL bytes replace the constants", "[memory][edge]") {
  const Plan p = gpt2_plan("2xH100", "dp=2,mbs=1,gas=1,precision=bf16");
  HardwareProfile prof = default_profile(p.cluster.gpu);
  const MemoryReport a = estimate_memory(p, Engine::Ours, &prof);
  prof.context_bytes += 100 << 20;
  prof.workspace_bytes += 10 << 20;
  prof.nccl_communicator_bytes += 1 << 20;
  const MemoryReport b = estimate_memory(p, Engine::Ours, &prof);
  CHECK(cat(b, MemCategory::Overhead) - cat(a, MemCategory::Overhead) == 110 << 20);
  CHECK(cat(b, MemCategory::CommBuffers) - cat(a, MemCategory::CommBuffers) == 1 << 20);  // one dp communicator
}

TEST_CASE("uncalibrated GPUs: datasheet less 1.3%, measured ones as measured", "[memory][edge]") {
  CHECK(gpu_by_name("A100-80GB").memory_bytes == int64_t(80 * 1024 * 0.987) * (int64_t(1) << 20));
  CHECK(double(gpu_by_name("RTX3090").memory_bytes) / double(1 << 30) == Approx(23.69).epsilon(1e-4));
  // A plan that needs 23.65 GiB on a 3090 does not fit once the 2% headroom is kept.
  const Plan p = gpt2_plan("1xRTX3090");
  HardwareProfile prof = default_profile(p.cluster.gpu);
  const MemoryReport r = estimate_memory(p, Engine::Ours, &prof);
  CHECK(r.gpu_usable_bytes() < int64_t(23.65 * double(1 << 30)));
}

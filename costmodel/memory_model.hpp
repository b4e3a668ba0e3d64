#pragma once
// Per-GPU and per-host memory of one training step, by category, per pipeline
// stage. Formulas and sources in docs/MEMORY_MODEL.md ("Memory model").
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/engines.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/hardware_profile.hpp"
#include "specs/memory_category.hpp"
#include "specs/plan.hpp"
#include "strategies/partition.hpp"

namespace planner {

struct StageMemory {
  int stage = 0;
  int layers = 0;                        // transformer layers on the stage (all its chunks)
  int first_layer = 0, last_layer = 0;  // [first, last) layers of the stage's first chunk
  bool has_embedding = false, has_head = false;
  int64_t params = 0;                    // parameters held by one rank of this stage (after TP)
  int inflight_microbatches = 0;         // activations of this many micro-batches live at the peak
  double inflight_layers = 0;            // ... of this many layers: the in-flight (micro-batch, chunk)s' layers
  int head_inflight_microbatches = 0;    // last stage: micro-batches whose last chunk (the LM head) awaits its backward
  int embedding_inflight_microbatches = 0;  // first stage: ... whose chunk 0 (the embedding) does
  MemBreakdown gpu{};                    // bytes on one GPU of this stage
  int64_t gpu_peak_bytes = 0;            // sum of gpu
  int64_t host_bytes = 0;                // bytes this GPU's process keeps on the host (offload)
  // DeepSpeed and FSDP2 (engine_has_moments): the step's moments with their
  // totals (bytes, overhead included); gpu is the largest one's breakdown.
  // Empty otherwise (the categories' largest values are added).
  std::vector<std::pair<std::string, int64_t>> moments;
  std::string peak_moment;
};

struct MemoryReport {
  std::vector<StageMemory> stages;
  int peak_stage = 0;
  int64_t per_gpu_peak_bytes = 0;        // the largest over ranks
  int64_t gpu_capacity_bytes = 0;        // what one process can allocate on the GPU (profile, else the GPU spec)
  int64_t gpu_headroom_bytes = 0;        // kept free (--headroom): fits when the peak <= capacity - headroom
  std::string capacity_source;           // where gpu_capacity_bytes comes from
  int64_t host_peak_bytes = 0;           // the fullest node's host memory need
  int64_t host_capacity_bytes = 0;
  bool gpu_fits = false, host_fits = false;
  bool fits() const { return gpu_fits && host_fits; }
  MemCategory binding = MemCategory::Activations;  // the largest category on the peak stage
  std::vector<std::string> notes;        // e.g. "zero=1 with dp=1 shards nothing"
  Engine engine = Engine::Ours;          // whose allocations these are
  const MemBreakdown& peak_breakdown() const { return stages.at(peak_stage).gpu; }
  int64_t gpu_usable_bytes() const { return gpu_capacity_bytes - gpu_headroom_bytes; }
};

// Transformer layers per (virtual) pipeline stage: strategies/partition.hpp's
// layout, the one the runtime executes.
std::vector<int> partition_layers(const ModelSpec& m, int chunks);

// `engine`: what that engine allocates for the plan (costmodel/engines_memory.hpp);
// the caller checks engine_gap first. Ours is this project's runtime.
// `profile` (null: the default profile of the plan's GPU) says which attention
// kernel and dropout the activations assume, what the process itself takes
// (context, workspaces, NCCL buffers), the GPU capacity and the headroom.
// `env`: what is installed beside the engine; Megatron without Transformer
// Engine runs megatron-core's local (unfused) attention, which keeps the
// s x s attention probabilities.
MemoryReport estimate_memory(const Plan& plan, Engine engine = Engine::Ours, const HardwareProfile* profile = nullptr,
                             const EngineEnv& env = {});
// NCCL's device memory on one rank of pipeline stage `stage` (memory_model.cpp).
double nccl_bytes(const ModelSpec& m, const Strategy& s, int stage, const MemoryConstants& k);
nlohmann::json memory_report_json(const MemoryReport& r);

}  // namespace planner

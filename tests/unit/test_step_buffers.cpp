// ZeRO's unit buffers read off the step program (strategies/step_buffers.hpp)
// and the memory model's pool of them (costmodel/memory_model.cpp).
#include "catch.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/model_states.hpp"
#include "strategies/step_buffers.hpp"
#include "strategies/step_program.hpp"

using namespace planner;

namespace {

UnitBufferPeaks peaks(const char* strategy, int64_t layers, bool tied) {
  const StepProgram p = build_step_program(Strategy::parse(strategy), layers, StepOptions{tied});
  return unit_buffer_peaks(p.stages[0], p.partition);
}

}  // namespace

TEST_CASE("unit_buffer_peaks: the layer units holding a buffer at once", "[memory][step_program]") {
  // step_program.hpp's example (dp=2, zero=3, 2 layers, tied), by hand:
  //   0G0 0G1 0F0.0 0G2 0F0.1 0R1 0G3 0F0.2 0R2 0F0.3 0G2 0B0.3 0RS3 0R3 0G1 0B0.2
  //   0RS2 0R2 0B0.1 0RS1 0R1 0B0.0 0RS0 0R0 ...
  // Layers are units 1 and 2: both gathered from 0G2 to 0R1 and from 0G1 (the
  // backward's prefetch) to 0R2; each gradient lives from its B to its RS.
  const UnitBufferPeaks z3 = peaks("dp=2,zero=3", 2, true);
  CHECK(z3.gathered_layers == 2);
  CHECK(z3.gradient_layers == 1);
  // ZeRO-2 gathers nothing; one layer has one of each at most.
  CHECK(peaks("dp=2,zero=2", 4, false).gathered_layers == 0);
  CHECK(peaks("dp=2,zero=2", 4, false).gradient_layers == 1);
  CHECK(peaks("dp=2,zero=3", 1, false).gathered_layers == 1);
  // Under ZeRO-0/1 the gradients are all-reduced after their last backward:
  // every layer's gradient is pending at once (not a pool: the flat buffer).
  CHECK(peaks("dp=2,zero=1,gas=2", 3, false).gradient_layers == 3);
}

TEST_CASE("unit_buffer_peaks: two micro-batches hold every moment of a longer ZeRO-2/3 step", "[memory][step_program]") {
  // zero_buffer_bytes reads the program of min(gas, 2) micro-batches.
  for (const char* base : {"dp=2,zero=2", "dp=2,zero=3", "dp=2,zero=3,offload=all", "dp=2,zero=2,offload=optimizer"})
    for (int64_t layers : {1, 2, 3, 7})
      for (bool tied : {false, true})
        for (int gas : {3, 4, 9}) {
          CAPTURE(base, layers, tied, gas);
          const std::string longer = std::string(base) + ",gas=" + std::to_string(gas);
          const std::string two = std::string(base) + ",gas=2";
          const UnitBufferPeaks a = peaks(longer.c_str(), layers, tied), b = peaks(two.c_str(), layers, tied);
          CHECK(a.gathered_layers == b.gathered_layers);
          CHECK(a.gradient_layers == b.gradient_layers);
        }
}

TEST_CASE("ZeRO pool: a one-layer stage still gets the executor's two layer slots", "[memory]") {
  // runtime/engine.cpp acquire() makes two layer-sized slots at the first use
  // whatever the stage's layers; the program's peak for one layer is one.
  ModelSpec m;
  m.name = "one-layer";
  m.layers = 1, m.hidden = 1024, m.heads = 16, m.kv_heads = 16, m.ffn = 4096;
  m.vocab = 51200, m.max_positions = 2048;
  const double L = double(m.layer_params()), E = double(m.embedding_params()), H = double(m.head_params());
  Plan p;
  p.model = m;
  p.cluster = parse_cluster("2xA100-80GB");
  p.seq = 1024;
  p.global_batch = 2;
  const double nccl = memory_constants(p.cluster).nccl_bytes_per_communicator;
  auto comm = [&](const char* text) {
    p.strategy = Strategy::parse(text);
    return double(estimate_memory(p).peak_breakdown()[int(MemCategory::CommBuffers)]) - nccl;
  };
  CHECK(comm("dp=2,zero=2") == Approx(2.0 * (E + H + 2 * L)).epsilon(1e-9));
  CHECK(comm("dp=2,zero=3") == Approx(2.0 * 2 * (E + H + 2 * L)).epsilon(1e-9));
}

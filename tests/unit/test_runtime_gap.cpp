// What `planner exec` does not run (specs/runtime_gap.hpp): the rules the
// runtime enforces, which plan and predict name in a note and `plan
// --runnable` leaves out. Each case is one rule by hand.
#include "catch.hpp"
#include "specs/model_spec.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/strategy.hpp"
#include "tiny_models.hpp"

using namespace planner;
using namespace planner::test;

namespace {
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("runtime_gap: a MoE model runs at ZeRO-0/1/2/3, expert parallelism with cp=1", "[runtime_gap]") {
  const ModelSpec m = moe_like();
  CHECK(runtime_gap(m, Strategy::parse("dp=4,ep=4,zero=0"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,tp=2,ep=2,zero=0"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,zero=1"), 64).empty());  // ep = 1: ZeRO-1 runs
  // The experts' states and gradients over the expert-data-parallel group
  // (tests/dist/test_moe_equivalence.cpp runs these against one process).
  CHECK(runtime_gap(m, Strategy::parse("dp=2,ep=2,zero=1"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=4,ep=2,zero=1"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=4,ep=4,zero=1,offload=optimizer"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,tp=2,ep=2,zero=1"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,pp=2,ep=2,zero=1"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,zero=2"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=4,ep=2,zero=2"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,tp=2,ep=2,zero=2,offload=optimizer"), 64).empty());
  // ZeRO-3, at ep 1 and above (the MoE layer reads its weights through the
  // leaves in the backward: runtime/model/moe_gemm.hpp).
  CHECK(runtime_gap(m, Strategy::parse("dp=2,zero=3"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=4,ep=2,zero=3"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,tp=2,ep=2,sp=1,zero=3,offload=all"), 64).empty());
  // What still does not run: ep > 1 with cp > 1 (at any ZeRO stage).
  CHECK(has(runtime_gap(m, Strategy::parse("dp=2,cp=2,ep=2,zero=0"), 64), "(ep=2) with cp=1 only; this plan has cp=2"));
  CHECK(has(runtime_gap(m, Strategy::parse("dp=2,cp=2,ep=2,zero=1"), 64), "(ep=2) with cp=1 only; this plan has cp=2"));
  CHECK(has(runtime_gap(m, Strategy::parse("finetune=lora"), 64), "LoRA/QLoRA on a mixture-of-experts model"));
  // The layer's own limits (runtime/model/moe.cpp refuses with the same words).
  // Sequence parallelism with tp runs (tests/dist/test_moe_equivalence.cpp), its seq a multiple of tp.
  CHECK(runtime_gap(m, Strategy::parse("tp=2,sp=1"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("dp=2,tp=2,ep=2,sp=1,zero=1"), 64).empty());
  CHECK(has(runtime_gap(m, Strategy::parse("tp=2,sp=1"), 63), "seq 63 must be a multiple of tp=2"));
  CHECK(has(moe_runtime_gap(m, 1, 3), "8 experts over ep=3"));
  ModelSpec capped = m;
  capped.moe.capacity_factor = 1.25;
  CHECK(has(moe_runtime_gap(capped, 1, 1), "a capacity factor"));
  CHECK(moe_runtime_gap(llama_like(), 2, 1).empty());  // dense: nothing to say
  // A dense model with the same strategies runs.
  CHECK(runtime_gap(llama_like(), Strategy::parse("dp=2,zero=3"), 64).empty());
}

TEST_CASE("runtime_gap: precision=fp8 with each rank's widths and the tokens multiples of 16; sp's sequence split", "[runtime_gap]") {
  ModelSpec m = llama_like();
  m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.ffn = 192;  // head_dim 16: q 64, kv 32
  CHECK(runtime_gap(m, Strategy::parse("mbs=1,precision=fp8"), 64).empty());
  // Tensor-parallel FP8 runs (with and without sp): each rank's qkv (64 + 2 x 32) / 2 = 64, q 32, ffn 96.
  CHECK(runtime_gap(m, Strategy::parse("tp=2,mbs=1,precision=fp8"), 64).empty());
  CHECK(runtime_gap(m, Strategy::parse("tp=2,sp=1,mbs=1,precision=fp8"), 64).empty());
  // tp=4: ffn 192 / 4 = 48 and qkv 32 still fit, q 64 / 4 = 16 too.
  CHECK(runtime_gap(m, Strategy::parse("tp=4,mbs=1,precision=fp8"), 64).empty());
  // Not the rank's parts: ffn 176 is a multiple of 16, 176 / 2 = 88 is not.
  m.ffn = 176;
  CHECK(runtime_gap(m, Strategy::parse("mbs=1,precision=fp8"), 64).empty());
  CHECK(has(runtime_gap(m, Strategy::parse("tp=2,mbs=1,precision=fp8"), 64), "88 is not"));
  m.ffn = 192;
  m.heads = 8, m.kv_heads = 8, m.head_size = 8;  // q 64, kv 64: tp=8 leaves (64 + 128) / 8 = 24 qkv columns per rank
  CHECK(has(runtime_gap(m, Strategy::parse("tp=8,mbs=1,precision=fp8"), 64), "24 is not"));
  m = llama_like();
  m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.ffn = 176;
  CHECK(has(runtime_gap(m, Strategy::parse("mbs=1,precision=fp8"), 40), "40 is not"));  // 40 tokens a micro-batch
  m.ffn = 180;
  CHECK(has(runtime_gap(m, Strategy::parse("mbs=1,precision=fp8"), 64), "180 is not"));
  CHECK(has(runtime_gap(llama_like(), Strategy::parse("tp=2,sp=1"), 63), "seq 63 must be a multiple of tp=2"));
  CHECK(runtime_gap(llama_like(), Strategy::parse("tp=2,sp=1"), 64).empty());
}

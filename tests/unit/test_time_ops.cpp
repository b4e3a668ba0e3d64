// Op cost formulas against numbers computed by hand, with a made-up profile
// whose round numbers make the arithmetic easy to follow.
#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/op_costs.hpp"
#include "strategies/errors.hpp"

using namespace planner;

namespace {

HardwareProfile toy() {
  HardwareProfile p;
  p.gpu = "toy";
  p.peak_fp32_flops = 25e12;
  p.peak_fp16_flops = p.peak_bf16_flops = 100e12;
  p.gemm_efficiency = 0.5;            // large GEMMs at 50 TFLOP/s
  p.memory_bandwidth_Bps = 1e12;
  p.memory_efficiency = 0.5;          // streaming at 500 GB/s
  p.sm_count = 100;
  p.gemm_tile_m = p.gemm_tile_n = 128;
  p.gemm_k_half = 32;
  p.attention_forward_relative = 0.8;
  p.attention_backward_relative = 0.5;
  p.kernel_overhead_seconds = 0;
  p.host_memory_efficiency = 0.5;
  p.host_copy_efficiency = 0.8;
  p.cpu_adam_flops_per_param = 20;
  return p;
}

}  // namespace

TEST_CASE("large GEMM: 2mnk over the measured large-GEMM rate", "[time]") {
  const auto p = toy();
  CHECK(gemm_shape_factor(p, 8192, 8192, 8192) == Approx(1.0));
  CHECK(gemm_seconds(p, 8192, 8192, 8192, Precision::BF16) == Approx(2.0 * 8192 * 8192 * 8192 / 50e12));
  // fp32 without TF32 runs on the 25 TFLOP/s CUDA cores, at the same efficiency.
  CHECK(gemm_seconds(p, 8192, 8192, 8192, Precision::FP32) == Approx(2.0 * 8192 * 8192 * 8192 / 12.5e12));
  auto q = p;
  q.kernel_overhead_seconds = 5e-6;
  CHECK(gemm_seconds(q, 8192, 8192, 8192, Precision::BF16) == Approx(2.0 * 8192 * 8192 * 8192 / 50e12 + 5e-6));
}

TEST_CASE("skinny GEMM: split-K over the idle SMs and a short main loop", "[time]") {
  const auto p = toy();
  // 128 x 128 output = one tile on 100 SMs: split-K into min(100, 8192/256) = 32
  // slices of k = 256; utilisation 32/100 * 256/(256+32), against the reference
  // 8192^3 (4096 tiles in 41 waves of 100, k-efficiency 8192/8224).
  const double ref = 4096.0 / 4100.0 * 8192.0 / 8224.0;
  const double f = 0.32 * 256.0 / 288.0 / ref;
  CHECK(gemm_shape_factor(p, 128, 128, 8192) == Approx(f));
  // Wave quantization: 101 tiles need two waves on 100 SMs.
  CHECK(gemm_shape_factor(p, 128 * 101, 128, 8192) == Approx(101.0 / 200.0 / (4096.0 / 4100.0)));
  // Tile padding: m = 129 fills two 128-row tiles to 129/256.
  CHECK(gemm_shape_factor(p, 129 * 100, 128, 8192) < gemm_shape_factor(p, 128 * 100, 128, 8192));
  // A GEMM too small for its flops is memory-bound: 1 x 8192 x 8192 moves the matrix.
  CHECK(gemm_seconds(p, 1, 8192, 8192, Precision::BF16) ==
        Approx((8192.0 + 8192.0 * 8192 + 8192) * 2 / 500e9));
}

TEST_CASE("memory-bound kernels: bytes over the achievable bandwidth", "[time]") {
  const auto p = toy();
  CHECK(memory_bound_seconds(p, 1e9) == Approx(1e9 / 500e9));
  CHECK(memory_bound_seconds(p, 0) == 0);
}

TEST_CASE("flash attention: 4 s^2 d per head forward, 2.5x backward, half when causal", "[time]") {
  const auto p = toy();
  const double fwd = 4.0 * 32 * 2048.0 * 2048 * 128 * 0.5;  // 32 heads x micro-batch
  CHECK(flash_attention_forward_seconds(p, 32, 2048, 128, true, Precision::BF16) == Approx(fwd / (50e12 * 0.8)));
  CHECK(flash_attention_backward_seconds(p, 32, 2048, 128, true, Precision::BF16) ==
        Approx(2.5 * fwd / (50e12 * 0.5)));
  CHECK(flash_attention_forward_seconds(p, 32, 2048, 128, false, Precision::BF16) ==
        Approx(2 * fwd / (50e12 * 0.8)));
}

TEST_CASE("fp32 attention: its own relative rates when measured, the 16-bit ones otherwise", "[time]") {
  auto p = toy();
  const double fwd = 4.0 * 32 * 2048.0 * 2048 * 128 * 0.5;
  const double fp32_rate = 25e12 * 0.5;  // peak_fp32 x gemm_efficiency (no TF32)
  CHECK(flash_attention_forward_seconds(p, 32, 2048, 128, true, Precision::FP32) == Approx(fwd / (fp32_rate * 0.8)));
  p.attention_forward_relative_fp32 = 0.2;
  p.attention_backward_relative_fp32 = 0.1;
  CHECK(flash_attention_forward_seconds(p, 32, 2048, 128, true, Precision::FP32) == Approx(fwd / (fp32_rate * 0.2)));
  CHECK(flash_attention_backward_seconds(p, 32, 2048, 128, true, Precision::FP32) ==
        Approx(2.5 * fwd / (fp32_rate * 0.1)));
  CHECK(flash_attention_forward_seconds(p, 32, 2048, 128, true, Precision::BF16) == Approx(fwd / (50e12 * 0.8)));
}

TEST_CASE("optimizer: fused Adam streams 32 bytes per parameter; CPU Adam shares the host", "[time]") {
  const auto p = toy();
  // bf16: zero 2 + norm 2 (reduction) + convert 6 (strided) + AdamW 28 + copy back 6 = 44 bytes.
  CHECK(gpu_adam_bytes_per_param(Precision::BF16) == 44);
  const double Bps = 500e9, strided = Bps * p.strided_kernel_relative, reduce = Bps * p.reduction_kernel_relative;
  CHECK(gpu_adam_seconds(p, 1e9, Precision::BF16) == Approx(1e9 * (36 / Bps + 2 / reduce + 6 / strided)));
  // fp32: zero 4 + norm 4 (reduction) + AdamW 28 in place = 36 bytes.
  CHECK(gpu_adam_bytes_per_param(Precision::FP32) == 36);
  CHECK(gpu_adam_seconds(p, 1e9, Precision::FP32) == Approx(1e9 * (32 / Bps + 4 / reduce)));
  // The fused AdamW kernel at its calibrated rate: its 28 bytes at 0.7 of streaming.
  auto q = p;
  q.adamw_kernel_relative = 0.7;
  CHECK(gpu_adam_seconds(q, 1e9, Precision::BF16) ==
        Approx(1e9 * (8 / Bps + 28 / (0.7 * Bps) + 2 / reduce + 6 / strided)));
  CHECK(gpu_adam_seconds(q, 1e9, Precision::FP32) == Approx(1e9 * (4 / Bps + 28 / (0.7 * Bps) + 4 / reduce)));
  ClusterSpec c;
  c.host_memory_bandwidth_Bps = 200e9;
  c.cpu_flops = 1e12;
  // Four processes share 200 GB/s at 50%: 25 GB/s each; 30 bytes per parameter.
  CHECK(cpu_adam_seconds(p, c, 1e8, 4) == Approx(1e8 * 30 / 25e9));
  // Arithmetic-bound when the CPU is slow: 20 flops/param over 1/4 of 10 GFLOP/s.
  c.cpu_flops = 10e9;
  CHECK(cpu_adam_seconds(p, c, 1e8, 4) == Approx(1e8 * 20 / 2.5e9));
  CHECK(host_copy_seconds(p, 1e9, 25e9) == Approx(1e9 / 20e9));
}

TEST_CASE("collectives: alpha-beta with ring and tree factors", "[time]") {
  const AlphaBeta l{8, 1 / 100e9, 1e-6, 5e-6};
  const double S = 1e9;
  CHECK(ring_all_reduce_seconds(S, l) == Approx(5e-6 + 14e-6 + 2.0 * 7 / 8 * S / 100e9));
  CHECK(ring_reduce_scatter_seconds(S, l) == Approx(5e-6 + 7e-6 + 7.0 / 8 * S / 100e9));
  CHECK(ring_all_gather_seconds(S, l) == Approx(ring_reduce_scatter_seconds(S, l)));
  CHECK(ring_broadcast_seconds(S, l) == Approx(5e-6 + 7e-6 + S / 100e9));
  CHECK(tree_all_reduce_seconds(S, l) == Approx(5e-6 + 2 * 3 * 1e-6 + 2 * S / 100e9));
  CHECK(p2p_seconds(S, l) == Approx(5e-6 + 1e-6 + S / 100e9));
  const AlphaBeta intra{8, 1 / 200e9, 0, 0}, inter{4, 1 / 25e9, 0, 0};
  CHECK(hierarchical_all_reduce_seconds(S, intra, inter) ==
        Approx(2 * 7.0 / 8 * S / 200e9 + 2 * 3.0 / 4 * (S / 8) / 25e9));
  // The closed form without latency: 2 (n-1)/n S / B.
  for (int n : {2, 4, 8, 64})
    CHECK(ring_all_reduce_seconds(S, {n, 1 / 50e9, 0, 0}) == Approx(2.0 * (n - 1) / n * S / 50e9));
  CHECK(ring_all_reduce_seconds(S, {1, 1 / 50e9, 1, 1}) == 0);
}

TEST_CASE("a transformer layer's GEMMs are 24 T h^2 forward and twice that backward", "[time]") {
  auto p = toy();
  ModelSpec m;
  m.layers = 1, m.hidden = 8192, m.heads = m.kv_heads = 64, m.ffn = 4 * 8192, m.vocab = 51200;
  const LayerShape s{8192, 1, 1, false, Precision::BF16, Ckpt::None};  // T = 8192 tokens
  const PassTimes t = transformer_layer_times(p, m, s, GroupLink{});
  const double T = 8192, h = 8192;
  CHECK(t.forward.gemm_seconds == Approx(24 * T * h * h / 50e12));
  CHECK(t.backward.gemm_seconds == Approx(48 * T * h * h / 50e12));
  CHECK(t.forward.tp_comm_seconds == 0);
  CHECK(t.recompute.total_seconds() == 0);
  // Weight gradients (half the backward's 48 T h^2) at 0.5 of the rate: 24 + 2 x 24 T h^2.
  auto slow_wgrad = p;
  slow_wgrad.weight_grad_gemm_relative = 0.5;
  CHECK(transformer_layer_times(slow_wgrad, m, s, GroupLink{}).backward.gemm_seconds == Approx(72 * T * h * h / 50e12));
  CHECK(transformer_layer_times(slow_wgrad, m, s, GroupLink{}).forward.gemm_seconds == Approx(24 * T * h * h / 50e12));
  // Full recomputation repeats the forward; selective with fused attention nothing.
  const PassTimes full = transformer_layer_times(p, m, {8192, 1, 1, false, Precision::BF16, Ckpt::Full}, GroupLink{});
  CHECK(full.recompute.total_seconds() == Approx(full.forward.total_seconds()));
  // Selective reruns the attention core's forward (the runtime's checkpoint reruns the fused kernel).
  const PassTimes sel = transformer_layer_times(p, m, {8192, 1, 1, false, Precision::BF16, Ckpt::Selective}, GroupLink{});
  CHECK(sel.recompute.total_seconds() == Approx(sel.forward.attention_seconds));
  p.flash_attention = false;
  const PassTimes sel2 = transformer_layer_times(p, m, {8192, 1, 1, false, Precision::BF16, Ckpt::Selective}, GroupLink{});
  CHECK(sel2.recompute.attention_seconds == Approx(sel2.forward.attention_seconds));
  // Norms, GeLU and residuals: 2*2 + 2*3 bytes per element of (T x h), 2 of (T x ffn), in 2-byte elements.
  p.flash_attention = true;
  const PassTimes t2 = transformer_layer_times(p, m, s, GroupLink{});
  const double core = flash_attention_forward_seconds(p, 64, 8192, 128, true, Precision::BF16);  // causal decoder
  // Forward: 2 norms (read + write, reduction class), 2 residual adds (read 2, write 1),
  // GeLU (read + write of T x ffn); 2-byte elements. m has biases and learned positions.
  // The runtime (profile fused_ops): the attention's residual add and the
  // second norm are one kernel (read 2, write 2, reduction class).
  const double red = 500e9 * p.reduction_kernel_relative;
  CHECK(t2.forward.memory_seconds ==
        Approx((2 * 2 * T * h + 4 * 2 * T * h) / red + (3 * 2 * T * h + 2 * 2 * T * 4 * h) / 500e9));
  // Backward: the runtime's norms one pass each (read x, dy; write dx: 3 e Th),
  // the second also reading the residual path's gradient (+1); one
  // gradient-accumulation add (the block input's two uses); GeLU backward 3 e
  // Tf; bias sums over qkv (3h), out (h), fc1 (4h), fc2 (h) columns; the split's
  // cat (read + write T x 3h).
  const double stream = 500e9;
  CHECK(t2.backward.memory_seconds ==
        Approx(((3 + 4) * 2 * T * h + 2 * T * (3 * h + h + 4 * h + h)) / red +
               (3 * 2 * T * h + 3 * 2 * T * 4 * h + 2 * 2 * T * 3 * h) / stream));
  // Eager code (the engines' profile): two norms of two kernels each way (5 e
  // Th backward) and two residual adds each way.
  auto eager = p;
  eager.fused_ops = false;
  const PassTimes t3 = transformer_layer_times(eager, m, s, GroupLink{});
  CHECK(t3.forward.memory_seconds == Approx(2 * 2 * 2 * T * h / red + (2 * 3 * 2 * T * h + 2 * 2 * T * 4 * h) / 500e9));
  CHECK(t3.backward.memory_seconds ==
        Approx((2 * 5 * 2 * T * h + 2 * T * (3 * h + h + 4 * h + h)) / red +
               (2 * 3 * 2 * T * h + 3 * 2 * T * 4 * h + 2 * 2 * T * 3 * h) / stream));
  CHECK(t2.forward.attention_seconds == Approx(core));
  // The attention backward: the fused kernel, and its rowsum(dO O) (read 2 e
  // Th, reduction) and fp32 dQ conversion (read 4, write 2), which a kernel
  // profile counts as attention too.
  CHECK(t2.backward.attention_seconds ==
        Approx(flash_attention_backward_seconds(p, 64, 8192, 128, true, Precision::BF16) + 2 * 2 * T * h / red +
               6 * T * h / stream));
}

TEST_CASE("the loss backward: eager code rescales the kept logits gradient, the runtime's kernel writes nothing",
          "[time]") {
  auto p = toy();
  ModelSpec m;
  m.layers = 1, m.hidden = 2048, m.heads = m.kv_heads = 16, m.ffn = 4 * 2048, m.vocab = 51200;  // 64 | vocab
  m.final_norm = false;
  const LayerShape s{2048, 4, 1, false, Precision::BF16, Ckpt::None};  // T = 8192 tokens
  auto eager = p;
  eager.fused_ops = false;
  const double T = 8192, V = 51200, str = 500e9 * p.strided_kernel_relative;
  // Eager: a multiply by a 0-dim device tensor (read + write of T x V, strided
  // class, one kernel); the runtime: one launch, no bytes. Same kernel count.
  CHECK(head_times(eager, m, s, GroupLink{}).backward.memory_seconds -
            head_times(p, m, s, GroupLink{}).backward.memory_seconds ==
        Approx(2 * 2 * T * V / str));
}

TEST_CASE("tensor parallelism: two all-reduces of the (T x h) activation per pass", "[time]") {
  const auto p = toy();
  ModelSpec m;
  m.layers = 1, m.hidden = 4096, m.heads = m.kv_heads = 32, m.ffn = 4 * 4096, m.vocab = 51200;
  GroupLink tp;
  tp.size = 8, tp.nodes = 1, tp.per_node = 8, tp.seconds_per_byte = 1 / 100e9;
  const double S = 2.0 * 2048 * 4096;  // bf16 (T x h), T = 2048
  const PassTimes t = transformer_layer_times(p, m, {2048, 1, 8, false, Precision::BF16, Ckpt::None}, tp);
  const double ar = 2.0 * 7 / 8 * S / 100e9 + p.collective_base_latency_seconds;
  CHECK(t.forward.tp_comm_seconds == Approx(2 * ar));
  CHECK(t.backward.tp_comm_seconds == Approx(2 * ar));
  // Sequence parallelism: all-gather + reduce-scatter move the same bytes.
  const PassTimes sp = transformer_layer_times(p, m, {2048, 1, 8, true, Precision::BF16, Ckpt::None}, tp);
  CHECK(sp.forward.tp_comm_seconds == Approx(2 * (ar + p.collective_base_latency_seconds)));
  CHECK(sp.forward.memory_seconds < t.forward.memory_seconds);  // norms and residuals on T/8 tokens
  // By hand (e = 2, T = 2048, h = 4096, this rank's ffn 4h/8): without sp a
  // norm (read + write, reduction class), the attention's residual add fused
  // with the second norm (read 2, write 2, reduction class), the other residual
  // add (read 2, write 1) and GeLU (read + write); the row-parallel biases are
  // in the GEMMs. With sp the norms and residuals run on T/8 tokens, and the
  // two row-parallel biases are broadcast adds (read + write, strided class) on
  // that shard.
  const double T = 2048, h = 4096, red = 500e9 * p.reduction_kernel_relative, str = 500e9 * p.strided_kernel_relative;
  CHECK(t.forward.memory_seconds == Approx(6 * 2 * T * h / red + (3 * 2 * T * h + 2 * 2 * T * h / 2) / 500e9));
  CHECK(sp.forward.memory_seconds == Approx(6 * 2 * T / 8 * h / red +
                                            (3 * 2 * T / 8 * h + 2 * 2 * T * h / 2) / 500e9 +
                                            2 * 2 * 2 * T / 8 * h / str));
  // Each collective between GEMMs costs its extra (10 us + 1 ps per byte of the activation) on top.
  auto q = p;
  q.tp_collective_extra_seconds = 10e-6;
  q.tp_collective_extra_seconds_per_byte = 1e-12;
  const double extra = 10e-6 + S * 1e-12;
  CHECK(transformer_layer_times(q, m, {2048, 1, 8, false, Precision::BF16, Ckpt::None}, tp).forward.tp_comm_seconds ==
        Approx(2 * (ar + extra)));
  CHECK(transformer_layer_times(q, m, {2048, 1, 8, true, Precision::BF16, Ckpt::None}, tp).backward.tp_comm_seconds ==
        Approx(6 * (ar / 2 + p.collective_base_latency_seconds / 2 + extra)));
}

TEST_CASE("profiles save and load as JSON; unknown keys are refused", "[time]") {
  const auto p = toy();
  const auto j = profile_to_json(p);
  const HardwareProfile q = profile_from_json(j, HardwareProfile{});
  CHECK(profile_to_json(q) == j);
  nlohmann::json partial = {{"gemm_efficiency", 0.6}};
  CHECK(profile_from_json(partial, p).gemm_efficiency == 0.6);
  CHECK(profile_from_json(partial, p).memory_bandwidth_Bps == p.memory_bandwidth_Bps);
  CHECK_THROWS_AS(profile_from_json({{"gemm_efficency", 0.6}}, p), InputError);
  CHECK_THROWS_AS(profile_from_json({{"gemm_efficiency", 1.5}}, p), InputError);
}

TEST_CASE("default profiles come from the catalog", "[time]") {
  const GpuSpec& h100 = gpu_by_name("H100");
  const HardwareProfile p = datasheet_profile(h100);
  CHECK(p.peak_bf16_flops == h100.peak_bf16);
  CHECK(p.gemm_efficiency == h100.gemm_efficiency);
  CHECK(p.sm_count == 132);
  CHECK(p.flash_attention);
  CHECK(p.peak_flops(Precision::BF16) == h100.peak_bf16);
  // An uncalibrated GPU's default is its datasheet profile with the in-step
  // defaults (measured on H100 and H200): its GEMMs at 0.913 and its streams
  // at 0.959 of the catalog's rates, attention 1.152x as long, and so on.
  const GpuSpec& a100 = gpu_by_name("A100");
  HardwareProfile d = datasheet_profile(a100);
  apply_in_step_defaults(d);
  CHECK(profile_to_json(default_profile(a100)) == profile_to_json(d));
  CHECK(d.gemm_efficiency == Approx(0.913 * a100.gemm_efficiency));
  CHECK(d.memory_efficiency == Approx(0.959 * a100.memory_efficiency));
  CHECK(d.attention_in_step_factor == Approx(1.152));
  CHECK(d.compute_slowdown_beside_comm == Approx(1.404));
  // A measured profile replaces every one of them.
  const HardwareProfile h = default_profile(h100);
  CHECK(h.gemm_efficiency != Approx(0.913 * h100.gemm_efficiency));
}

TEST_CASE("the GPUs this project measured default to their shipped calibrate profile", "[time][calibrate]") {
  for (const char* name : {"H100-SXM", "H200"}) {
    const GpuSpec& g = gpu_by_name(name);
    const nlohmann::json* m = measured_profile_json(name);
    REQUIRE(m != nullptr);
    const HardwareProfile d = default_profile(g), base = datasheet_profile(g);
    // Every field the shipped file holds is the default's; the others stay the datasheet's.
    const nlohmann::json dj = profile_to_json(d), bj = profile_to_json(base);
    for (auto it = dj.begin(); it != dj.end(); ++it) {
      if (m->contains(it.key())) CHECK(*it == m->at(it.key()));
      else CHECK(*it == bj.at(it.key()));
    }
    CHECK(d.gpu_memory_bytes == m->at("gpu_memory_bytes").get<int64_t>());
    CHECK(d.gemm_efficiency != base.gemm_efficiency);  // measured, not the catalog's
    CHECK(d.peak_bf16_flops == g.peak_bf16);            // peaks stay the datasheet's
  }
  // A spec whose figures a cluster file changed is no longer the measured GPU.
  GpuSpec changed = nlohmann::json{{"name", "H100"}, {"peak_bf16_TFLOPS", 500}}.get<GpuSpec>();
  HardwareProfile generic = datasheet_profile(changed);
  apply_in_step_defaults(generic);
  CHECK(profile_to_json(default_profile(changed)) == profile_to_json(generic));
  CHECK(measured_profile_json("A100-80GB-SXM") == nullptr);
  // A memory size the cluster file states is the capacity.
  GpuSpec small = nlohmann::json{{"name", "H100"}, {"memory", "64GiB"}}.get<GpuSpec>();
  CHECK(!small.calibrated.empty());
  CHECK(default_profile(small).gpu_memory_bytes == datasheet_profile(small).gpu_memory_bytes);
  CHECK(default_profile(small).gemm_efficiency == default_profile(gpu_by_name("H100")).gemm_efficiency);
}

TEST_CASE("tensor-parallel collectives pipelined with the GEMMs (tp_comm_overlap)", "[time]") {
  auto p = toy();
  // The decomposition into tp chunks: the pass takes max(comm, gemm) + min / tp.
  CHECK(exposed_tp_comm_seconds(p, 3.0, 10.0, 4) == 3.0);  // off by default: serial
  p.tp_comm_overlap = 1;
  CHECK(exposed_tp_comm_seconds(p, 3.0, 10.0, 4) == Approx(0.75));        // 10 + 3/4 - 10
  CHECK(exposed_tp_comm_seconds(p, 12.0, 10.0, 4) == Approx(12 + 2.5 - 10));  // comm-bound
  CHECK(exposed_tp_comm_seconds(p, 3.0, 10.0, 1) == 3.0);                 // no group
  p.tp_comm_overlap = 0.5;
  CHECK(exposed_tp_comm_seconds(p, 3.0, 10.0, 4) == Approx(0.5 * 3 + 0.5 * 0.75));
  // In a layer with sp: the forward's 2 AG + 2 RS and the backward's 4 AG + 2 RS
  // shrink by exactly that rule; without sp nothing changes (all-reduces stay serial).
  ModelSpec m;
  m.layers = 1, m.hidden = 4096, m.heads = m.kv_heads = 32, m.ffn = 4 * 4096, m.vocab = 51200;
  const GroupLink link{2, 1, 2, 1 / 100e9, 5e-6, 1 / 100e9, 5e-6, 0, 0};
  const LayerShape sp{4096, 1, 2, true, Precision::BF16, Ckpt::None}, nosp{4096, 1, 2, false, Precision::BF16, Ckpt::None};
  auto serial = toy();
  const PassTimes a = transformer_layer_times(serial, m, sp, link), b = transformer_layer_times(p, m, sp, link);
  CHECK(b.forward.gemm_seconds == Approx(a.forward.gemm_seconds));
  CHECK(b.forward.tp_comm_seconds == Approx(exposed_tp_comm_seconds(p, a.forward.tp_comm_seconds, a.forward.gemm_seconds, 2)));
  CHECK(b.backward.tp_comm_seconds ==
        Approx(exposed_tp_comm_seconds(p, a.backward.tp_comm_seconds, a.backward.gemm_seconds, 2)));
  CHECK(b.forward.tp_comm_seconds < a.forward.tp_comm_seconds);
  CHECK(transformer_layer_times(p, m, nosp, link).forward.tp_comm_seconds ==
        Approx(transformer_layer_times(serial, m, nosp, link).forward.tp_comm_seconds));
  nlohmann::json bad = profile_to_json(p);
  bad["tp_comm_overlap"] = 1.5;
  CHECK_THROWS_AS(profile_from_json(bad, p), InputError);
}

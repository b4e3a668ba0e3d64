// planner calibrate's moe_host part: the host's seconds in one MoE
// transformer layer's forward and backward as the runtime runs them
// (runtime/model/transformer.* and moe.*), which the time model puts under
// each MoE layer as a floor (docs/TIME_MODEL.md, "Mixture of experts"). The
// layer is the runtime's whole one, attention, norms and residuals included:
// its forward waits once on the host for the routed counts (they size the
// all-to-all), so the host cannot run ahead of that layer's attention either,
// and the layer takes at least the host's time for all of it. The layer is
// small (hidden 512, 8 heads over sequences of 256, experts of width 512,
// top-2, SwiGLU, no shared MLP) so that the GPU's work is microseconds and
// the wall time is the host's, over a chain of layers (a barrier only before
// each chain). Two token counts give a fixed part and a part per routed row
// (ep > 1 builds its row permutation on the host). Alone (ep = 1) on rank 0,
// and under mpirun with every rank in one expert-parallel group.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "calibration/measure_detail.hpp"
#include "runtime/device.hpp"
#include "runtime/model/moe.hpp"
#include "runtime/model/transformer.hpp"

namespace planner::rt::calib {

namespace {

constexpr int kLayers = 8;
constexpr int64_t kSeq = 256;  // tokens per sequence: the attention's GPU work stays small

// `shared`: with a shared MLP of the experts' width behind Qwen2-MoE's sigmoid
// gate, as Qwen-MoE and DeepSeek layers have (the probe's second layer kind).
ModelSpec moe_probe_spec(int ep, bool shared = false) {
  ModelSpec m;
  m.name = "calibrate-moe-probe";
  m.arch = Arch::Decoder;
  m.layers = kLayers, m.hidden = 512, m.heads = 8, m.kv_heads = 8, m.ffn = 1024, m.vocab = 1024;
  m.mlp = MlpKind::SwiGlu, m.norm = NormKind::RmsNorm, m.pos = PosEmbed::Rotary;
  m.qkv_bias = m.out_bias = m.mlp_bias = false;
  m.moe.top_k = 2, m.moe.expert_ffn = 512;
  m.moe.experts = ep * ((8 + ep - 1) / ep);  // 8, or the next multiple of ep
  if (shared) m.moe.shared_experts = 1, m.moe.shared_ffn = 512, m.moe.shared_gate = true;
  return m;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// The median host seconds per layer of a forward through kLayers layers
// (`layer(l, y)`) and of its backward, after warm-up. Layers run one after
// another with no barrier between them, as a training step runs them: under
// mpirun each layer's exchange of the routed counts then also waits for the
// slowest rank of the group, which a barrier per layer would hide.
template <class Layer>
std::pair<double, double> time_chain(const Ctx& c, Communicator* ep, const at::Tensor& x, const at::Tensor& dy,
                                     Layer layer) {
  const int warm = 3, reps = c.quick ? 5 : 15;
  std::vector<double> fwd, bwd;
  for (int i = 0; i < warm + reps; ++i) {
    synchronize(c.cuda);
    if (ep) ep->barrier();
    at::Tensor y = x.detach().requires_grad_(true);
    const double t0 = now_s();
    for (int l = 0; l < kLayers; ++l) y = layer(l, y);
    const double t1 = now_s();
    y.backward(dy);
    const double t2 = now_s();
    if (i >= warm) fwd.push_back((t1 - t0) / kLayers), bwd.push_back((t2 - t1) / kLayers);
  }
  synchronize(c.cuda);
  return {median(fwd), median(bwd)};
}

// The probe with a shared gated MLP (moe_probe_spec's `shared`): its whole
// layer's host seconds per forward and backward at `T` tokens, timed as the
// plain probe's (the difference is the shared MLP's host work).
nlohmann::json measure_shared_layer(const Ctx& c, Communicator* ep, int64_t T) {
  const int n = ep ? ep->size() : 1;
  const ModelSpec m = moe_probe_spec(n, true);
  TransformerModel model(m, kSeq, nullptr, false, ep);
  const at::ScalarType dt = c.cuda ? at::kBFloat16 : at::kFloat;
  model.materialize(c.device, dt, 11 + uint64_t(c.rank));
  const auto opt = at::TensorOptions().device(c.device).dtype(dt);
  at::manual_seed(5 + uint64_t(c.rank));
  const at::Tensor x = at::randn({T / kSeq, kSeq, m.hidden}, opt), dy = at::randn({T / kSeq, kSeq, m.hidden}, opt);
  const auto [f, b] = time_chain(c, ep, x, dy, [&](int l, const at::Tensor& y) { return model.layer(l, y, false); });
  say(c, "moe host (ep " + std::to_string(n) + ", " + std::to_string(T) + " tokens, with a shared gated MLP): forward " +
             fmt_num(f * 1e3) + " ms, backward " + fmt_num(b * 1e3) + " ms per layer");
  return {{"tokens", T}, {"rows", T * m.moe.top_k}, {"shared_ffn", m.moe.shared_ffn},
          {"forward_seconds", f}, {"backward_seconds", b}};
}

nlohmann::json measure_moe_host(const Ctx& c, Communicator* ep) {
  const int n = ep ? ep->size() : 1;
  const ModelSpec m = moe_probe_spec(n);
  TransformerModel model(m, kSeq, nullptr, false, ep);
  const at::ScalarType dt = c.cuda ? at::kBFloat16 : at::kFloat;
  // The runtime's initialisation (a router of N(0, 0.02) spreads the tokens
  // over the experts), seeded per rank.
  model.materialize(c.device, dt, 11 + uint64_t(c.rank));
  const auto opt = at::TensorOptions().device(c.device).dtype(dt);
  nlohmann::json points = nlohmann::json::array();
  // CPU-sized (quick) shapes: the experts' GEMMs at 8192 tokens take seconds on a CPU.
  const std::vector<int64_t> tokens = c.quick ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{1024, 8192};
  for (const int64_t T : tokens) {
    at::manual_seed(5 + uint64_t(c.rank));
    const at::Tensor x = at::randn({T / kSeq, kSeq, m.hidden}, opt), dy = at::randn({T / kSeq, kSeq, m.hidden}, opt);
    // The whole layer, and (a diagnosis kept in the measurement) the MoE
    // block alone with its residual add, as calibrate timed it before.
    const MoeBlock& block = *model.moe();
    auto chain = [&](bool whole) {
      return time_chain(c, ep, x, dy, [&](int l, const at::Tensor& y) {
        return whole ? model.layer(l, y, false) : y + block.forward(model.store(), l, y, 1.0);
      });
    };
    const auto [f, b] = chain(true);
    const auto [bf, bb] = chain(false);
    say(c, "moe host (ep " + std::to_string(n) + ", " + std::to_string(T) + " tokens): forward " +
               fmt_num(f * 1e3) + " ms, backward " + fmt_num(b * 1e3) + " ms per layer (the MoE block alone " +
               fmt_num(bf * 1e3) + " and " + fmt_num(bb * 1e3) + " ms)");
    points.push_back({{"tokens", T},
                      {"rows", T * m.moe.top_k},
                      {"forward_seconds", f},
                      {"backward_seconds", b},
                      {"block_forward_seconds", bf},
                      {"block_backward_seconds", bb}});
  }
  // The same layer with a shared gated MLP, at the first token count.
  const nlohmann::json shared = measure_shared_layer(c, ep, tokens.front());
  return {{"ep", n},
          {"unit", "layer"},
          {"shared", shared},
          {"seq", kSeq},
          {"experts", m.moe.experts},
          {"top_k", m.moe.top_k},
          {"hidden", m.hidden},
          {"expert_ffn", m.moe.expert_ffn},
          {"precision", c.cuda ? "bf16" : "fp32"},
          {"layers", kLayers},
          {"points", points}};
}

}  // namespace planner::rt::calib

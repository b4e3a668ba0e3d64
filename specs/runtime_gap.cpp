#include "specs/runtime_gap.hpp"

#include <algorithm>
#include <string>

namespace planner {

std::string moe_runtime_gap(const ModelSpec& m, int tp, int ep) {
  const MoeSpec& e = m.moe;
  if (!e.enabled()) return "";
  auto no = [&](const std::string& what) {
    return "the runtime does not execute mixture of experts with " + what + " (" + m.name + ")";
  };
  if (m.arch != Arch::Decoder) return no("an encoder");
  if (m.parallel_block) return no("the parallel attention/MLP block");
  if (m.mlp_bias) return no("MLP biases");
  if (e.capacity_factor > 0) return no("a capacity factor (token dropping); dropless routing (capacity_factor 0) runs");
  if (ep > 0 && e.experts % ep != 0)
    return no(std::to_string(e.experts) + " experts over ep=" + std::to_string(ep) + " (not a multiple)");
  if (tp > 0 && (e.expert_ffn % tp != 0 || e.shared_ffn % tp != 0))
    return no("expert widths not divisible by tp=" + std::to_string(tp));
  if (e.top_k < 1 || e.top_k > e.experts) return no("top_k outside [1, experts]");
  return "";
}

std::string runtime_gap(const ModelSpec& m, const Strategy& s, int64_t seq) {
  if (std::string g = runtime_model_gap(m); !g.empty()) return g;
  if (m.moe.enabled()) {
    if (std::string g = moe_runtime_gap(m, s.tp, s.ep); !g.empty()) return g;
    if (s.ep > 1 && s.cp > 1)
      return "the runtime executes expert parallelism (ep=" + std::to_string(s.ep) + ") with cp=1 only; this plan has cp=" +
             std::to_string(s.cp);
    if (s.finetune.frozen_base())
      return "the runtime does not execute LoRA/QLoRA on a mixture-of-experts model (adapters on experts are not built)";
  }
  if (s.precision == Precision::FP8) {
    // runtime/model/fp8_linear.hpp: at::_scaled_mm takes dimensions that are
    // multiples of 16; under tp each rank's GEMMs take its part (qkv's and
    // fc1's output columns, o's and fc2's input columns; tp divides heads, kv
    // heads and ffn). Under sp the column-parallel GEMMs gather the sequence,
    // so the tokens are a micro-batch's whole (seq/cp * mbs) either way.
    const int64_t tokens = seq / std::max(1, s.cp) * s.mbs, t = std::max(1, s.tp);
    for (int64_t d : {m.hidden, (m.q_dim() + 2 * m.kv_dim()) / t, m.q_dim() / t, m.ffn / t, tokens})
      if (d % 16 != 0)
        return "precision=fp8 needs the hidden width, each tp rank's qkv width ((q + 2 kv) / tp), attention width "
               "(q / tp) and FFN width (ffn / tp), and the tokens of a micro-batch (seq/cp*mbs) to be multiples of 16 "
               "(at::_scaled_mm); " + std::to_string(d) + " is not";
  }
  if (s.sp && s.tp > 1 && seq % s.tp != 0)
    return "sp=1 splits the sequence over the tp ranks, so seq " + std::to_string(seq) + " must be a multiple of tp=" +
           std::to_string(s.tp);
  return "";
}

bool runtime_reserves_head_block(const ModelSpec& m, const Strategy& s, double logits_bytes) {
  return !m.mlm_head && (s.pp == 1 || s.schedule == Schedule::OneFOneB) && logits_bytes >= double(int64_t(128) << 20);
}

}  // namespace planner

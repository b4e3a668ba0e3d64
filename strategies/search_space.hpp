#pragma once
// The strategy search space: every legal Strategy for a GPU count, a global
// batch and a model's divisibility, enumerated without allocation. The rules
// mirror Strategy::validate() and check_compat() (costmodel/compat.hpp), so
// every enumerated strategy passes both; a test checks that.
//
// Dimensions: every tp * cp * pp * dp factorization of the GPUs (tp dividing
// the heads, kv-heads and FFN; cp up to max_cp with seq a multiple of 2*cp;
// pp at most the layers; dp dividing the global batch); every micro-batch
// size dividing the per-replica batch (gas follows);
// ZeRO 0..3 (2 and 3 only without PP, DeepSpeed's rule); offload none /
// optimizer (ZeRO>=1) / all (ZeRO-3); checkpointing none / selective / full;
// GPipe, 1F1B and interleaved with every vpp up to max_vpp (pp > 1, gas a
// multiple of pp, pp * vpp at most the layers); sequence parallelism with tp > 1;
// precision: bf16 where the GPU has it, else fp16, and fp32; fp8 too when asked
// (SpaceLimits::fp8: `--allow fp8`, and the GPU has FP8); for a mixture of
// experts, every expert-parallel degree ep dividing dp and the experts (tp
// dividing the experts' and the shared MLP's widths too).
//
// Left out because they cost exactly the same as a listed one in the model
// (docs/SIMULATOR.md): fp16 where bf16 exists (same tensor-core rate, same
// bytes), GPipe and interleaved with pp = 1, zero>=1 without offload at
// dp * cp = 1 (nothing to shard).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "strategies/strategy.hpp"

namespace planner {

struct SpaceLimits {
  int world = 1;
  int64_t global_batch = 1;
  int64_t layers = 1, heads = 1, kv_heads = 1, ffn = 1;
  int64_t experts = 0, expert_ffn = 0, shared_ffn = 0;  // mixture of experts (experts 0: dense, ep = 1 only)
  bool bf16 = true;        // the GPU has bfloat16
  bool fp16 = true;        // the GPU has fp16 tensor cores
  bool fp32 = true;        // also search fp32 training
  bool fp8 = false;        // also search fp8 linear GEMMs (the caller checks the GPU has FP8)
  int max_vpp = 8;         // interleaved: virtual stages per rank to try
  int64_t max_mbs = 0;     // 0: every divisor of the per-replica batch
  // Context parallelism: cp from 1 to max_cp dividing the GPUs left by tp,
  // with seq a multiple of 2*cp (causal load balancing). 1: none searched.
  int max_cp = 1;
  int64_t seq = 0;
};

namespace detail {
// The memory and schedule choices of one degree assignment (s.dp, s.tp,
// s.pp, s.cp, s.ep, s.mbs, s.gas set by the caller).
template <class F>
void for_each_setting(const SpaceLimits& L, const Precision* precs, int n_prec, Strategy& s, F& visit) {
  const int dp = s.dp, tp = s.tp, pp = s.pp, gas = s.gas;
  for (int zero = 0; zero <= 3; ++zero) {
    if (zero >= 2 && pp > 1) continue;
    for (int off = 0; off < 3; ++off) {
      const Offload offload = Offload(off);
      if (offload == Offload::Optimizer && zero < 1) continue;
      if (offload == Offload::All && zero != 3) continue;
      if (dp * s.cp == 1 && zero >= 1 && offload == Offload::None) continue;  // ZeRO shards over dp-cp
      s.zero = zero, s.offload = offload;
      for (int ck = 0; ck < 3; ++ck) {
        s.ckpt = Ckpt(ck);
        // Under cp selective recomputes nothing (ring attention is never
        // checkpointed; costmodel/cost_model.cpp): the plan without it.
        if (s.ckpt == Ckpt::Selective && s.cp > 1) continue;
        for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
          s.sp = sp != 0;
          for (int pi = 0; pi < n_prec; ++pi) {
            s.precision = precs[pi];
            s.vpp = 1;
            s.schedule = Schedule::OneFOneB;
            visit(static_cast<const Strategy&>(s));
            if (pp == 1) continue;
            s.schedule = Schedule::GPipe;
            visit(static_cast<const Strategy&>(s));
            if (gas % pp) continue;
            s.schedule = Schedule::Interleaved;
            for (int vpp = 2; vpp <= L.max_vpp && int64_t(pp) * vpp <= L.layers; ++vpp) {
              s.vpp = vpp;
              visit(static_cast<const Strategy&>(s));
            }
            s.vpp = 1;
          }
        }
      }
    }
  }
}
}  // namespace detail

template <class F>
void for_each_strategy(const SpaceLimits& L, F&& visit) {
  Strategy s;
  Precision precs[3];
  int n_prec = 0;
  if (L.bf16) precs[n_prec++] = Precision::BF16;
  else if (L.fp16) precs[n_prec++] = Precision::FP16;
  if (L.fp8) precs[n_prec++] = Precision::FP8;
  if (L.fp32) precs[n_prec++] = Precision::FP32;
  for (int tp = 1; tp <= L.world; ++tp) {
    if (L.world % tp || L.heads % tp || L.kv_heads % tp || L.ffn % tp) continue;
    if (L.experts > 0 && (L.expert_ffn % tp || L.shared_ffn % tp)) continue;
    for (int cp = 1; cp <= L.world / tp && cp <= L.max_cp; ++cp) {
      if ((L.world / tp) % cp || (cp > 1 && L.seq % (2 * int64_t(cp)))) continue;
      const int rest = L.world / (tp * cp);
      for (int pp = 1; pp <= rest && pp <= L.layers; ++pp) {
        if (rest % pp) continue;
        const int dp = rest / pp;
        if (L.global_batch % dp) continue;
        const int64_t per_replica = L.global_batch / dp;
        for (int ep = 1; ep <= dp; ++ep) {
          if (dp % ep || (ep > 1 && (L.experts == 0 || L.experts % ep))) continue;
          // mbs at most kMaxMbs and gas at most kMaxDegree (Strategy::validate):
          // bounds the loop too, whatever the global batch (issue 11).
          const int64_t mbs_end =
              std::min<int64_t>(per_replica, L.max_mbs > 0 ? std::min<int64_t>(L.max_mbs, kMaxMbs) : kMaxMbs);
          for (int64_t mbs = 1; mbs <= mbs_end; ++mbs) {
            if (per_replica % mbs || per_replica / mbs > kMaxDegree) continue;
            s.dp = dp, s.tp = tp, s.pp = pp, s.cp = cp, s.ep = ep, s.mbs = int(mbs), s.gas = int(per_replica / mbs);
            detail::for_each_setting(L, precs, n_prec, s, visit);
          }
        }
      }
    }
  }
}

std::vector<Strategy> enumerate_strategies(const SpaceLimits& limits);
int64_t count_strategies(const SpaceLimits& limits);

}  // namespace planner

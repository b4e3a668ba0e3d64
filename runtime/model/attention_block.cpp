#include "runtime/model/attention_block.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner::rt {

const char* to_string(BlockKernel k) {
  switch (k) {
    case BlockKernel::CpuFlash: return "cpu-flash";
    case BlockKernel::Flash: return "flash";
    case BlockKernel::Cudnn: return "cudnn";
  }
  return "?";
}

CpAttention cp_attention_from_env() {
  const char* env = std::getenv("PLANNER_CP_ATTENTION");
  if (!env || !*env) return CpAttention::Auto;
  if (std::string(env) == "flash") return CpAttention::Flash;
  throw InputError("PLANNER_CP_ATTENTION='" + clip(env) +
                   "' is not an accepted value: 'flash' (FlashAttention-2 blocks), or unset or empty (cuDNN's blocks "
                   "after their self-check)");
}

namespace {

// What cuDNN's forward returned besides the output, reused by its backward:
// the log-sum-exp's rank (LibTorch returns it as (b, heads, sq, 1)) and the
// dropout RNG state (dropout is 0 here; the backward still takes the tensors).
struct CudnnState {
  bool lse_has_unit_dim = true;
  at::Tensor philox_seed, philox_offset;
};
CudnnState& cudnn_state() {
  static CudnnState s;
  return s;
}

std::pair<at::Tensor, at::Tensor> cudnn_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                bool causal) {
  auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/true,
                                                   /*dropout_p=*/0.0, causal, /*return_debug_mask=*/false);
  const at::Tensor& lse = std::get<1>(r);
  const int64_t b = q.size(0), h = q.size(1), sq = q.size(2);
  if (lse.numel() != b * h * sq) throw std::runtime_error("cuDNN attention's log-sum-exp has an unexpected shape");
  auto& st = cudnn_state();
  st.lse_has_unit_dim = lse.dim() == 4;
  if (!st.philox_seed.defined()) st.philox_seed = std::get<6>(r), st.philox_offset = std::get<7>(r);
  return {std::get<0>(r), lse.reshape({b, h, sq}).to(at::kFloat)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> cudnn_backward(const at::Tensor& dout, const at::Tensor& q,
                                                              const at::Tensor& k, const at::Tensor& v,
                                                              const at::Tensor& out, const at::Tensor& lse,
                                                              bool causal) {
  const auto& st = cudnn_state();
  const at::Tensor l = (st.lse_has_unit_dim ? lse.unsqueeze(-1) : lse).contiguous();
  return at::_scaled_dot_product_cudnn_attention_backward(dout, q, k, v, out, l, st.philox_seed, st.philox_offset,
                                                          /*attn_bias=*/at::Tensor(), /*cum_seq_q=*/at::Tensor(),
                                                          /*cum_seq_k=*/at::Tensor(), q.size(2), k.size(2),
                                                          /*dropout_p=*/0.0, causal);
}

// |a - b| <= tol * max|b| + 1e-3 elementwise (bf16/fp16 blocks: both sides
// rounded; the floor, against inputs of magnitude 1, keeps an output that
// averages values of both signs to near 0 from failing on rounding alone:
// validation/h100/cudnn_blocks measured 3e-4 against a largest |out| of 0.0056).
bool close(const at::Tensor& a, const at::Tensor& b, double tol) {
  const at::Tensor bf = b.to(at::kFloat), diff = (a.to(at::kFloat) - bf).abs().max();
  return diff.item<double>() <= tol * bf.abs().max().item<double>() + 1e-3;
}

// Deterministic (1, heads, 2n, d) inputs for the self-checks, in like's dtype,
// without touching the training's random generator.
at::Tensor check_input(const at::Tensor& like, int64_t heads, int64_t n, int64_t d, double f) {
  return at::arange(heads * 2 * n * d, like.options().dtype(at::kFloat)).mul(f).sin().reshape({1, heads, 2 * n, d}).to(
      like.scalar_type());
}

// cuDNN over the first and the second n keys of k, v, merged in fp32: the
// halves (made contiguous), the merged log-sum-exp and output.
struct TwoBlocks {
  at::Tensor k1, k2, v1, v2, lse, out;
};
TwoBlocks two_cudnn_blocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n) {
  TwoBlocks b;
  b.k1 = k.narrow(2, 0, n).contiguous(), b.k2 = k.narrow(2, n, n).contiguous();
  b.v1 = v.narrow(2, 0, n).contiguous(), b.v2 = v.narrow(2, n, n).contiguous();
  auto [o1, l1] = cudnn_forward(q, b.k1, b.v1, false);
  auto [o2, l2] = cudnn_forward(q, b.k2, b.v2, false);
  b.lse = at::logaddexp(l1, l2);
  b.out = o1.to(at::kFloat) * at::exp(l1 - b.lse).unsqueeze(-1) + o2.to(at::kFloat) * at::exp(l2 - b.lse).unsqueeze(-1);
  return b;
}

// Two blocks of cuDNN merged against one flash call over the whole K/V, and
// the blocks' backward given the merged output and log-sum-exp; also a causal
// square block. Empty on success, else what failed.
std::string cudnn_self_check(const at::Tensor& like) {
  const int64_t h = like.size(1), d = like.size(3), n = 128;
  // q scaled so that the softmax is peaked and the outputs are not all near 0.
  const at::Tensor q = check_input(like, h, n, d, 0.37).mul(4.0), k = check_input(like, h, n, d, 0.71),
                   v = check_input(like, h, n, d, 1.13), dout = check_input(like, h, n, d, 0.53);
  const auto ref = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, /*is_causal=*/false);
  const at::Tensor out_ref = std::get<0>(ref), lse_ref = std::get<1>(ref).to(at::kFloat);
  const TwoBlocks b = two_cudnn_blocks(q, k, v, n);
  const at::Tensor &k1 = b.k1, &k2 = b.k2, &v1 = b.v1, &v2 = b.v2;
  if (!close(b.lse, lse_ref, 1e-2)) return "merged log-sum-exp differs from flash's";
  if (!close(b.out, out_ref, 2e-2)) return "merged output differs from flash's";
  const auto causal_ref = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, /*is_causal=*/true);
  auto [oc, lc] = cudnn_forward(q, k, v, true);
  if (!close(oc, std::get<0>(causal_ref), 2e-2)) return "causal output differs from flash's";
  if (!close(lc, std::get<1>(causal_ref), 1e-2)) return "causal log-sum-exp differs from flash's";
  const auto g = at::_scaled_dot_product_flash_attention_backward(dout, q, k, v, out_ref, std::get<1>(ref),
                                                                  at::Tensor(), at::Tensor(), 2 * n, 2 * n, 0.0,
                                                                  false, at::Tensor(), at::Tensor());
  const at::Tensor out_b = out_ref.contiguous();
  auto [gq1, gk1, gv1] = cudnn_backward(dout, q, k1, v1, out_b, lse_ref, false);
  auto [gq2, gk2, gv2] = cudnn_backward(dout, q, k2, v2, out_b, lse_ref, false);
  if (!close(gq1.to(at::kFloat) + gq2.to(at::kFloat), std::get<0>(g), 5e-2)) return "block dQ differs from flash's";
  if (!close(at::cat({gk1, gk2}, 2), std::get<1>(g), 5e-2)) return "block dK differs from flash's";
  if (!close(at::cat({gv1, gv2}, 2), std::get<2>(g), 5e-2)) return "block dV differs from flash's";
  return {};
}

// cuDNN's blocks with k, v on hk < h heads against flash over the heads
// repeated: two blocks merged (output, log-sum-exp) and their backward (dQ
// summed over the blocks, dK and dV per kv head against flash's summed over
// each group). Empty on success, else what failed.
std::string cudnn_gqa_check(const at::Tensor& q_like, int64_t hk) {
  const int64_t h = q_like.size(1), d = q_like.size(3), n = 128, g = h / hk;
  const at::Tensor q = check_input(q_like, h, n, d, 0.37).mul(4.0), k = check_input(q_like, hk, n, d, 0.71),
                   v = check_input(q_like, hk, n, d, 1.13), dout = check_input(q_like, h, n, d, 0.53);
  const at::Tensor ke = k.repeat_interleave(g, 1), ve = v.repeat_interleave(g, 1);
  const auto ref = at::_scaled_dot_product_flash_attention(q, ke, ve, 0.0, /*is_causal=*/false);
  const at::Tensor out_ref = std::get<0>(ref).contiguous(), lse_ref = std::get<1>(ref).to(at::kFloat);
  const TwoBlocks b = two_cudnn_blocks(q, k, v, n);
  const at::Tensor &k1 = b.k1, &k2 = b.k2, &v1 = b.v1, &v2 = b.v2;
  if (!close(b.lse, lse_ref, 1e-2)) return "grouped kv heads: merged log-sum-exp differs from flash's";
  if (!close(b.out, out_ref, 2e-2)) return "grouped kv heads: merged output differs from flash's";
  const auto gr = at::_scaled_dot_product_flash_attention_backward(dout, q, ke, ve, out_ref, std::get<1>(ref),
                                                                   at::Tensor(), at::Tensor(), 2 * n, 2 * n, 0.0,
                                                                   false, at::Tensor(), at::Tensor());
  auto per_kv = [&](const at::Tensor& t) { return t.to(at::kFloat).reshape({1, hk, g, 2 * n, d}).sum(2); };
  auto [gq1, gk1, gv1] = cudnn_backward(dout, q, k1, v1, out_ref, lse_ref, false);
  auto [gq2, gk2, gv2] = cudnn_backward(dout, q, k2, v2, out_ref, lse_ref, false);
  if (gk1.size(1) != hk || gv1.size(1) != hk) return "grouped kv heads: dK/dV do not come per kv head";
  if (!close(gq1.to(at::kFloat) + gq2.to(at::kFloat), std::get<0>(gr), 5e-2))
    return "grouped kv heads: block dQ differs from flash's";
  if (!close(at::cat({gk1, gk2}, 2), per_kv(std::get<1>(gr)), 5e-2)) return "grouped kv heads: block dK differs";
  if (!close(at::cat({gv1, gv2}, 2), per_kv(std::get<2>(gr)), 5e-2)) return "grouped kv heads: block dV differs";
  return {};
}

}  // namespace

bool block_takes_kv_heads(BlockKernel kernel, const at::Tensor& q, const at::Tensor& k) {
  if (kernel != BlockKernel::Cudnn || k.size(1) == q.size(1)) return false;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int64_t, int64_t, int64_t>, bool> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(int(q.get_device()), int(q.scalar_type()), q.size(1), k.size(1), q.size(3));
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::string fail;
    try {
      fail = cudnn_gqa_check(q, k.size(1));
    } catch (const std::exception& e) {
      fail = std::string("cuDNN attention with grouped kv heads failed: ") + e.what();
      fail = fail.substr(0, fail.find('\n'));
    }
    if (!fail.empty())
      std::fprintf(stderr, "note: ring attention repeats the kv heads for cuDNN's blocks: %s\n", fail.c_str());
    it = cache.emplace(key, fail.empty()).first;
  }
  return it->second;
}

BlockKernel choose_block_kernel(const at::Tensor& q, std::string* why) {
  if (!q.is_cuda()) return BlockKernel::CpuFlash;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int64_t, int64_t>, std::pair<BlockKernel, std::string>> cache;
  if (cp_attention_from_env() == CpAttention::Flash) {
    if (why) *why = "PLANNER_CP_ATTENTION=flash";
    return BlockKernel::Flash;
  }
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(int(q.get_device()), int(q.scalar_type()), q.size(1), q.size(3));
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::string fail;
    try {
      fail = cudnn_self_check(q);
    } catch (const std::exception& e) {
      fail = std::string("cuDNN attention failed: ") + e.what();
      fail = fail.substr(0, fail.find('\n'));
    }
    const BlockKernel k = fail.empty() ? BlockKernel::Cudnn : BlockKernel::Flash;
    if (!fail.empty())
      std::fprintf(stderr, "note: ring attention runs FlashAttention-2 blocks, not cuDNN's: %s\n", fail.c_str());
    it = cache.emplace(key, std::make_pair(k, fail)).first;
  }
  if (why) *why = it->second.second;
  return it->second.first;
}

std::pair<at::Tensor, at::Tensor> block_forward(BlockKernel kernel, const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, bool causal) {
  switch (kernel) {
    case BlockKernel::Cudnn: return cudnn_forward(q, k, v, causal);
    case BlockKernel::Flash: {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, /*dropout_p=*/0.0, causal);
      return {std::get<0>(r), std::get<1>(r)};
    }
    case BlockKernel::CpuFlash: break;
  }
  auto r = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, /*dropout_p=*/0.0, causal);
  return {std::get<0>(r), std::get<1>(r)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> block_backward(BlockKernel kernel, const at::Tensor& dout,
                                                              const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& out,
                                                              const at::Tensor& lse, bool causal) {
  switch (kernel) {
    case BlockKernel::Cudnn: return cudnn_backward(dout, q, k, v, out, lse, causal);
    case BlockKernel::Flash:
      return at::_scaled_dot_product_flash_attention_backward(dout, q, k, v, out, lse, at::Tensor(), at::Tensor(),
                                                              q.size(2), k.size(2), /*dropout_p=*/0.0, causal,
                                                              at::Tensor(), at::Tensor());
    case BlockKernel::CpuFlash: break;
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, /*dropout_p=*/0.0, causal);
}

}  // namespace planner::rt

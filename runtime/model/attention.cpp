#include "runtime/model/attention.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <optional>

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

// Causal attention with a window through ATen's FlashAttention-2 entry points
// (the ones SDPA's flash backend calls, which take the window SDPA does not
// expose). They work in (b, s, heads, d), heads and kv heads as they are
// (the kernel handles grouped-query attention itself), and return the
// per-row log-sum-exp and the RNG state (unused without dropout) that the
// backward takes back.
struct WindowedFlash : torch::autograd::Function<WindowedFlash> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t window) {
    at::Tensor qt = q.transpose(1, 2).contiguous(), kt = k.transpose(1, 2).contiguous();
    at::Tensor vt = v.transpose(1, 2).contiguous();
    const int64_t sq = qt.size(1), sk = kt.size(1);
    auto r = at::_flash_attention_forward(qt, kt, vt, std::nullopt, std::nullopt, sq, sk, /*dropout_p=*/0.0,
                                          /*is_causal=*/true, /*return_debug_mask=*/false, /*scale=*/std::nullopt,
                                          /*window_size_left=*/window - 1, /*window_size_right=*/int64_t(0));
    at::Tensor out = std::get<0>(r);
    ctx->save_for_backward({qt, kt, vt, out, std::get<1>(r), std::get<2>(r), std::get<3>(r)});
    ctx->saved_data["window"] = window;
    return out.transpose(1, 2);  // (b, heads, s, d), as SDPA returns it
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto s = ctx->get_saved_variables();
    const int64_t window = ctx->saved_data["window"].toInt();
    at::Tensor g = grads[0].transpose(1, 2).contiguous();
    auto r = at::_flash_attention_backward(g, s[0], s[1], s[2], s[3], s[4], at::Tensor(), at::Tensor(), s[0].size(1),
                                           s[1].size(1), /*dropout_p=*/0.0, /*is_causal=*/true, s[5], s[6],
                                           /*scale=*/std::nullopt, /*window_size_left=*/window - 1,
                                           /*window_size_right=*/int64_t(0));
    return {std::get<0>(r).transpose(1, 2), std::get<1>(r).transpose(1, 2), std::get<2>(r).transpose(1, 2),
            at::Tensor()};
  }
};

}  // namespace

bool windowed_flash_applies(const at::Tensor& q) {
  const auto t = q.scalar_type();
  const int64_t d = q.size(-1);
  return q.is_cuda() && (t == at::kBFloat16 || t == at::kHalf) && d % 8 == 0 && d <= 256;
}

at::Tensor causal_band_mask(int64_t s, int64_t window, at::Device device) {
  auto opts = at::TensorOptions().device(device).dtype(at::kLong);
  at::Tensor i = at::arange(s, opts).unsqueeze(1), j = at::arange(s, opts).unsqueeze(0);
  at::Tensor m = j.le(i);
  if (window > 0) m = m.logical_and(i.sub(j).lt(window));
  return m;
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, bool gqa,
                  int64_t window) {
  const int64_t s = q.size(2);
  if (!causal || window <= 0 || window >= s || k.size(2) != s)  // no window, or one that covers everything
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/gqa);
  if (windowed_flash_applies(q)) return WindowedFlash::apply(q, k, v, window);
  at::Tensor kk = k, vv = v;
  bool g = gqa;
  if (gqa && q.is_cuda()) {
    // CUDA's memory-efficient kernel (which takes masks) does not take
    // enable_gqa; repeat the kv heads so that it, not the s^2 math path, runs.
    const int64_t rep = q.size(1) / k.size(1);
    kk = k.repeat_interleave(rep, 1), vv = v.repeat_interleave(rep, 1), g = false;
  }
  return at::scaled_dot_product_attention(q, kk, vv, causal_band_mask(s, window, q.device()), /*dropout_p=*/0.0,
                                          /*is_causal=*/false, /*scale=*/std::nullopt, /*enable_gqa=*/g);
}

}  // namespace planner::rt

#pragma once
// The attention core of the runtime's transformer: softmax(q k^T / sqrt(d)) v,
// causal or bidirectional, grouped-query, and causal with a sliding window
// (Mistral, Gemma-2, GPT-Neo's local layers; Beltagy et al. 2020, "Longformer",
// sec. 3.1; Jiang et al. 2023, "Mistral 7B", sec. 2).
//
// A window of w keys: query i attends keys j with i - w < j <= i (itself and
// the w - 1 before it), the convention of HF's sliding_window (Mistral's
// MistralConfig.sliding_window = 4096) and of ModelSpec::sliding_window, which
// the cost model counts with attended_pairs(). A window of 0, or one at least
// as long as the sequence, is full causal attention and runs the same kernel
// as a model without a window (the results are then bitwise the same).
//
// Kernels:
//  - CUDA, bf16/fp16, head_dim a multiple of 8 and at most 256: the flash
//    kernel itself with its window (at::_flash_attention_forward/_backward's
//    window_size_left = w - 1, window_size_right = 0, the FlashAttention-2
//    convention; present in ATen since 2.5, the signature used here is the
//    one of torch 2.11's native_functions.yaml). Its cost is the window's
//    share of the blocks, as the cost model assumes.
//  - otherwise (CPU, fp32 on CUDA): at::scaled_dot_product_attention with a
//    boolean band mask of (s, s): the CPU flash kernel takes the mask, so
//    memory stays O(s) per head apart from the mask itself; time is that of
//    full attention (the CPU runs are equivalence tests, not timings).
#include <ATen/ATen.h>

#include <cstdint>

namespace planner::rt {

// q (b, heads, s, d); k, v (b, kv_heads, s, d) (gqa: kv_heads divides heads).
// window > 0 (causal only): each query attends at most `window` keys.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, bool gqa,
                  int64_t window = 0);

// (s, s) bool, true where query i may attend key j: j <= i and i - j < window
// (window <= 0: j <= i).
at::Tensor causal_band_mask(int64_t s, int64_t window, at::Device device);

// Whether attend() runs the windowed flash kernel for these inputs.
bool windowed_flash_applies(const at::Tensor& q);

}  // namespace planner::rt

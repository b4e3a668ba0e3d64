#pragma once
// One block of attention for ring attention (runtime/model/context_parallel.*):
// the block's output and log-sum-exp, and the block's dQ, dK, dV given the
// merged output and log-sum-exp of the whole attention.
//
// Which kernel. The time model prices attention at the rate calibrate measured
// for the device's scaled_dot_product_attention, which on Hopper is cuDNN's
// fused attention. cp21 (validation/h100x4/cp21/kernels) showed that ATen's
// flash kernel (FlashAttention-2) ran the same blocks 1.6x slower there
// (0.225 s against 0.141 s a step for llama-3.2-1b at seq 32768). So on CUDA
// the blocks run cuDNN's kernels (_scaled_dot_product_cudnn_attention and its
// backward) when a self-check passes, and FlashAttention-2 otherwise; on the
// CPU, LibTorch's flash kernel for the CPU.
//
// The self-check (once per process and shape class) runs a two-block problem
// both ways: cuDNN's blocks merged must equal one flash call over the whole
// K/V (output and log-sum-exp), and cuDNN's backward of each block given the
// merged output and log-sum-exp must sum to flash's dQ and give its dK, dV
// halves, within bf16's rounding. A kernel that throws or disagrees is not
// used, and the reason goes to stderr once. PLANNER_CP_ATTENTION=flash forces
// FlashAttention-2 (for comparison runs); unset or empty leaves the choice to
// the self-check; any other value is refused (cp_attention_from_env), not
// ignored, so a misspelt comparison run cannot silently time cuDNN's blocks.
#include <ATen/ATen.h>

#include <string>
#include <tuple>
#include <utility>

namespace planner::rt {

enum class BlockKernel { CpuFlash, Flash, Cudnn };
const char* to_string(BlockKernel k);

// What PLANNER_CP_ATTENTION asks for: Auto (unset or empty: cuDNN's blocks when
// their self-check passes) or Flash ("flash"). Any other value throws
// InputError naming the variable, the value and the accepted values; exec
// calls it before any rank starts (runtime/exec.cpp, check_runnable).
enum class CpAttention { Auto, Flash };
CpAttention cp_attention_from_env();

// The kernel ring attention uses for q of this device, dtype, heads and head
// dimension (runs the self-check the first time on CUDA). `why` (optional)
// receives the reason when cuDNN was not chosen.
BlockKernel choose_block_kernel(const at::Tensor& q, std::string* why = nullptr);

// Grouped-query attention (fewer kv heads than query heads): whether `kernel`
// takes k and v with their own kv heads, returning dK and dV per kv head (the
// group's sum), so that the ring sends, holds and accumulates them without a
// copy per query head. cuDNN's kernel does, as scaled_dot_product_attention
// runs it with enable_gqa; this checks it once per shape class against flash
// over repeated kv heads (forward merged from two blocks, backward summed over
// each group) and says on stderr once when it does not hold. False for the
// flash and CPU kernels (the ring then repeats the kv heads, as before) and
// when q and k have the same heads.
bool block_takes_kv_heads(BlockKernel kernel, const at::Tensor& q, const at::Tensor& k);

// q (b, heads, sq, d); k, v (b, heads, sk, d), or (b, kv heads, sk, d) where
// block_takes_kv_heads is true.
// Returns the output (q's dtype) and the log-sum-exp (fp32, (b, heads, sq)).
std::pair<at::Tensor, at::Tensor> block_forward(BlockKernel kernel, const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, bool causal);

// dQ, dK, dV of one block, given the merged output and log-sum-exp (fp32,
// (b, heads, sq)) of the whole attention.
std::tuple<at::Tensor, at::Tensor, at::Tensor> block_backward(BlockKernel kernel, const at::Tensor& dout,
                                                              const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& out,
                                                              const at::Tensor& lse, bool causal);

}  // namespace planner::rt

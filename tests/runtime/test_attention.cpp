// Sliding-window attention (runtime/model/attention.hpp) and the fields of
// today's dense decoders in the runtime's transformer, on the CPU in fp32:
// the windowed core against a band-masked softmax written out by hand
// (forward and backward, 1e-5), a window covering the sequence against full
// causal attention (bitwise), which layers a spec windows, and the runtime's
// parameter count against the ModelSpec's for every preset it builds.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "catch.hpp"
#include "runtime/model/attention.hpp"
#include "runtime/model/attention_block.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/data.hpp"
#include "specs/model_spec.hpp"
#include "tiny_models.hpp"

using namespace planner;
using namespace planner::rt;
using namespace planner::test;

namespace {

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// softmax(q k^T / sqrt(d) + mask) v, the mask built element by element:
// query i sees key j when j <= i and i - j < window. kv heads repeated for
// grouped-query attention (head n uses kv head n / (heads / kv_heads)).
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) {
  const int64_t s = q.size(2), rep = q.size(1) / k.size(1);
  at::Tensor kk = k.repeat_interleave(rep, 1), vv = v.repeat_interleave(rep, 1);
  at::Tensor scores = at::matmul(q, kk.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  at::Tensor allowed = at::zeros({s, s}, at::kBool);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j <= i; ++j)
      if (i - j < window) allowed[i][j] = true;
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), vv);
}

struct Qkv {
  at::Tensor q, k, v;
};
Qkv random_qkv(int64_t b, int64_t heads, int64_t kv_heads, int64_t s, int64_t d) {
  at::manual_seed(11);
  return {at::randn({b, heads, s, d}).requires_grad_(true), at::randn({b, kv_heads, s, d}).requires_grad_(true),
          at::randn({b, kv_heads, s, d}).requires_grad_(true)};
}

// Loss and flat gradient of one step of `m` at seq 16 from seed 3.
std::pair<double, at::Tensor> loss_and_grads(const ModelSpec& m, Ckpt ckpt = Ckpt::None) {
  TransformerModel model(m, 16);
  model.materialize(at::kCPU, at::kFloat, 3);
  SyntheticTokens tokens(m.vocab, 8);
  std::vector<int64_t> host;
  tokens.batch(0, 0, 2, 16, host);
  at::Tensor all = at::from_blob(host.data(), {2, 17}, at::kLong).clone();
  at::Tensor loss = model.loss(all.narrow(1, 0, 16), all.narrow(1, 1, 16).clone(), ckpt);
  torch::autograd::backward({loss});
  return {loss.item<double>(), model.store().grads.clone()};
}

}  // namespace

TEST_CASE("attention: a window of w keys equals a band-masked softmax, forward and backward", "[runtime][window]") {
  for (int64_t kv_heads : {4, 2}) {  // multi-head and grouped-query
    for (int64_t window : {1, 3, 7}) {
      INFO("kv_heads " << kv_heads << ", window " << window);
      Qkv a = random_qkv(2, 4, kv_heads, 12, 8);
      Qkv r = {a.q.detach().clone().requires_grad_(true), a.k.detach().clone().requires_grad_(true),
               a.v.detach().clone().requires_grad_(true)};
      at::Tensor out = attend(a.q, a.k, a.v, /*causal=*/true, /*gqa=*/kv_heads != 4, window);
      at::Tensor ref = reference_attention(r.q, r.k, r.v, window);
      CHECK(max_abs_diff(out, ref) <= 1e-5);
      at::manual_seed(12);
      at::Tensor g = at::randn_like(ref);
      torch::autograd::backward({out}, {g});
      torch::autograd::backward({ref}, {g});
      CHECK(max_abs_diff(a.q.grad(), r.q.grad()) <= 1e-5);
      CHECK(max_abs_diff(a.k.grad(), r.k.grad()) <= 1e-5);
      CHECK(max_abs_diff(a.v.grad(), r.v.grad()) <= 1e-5);
    }
  }
  // Window 1: each query sees only itself, so the output is v.
  Qkv a = random_qkv(1, 2, 2, 5, 4);
  CHECK(max_abs_diff(attend(a.q, a.k, a.v, true, false, 1), a.v) <= 1e-6);
}

TEST_CASE("attention: a window covering the sequence is full causal attention", "[runtime][window]") {
  Qkv a = random_qkv(2, 4, 2, 10, 8);
  const at::Tensor full = attend(a.q, a.k, a.v, true, true, 0);
  CHECK(at::equal(attend(a.q, a.k, a.v, true, true, 10), full));   // bitwise: the same kernel
  CHECK(at::equal(attend(a.q, a.k, a.v, true, true, 4096), full));
  // The band mask itself at window = seq is the causal triangle.
  CHECK(at::equal(causal_band_mask(10, 10, at::kCPU), causal_band_mask(10, 0, at::kCPU)));
  CHECK(causal_band_mask(10, 0, at::kCPU).sum().item<int64_t>() == 55);
  CHECK(causal_band_mask(10, 3, at::kCPU).sum().item<int64_t>() == int64_t(attended_pairs(10, 3)));
  // Through the masked kernel too (window = seq - 1 differs from causal only in
  // key 0 of the last query): the difference is that row's alone.
  const at::Tensor almost = attend(a.q, a.k, a.v, true, true, 9);
  CHECK(max_abs_diff(almost.narrow(2, 0, 9), full.narrow(2, 0, 9)) <= 1e-6);
  CHECK(max_abs_diff(almost.narrow(2, 9, 1), full.narrow(2, 9, 1)) > 1e-4);

  // A whole model: a window >= seq gives the model without one, bitwise; a
  // shorter window another loss.
  ModelSpec global = mistral_like();
  global.sliding_window = global.window_layers = 0;
  ModelSpec covering = mistral_like();
  covering.sliding_window = 16;
  const auto [l0, g0] = loss_and_grads(global);
  const auto [l1, g1] = loss_and_grads(covering);
  CHECK(l1 == l0);
  CHECK(at::equal(g1, g0));
  const auto [l2, g2] = loss_and_grads(mistral_like());  // window 5 at seq 16
  CHECK(std::abs(l2 - l0) > 1e-6);
  // Selective recomputation recomputes the windowed core: same gradients.
  const auto [l3, g3] = loss_and_grads(mistral_like(), Ckpt::Selective);
  CHECK(l3 == Approx(l2).epsilon(1e-9));
  CHECK(max_abs_diff(g3, g2) <= 1e-6);
}

TEST_CASE("attention: which layers a spec windows", "[runtime][window]") {
  ModelSpec m = llama_like();
  m.layers = 5, m.sliding_window = 4;
  auto windowed = [&] {
    std::string s;
    for (int64_t i = 0; i < m.layers; ++i) s += m.layer_windowed(i) ? 'w' : 'g';
    return s;
  };
  m.window_layers = 5;
  CHECK(windowed() == "wwwww");  // Mistral
  m.window_layers = 2;
  CHECK(windowed() == "gggww");  // Qwen2: from max_window_layers on
  m.window_layers = 3, m.window_pattern = WindowPattern::Even;
  CHECK(windowed() == "wgwgw");  // Gemma-2
  m.window_layers = 2, m.window_pattern = WindowPattern::Odd;
  CHECK(windowed() == "gwgwg");  // GPT-Neo's [global, local]
  m.window_pattern = WindowPattern::Other;
  CHECK(windowed() == "ggggg");
  CHECK(runtime_model_gap(m).find("pattern of layers") != std::string::npos);
  // A changed window changes only the windowed layers: Gemma-2-like with the
  // window on its odd layers instead gives another loss.
  ModelSpec even = gemma2_like(), odd = gemma2_like();
  odd.window_layers = 1, odd.window_pattern = WindowPattern::Odd;
  CHECK(std::abs(loss_and_grads(even).first - loss_and_grads(odd).first) > 1e-6);
}

TEST_CASE("runtime: every preset it builds has the ModelSpec's parameter count", "[runtime][models]") {
  // Declaring the tensors allocates nothing, so the real presets are counted.
  int built = 0;
  for (const std::string& n : model_preset_names()) {
    const ModelSpec m = model_preset(n);
    if (!runtime_model_gap(m).empty()) continue;
    INFO(n);
    CHECK(count_model_params(m, 128) == m.total_params());
    ++built;
  }
  CHECK(built > 20);
  // Qwen2.5-0.5B (qkv bias, tied, 14 heads of 64 over 2 kv heads): 494,032,768
  // parameters, the count of its published safetensors.
  const ModelSpec q = model_preset("qwen2.5-0.5b");
  CHECK(runtime_model_gap(q).empty());
  CHECK(count_model_params(q, 128) == 494'032'768);
  // Qwen3 (head_dim 128 != 1024/16, q/k norms) and Gemma-2 (head_dim 256,
  // sandwich norms, GeGLU, final logit soft-capping) are built.
  CHECK(runtime_model_gap(model_preset("qwen3-0.6b")).empty());
  CHECK(runtime_model_gap(model_preset("mistral-7b")).empty());
  CHECK(runtime_model_gap(model_preset("gemma-2-2b")).empty());
  CHECK(model_preset("gemma-2-2b").logit_softcap == 30.0);
  CHECK(count_model_params(model_preset("gemma-2-2b"), 128) == model_preset("gemma-2-2b").total_params());
}

// Ring attention's blocks on CUDA (runtime/model/attention_block.hpp): cuDNN's
// kernel passes its self-check, takes grouped kv heads as they are, and one
// block with the kv heads equals the block over the heads repeated (output,
// log-sum-exp, dQ; dK and dV against the repeated heads' summed per group).
// On a machine without CUDA there is nothing to check; the CPU's ring runs
// LibTorch's CPU flash kernel, checked against one process in tests/dist.
TEST_CASE("attention blocks: cuDNN's, with grouped kv heads as they are (CUDA)", "[runtime][cp][cuda]") {
  if (!at::hasCUDA()) {
    SUCCEED("no CUDA device: the CPU's blocks are checked in tests/dist/test_cp_equivalence.cpp");
    return;
  }
  using namespace planner::rt;
  const auto opt = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  at::manual_seed(3);
  const int64_t h = 8, hk = 2, s = 256, d = 64;
  const at::Tensor q = at::randn({1, h, s, d}, opt), k = at::randn({1, hk, s, d}, opt), v = at::randn({1, hk, s, d}, opt);
  std::string why;
  const BlockKernel kernel = choose_block_kernel(q, &why);
  INFO(why);
  REQUIRE(kernel == BlockKernel::Cudnn);
  REQUIRE(block_takes_kv_heads(kernel, q, k));
  CHECK_FALSE(block_takes_kv_heads(kernel, q, q));  // same heads: nothing to take
  const at::Tensor ke = k.repeat_interleave(h / hk, 1), ve = v.repeat_interleave(h / hk, 1);
  // |a - b| within bf16's rounding of b's largest magnitude.
  auto near = [](const at::Tensor& a, const at::Tensor& b, double tol) {
    const at::Tensor bf = b.to(at::kFloat);
    return (a.to(at::kFloat) - bf).abs().max().item<double>() <= tol * bf.abs().max().item<double>() + 1e-3;
  };
  for (bool causal : {false, true}) {
    auto [o, l] = block_forward(kernel, q, k, v, causal);
    auto [oe, le] = block_forward(kernel, q, ke, ve, causal);
    CHECK(near(o, oe, 2e-2));
    CHECK(near(l, le, 1e-2));
    const at::Tensor dout = at::randn_like(q);
    auto [gq, gk, gv] = block_backward(kernel, dout, q, k, v, o, l, causal);
    auto [gqe, gke, gve] = block_backward(kernel, dout, q, ke, ve, oe, le, causal);
    auto per_kv = [&](const at::Tensor& t) { return t.to(at::kFloat).reshape({1, hk, h / hk, s, d}).sum(2); };
    CHECK(gk.size(1) == hk);
    CHECK(near(gq, gqe, 2e-2));
    CHECK(near(gk, per_kv(gke), 2e-2));
    CHECK(near(gv, per_kv(gve), 2e-2));
  }
}

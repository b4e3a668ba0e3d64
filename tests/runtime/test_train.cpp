// Runtime tests on the CPU, fp32, tiny models: parameter counts against
// ModelSpec, learning, activation checkpointing, gradient accumulation, the
// optimizer update, and the precision layout.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "catch.hpp"
#include "specs/model_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/model/transformer.hpp"
#include "reference_trainer.hpp"
#include "tiny_models.hpp"

using namespace planner;
using namespace planner::rt;
using namespace planner::test;

namespace {

RunConfig fp32_config(const ModelSpec& m, int mbs, int gas, int64_t seq, Ckpt ckpt = Ckpt::None) {
  Strategy s;
  s.precision = Precision::FP32;
  s.ckpt = ckpt;
  s.mbs = mbs, s.gas = gas;
  return make_run_config(m, s, seq);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("runtime: parameter count equals the ModelSpec's for every family", "[runtime]") {
  for (const ModelSpec& m :
       {gpt2_like(), neo_like(), gptj_like(), opt_like(), opt350_like(), llama_like(), bert_like(), mistral_like(),
        qwen2_like(), qwen3_like(), gemma2_like(), gemma3_like()}) {
    INFO(m.name);
    TransformerModel model(m, 32);
    const auto& s = model.store();
    CHECK(s.numel() == m.total_params());
    CHECK(s.group_numel(0) == m.embedding_params());
    for (int l = 1; l <= m.layers; ++l) CHECK(s.group_numel(l) == m.layer_params());
    CHECK(s.group_numel(static_cast<int>(m.layers) + 1) == m.head_params());
    // decayed (matrices, embeddings) first, as one contiguous range
    for (const auto& i : s.infos()) CHECK(i.decay == (i.offset < s.decay_numel()));
  }
}

TEST_CASE("runtime: every family runs forward and backward with finite gradients", "[runtime]") {
  for (const ModelSpec& m :
       {gpt2_like(), neo_like(), gptj_like(), opt_like(), opt350_like(), llama_like(), bert_like(), mistral_like(),
        qwen2_like(), qwen3_like(), gemma2_like(), gemma3_like()}) {
    INFO(m.name);
    auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 7);
    Trainer t(fp32_config(m, 2, 1, 16), at::kCPU, tokens);
    auto [ids, labels] = t.batch(0, 0, 2);
    at::Tensor loss = t.forward_backward(ids, labels, 1.0);
    const double l = loss.item<double>();
    CHECK(std::isfinite(l));
    CHECK(l == Approx(std::log(double(m.vocab))).epsilon(0.1));  // fresh model: near uniform
    CHECK(t.grads().isfinite().all().item<bool>());
    CHECK(t.grads().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("runtime: gradients match finite differences in double precision", "[runtime]") {
  // Checks the whole backward (LinearAccum's in-place weight-gradient
  // accumulation, the padded LM head, the chunked cross-entropy, attention,
  // norms, rotary, the MLPs): the directional derivative g . d against
  // (L(p + eps d) - L(p - eps d)) / (2 eps).
  for (const ModelSpec& m : {gpt2_like(), gptj_like(), opt350_like(), llama_like(), bert_like(), mistral_like(),
                            qwen3_like(), gemma2_like(), gemma3_like()}) {
    INFO(m.name);
    TransformerModel model(m, 16);
    model.materialize(at::kCPU, at::kDouble, 3);
    model.loss_chunk_rows = 5;  // several chunks, a ragged last one
    SyntheticTokens tokens(m.vocab, 8);
    std::vector<int64_t> host;
    tokens.batch(0, 0, 2, 16, host);
    at::Tensor all = at::from_blob(host.data(), {2, 17}, at::kLong).clone();
    at::Tensor ids = all.narrow(1, 0, 16), labels = all.narrow(1, 1, 16).clone();
    if (m.arch == Arch::Encoder) labels.narrow(1, 0, 8).fill_(-100);  // unlabelled positions too
    auto& st = model.store();
    torch::autograd::backward({model.loss(ids, labels, Ckpt::None)});
    at::Tensor g = st.grads.clone();
    at::manual_seed(5);
    at::Tensor d = at::randn({st.numel()}, at::kDouble);
    const double eps = 1e-6;
    double lp, lm;
    {
      at::NoGradGuard ng;
      st.params.add_(d, eps);
      lp = model.loss(ids, labels, Ckpt::None).item<double>();
      st.params.add_(d, -2 * eps);
      lm = model.loss(ids, labels, Ckpt::None).item<double>();
      st.params.add_(d, eps);
    }
    const double fd = (lp - lm) / (2 * eps), an = (g * d).sum().item<double>();
    INFO("finite difference " << fd << ", analytic " << an);
    CHECK(an == Approx(fd).epsilon(1e-6));
  }
}

TEST_CASE("runtime: the loss of a tiny model falls over 50 steps", "[runtime]") {
  ModelSpec m = gpt2_like();
  auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 1);
  RunConfig c = fp32_config(m, 8, 1, 32);
  c.options.optim.lr = 3e-3;
  Trainer t(c, at::kCPU, tokens);
  std::vector<double> losses;
  for (int s = 0; s < 50; ++s) losses.push_back(t.step(s).item<double>());
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[static_cast<size_t>(i)] / 5, last += losses[static_cast<size_t>(45 + i)] / 5;
  INFO("first 5 steps " << first << ", last 5 steps " << last);
  CHECK(losses.front() == Approx(std::log(96.0)).epsilon(0.05));
  CHECK(last < first - 1.0);  // the Markov text's floor is ~1.7 nats below ln(96)
  CHECK(t.optimizer_steps() == 50);
}

TEST_CASE("runtime: checkpointing keeps fewer bytes and leaves gradients unchanged", "[runtime]") {
  enable_cpu_memory_counting();
  ModelSpec m = gpt2_like();
  m.layers = 4;
  auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 3);
  at::Tensor reference;
  int64_t saved[3] = {0, 0, 0};
  const Ckpt modes[3] = {Ckpt::None, Ckpt::Selective, Ckpt::Full};
  for (int k = 0; k < 3; ++k) {
    INFO("ckpt=" << to_string(modes[k]));
    Trainer t(fp32_config(m, 4, 1, 32, modes[k]), at::kCPU, tokens);
    auto [ids, labels] = t.batch(0, 0, 4);
    // Bytes the forward leaves alive for the backward: allocated just before the
    // head minus allocated before the forward (the counting CPU allocator).
    const int64_t start = memory_stats(false).allocated;
    t.model().before_head = [&] { saved[k] = memory_stats(false).allocated - start; };
    t.forward_backward(ids, labels, 1.0);
    if (k == 0) reference = t.grads().clone();
    else CHECK(max_abs_diff(t.grads(), reference) <= 1e-6);
  }
  INFO("saved bytes none " << saved[0] << ", selective " << saved[1] << ", full " << saved[2]);
  CHECK(saved[0] > 0);
  CHECK(saved[1] <= saved[0]);
  // full keeps each layer's input only: (b, s, h) fp32 per layer, plus the embedding output
  CHECK(saved[2] < saved[0] / 4);
  CHECK(saved[2] >= 4 * 32 * 32 * 4 * m.layers);
}

TEST_CASE("runtime: accumulating k micro-batches equals one batch k times larger", "[runtime]") {
  for (const ModelSpec& m : {gpt2_like(), llama_like()}) {
    INFO(m.name);
    auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 5);
    Trainer big(fp32_config(m, 4, 1, 16), at::kCPU, tokens);
    Trainer acc(fp32_config(m, 2, 2, 16), at::kCPU, tokens);
    CHECK(max_abs_diff(big.params(), acc.params()) == 0);  // same seed, same weights
    auto [ids, labels] = big.batch(0, 0, 4);
    at::Tensor l1 = big.forward_backward(ids, labels, 1.0);
    at::Tensor l2 = acc.forward_backward(ids.narrow(0, 0, 2), labels.narrow(0, 0, 2), 0.5);
    l2 = l2 + acc.forward_backward(ids.narrow(0, 2, 2), labels.narrow(0, 2, 2), 0.5);
    CHECK(l1.item<double>() == Approx(l2.item<double>() / 2).epsilon(1e-5));
    CHECK(max_abs_diff(big.grads(), acc.grads()) <= 1e-6);
    const double scale = big.grads().abs().max().item<double>();
    CHECK(scale > 1e-4);
  }
}

TEST_CASE("runtime: the flat AdamW step matches the textbook update", "[runtime]") {
  ModelSpec m = gpt2_like();
  auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 9);
  RunConfig c = fp32_config(m, 1, 1, 8);
  c.options.optim.grad_clip = 0.5;
  Trainer t(c, at::kCPU, tokens);
  const int64_t n = t.params().numel(), nd = t.model().store().decay_numel();
  at::Tensor p0 = t.params().to(at::kDouble);
  at::manual_seed(11);
  at::Tensor g = at::randn({n}, at::kDouble) * 0.01;
  {
    at::NoGradGuard ng;
    t.grads().copy_(g);
  }
  REQUIRE(t.optimizer_step());
  // Textbook (double): clip, Adam moments after one step, bias correction,
  // decoupled weight decay on the decayed range.
  const double norm = g.norm().item<double>();
  const double coef = std::min(1.0, c.options.optim.grad_clip / (norm + 1e-6));
  at::Tensor gc = g * coef;
  at::Tensor m1 = gc * (1 - c.options.optim.beta1), v1 = gc * gc * (1 - c.options.optim.beta2);
  at::Tensor mh = m1 / (1 - c.options.optim.beta1), vh = v1 / (1 - c.options.optim.beta2);
  at::Tensor wd = at::zeros({n}, at::kDouble);
  wd.narrow(0, 0, nd).fill_(c.options.optim.weight_decay);
  at::Tensor expect = p0 * (1 - c.options.optim.lr * wd) - c.options.optim.lr * mh / (vh.sqrt() + c.options.optim.eps);
  CHECK(max_abs_diff(t.params(), expect) <= 1e-6);
}

TEST_CASE("runtime: bf16 layout is 2 + 2 + 12 bytes per parameter and trains", "[runtime]") {
  ModelSpec m = gpt2_like();
  auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 2);
  RunConfig c = fp32_config(m, 4, 2, 16);
  c.plan.strategy.precision = Precision::BF16;
  c.options.optim.lr = 3e-3;
  Trainer t(c, at::kCPU, tokens);
  const int64_t n = m.total_params();
  CHECK(t.param_bytes() == 2 * n);
  CHECK(t.grad_bytes() == 2 * n);
  CHECK(t.optimizer_state_bytes() == 12 * n);
  CHECK(t.params().scalar_type() == at::kBFloat16);
  const double l0 = t.step(0).item<double>();
  double l = l0;
  for (int s = 1; s < 15; ++s) l = t.step(s).item<double>();
  CHECK(std::isfinite(l));
  CHECK(l < l0);

  RunConfig c32 = fp32_config(m, 4, 1, 16);
  Trainer t32(c32, at::kCPU, tokens);
  CHECK(t32.param_bytes() == 4 * n);
  CHECK(t32.optimizer_state_bytes() == 8 * n);  // master = the parameters
}

TEST_CASE("runtime: fp16 skips a step on overflow and halves the loss scale", "[runtime]") {
  ModelSpec m = gpt2_like();
  auto tokens = std::make_shared<SyntheticTokens>(m.vocab, 4);
  RunConfig c = fp32_config(m, 2, 1, 16);
  c.plan.strategy.precision = Precision::FP16;
  Trainer t(c, at::kCPU, tokens);
  at::Tensor before = t.params().clone();
  {
    at::NoGradGuard ng;
    t.grads().fill_(std::numeric_limits<float>::infinity());
  }
  CHECK_FALSE(t.optimizer_step());
  CHECK(t.loss_scale() == c.options.optim.fp16_init_scale / 2);
  CHECK(t.skipped_steps() == 1);
  CHECK(max_abs_diff(t.params(), before) == 0);
  const double l = t.step(0).item<double>();
  CHECK(std::isfinite(l));
}

TEST_CASE("runtime: the soft-capped loss and its gradient equal cross-entropy over cap * tanh(logits / cap)",
          "[runtime][softcap]") {
  // Gemma-2's final logit soft-capping (runtime soft_cap): the loss forms
  // dL/dz = dL/dy (1 - (y / cap)^2) in its forward. Reference: the plain ATen
  // formula over the valid vocabulary columns, differentiated by autograd.
  // On the CPU in double (the chunked loss, padding 96 -> 128 columns); on a
  // GPU, when there is one, the fused cross-entropy kernel in fp32.
  ModelSpec m = gemma2_like();
  m.logit_softcap = 0.25;
  std::vector<std::pair<at::Device, at::ScalarType>> where{{at::kCPU, at::kDouble}};
  if (at::hasCUDA()) where.emplace_back(at::kCUDA, at::kFloat);
  for (const auto& [dev, dt] : where) {
    INFO(dev << " " << dt);
    TransformerModel model(m, 16);
    model.materialize(dev, dt, 3);
    model.loss_chunk_rows = 7;
    at::manual_seed(11);
    const auto opt = at::TensorOptions().dtype(dt).device(dev);
    // Hidden states large enough that the logits reach the cap's bend.
    at::Tensor x = (at::randn({2, 16, m.hidden}, opt) * 4).requires_grad_(true);
    at::Tensor labels = at::randint(0, m.vocab, {2, 16}, at::TensorOptions().dtype(at::kLong).device(dev));
    labels.narrow(1, 0, 3).fill_(-100);
    at::Tensor loss = model.head_loss(x, labels, 1.0);
    const at::Tensor gx = torch::autograd::grad({loss}, {x})[0];
    at::Tensor x2 = x.detach().clone().requires_grad_(true);
    const at::Tensor z = model.logits(x2).narrow(-1, 0, m.vocab);
    const at::Tensor y = at::tanh(z / m.logit_softcap) * m.logit_softcap;
    CHECK(y.abs().max().item<double>() > 0.5 * m.logit_softcap);  // the cap bends these logits
    const at::Tensor ref = at::cross_entropy_loss(y.reshape({-1, m.vocab}).to(at::kDouble), labels.reshape({-1}));
    const at::Tensor gref = torch::autograd::grad({ref}, {x2})[0];
    const double tol = dt == at::kDouble ? 1e-10 : 1e-5;
    CHECK(std::abs(loss.item<double>() - ref.item<double>()) < tol * std::abs(ref.item<double>()));
    CHECK(max_abs_diff(gx, gref) < tol * gref.abs().max().item<double>());
    // Without the cap the same logits give another gradient, far beyond the
    // tolerance: the cap is applied.
    at::Tensor x3 = x.detach().clone().requires_grad_(true);
    const at::Tensor plain = at::cross_entropy_loss(
        model.logits(x3).narrow(-1, 0, m.vocab).reshape({-1, m.vocab}).to(at::kDouble), labels.reshape({-1}));
    const at::Tensor gplain = torch::autograd::grad({plain}, {x3})[0];
    INFO("capped against plain: " << max_abs_diff(gplain, gref) / gref.abs().max().item<double>());
    CHECK(max_abs_diff(gplain, gref) > 100 * tol * gref.abs().max().item<double>());
  }
}

TEST_CASE("runtime: a kept logits tensor gives the losses and gradients of fresh ones, both forwards before both "
          "backwards",
          "[runtime][engine][memory]") {
  // TransformerModel::keep_head_logits: the head writes every micro-batch's
  // logits into one tensor (GPipe on CUDA). Two micro-batches'
  // heads run before either backward, as on GPipe's last stage; the second
  // overwrites the first's logits, which nothing may still need. Padded
  // vocabulary (96 -> 128 columns, -inf beyond) and the chunked loss.
  const ModelSpec m = llama_like();
  auto run = [&](bool keep, std::vector<double>& losses) {
    TransformerModel model(m, 16);
    model.materialize(at::kCPU, at::kDouble, 5);
    model.loss_chunk_rows = 7;
    model.keep_head_logits = keep;
    at::manual_seed(3);
    std::vector<at::Tensor> xs, ls;
    for (int mb = 0; mb < 2; ++mb) {
      xs.push_back(at::randn({2, 16, m.hidden}, at::kDouble).requires_grad_(true));
      ls.push_back(at::randint(0, m.vocab, {2, 16}, at::TensorOptions().dtype(at::kLong)));
      ls.back().narrow(1, 0, 2).fill_(-100);
    }
    std::vector<at::Tensor> out;
    for (int mb = 0; mb < 2; ++mb) out.push_back(model.head_loss(xs[size_t(mb)], ls[size_t(mb)], 1.0));
    for (int mb = 1; mb >= 0; --mb) {
      losses.push_back(out[size_t(mb)].item<double>());
      torch::autograd::backward({out[size_t(mb)]});
    }
    return std::vector<at::Tensor>{xs[0].grad(), xs[1].grad(), model.store().grads.clone()};
  };
  std::vector<double> fresh_loss, kept_loss;
  const auto fresh = run(false, fresh_loss), kept = run(true, kept_loss);
  REQUIRE(fresh[2].abs().max().item<double>() > 0);  // the head's weight got its gradient
  for (size_t i = 0; i < 2; ++i) CHECK(std::abs(fresh_loss[i] - kept_loss[i]) < 1e-12 * std::abs(fresh_loss[i]));
  for (size_t i = 0; i < fresh.size(); ++i) CHECK(max_abs_diff(fresh[i], kept[i]) < 1e-12);
  // And the kept tensor is used: two heads' logits share one storage.
  TransformerModel model(m, 16);
  model.materialize(at::kCPU, at::kDouble, 5);
  model.keep_head_logits = true;
  const at::Tensor a = model.logits(at::randn({2, 16, m.hidden}, at::kDouble));
  const at::Tensor b = model.logits(at::randn({2, 16, m.hidden}, at::kDouble));
  CHECK(a.data_ptr() == b.data_ptr());
  model.keep_head_logits = false;
  CHECK(model.logits(at::randn({2, 16, m.hidden}, at::kDouble)).data_ptr() != a.data_ptr());
  // The two micro-batches differ, so a second head writing over the first's
  // logits before its loss was formed would show.
  CHECK(std::abs(fresh_loss[0] - fresh_loss[1]) > 1e-6);
}

// planner calibrate: GEMMs and attention on a training step's own operands
// against the same shapes on random normal operands (runtime/calibrate.hpp).
//
// Why: at its power limit a GPU's SM clock depends on the values it multiplies
// (validation/h100/kernels §3: bf16 GEMMs on random normal operands ran at
// 639-725 TFLOP/s on an H100, on zeros at 775-892), so calibrate's points, all
// drawn from at::randn, rate the kernels of a step at a clock the step does
// not run at. Naming another distribution by hand would be a guess; this part
// measures the operands themselves.
//
// How: for each model family the runtime executes (a GPT-style decoder with
// GELU, an OPT-style one with ReLU, a LLaMA-style one with SwiGLU and
// grouped-query attention; one layer each at the widths of calibrate's GEMM
// shapes), a Trainer runs two optimizer steps on the synthetic tokens `planner
// exec` trains on, then the forward and backward of a third micro-batch under a
// RecordFunction observer that copies the operands of every GEMM (aten::mm,
// addmm, addmm_) and of the fused attention (q, k, v and the output's
// gradient). Each captured GEMM is then timed as calibrate times its shapes
// (interleaved with a memory-bound copy of about its own duration) on its own
// operands and on random normal ones of the same shape and strides, one after
// the other; the attention likewise (forward, and forward + backward). The fit
// (costmodel/calibration.cpp) scales the GPU's GEMM rate and attention rates by
// the median ratio per precision.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "costmodel/model_spec.hpp"
#include "runtime/calibrate_detail.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/trainer.hpp"

namespace planner::rt::calib {

namespace {

using nlohmann::json;

Captured* g_captured = nullptr;  // set only while the observer is installed

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// The RecordFunction start callback (a plain function: the API takes no
// closures). Runs on whichever thread calls the op: the caller's in the
// forward, autograd's device thread in the backward.
std::unique_ptr<at::ObserverContext> observe(const at::RecordFunction& fn) {
  Captured* cap = g_captured;
  if (!cap) return nullptr;
  const std::string_view name = fn.name();
  const auto in = fn.inputs();
  auto tensor = [&](size_t i) { return i < in.size() && in[i].isTensor() ? in[i].toTensor() : at::Tensor(); };
  at::Tensor a, b, self, q, k, v, dout;
  if (name == "aten::mm") {
    a = tensor(0), b = tensor(1);
  } else if (name == "aten::addmm" || name == "aten::addmm_") {
    self = tensor(0), a = tensor(1), b = tensor(2);
  } else if (name == "aten::scaled_dot_product_attention") {
    q = tensor(0), k = tensor(1), v = tensor(2);
  } else if (starts_with(name, "aten::_scaled_dot_product_") && ends_with(name, "_backward")) {
    dout = tensor(0);  // every fused attention backward takes the output's gradient first
  } else {
    return nullptr;
  }
  // Copies, not references: a buffer can be written again before the timing.
  torch::autograd::AutoGradMode no_grad(false);
  std::lock_guard<std::mutex> lock(cap->mu);
  if (a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2) {
    CapturedGemm g;
    g.op = std::string(name);
    g.a = a.clone(at::MemoryFormat::Preserve);
    g.b = b.clone(at::MemoryFormat::Preserve);
    if (self.defined()) g.self = self.clone(at::MemoryFormat::Preserve);
    cap->gemms.push_back(std::move(g));
  } else if (q.defined() && k.defined() && v.defined() && q.dim() == 4) {
    cap->attention.push_back({q.contiguous().clone(), k.contiguous().clone(), v.contiguous().clone()});
  } else if (dout.defined() && dout.dim() == 4) {
    cap->attention_grads.push_back(dout.contiguous().clone());
  }
  return nullptr;
}

struct Family {
  std::string label;
  ModelSpec spec;
};

// One layer of each family the runtime executes, at calibrate's GEMM widths
// (calibrate_compute.cpp): gpt-neo-1.3b's (GELU, 16 heads of 128), opt-1.3b's
// (ReLU, 32 heads of 64) and TinyLlama's (SwiGLU 5632, 32 heads of 64 with 4
// kv heads). Quick: the same families 64 wide.
std::vector<Family> families(bool quick) {
  std::vector<Family> f;
  ModelSpec gpt = model_preset("gpt-neo-1.3b"), opt = model_preset("opt-1.3b"), llama = model_preset("llama-2-7b");
  llama.hidden = 2048, llama.heads = 32, llama.kv_heads = 4, llama.ffn = 5632;
  if (quick) {
    for (ModelSpec* s : {&gpt, &opt, &llama}) s->hidden = 64, s->heads = 4, s->kv_heads = 4, s->ffn = 256, s->vocab = 512;
    llama.kv_heads = 2, llama.ffn = 176;
  }
  for (ModelSpec* s : {&gpt, &opt, &llama}) s->layers = 1;
  f.push_back({"gpt-neo-1.3b, one layer", gpt});
  f.push_back({"opt-1.3b, one layer", opt});
  f.push_back({"tinyllama-1.1b, one layer", llama});
  for (auto& x : f) x.spec.validate();
  return f;
}

// The seconds of one call of `fn` as calibrate's GEMM points are timed on the
// GPU: each call followed by a copy of about its own duration, the median call
// (CUDA events). On the CPU the fastest batch of calls.
double time_gemm(const Ctx& c, const std::function<void()>& fn, const at::Tensor& src, const at::Tensor& dst,
                 double copy_per_element) {
  const double alone = time_per_call(c, fn, c.quick ? 0.001 : 0.004);
  if (!c.cuda) return alone;
  const int64_t n = std::clamp<int64_t>(int64_t(alone / copy_per_element), 1 << 16, src.numel());
  at::Tensor s = src.narrow(0, 0, n), d = dst.narrow(0, 0, n);
  const int calls = int(std::clamp(0.05 / (2 * alone), 10.0, 1000.0));
  IntervalTimer t(c.cuda);
  for (int i = 0; i < calls; ++i) {
    t.start();
    fn();
    t.stop();
    d.copy_(s);
  }
  std::vector<double> v = t.seconds();
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

void capture_ops(Captured& cap, const std::function<void()>& fn) {
  g_captured = &cap;
  const at::CallbackHandle h = at::addGlobalCallback(
      at::RecordFunctionCallback(&observe).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  try {
    fn();
  } catch (...) {
    at::removeCallback(h);
    g_captured = nullptr;
    throw;
  }
  at::removeCallback(h);
  g_captured = nullptr;
}

void replay_gemm(const CapturedGemm& g) {
  if (g.op == "aten::addmm_") {
    at::Tensor t = g.self;
    t.addmm_(g.a, g.b);
  } else if (g.op == "aten::addmm") {
    (void)at::addmm(g.self, g.a, g.b);
  } else {
    (void)at::mm(g.a, g.b);
  }
}

namespace {

const char* layout_of(const at::Tensor& a, const at::Tensor& b) {
  const bool at_ = a.stride(0) == 1 && a.size(1) > 1, bt = b.stride(0) == 1 && b.size(1) > 1;
  return at_ ? (bt ? "tt" : "tn") : (bt ? "nt" : "nn");
}

}  // namespace

json measure_step_operands(const Ctx& c) {
  json gemms = json::array(), attention = json::array();
  const std::vector<Precision> precisions =
      c.cuda ? std::vector<Precision>{Precision::BF16, Precision::FP16, Precision::FP32}
             : std::vector<Precision>{Precision::FP32};
  // The memory-bound copy that comes between a step's GEMMs (calibrate_compute.cpp's Filler).
  at::Tensor src, dst;
  double copy_per_element = 0;
  if (c.cuda) {
    src = at::randn({int64_t(1) << 26}, at::TensorOptions().device(c.device).dtype(at::kBFloat16));
    dst = at::empty_like(src);
    copy_per_element = time_per_call(c, [&] { dst.copy_(src); }) / double(src.numel());
  }
  // GEMMs this small are launch-bound: their operands cannot show.
  const double min_flops = c.quick ? 0.0 : 1e9;
  for (const Family& fam : families(c.quick)) {
    for (Precision pr : precisions) {
      TrainConfig cfg;
      cfg.precision = pr;
      cfg.mbs = c.quick ? 2 : 4;
      cfg.gas = 1;
      cfg.seq = c.quick ? 32 : 2048;
      Captured cap;
      {
        Trainer tr(fam.spec, cfg, c.device, std::make_shared<SyntheticTokens>(fam.spec.vocab, cfg.seed));
        tr.step(0);
        tr.step(1);
        synchronize(c.cuda);
        tr.zero_grad();
        auto [ids, labels] = tr.batch(2, 0, cfg.mbs);
        capture_ops(cap, [&] {
          tr.forward_backward(ids, labels, tr.loss_scale() / double(cfg.gas));
          synchronize(c.cuda);
        });
      }
      empty_cache(c.cuda);
      const std::string p = to_string(pr);
      int timed = 0;
      for (const CapturedGemm& g : cap.gemms) {
        const at::Tensor &a = g.a, &b = g.b;
        const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
        const double flops = 2.0 * double(m) * double(n) * double(k);
        if (flops < min_flops) continue;
        at::Tensor y = at::empty({m, n}, a.options());
        at::Tensor ra = at::randn_like(a, at::MemoryFormat::Preserve), rb = at::randn_like(b, at::MemoryFormat::Preserve);
        const double random = time_gemm(c, [&] { at::mm_out(y, ra, rb); }, src, dst, copy_per_element);
        const double step = time_gemm(c, [&] { at::mm_out(y, a, b); }, src, dst, copy_per_element);
        gemms.push_back({{"precision", p}, {"model", fam.label}, {"layout", layout_of(a, b)}, {"m", m}, {"n", n},
                         {"k", k}, {"random_seconds", random}, {"step_seconds", step}});
        ++timed;
      }
      say(c, "step operands " + p + " " + fam.label + ": " + std::to_string(cap.gemms.size()) + " GEMMs (" +
                 std::to_string(timed) + " timed), " + std::to_string(cap.attention.size()) + " attention");
      for (size_t i = 0; i < cap.attention.size() && i < cap.attention_grads.size(); ++i) {
        // Attention backward runs in the reverse order of the forwards.
        const auto& qkv = cap.attention[i];
        const at::Tensor& g = cap.attention_grads[cap.attention_grads.size() - 1 - i];
        const bool gqa = qkv[1].size(1) != qkv[0].size(1);
        auto time_attention = [&](const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0,
                                  const at::Tensor& dout) {
          at::Tensor q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true),
                     v = v0.detach().requires_grad_(true);
          auto fwd = [&] {
            return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa);
          };
          const double f = time_per_call(c, [&] { (void)fwd(); });
          const double fb = time_per_call(c, [&] {
            at::Tensor o = fwd();
            (void)torch::autograd::grad({o}, {q, k, v}, {dout});
          });
          return std::pair<double, double>{f, std::max(fb - f, 1e-9)};
        };
        const auto random = time_attention(at::randn_like(qkv[0]), at::randn_like(qkv[1]), at::randn_like(qkv[2]),
                                           at::randn_like(g));
        const auto step = time_attention(qkv[0], qkv[1], qkv[2], g);
        attention.push_back({{"precision", p}, {"model", fam.label}, {"batch", qkv[0].size(0)},
                             {"heads", qkv[0].size(1)}, {"kv_heads", qkv[1].size(1)}, {"seq", qkv[0].size(2)},
                             {"head_dim", qkv[0].size(3)}, {"random_forward_seconds", random.first},
                             {"step_forward_seconds", step.first}, {"random_backward_seconds", random.second},
                             {"step_backward_seconds", step.second}});
      }
      cap.gemms.clear(), cap.attention.clear(), cap.attention_grads.clear();
      empty_cache(c.cuda);
    }
  }
  return {{"gemms", gemms}, {"attention", attention}};
}

}  // namespace planner::rt::calib

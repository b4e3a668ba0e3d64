// planner calibrate's in-step part (calibration/measure_in_step.cpp): the
// RecordFunction observer that copies the operands of a training step's GEMMs
// and attention (capture_ops, replay_gemm: calibration/measure_detail.hpp),
// and the timing of what it captured as calibrate times its points
// (calibration/measure_in_step.hpp).
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "calibration/measure_in_step.hpp"

namespace planner::rt::calib {

using nlohmann::json;

namespace {

Captured* g_captured = nullptr;  // set only while the observer is installed

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// The layout of a 2-D GEMM's operands as calibrate names its points.
const char* layout_of(const at::Tensor& a, const at::Tensor& b) {
  const bool at_ = a.stride(0) == 1 && a.size(1) > 1, bt = b.stride(0) == 1 && b.size(1) > 1;
  return at_ ? (bt ? "tt" : "tn") : (bt ? "nt" : "nn");
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
  at::Tensor a, b, self, q, k, v, dout, scale_a, scale_b;
  at::ScalarType out_dtype = at::kBFloat16;
  if (name == "aten::mm") {
    a = tensor(0), b = tensor(1);
  } else if (name == "aten::_scaled_mm") {  // (a, b, scale_a, scale_b, bias, scale_result, out_dtype, fast_accum)
    a = tensor(0), b = tensor(1), scale_a = tensor(2), scale_b = tensor(3);
    if (in.size() > 6 && in[6].isInt()) out_dtype = static_cast<at::ScalarType>(in[6].toInt());
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
    if (cap->distinct) {
      const char* lay = layout_of(a, b);
      for (CapturedGemm& g : cap->gemms)
        if (g.a.size(0) == a.size(0) && g.b.size(1) == b.size(1) && g.a.size(1) == a.size(1) &&
            g.a.scalar_type() == a.scalar_type() && std::string_view(layout_of(g.a, g.b)) == lay) {
          ++g.count;
          return nullptr;
        }
    }
    CapturedGemm g;
    g.op = std::string(name);
    g.a = a.clone(at::MemoryFormat::Preserve);
    g.b = b.clone(at::MemoryFormat::Preserve);
    if (self.defined()) g.self = self.clone(at::MemoryFormat::Preserve);
    if (scale_a.defined()) g.scale_a = scale_a.clone(), g.scale_b = scale_b.clone(), g.out_dtype = out_dtype;
    cap->gemms.push_back(std::move(g));
  } else if (q.defined() && k.defined() && v.defined() && q.dim() == 4) {
    ++cap->attention_calls;
    if (!cap->distinct || cap->attention.empty())
      cap->attention.push_back({q.contiguous().clone(), k.contiguous().clone(), v.contiguous().clone()});
  } else if (dout.defined() && dout.dim() == 4) {
    // Distinct: the last backward is the first forward's (autograd runs them in reverse).
    if (cap->distinct) cap->attention_grads.clear();
    cap->attention_grads.push_back(dout.contiguous().clone());
  }
  return nullptr;
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

namespace {

at::Tensor scaled_mm(const CapturedGemm& g) {
  return at::_scaled_mm(g.a, g.b, g.scale_a, g.scale_b, std::nullopt, std::nullopt, g.out_dtype, false);
}

}  // namespace

void replay_gemm(const CapturedGemm& g) {
  if (g.op == "aten::_scaled_mm") {
    (void)scaled_mm(g);
  } else if (g.op == "aten::addmm_") {
    at::Tensor t = g.self;
    t.addmm_(g.a, g.b);
  } else if (g.op == "aten::addmm") {
    (void)at::addmm(g.self, g.a, g.b);
  } else {
    (void)at::mm(g.a, g.b);
  }
}

// Each distinct captured GEMM (the layers repeat theirs) timed once as
// calibrate times its shapes, counted: the shapes, their summed time and the calls.
json time_gemms(const Ctx& c, const Captured& cap, const Filler* filler, double& alone_gemm, int64_t& calls) {
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t, std::string>, std::pair<const CapturedGemm*, int>>
      distinct;
  calls = 0;
  for (const CapturedGemm& g : cap.gemms) {
    auto key = std::make_tuple(std::string(layout_of(g.a, g.b)), g.a.size(0), g.b.size(1), g.a.size(1),
                               std::string(c10::toString(g.a.scalar_type())));
    auto [it, fresh] = distinct.try_emplace(key, &g, 0);
    it->second.second += g.count;
    calls += g.count;
  }
  json shapes = json::array();
  alone_gemm = 0;
  for (const auto& [key, gc] : distinct) {
    const CapturedGemm& g = *gc.first;
    at::Tensor y = at::empty({g.a.size(0), g.b.size(1)}, g.a.options());
    const bool fp8 = g.op == "aten::_scaled_mm";
    std::function<void()> fn = [&] { at::mm_out(y, g.a, g.b); };
    if (fp8) fn = [&] { (void)scaled_mm(g); };  // as calibrate times its FP8 points
    const double alone = time_per_call(c, fn);
    const double sec = c.cuda ? time_interleaved(c, fn, alone, *filler) : alone;
    alone_gemm += gc.second * sec;
    shapes.push_back({{"layout", std::get<0>(key)}, {"m", std::get<1>(key)}, {"n", std::get<2>(key)},
                      {"k", std::get<3>(key)}, {"count", gc.second}, {"seconds", sec}});
    if (fp8) shapes.back()["fp8"] = true;
  }
  return shapes;
}

// The captured attention timed as measure_attention does (forward + backward).
json time_attention(const Ctx& c, const Captured& cap, double& alone_attention) {
  alone_attention = 0;
  json attention = json::array();
  for (size_t i = 0; i < cap.attention.size() && i < cap.attention_grads.size(); ++i) {
    // Attention backward runs in the reverse order of the forwards.
    const auto& qkv = cap.attention[i];
    const at::Tensor& dout = cap.attention_grads[cap.attention_grads.size() - 1 - i];
    const bool gqa = qkv[1].size(1) != qkv[0].size(1);
    at::Tensor q = qkv[0].detach().requires_grad_(true), k = qkv[1].detach().requires_grad_(true),
               v = qkv[2].detach().requires_grad_(true);
    const double fb = time_per_call(c, [&] {
      at::Tensor o = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa);
      (void)torch::autograd::grad({o}, {q, k, v}, {dout});
    });
    // Distinct: the one captured attention stands for every layer's (the same shape).
    const int64_t n = cap.distinct ? std::max<int64_t>(1, cap.attention_calls) : 1;
    alone_attention += double(n) * fb;
    attention.push_back({{"batch", q.size(0)}, {"heads", q.size(1)}, {"kv_heads", k.size(1)}, {"seq", q.size(2)},
                         {"head_dim", q.size(3)}, {"count", n}, {"seconds", fb}});
  }
  return attention;
}

}  // namespace planner::rt::calib

// planner calibrate: GEMMs, fused attention, memory-bound kernels and the
// launch cost of a tiny kernel on the device (calibration/measure.hpp).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "calibration/measure_detail.hpp"
#include "runtime/device.hpp"
#include "runtime/model/attention.hpp"
#include "runtime/model/fp8_linear.hpp"

namespace planner::rt::calib {

namespace {

using nlohmann::json;

at::ScalarType dtype_of(const std::string& p) {
  return p == "bf16" ? at::kBFloat16 : p == "fp16" ? at::kHalf : at::kFloat;
}

int elem_bytes(const std::string& p) { return p == "fp32" ? 4 : 2; }

struct Shape {
  std::string label;
  std::string layout;  // nt: x w^T (forward), nn: data gradient, tn: weight gradient
  int64_t m, n, k;
};

// Transformer GEMMs, C (m x n) = A (m x k) B (k x n), of T tokens. Forward
// x w^T: qkv (T, 3h, h), attention out (T, h, h), MLP up (T, 4h, h), down
// (T, h, 4h); backward of MLP up: data gradient (T, h, 4h) and weight gradient
// (4h, h, T); the weight gradients of qkv (3h, h, T) and MLP down (h, 4h, T).
// h = 1600 (gpt2-xl: 4800, 6400 unaligned to 128-wide tiles),
// 2048 and 4096; a LLaMA-style layer (TinyLlama: h 2048, 4 kv heads of 64:
// qkv 2560; SwiGLU up 2 x 5632, down from 5632); the 8192^3 reference.
std::vector<Shape> gemm_shapes(bool quick) {
  std::vector<Shape> s;
  const int64_t T = quick ? 256 : 16384;
  const std::vector<int64_t> widths = quick ? std::vector<int64_t>{64, 100} : std::vector<int64_t>{1600, 2048, 4096};
  for (int64_t h : widths) {
    const std::string w = " h=" + std::to_string(h);
    s.push_back({"qkv" + w, "nt", T, 3 * h, h});
    s.push_back({"attention out" + w, "nt", T, h, h});
    s.push_back({"mlp up" + w, "nt", T, 4 * h, h});
    s.push_back({"mlp down" + w, "nt", T, h, 4 * h});
    if (!quick) {
      s.push_back({"mlp up data grad" + w, "nn", T, h, 4 * h});
      s.push_back({"mlp up weight grad" + w, "tn", 4 * h, h, T});
      s.push_back({"qkv weight grad" + w, "tn", 3 * h, h, T});
      s.push_back({"mlp down weight grad" + w, "tn", h, 4 * h, T});
    }
  }
  if (!quick) {
    s.push_back({"gqa qkv h=2048 kv=256", "nt", T, 2560, 2048});
    s.push_back({"swiglu up h=2048 f=5632", "nt", T, 11264, 2048});
    s.push_back({"swiglu down h=2048 f=5632", "nt", T, 2048, 5632});
  }
  const int64_t ref = quick ? 256 : 8192;
  s.push_back({"reference " + std::to_string(ref) + "^3", "nn", ref, ref, ref});
  return s;
}

}  // namespace

Filler::Filler(const Ctx& c) {
  src = at::randn({int64_t(1) << 26}, at::TensorOptions().device(c.device).dtype(at::kBFloat16));
  dst = at::empty_like(src);
  per_element = time_per_call(c, [&] { dst.copy_(src); }) / double(src.numel());
}

double time_interleaved(const Ctx& c, const std::function<void()>& gemm, double alone, const Filler& f) {
  const int64_t n = std::clamp<int64_t>(int64_t(alone / f.per_element), 1 << 16, f.src.numel());
  at::Tensor a = f.src.narrow(0, 0, n), b = f.dst.narrow(0, 0, n);
  const int calls = int(std::clamp(0.1 / (2 * alone), 10.0, 2000.0));
  IntervalTimer t(c.cuda);
  for (int i = 0; i < calls; ++i) {
    t.start();
    gemm();
    t.stop();
    b.copy_(a);
  }
  std::vector<double> s = t.seconds();
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  return s[s.size() / 2];
}

namespace {

// precision=fp8's GEMMs as runtime/model/fp8_linear.cpp calls them: the
// forward ("nt") transformer shapes, e4m3 x e4m3 -> bf16 through
// at::_scaled_mm with per-tensor scales (the casts are not in the time: the
// layer model prices them as memory-bound kernels). Skipped with a note where
// the GPU has no FP8 (before compute capability 8.9).
void measure_fp8_gemms(const Ctx& c, const Filler& filler, json& out) {
  if (!fp8_gemm_available(c.device)) {
    if (c.notes) c.notes->push_back("gemm fp8: not measured (at::_scaled_mm does not run on this GPU)");
    return;
  }
  const auto bf = at::TensorOptions().device(c.device).dtype(at::kBFloat16);
  for (const Shape& s : gemm_shapes(c.quick)) {
    if (s.layout != "nt" || s.m % 16 || s.n % 16 || s.k % 16) continue;
    const Fp8Tensor a = quantize_fp8(at::randn({s.m, s.k}, bf), at::kFloat8_e4m3fn);
    const Fp8Tensor w = quantize_fp8(at::randn({s.n, s.k}, bf), at::kFloat8_e4m3fn);
    const Fp8Tensor b{w.data.t(), w.scale_inv};
    std::function<void()> fn = [&] { fp8_mm(a, b, at::kBFloat16); };
    const double alone = time_per_call(c, fn);
    const double sec = time_interleaved(c, fn, alone, filler);
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    say(c, "gemm fp8 " + s.label + " (" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
               "): " + fmt_num(sec * 1e3) + " ms, " + fmt_num(flops / sec / 1e12) + " TFLOP/s");
    out.push_back({{"precision", "fp8"}, {"label", s.label}, {"layout", s.layout}, {"m", s.m}, {"n", s.n},
                   {"k", s.k}, {"seconds", sec}, {"back_to_back_seconds", alone}});
  }
}

}  // namespace

json measure_gemms(const Ctx& c) {
  json out = json::array();
  // The CPU has no fp16 GEMM worth training with; the runtime's CPU plans run fp32.
  const std::vector<std::string> precisions = c.cuda ? std::vector<std::string>{"bf16", "fp16", "fp32"}
                                                     : std::vector<std::string>{"fp32", "bf16"};
  std::unique_ptr<Filler> filler;
  if (c.cuda) filler = std::make_unique<Filler>(c);
  for (const auto& p : precisions) {
    const auto opt = at::TensorOptions().device(c.device).dtype(dtype_of(p));
    for (const Shape& s : gemm_shapes(c.quick)) {
      at::Tensor a, b, y = at::empty({s.m, s.n}, opt);
      std::function<void()> fn;
      if (s.layout == "nt") {
        a = at::randn({s.m, s.k}, opt), b = at::randn({s.n, s.k}, opt);
        fn = [&] { at::mm_out(y, a, b.t()); };
      } else if (s.layout == "tn") {
        a = at::randn({s.k, s.m}, opt), b = at::randn({s.k, s.n}, opt);
        fn = [&] { at::mm_out(y, a.t(), b); };
      } else {
        a = at::randn({s.m, s.k}, opt), b = at::randn({s.k, s.n}, opt);
        fn = [&] { at::mm_out(y, a, b); };
      }
      // The GPU: as a training step runs them (interleaved), the back-to-back
      // figure kept beside it; the CPU has no such clock behaviour.
      const double alone = time_per_call(c, fn);
      const double sec = c.cuda ? time_interleaved(c, fn, alone, *filler) : alone;
      const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
      say(c, "gemm " + p + " " + s.label + " (" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                 std::to_string(s.k) + ", " + s.layout + "): " + fmt_num(sec * 1e3) + " ms, " +
                 fmt_num(flops / sec / 1e12) + " TFLOP/s" +
                 (c.cuda ? " (back to back " + fmt_num(flops / alone / 1e12) + ")" : std::string()));
      out.push_back({{"precision", p}, {"label", s.label}, {"layout", s.layout}, {"m", s.m}, {"n", s.n},
                     {"k", s.k}, {"seconds", sec}, {"back_to_back_seconds", alone}});
    }
  }
  if (c.cuda) measure_fp8_gemms(c, *filler, out);
  else if (c.notes) c.notes->push_back("gemm fp8: not measured on the CPU (FP8 GEMM points are CUDA's: at::_scaled_mm)");
  return out;
}

json measure_attention(const Ctx& c) {
  json out = json::array();
  struct Cfg {
    int64_t b, heads, kv_heads, s, d;
  };
  // Head dimensions 64 and 128 at sequences 1024 to 8192 (and 16384 and
  // 32768 in 16-bit: long-context plans; validation/h100/window23 ran full
  // attention at those lengths 12-15% faster than the rates held at 8192), and
  // 80 (OPT-2.7b: the flash kernels run it padded to a wider head) at 1024
  // and 2048, and 256 (Gemma-2 and Gemma-3; 16-bit only) at 2048 to 16384
  // (the profile's attention_rates interpolate between them):
  // gpt2-xl (25 heads of 64), gpt-neo (16 of 128), TinyLlama's GQA (32
  // heads, 4 kv heads of 64), and the others of the grid at about the same
  // work.
  const std::vector<Cfg> cfgs = c.quick ? std::vector<Cfg>{{2, 4, 4, 128, 32}, {2, 4, 2, 128, 16}}
                                        : std::vector<Cfg>{{8, 25, 25, 1024, 64},
                                                           {8, 32, 4, 2048, 64},
                                                           {4, 32, 32, 2048, 64},
                                                           {2, 32, 32, 4096, 64},
                                                           {1, 32, 32, 8192, 64},
                                                           {8, 32, 32, 1024, 80},
                                                           {4, 32, 32, 2048, 80},
                                                           {8, 16, 16, 1024, 128},
                                                           {8, 16, 16, 2048, 128},
                                                           {2, 32, 32, 4096, 128},
                                                           {1, 16, 16, 8192, 128},
                                                           {1, 32, 32, 16384, 64},
                                                           {1, 16, 16, 16384, 128},
                                                           {1, 16, 16, 32768, 128},
                                                           {4, 8, 8, 2048, 256},
                                                           {2, 8, 4, 4096, 256},
                                                           {1, 8, 8, 8192, 256},
                                                           {1, 8, 4, 16384, 256}};
  // fp32 on the GPU too: SDPA has no flash kernel for it and runs the
  // memory-efficient one, which the profile keeps apart (..._relative_fp32).
  const std::vector<std::string> precisions = c.cuda ? std::vector<std::string>{"bf16", "fp16", "fp32"}
                                                     : std::vector<std::string>{"fp32"};
  for (const auto& p : precisions) {
    const auto opt = at::TensorOptions().device(c.device).dtype(dtype_of(p));
    for (const Cfg& g : cfgs) {
      if (p == "fp32" && (g.s > 8192 || g.d > 128)) continue;  // the memory-efficient kernel: minutes at these lengths
      at::Tensor q = at::randn({g.b, g.heads, g.s, g.d}, opt).requires_grad_(true);
      at::Tensor k = at::randn({g.b, g.kv_heads, g.s, g.d}, opt).requires_grad_(true);
      at::Tensor v = at::randn({g.b, g.kv_heads, g.s, g.d}, opt).requires_grad_(true);
      at::Tensor dout = at::randn({g.b, g.heads, g.s, g.d}, opt);
      const bool gqa = g.kv_heads != g.heads;
      auto fwd = [&] {
        return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa);
      };
      // Forward as in training (autograd records it), then forward + backward.
      const double f = time_per_call(c, [&] { (void)fwd(); });
      const double fb = time_per_call(c, [&] {
        at::Tensor o = fwd();
        (void)torch::autograd::grad({o}, {q, k, v}, {dout});
      });
      const double bwd = std::max(fb - f, 1e-9);
      say(c, "attention " + p + " b=" + std::to_string(g.b) + " heads=" + std::to_string(g.heads) + "/" +
                 std::to_string(g.kv_heads) + " s=" + std::to_string(g.s) + " d=" + std::to_string(g.d) +
                 ": forward " + fmt_num(f * 1e3) + " ms, backward " + fmt_num(bwd * 1e3) + " ms");
      out.push_back({{"precision", p}, {"batch", g.b}, {"heads", g.heads}, {"kv_heads", g.kv_heads}, {"seq", g.s},
                     {"head_dim", g.d}, {"causal", true}, {"forward_seconds", f}, {"backward_seconds", bwd}});
    }
  }
  return out;
}

// Causal attention with a sliding window as the runtime runs it
// (rt::attend with a window: FlashAttention-2's kernel with its window, and
// the layout copies around it), beside the full causal attention of the same
// shape (rt::attend without one: SDPA's kernel, cuDNN's on Hopper). The fit
// compares their rates on the work each does (attention_window_*_relative).
// CUDA 16-bit only: elsewhere the runtime masks the full scores, which costs
// what full attention costs.
json measure_attention_window(const Ctx& c) {
  json out = json::array();
  if (!c.cuda) {
    if (c.notes) c.notes->push_back("attention_window: not measured on the CPU (the band mask costs full attention)");
    return out;
  }
  struct Cfg {
    int64_t b, heads, kv_heads, s, d, window;
  };
  // Mistral's shape (32 heads, 8 kv heads of 128) at windows of a quarter and
  // an eighth of the sequence, heads of 64 with a window of half, and heads of
  // 256: Gemma-3-1B's (4 heads, 1 kv head, window 512), Gemma-3-4B's (8 over 4,
  // window 1024) and Gemma-2's (8 over 4, window 4096).
  const std::vector<Cfg> cfgs = c.quick ? std::vector<Cfg>{{1, 4, 4, 256, 32, 64}}
                                        : std::vector<Cfg>{{1, 32, 8, 16384, 128, 4096},
                                                           {1, 32, 8, 16384, 128, 2048},
                                                           {2, 16, 16, 8192, 128, 2048},
                                                           {2, 32, 32, 8192, 64, 4096},
                                                           {2, 4, 1, 8192, 256, 512},
                                                           {1, 4, 1, 16384, 256, 512},
                                                           {2, 8, 4, 8192, 256, 1024},
                                                           {1, 8, 4, 16384, 256, 4096}};
  const auto opt = at::TensorOptions().device(c.device).dtype(at::kBFloat16);
  // In the layout the runtime's layer hands them over (TransformerModel::attention):
  // (b, s, heads, d) memory seen as (b, heads, s, d), which the windowed
  // kernel takes without a copy. Contiguous (b, heads, s, d) inputs made it
  // copy q, k, v and the output's gradient first, which at head_dim 256 and
  // windows of 512-1024 made the windowed pass up to 1.8x slower than in a
  // step (validation/h200/gemma57).
  for (const Cfg& g : cfgs) {
    auto as_step = [&](int64_t heads) { return at::randn({g.b, g.s, heads, g.d}, opt).transpose(1, 2); };
    at::Tensor q = as_step(g.heads).requires_grad_(true);
    at::Tensor k = as_step(g.kv_heads).requires_grad_(true);
    at::Tensor v = as_step(g.kv_heads).requires_grad_(true);
    at::Tensor dout = as_step(g.heads);
    const bool gqa = g.kv_heads != g.heads;
    json row = {{"precision", "bf16"}, {"batch", g.b},   {"heads", g.heads}, {"kv_heads", g.kv_heads},
                {"seq", g.s},          {"head_dim", g.d}, {"window", g.window}};
    for (const int64_t w : {int64_t(0), g.window}) {
      auto fwd = [&] { return attend(q, k, v, /*causal=*/true, gqa, w); };
      const double f = time_per_call(c, [&] { (void)fwd(); });
      const double fb = time_per_call(c, [&] {
        at::Tensor o = fwd();
        (void)torch::autograd::grad({o}, {q, k, v}, {dout});
      });
      const std::string pre = w == 0 ? "full_" : "";
      row[pre + "forward_seconds"] = f;
      row[pre + "backward_seconds"] = std::max(fb - f, 1e-9);
    }
    say(c, "attention window " + std::to_string(g.window) + " s=" + std::to_string(g.s) + " d=" +
               std::to_string(g.d) + ": forward " + fmt_num(row["forward_seconds"].get<double>() * 1e3) +
               " ms (full " + fmt_num(row["full_forward_seconds"].get<double>() * 1e3) + " ms), backward " +
               fmt_num(row["backward_seconds"].get<double>() * 1e3) + " ms (full " +
               fmt_num(row["full_backward_seconds"].get<double>() * 1e3) + " ms)");
    out.push_back(row);
  }
  return out;
}

json measure_memory_kernels(const Ctx& c) {
  json out = json::array();
  // The working precision's elements: bf16 on the GPU, fp32 on the CPU.
  const std::string p = c.cuda ? "bf16" : "fp32";
  const int64_t e = elem_bytes(p);
  const auto opt = at::TensorOptions().device(c.device).dtype(dtype_of(p));
  const int64_t h = c.quick ? 256 : 2048;
  const int64_t n = c.quick ? (int64_t(1) << 20) : (int64_t(1) << 26);  // 128 MiB of bf16 on the GPU
  const int64_t T = n / h;
  at::Tensor a = at::randn({T, h}, opt), b = at::randn({T, h}, opt), y = at::empty({T, h}, opt);
  at::Tensor y32 = at::empty({T, h}, opt.dtype(at::kFloat));
  at::Tensor w = at::randn({h}, opt), bias = at::randn({h}, opt);
  at::Tensor wide = at::randn({T / 2, 2 * h}, opt);  // a SwiGLU up-projection output; its halves are narrowed
  auto add = [&](const std::string& cls, const std::string& name, double bytes, const std::function<void()>& fn) {
    const double sec = time_per_call(c, fn);
    say(c, "memory " + cls + " " + name + ": " + fmt_num(bytes / sec / 1e9) + " GB/s");
    out.push_back({{"class", cls}, {"name", name}, {"precision", p}, {"bytes", bytes}, {"seconds", sec}});
  };
  const double ne = double(n) * double(e);
  // Vectorized streams.
  add("streaming", "copy", 2 * ne, [&] { y.copy_(a); });
  add("streaming", "add", 3 * ne, [&] { at::add_out(y, a, b); });
  add("streaming", "gelu", 2 * ne, [&] { (void)at::gelu(a); });
  // PyTorch's non-vectorized elementwise path: converting, broadcast, narrowed operands.
  if (e != 4) add("strided", "convert to fp32", double(n) * double(e + 4), [&] { y32.copy_(a); });
  add("strided", "broadcast multiply", 2 * ne, [&] { at::mul_out(y, a, w); });
  add("strided", "silu of a narrowed half", ne, [&] { (void)at::silu(wide.narrow(1, 0, h)); });
  // Reductions.
  add("reduction", "layer norm", 2 * ne, [&] { (void)at::layer_norm(a, {h}, w, bias); });
  add("reduction", "column sum", ne, [&] { (void)a.sum(0); });
  // The optimizer's kernel, as adam_range (runtime/optim/adamw.cpp) calls it on
  // one chunk: fp32 master, gradient and moments (read 16, write 12 bytes per
  // parameter).
  {
    const auto f32 = opt.dtype(at::kFloat);
    const int64_t k = c.quick ? (int64_t(1) << 18) : (int64_t(1) << 26);
    at::Tensor pm = at::randn({k}, f32), g = at::randn({k}, f32), m1 = at::zeros({k}, f32), v1 = at::zeros({k}, f32);
    at::Tensor step = at::ones({}, f32), divisor = at::ones({}, f32);
    add("adamw", "fused AdamW", 28.0 * double(k), [&] {
      at::_fused_adamw_({pm}, {g}, {m1}, {v1}, {}, {step}, 1e-4, 0.9, 0.95, 0.1, 1e-8, /*amsgrad=*/false,
                        /*maximize=*/false, divisor, /*found_inf=*/std::nullopt);
    });
  }
  return out;
}

json measure_kernel_overhead(const Ctx& c) {
  at::Tensor t = at::zeros({1}, at::TensorOptions().device(c.device));
  const int burst = 50;
  // Launch-bound: the GPU waits for the CPU to enqueue each tiny kernel.
  const double launch = time_per_call(c, [&] {
    for (int i = 0; i < burst; ++i) t.add_(1.0);
  }) / burst;
  say(c, "kernel launch: " + fmt_num(launch * 1e6) + " us per tiny kernel, launch-bound");
  if (!c.cuda) return {{"kernel_overhead_seconds", launch}, {"launch_bound_seconds", launch}};
  // Queued, as in a training step, where the CPU runs ahead of the GPU: GEMMs
  // first hold the GPU while the burst is enqueued behind them, and events
  // time the burst on the GPU alone (a kernel's fixed cost plus the gap to the
  // next). The figure the layer model adds per kernel.
  const auto opt = at::TensorOptions().device(c.device).dtype(at::kBFloat16);
  const int64_t g = c.quick ? 256 : 4096;
  at::Tensor x = at::randn({g, g}, opt), y = at::empty({g, g}, opt);
  const int queued = 400;
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    synchronize(true);
    for (int i = 0; i < 30; ++i) at::mm_out(y, x, x);  // ~5 ms of work ahead of the burst on an H100
    IntervalTimer timer(true);
    timer.start();
    for (int i = 0; i < queued; ++i) t.add_(1.0);
    timer.stop();
    best = std::min(best, timer.seconds().at(0) / queued);
  }
  say(c, "kernel overhead: " + fmt_num(best * 1e6) + " us per tiny kernel, queued behind work");
  return {{"kernel_overhead_seconds", best}, {"launch_bound_seconds", launch}};
}

}  // namespace planner::rt::calib

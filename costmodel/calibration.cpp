#include "costmodel/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "specs/cluster_spec.hpp"
#include "costmodel/collectives.hpp"
#include "costmodel/cost_model.hpp"
#include "specs/model_spec.hpp"
#include "costmodel/op_costs.hpp"
#include "specs/plan.hpp"
#include "costmodel/topology.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#include "strategies/strategy.hpp"

namespace planner {

namespace {

using nlohmann::json;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Precision precision_of(const std::string& p) {
  return p == "bf16" ? Precision::BF16 : p == "fp16" ? Precision::FP16 : p == "fp8" ? Precision::FP8 : Precision::FP32;
}

double pct_error(double model, double measured) { return measured > 0 ? (model - measured) / measured * 100.0 : 0.0; }

// Keeps a fitted value inside (0, 1], noting when the measurement was above the
// datasheet figure it is divided by.
double fraction(double v, const std::string& field, std::vector<std::string>& notes) {
  if (!(v > 0) || !std::isfinite(v)) return 0;
  if (v > 1.0) {
    notes.push_back(fmt::format("{}: measured {:.3f} of the figure it is divided by; kept at 1", field, v));
    return 1.0;
  }
  return v;
}

struct Fitter {
  HardwareProfile p;
  json m;  // the measured document, annotated with the model's time per point
  json fits = json::object();
  std::vector<std::string> notes;
  const GpuSpec* gpu = nullptr;

  void set(const std::string& field, double value, const std::string& how) {
    fits[field] = {{"value", value}, {"from", how}};
  }

  void memory_kernels() {
    if (!m.contains("memory_kernels") || m["memory_kernels"].empty()) return;
    std::map<std::string, std::vector<double>> rates;
    double best = 0;
    for (const auto& k : m["memory_kernels"]) {
      const double r = k.at("bytes").get<double>() / k.at("seconds").get<double>();
      rates[k.at("class").get<std::string>()].push_back(r);
      if (k.at("class") == "streaming") best = std::max(best, r);
    }
    const double stream = median(rates["streaming"]);
    if (stream <= 0) return;
    if (!gpu) {
      p.memory_bandwidth_Bps = best;
      set("memory_bandwidth_Bps", best, "CPU: the fastest measured streaming kernel (no datasheet)");
    }
    const double eff = fraction(stream / p.memory_bandwidth_Bps, "memory_efficiency", notes);
    if (eff > 0) {
      p.memory_efficiency = eff;
      set("memory_efficiency", eff,
          fmt::format("median streaming rate {:.4g} GB/s over {} points / {} {:.4g} GB/s", stream / 1e9,
                      rates["streaming"].size(), gpu ? "datasheet" : "fastest", p.memory_bandwidth_Bps / 1e9));
    }
    for (const auto& [cls, field] : {std::pair<std::string, const char*>{"strided", "strided_kernel_relative"},
                                     {"reduction", "reduction_kernel_relative"},
                                     {"adamw", "adamw_kernel_relative"}}) {
      if (rates[cls].empty()) continue;  // adamw: measured since 2026-11-26
      const double r = median(rates[cls]);
      const double rel = fraction(r / stream, field, notes);
      if (rel <= 0) continue;
      (cls == "strided"     ? p.strided_kernel_relative
       : cls == "reduction" ? p.reduction_kernel_relative
                            : p.adamw_kernel_relative) = rel;
      set(field, rel, fmt::format("median {} rate {:.4g} GB/s over {} points / median streaming {:.4g} GB/s", cls,
                                  r / 1e9, rates[cls].size(), stream / 1e9));
    }
    for (auto& k : m["memory_kernels"]) {
      const std::string c = k.at("class").get<std::string>();
      const MemKernel kind = c == "strided"     ? MemKernel::Strided
                             : c == "reduction" ? MemKernel::Reduction
                             : c == "adamw"     ? MemKernel::AdamW
                                                : MemKernel::Streaming;
      const double model = memory_kernel_seconds(p, k.at("bytes").get<double>(), kind);
      k["model_seconds"] = model;
      k["error_pct"] = pct_error(model, k.at("seconds").get<double>());
    }
  }

  void kernel_overhead() {
    if (!m.contains("kernel_overhead_seconds")) return;
    // Measurements before the queued figure hold one number, the launch-bound one.
    const json& k = m["kernel_overhead_seconds"];
    const bool queued = k.is_object();
    if (queued && !k.contains("kernel_overhead_seconds")) return;
    const double s = queued ? k["kernel_overhead_seconds"].get<double>() : k.get<double>();
    if (!(s >= 0) || !std::isfinite(s)) return;
    p.kernel_overhead_seconds = s;
    set("kernel_overhead_seconds", s,
        queued && gpu ? fmt::format("a tiny kernel's GPU time in a burst of 400 queued behind work, as in a step "
                                    "(launch-bound: {:.3g} us)",
                                    k.value("launch_bound_seconds", 0.0) * 1e6)
                      : "a tiny kernel's time in a burst of 50 (launch-bound)");
  }

  // Whether an in_step row is the deepest of its model and precision (since
  // 2026-11-26 the 16-bit models run at 8 and 24 layers; the deepest is the
  // nearer to the models people train).
  bool deepest_row(const json& x) const {
    const int64_t L = x.value("layers", int64_t(0));
    for (const auto& y : m["in_step"])
      if (y.value("model", "") == x.value("model", "") && y.value("precision", "") == x.value("precision", "") &&
          y.value("layers", int64_t(0)) > L)
        return false;
    return true;
  }

  // calibrate's in_step part: per model family and precision, the GEMM
  // kernels' time in sustained training passes (Kineto; since 2026-11-26 run
  // back to back, at 8 and 24 layers for 16-bit, the deepest row of each
  // model taken; before, single passes after a pause at 8 layers, earlier 2)
  // and the same GEMMs timed as
  // calibrate times its points. At its power limit a GPU's clock depends on
  // the mix it runs (validation/archive/h100/in-step), so on the GPU the GEMM rates
  // fitted from calibrate's points are scaled by the median, per precision,
  // of calibrate's time over the step's: {precision: (median, rows)}, {} where
  // not measured (the CPU has no step kernel times).
  std::map<std::string, std::pair<double, size_t>> gemm_in_step_factors() const {
    std::map<std::string, std::pair<double, size_t>> out;
    if (!m.contains("in_step") || !m["in_step"].is_array()) return out;
    std::map<std::string, std::vector<double>> ratios;
    for (const auto& x : m["in_step"]) {
      if (!deepest_row(x)) continue;
      // No fused attention captured: SDPA ran its math path (fp32 with
      // grouped-query attention), whose batched GEMMs the step's GEMM time
      // counts and calibrate's does not.
      if (x.contains("attention") && x["attention"].is_array() && x["attention"].empty()) continue;
      const double a = x.value("alone_gemm_seconds", 0.0), st = x.value("step_gemm_seconds", 0.0);
      if (!(a > 0) || !(st > 0) || !std::isfinite(a) || !std::isfinite(st)) continue;
      ratios[x.value("precision", "")].push_back(a / st);
    }
    for (auto& [prec, v] : ratios) out[prec] = {median(v), v.size()};
    return out;
  }

  // calibrate's in_step part also sums the attention kernels (the fused
  // backward's helpers counted with them) and the memory-bound kernels of its
  // models' passes. On the GPU the attention's factor is the median, over the
  // deepest 16-bit row of each model, of that time over the layer model's attention time for the
  // same model, tokens and precision (one pass: forward and backward, one
  // GPU), with the rates fitted so far: attention_in_step_factor. Only rows
  // whose kernel profile counted the helpers as attention, as the layer model
  // does (`attention_with_helpers`, since 2026-11-26; before, cuDNN's counted
  // as memory-bound). The fp32 rows are left out (with grouped-query attention
  // SDPA runs its math path, whose kernels the layer model does not price as
  // the fused kernel's). The memory-bound ratio is computed the same way and
  // kept in the rows and a note; memory_in_step_factor, the layers' own, is
  // the ratio of the differences between a model's two depths (below).
  void in_step_classes() {
    if (!m.contains("in_step") || !m["in_step"].is_array() || !gpu) return;
    std::vector<double> memory, attention;
    // The layer model's times with the memory-bound in-step factor left at 1.
    HardwareProfile q = p;
    q.memory_in_step_factor = 1;
    for (auto& x : m["in_step"]) {
      // fp32 and fp8 rows set the GEMM rates only (gemm_in_step_factors).
      if (!x.contains("spec") || x.value("precision", "") == "fp32" || x.value("precision", "") == "fp8") continue;
      Plan plan;
      x["spec"].get_to(plan.model);
      plan.cluster = parse_cluster("1x" + gpu->name);
      plan.seq = x.value("seq", int64_t(2048));
      plan.global_batch = x.value("mbs", int64_t(4));
      plan.strategy = Strategy::parse(fmt::format("mbs={},gas=1,precision={}", plan.global_batch,
                                                  x["precision"].get<std::string>()));
      const OpTimes model = step_op_times(plan, q, 0);
      const double mem = x.value("step_memory_bound_seconds", 0.0);
      if (mem > 0 && std::isfinite(mem) && model.memory_seconds > 0) {
        x["model_memory_bound_seconds"] = model.memory_seconds;
        memory.push_back(mem / model.memory_seconds);
      }
      const double att = x.value("step_attention_seconds", 0.0);
      if (!deepest_row(x)) continue;
      if (x.value("attention_with_helpers", false) && att > 0 && std::isfinite(att) && model.attention_seconds > 0) {
        x["model_attention_seconds"] = model.attention_seconds;
        attention.push_back(att / model.attention_seconds);
      }
    }
    const std::string how = "median over {} 16-bit in-step rows of the {} kernels' time in a sustained pass (Kineto) / "
                            "the layer model's {} time for the same model and tokens";
    // The whole pass's memory-bound ratio is kept in a note, not applied: in
    // eight-layer models the vocabulary head and its loss are about two
    // thirds of the layer model's memory-bound time (GPT-Neo-1.3B's: 8.6 of
    // 13.4 ms), so it speaks for the head's kernels; the layers' own comes
    // from two depths below.
    if (!memory.empty())
      notes.push_back(fmt::format("memory-bound kernels in the in-step passes: median {:.3f} of the layer model's over {} "
                                  "rows (the whole pass, the vocabulary head and loss included)",
                                  median(memory), memory.size()));
    // The layers' own: between two depths of the same model and precision the
    // head, loss and embedding cancel, (step's deep - shallow) / (model's deep
    // - shallow), the median over the pairs: memory_in_step_factor.
    std::vector<double> layers;
    for (const auto& x : m["in_step"]) {
      if (!x.contains("model_memory_bound_seconds") || !deepest_row(x)) continue;
      const json* shallow = nullptr;
      for (const auto& y : m["in_step"])
        if (&y != &x && y.contains("model_memory_bound_seconds") && y.value("model", "") == x.value("model", "") &&
            y.value("precision", "") == x.value("precision", "") &&
            y.value("layers", int64_t(0)) < x.value("layers", int64_t(0)) &&
            (!shallow || y.value("layers", int64_t(0)) < shallow->value("layers", int64_t(0))))
          shallow = &y;
      if (!shallow) continue;
      const double ds = x["step_memory_bound_seconds"].get<double>() - (*shallow)["step_memory_bound_seconds"].get<double>();
      const double dm =
          x["model_memory_bound_seconds"].get<double>() - (*shallow)["model_memory_bound_seconds"].get<double>();
      if (ds > 0 && dm > 0) layers.push_back(ds / dm);
    }
    if (!layers.empty()) {
      p.memory_in_step_factor = std::clamp(median(layers), 0.5, 2.0);
      set("memory_in_step_factor", p.memory_in_step_factor,
          fmt::format("median over {} 16-bit models of (their memory-bound kernels' time in a sustained pass at the "
                      "deeper depth - at the shallower) / (the layer model's deeper - shallower): the layers' own",
                      layers.size()));
    }
    if (!attention.empty()) {
      p.attention_in_step_factor = std::clamp(median(attention), 0.5, 2.0);
      set("attention_in_step_factor", p.attention_in_step_factor,
          fmt::format(fmt::runtime(how), attention.size(), "attention", "attention"));
    }
  }

  void gemms() {
    if (!m.contains("gemm") || m["gemm"].empty()) return;
    const auto factors = gemm_in_step_factors();
    std::map<std::string, std::vector<json*>> by_prec;
    for (auto& g : m["gemm"]) by_prec[g.at("precision").get<std::string>()].push_back(&g);
    if (!gpu) {
      // No datasheet: the fastest shape of each precision is the peak.
      for (auto& [prec, pts] : by_prec) {
        if (prec == "fp8") continue;  // measured on CUDA only (calibration/measure_compute.cpp)
        double best = 0;
        for (json* g : pts) best = std::max(best, 2.0 * (*g)["m"].get<double>() * (*g)["n"].get<double>() *
                                                      (*g)["k"].get<double>() / (*g)["seconds"].get<double>());
        (prec == "fp32" ? p.peak_fp32_flops : prec == "fp16" ? p.peak_fp16_flops : p.peak_bf16_flops) = best;
        set("peak_" + prec + "_flops", best, "CPU: the fastest measured GEMM of this precision (no datasheet)");
      }
    }
    double main_eff = 0;
    std::string main_prec;
    std::vector<double> tn16, tn32;
    for (const char* prec : {"fp32", "fp16", "bf16"}) {  // the last one measured is the main (16-bit) one
      if (!by_prec.count(prec)) continue;
      const Precision pr = precision_of(prec);
      const double peak = p.peak_flops(pr);
      if (peak <= 0) continue;
      std::vector<double> effs;
      for (json* g : by_prec[prec]) {
        const int64_t M = (*g)["m"].get<int64_t>(), N = (*g)["n"].get<int64_t>(), K = (*g)["k"].get<int64_t>();
        const double flops = 2.0 * double(M) * double(N) * double(K);
        const double f = gemm_shape_factor(p, M, N, K, 1);
        const double e = flops / (*g)["seconds"].get<double>() / (peak * f);
        (*g)["shape_factor"] = f;
        (*g)["efficiency"] = e;
        effs.push_back(e);
      }
      // Shapes whose model time is memory-bound say nothing about the GEMM rate.
      const double first = median(effs);
      std::vector<double> kept;
      for (json* g : by_prec[prec]) {
        const int64_t M = (*g)["m"].get<int64_t>(), N = (*g)["n"].get<int64_t>(), K = (*g)["k"].get<int64_t>();
        const double compute = 2.0 * double(M) * double(N) * double(K) / (peak * first * (*g)["shape_factor"].get<double>());
        const double bytes = double(M * K + K * N + M * N) * bytes_per_element(pr);
        const bool mem_bound = bytes / p.memory_Bps() > compute;
        (*g)["memory_bound"] = mem_bound;
        // Weight gradients (tn) have their own relative rate, fitted below.
        if (!mem_bound && g->value("layout", "") != "tn") kept.push_back((*g)["efficiency"].get<double>());
      }
      double points_eff = median(kept.empty() ? effs : kept), factor = 1;
      std::string how_step;
      if (auto it = factors.find(prec); it != factors.end() && gpu) {
        factor = it->second.first;
        how_step = fmt::format(" x {:.4f}, the median over {} models of calibrate's time for their GEMMs / the GEMM "
                               "kernels' time in a sustained training step (the points alone: {:.4f})",
                               factor, it->second.second, points_eff);
      }
      const double eff = fraction(points_eff * factor, std::string("gemm_efficiency_") + prec, notes);
      if (eff <= 0) continue;
      (pr == Precision::FP32 ? p.gemm_efficiency_fp32 : pr == Precision::FP16 ? p.gemm_efficiency_fp16
                                                                              : p.gemm_efficiency_bf16) = eff;
      set(std::string("gemm_efficiency_") + prec, eff,
          fmt::format("median over {} shapes of measured FLOP/s / ({} peak {:.4g} TFLOP/s x shape factor){}",
                      kept.empty() ? effs.size() : kept.size(), pr == Precision::FP32 && p.allow_tf32 ? "tf32" : prec,
                      peak / 1e12, how_step));
      main_eff = eff, main_prec = prec;
      // The weight-gradient shapes against this precision's fitted rate (before the in-step factor, which both share).
      for (json* g : by_prec[prec])
        if (g->value("layout", "") == "tn" && !(*g)["memory_bound"].get<bool>())
          (pr == Precision::FP32 ? tn32 : tn16).push_back((*g)["efficiency"].get<double>() / points_eff);
    }
    auto fit_tn = [&](const std::vector<double>& v, const char* field, double& out, bool fp32) {
      if (v.empty()) return;
      const double x = median(v);
      if (!(x > 0) || x > 2) return;
      out = x;
      set(field, x, fmt::format("median over {} {}weight-gradient (tn) shapes of their efficiency / their precision's "
                                "fitted forward and data-gradient efficiency",
                                v.size(), fp32 ? "fp32 " : "16-bit "));
    };
    fit_fp8(by_prec, factors);
    fit_tn(tn16, "weight_grad_gemm_relative", p.weight_grad_gemm_relative, false);
    fit_tn(tn32, "weight_grad_gemm_relative_fp32", p.weight_grad_gemm_relative_fp32, true);
    if (main_eff > 0) {
      p.gemm_efficiency = main_eff;
      set("gemm_efficiency", main_eff, "gemm_efficiency_" + main_prec);
    }
    for (auto& g : m["gemm"]) {
      const int64_t M = g["m"].get<int64_t>(), N = g["n"].get<int64_t>(), K = g["k"].get<int64_t>();
      const Precision pr = precision_of(g["precision"].get<std::string>());
      const double model = g.value("layout", "") == "tn" ? weight_grad_gemm_seconds(p, M, N, K, pr)
                                                          : gemm_seconds(p, M, N, K, pr, 1);
      g["model_seconds"] = model;
      g["error_pct"] = pct_error(model, g["seconds"].get<double>());
    }
  }

  // FP8 GEMM points (at::_scaled_mm, e4m3 x e4m3 -> bf16, per-tensor scales):
  // their efficiency against the FP8 peak, as the bf16 fit does (median over
  // the shapes that are not memory-bound, operands one byte each), times the
  // in-step factor of the fp8 in_step rows where calibrate measured them
  // (their steps' GEMMs: the layers' FP8 ones and the bf16 head's).
  void fit_fp8(std::map<std::string, std::vector<json*>>& by_prec,
               const std::map<std::string, std::pair<double, size_t>>& factors) {
    if (!by_prec.count("fp8") || p.peak_fp8_flops <= 0) return;
    std::vector<double> effs;
    for (json* g : by_prec["fp8"]) {
      const int64_t M = (*g)["m"].get<int64_t>(), N = (*g)["n"].get<int64_t>(), K = (*g)["k"].get<int64_t>();
      const double flops = 2.0 * double(M) * double(N) * double(K);
      const double f = gemm_shape_factor(p, M, N, K, 1);
      const double e = flops / (*g)["seconds"].get<double>() / (p.peak_fp8_flops * f);
      const double bytes = double(M * K + K * N) + 2.0 * double(M * N);
      (*g)["shape_factor"] = f;
      (*g)["efficiency"] = e;
      (*g)["memory_bound"] = bytes / p.memory_Bps() > flops / (p.peak_fp8_flops * f);
      if (!(*g)["memory_bound"].get<bool>()) effs.push_back(e);
    }
    const double points = median(effs);
    double factor = 1;
    std::string how_step;
    if (auto it = factors.find("fp8"); it != factors.end() && gpu) {
      factor = it->second.first;
      how_step = fmt::format(" x {:.4f}, the median over {} models (precision=fp8) of calibrate's time for their "
                             "GEMMs / the GEMM kernels' time in a sustained training step (the points alone: {:.4f})",
                             factor, it->second.second, points);
    }
    const double eff = fraction(points * factor, "gemm_efficiency_fp8", notes);
    if (eff <= 0) return;
    p.gemm_efficiency_fp8 = eff;
    set("gemm_efficiency_fp8", eff,
        fmt::format("median over {} FP8 shapes (at::_scaled_mm, e4m3, per-tensor scales) of measured FLOP/s / (FP8 "
                    "peak {:.4g} TFLOP/s x shape factor){}", effs.size(), p.peak_fp8_flops / 1e12, how_step));
  }

  // Kernels the layer model prices beside the fused backward (layer_costs.cpp):
  // rowsum(dO * O) and the fp32 dQ converted to the working precision.
  double attention_helpers(const json& a, Precision pr) const {
    const double e = bytes_per_element(pr);
    const double th = a["batch"].get<double>() * a["seq"].get<double>() * a["heads"].get<double>() *
                      a["head_dim"].get<double>();
    return memory_kernel_seconds(p, 2 * e * th, MemKernel::Reduction) +
           memory_kernel_seconds(p, (4 + e) * th, MemKernel::Streaming) + 2 * p.kernel_overhead_seconds;
  }

  void attention() {
    if (!m.contains("attention") || m["attention"].empty()) return;
    // Two families: 16-bit inputs (SDPA's flash kernel) and fp32 inputs (its
    // memory-efficient kernel, no flash kernel exists for fp32), each fitted
    // against its own precision's GEMM rate.
    std::vector<double> fwd, bwd, fwd32, bwd32;
    for (auto& a : m["attention"]) {
      const Precision pr = precision_of(a["precision"].get<std::string>());
      const double bh = a["batch"].get<double>() * a["heads"].get<double>();
      const double work = 4.0 * bh * a["seq"].get<double>() * a["seq"].get<double>() * a["head_dim"].get<double>() *
                          (a.value("causal", true) ? 0.5 : 1.0);
      const double rate = p.gemm_flops(pr);
      const double b = a["backward_seconds"].get<double>();
      const double core = std::max(0.5 * b, b - attention_helpers(a, pr));
      a["forward_relative"] = work / a["forward_seconds"].get<double>() / rate;
      a["backward_relative"] = 2.5 * work / core / rate;
      // A CPU calibration has only fp32 cases: they are the profile's main figures.
      const bool own_fp32 = pr == Precision::FP32 && gpu != nullptr;
      // fp32 with grouped-query attention: SDPA has no fused kernel for it on
      // the GPU and runs its math path (on an H100 about 10x slower than the
      // memory-efficient kernel at the same work), which the fused kernels'
      // rates must not include.
      if (own_fp32 && a.value("kv_heads", a["heads"].get<int64_t>()) != a["heads"].get<int64_t>()) {
        a["excluded"] = "fp32 grouped-query attention runs SDPA's math path";
        continue;
      }
      (own_fp32 ? fwd32 : fwd).push_back(a["forward_relative"]);
      (own_fp32 ? bwd32 : bwd).push_back(a["backward_relative"]);
    }
    const std::string how_f = "median over {} {}cases of attention FLOP/s (4 b a s^2 d, halved causal) / the fitted {}GEMM rate";
    const std::string how_b = "median over {} {}cases of 2.5x the forward's FLOPs / (backward time less rowsum(dO O) and the "
                              "dQ conversion, which the layer model prices apart) / the fitted {}GEMM rate";
    // The attention's own in-step ratio (calibrate's in_step part) is kept in
    // the measurements and not applied. With two-layer models it made the
    // attention of the H100's development plans 11-21% faster than measured,
    // against -1..-12% without it (validation/archive/h100/in-step). With eight
    // layers, on two H200s, the attention still ran 1.07x faster in that
    // step than alone (validation/archive/h200x2/calib13), while the attention
    // kernels of 24-layer training steps on the same host ran at calibrate's
    // alone rates or slower (h200x2-3d/run6: GPT-Neo-1.3B dp=2, 0.0543 s
    // measured against 0.0467 s predicted without the ratio). Both readings
    // compared calibrate's alone time, which includes the backward's two
    // helper kernels, with a step's attention kernels without cuDNN's helpers
    // (filed as memory-bound then): about a tenth of the backward. What is
    // applied instead is the step's attention against the layer model's
    // (attention_in_step_factor, in_step_classes above).
    auto fit = [&](const std::vector<double>& v, const char* field, double& out, bool fp32, const std::string& how) {
      if (v.empty()) return;
      const double x = fraction(median(v), field, notes);
      if (x <= 0) return;
      out = x;
      set(field, x, fmt::format(fmt::runtime(how), v.size(), fp32 ? "fp32 " : "", fp32 ? "fp32 " : ""));
    };
    fit(fwd, "attention_forward_relative", p.attention_forward_relative, false, how_f);
    fit(bwd, "attention_backward_relative", p.attention_backward_relative, false, how_b);
    fit(fwd32, "attention_forward_relative_fp32", p.attention_forward_relative_fp32, true, how_f);
    fit(bwd32, "attention_backward_relative_fp32", p.attention_backward_relative_fp32, true, how_b);
    // Per head dimension and sequence length: the median over the cases at
    // that point (bf16 and fp16, batch sizes, grouped-query or not).
    std::map<std::tuple<bool, int64_t, int64_t>, std::pair<std::vector<double>, std::vector<double>>> at;
    for (auto& a : m["attention"]) {
      if (a.contains("excluded")) continue;
      // By the inputs' precision, on the CPU too (its cases are fp32, as its
      // plans are; the single figures there are the main ones).
      const bool fp32 = precision_of(a["precision"].get<std::string>()) == Precision::FP32;
      auto& [f, b] = at[{fp32, a["head_dim"].get<int64_t>(), a["seq"].get<int64_t>()}];
      f.push_back(a["forward_relative"].get<double>());
      b.push_back(a["backward_relative"].get<double>());
    }
    p.attention_rates.clear();
    json table = json::array();
    for (const auto& [key, fb] : at) {
      const auto& [fp32, d, sq] = key;
      HardwareProfile::AttentionRate r;
      r.fp32 = fp32, r.head_dim = d, r.seq = sq;
      r.forward = std::min(2.0, median(fb.first));
      r.backward = std::min(2.0, median(fb.second));
      if (!(r.forward > 0) || !(r.backward > 0)) continue;
      p.attention_rates.push_back(r);
      table.push_back({{"precision", fp32 ? "fp32" : "16-bit"}, {"head_dim", d}, {"seq", sq}, {"forward", r.forward},
                       {"backward", r.backward}, {"cases", fb.first.size()}});
    }
    if (!table.empty())
      fits["attention_rates"] = {{"value", table},
                                 {"from", "per head dimension and sequence length: the median over its cases of the "
                                          "relative rates above (each case against its precision's fitted GEMM "
                                          "rate)"}};
    p.flash_attention = true;  // the runtime's SDPA is a fused kernel
    for (auto& a : m["attention"]) {
      const Precision pr = precision_of(a["precision"].get<std::string>());
      const int64_t bh = a["batch"].get<int64_t>() * a["heads"].get<int64_t>();
      const int64_t s = a["seq"].get<int64_t>(), d = a["head_dim"].get<int64_t>();
      const bool causal = a.value("causal", true);
      const double mf = flash_attention_forward_seconds(p, bh, s, d, causal, pr);
      const double mb = flash_attention_backward_seconds(p, bh, s, d, causal, pr) + attention_helpers(a, pr);
      a["model_forward_seconds"] = mf;
      a["model_backward_seconds"] = mb;
      a["forward_error_pct"] = pct_error(mf, a["forward_seconds"].get<double>());
      a["backward_error_pct"] = pct_error(mb, a["backward_seconds"].get<double>());
    }
  }

  // Sliding-window attention (calibrate's attention_window part): the
  // windowed kernel's rate on the attended pairs it computes over the full
  // causal kernel's rate at the same shape, i.e. (full time x the window's
  // share of the causal pairs) / windowed time; the median over the cases.
  void attention_window() {
    if (!m.contains("attention_window") || m["attention_window"].empty()) return;
    std::vector<double> fwd, bwd;
    std::map<std::pair<int64_t, int64_t>, std::pair<std::vector<double>, std::vector<double>>> at;
    for (auto& a : m["attention_window"]) {
      const int64_t s = a["seq"].get<int64_t>(), w = a["window"].get<int64_t>();
      const double share = attended_pairs(s, w) / attended_pairs(s, 0);
      const double f = share * a["full_forward_seconds"].get<double>() / a["forward_seconds"].get<double>();
      const double b = share * a["full_backward_seconds"].get<double>() / a["backward_seconds"].get<double>();
      a["forward_relative"] = f;
      a["backward_relative"] = b;
      fwd.push_back(f);
      bwd.push_back(b);
      auto& [pf, pb] = at[{a["head_dim"].get<int64_t>(), w}];
      pf.push_back(f);
      pb.push_back(b);
    }
    // Per head dimension and window: the median of the cases there (the
    // window, not the sequence, sets the edge blocks' share of the work).
    p.attention_window_rates.clear();
    json table = json::array();
    for (const auto& [key, fb] : at) {
      HardwareProfile::AttentionRate r;
      r.head_dim = key.first, r.seq = key.second;  // seq: the window (HardwareProfile::attention_window_rates)
      r.forward = std::clamp(median(fb.first), 0.05, 2.0);
      r.backward = std::clamp(median(fb.second), 0.05, 2.0);
      p.attention_window_rates.push_back(r);
      table.push_back({{"head_dim", r.head_dim}, {"window", r.seq}, {"forward", r.forward}, {"backward", r.backward},
                       {"cases", fb.first.size()}});
    }
    fits["attention_window_rates"] = {
        {"value", table},
        {"from", "per head dimension and window: the median over its cases of the windowed kernel's relative "
                 "rates"}};
    const std::string how = "median over {} cases of the windowed kernel's rate on its attended pairs (the runtime's "
                            "FlashAttention-2 with a window) / the full causal kernel's at the same shape, {}";
    p.attention_window_forward_relative = std::clamp(median(fwd), 0.05, 2.0);
    set("attention_window_forward_relative", p.attention_window_forward_relative,
        fmt::format(fmt::runtime(how), fwd.size(), "forward"));
    p.attention_window_backward_relative = std::clamp(median(bwd), 0.05, 2.0);
    set("attention_window_backward_relative", p.attention_window_backward_relative,
        fmt::format(fmt::runtime(how), bwd.size(), "backward"));
  }

  // The MoE layer's host seconds (calibrate's moe_host part): a line through
  // the two token counts' points, fixed part + per routed row (both >= 0).
  void moe_host() {
    struct Line {
      double fixed = 0, per_row = 0;
    };
    auto fit = [](const json& pts, const char* key) {
      Line l;
      if (!pts.is_array() || pts.empty()) return l;
      const json &a = pts.front(), &b = pts.back();
      const double ra = a.value("rows", 0.0), rb = b.value("rows", 0.0);
      const double ya = a.value(key, 0.0), yb = b.value(key, 0.0);
      l.per_row = rb > ra ? std::max(0.0, (yb - ya) / (rb - ra)) : 0.0;
      l.fixed = std::max(0.0, ya - l.per_row * ra);
      return l;
    };
    auto one = [&](const char* part, double& f, double& fr, double& b, double& br, const std::string& prefix) {
      if (!m.contains(part) || !m[part].contains("points") || m[part]["points"].size() < 2) return false;
      const json& x = m[part];
      const Line lf = fit(x["points"], "forward_seconds"), lb = fit(x["points"], "backward_seconds");
      if (!(lf.fixed + lf.per_row > 0) || !(lb.fixed + lb.per_row > 0)) return false;
      f = lf.fixed, fr = lf.per_row, b = lb.fixed, br = lb.per_row;
      // "unit": "layer" (the whole MoE transformer layer) since 2026-11-27;
      // before, the MoE block alone.
      const std::string how = fmt::format(
          "the runtime's MoE {} ({} experts of width {}, top-{}, hidden {}, {}; ep {}) timed on the host at {} "
          "and {} tokens, median of each: fixed + per routed row",
          x.value("unit", "") == "layer" ? "transformer layer (attention, norms, MoE block)" : "block",
          x.value("experts", 0), x.value("expert_ffn", 0), x.value("top_k", 0), x.value("hidden", 0),
          x.value("precision", ""), x.value("ep", 1), x["points"].front().value("tokens", 0),
          x["points"].back().value("tokens", 0));
      set(prefix + "forward_seconds", f, how);
      set(prefix + "forward_row_seconds", fr, how);
      set(prefix + "backward_seconds", b, how);
      set(prefix + "backward_row_seconds", br, how);
      return true;
    };
    if (one("moe_host", p.moe_host_forward_seconds, p.moe_host_forward_row_seconds, p.moe_host_backward_seconds,
            p.moe_host_backward_row_seconds, "moe_host_"))
      moe_host_shared(m["moe_host"]);
    if (m.contains("moe_host_ep") && m["moe_host_ep"].value("ep", 0) >= 2 &&
        one("moe_host_ep", p.moe_host_ep_forward_seconds, p.moe_host_ep_forward_row_seconds,
            p.moe_host_ep_backward_seconds, p.moe_host_ep_backward_row_seconds, "moe_host_ep_")) {
      p.moe_host_ep_size = m["moe_host_ep"]["ep"].get<int>();
      set("moe_host_ep_size", p.moe_host_ep_size, "the ep group of calibrate's moe_host part under mpirun");
      const int64_t comm = m["moe_host_ep"].value("communicator_bytes", int64_t(-1));
      if (comm > 0) {
        p.nccl_all_to_all_peer_bytes = comm / (p.moe_host_ep_size - 1);
        p.nccl_all_to_all_fixed_bytes = 0;
        set("nccl_all_to_all_fixed_bytes", 0.0, "one ep size measured: the whole communicator counted per peer");
        set("nccl_all_to_all_peer_bytes", double(p.nccl_all_to_all_peer_bytes),
            fmt::format("growth of memory outside the allocator across the ep communicator's set-up and the MoE "
                        "block's exchanges, {:.0f} MiB over {} peers",
                        double(comm) / 1048576.0, p.moe_host_ep_size - 1));
      }
    }
  }

  // The shared MLP's part: the probe with a shared gated MLP at the first
  // token count, less the plain probe's point there (each >= 0).
  void moe_host_shared(const json& x) {
    if (!x.contains("shared") || !x["shared"].is_object()) return;
    const json& sh = x["shared"];
    const int64_t T = sh.value("tokens", int64_t(0));
    for (const json& pt : x["points"]) {
      if (pt.value("tokens", int64_t(-1)) != T) continue;
      p.moe_host_shared_forward_seconds = std::max(0.0, sh.value("forward_seconds", 0.0) - pt.value("forward_seconds", 0.0));
      p.moe_host_shared_backward_seconds =
          std::max(0.0, sh.value("backward_seconds", 0.0) - pt.value("backward_seconds", 0.0));
      const std::string how = fmt::format(
          "calibrate's MoE probe layer with a shared MLP of width {} behind a sigmoid gate, less the same layer "
          "without, timed on the host at {} tokens (ep {})",
          sh.value("shared_ffn", 0), T, x.value("ep", 1));
      set("moe_host_shared_forward_seconds", p.moe_host_shared_forward_seconds, how);
      set("moe_host_shared_backward_seconds", p.moe_host_shared_backward_seconds, how);
      return;
    }
  }

  void host() {
    if (m.contains("cpu_adam") && m["cpu_adam"].value("seconds", 0.0) > 0) {
      const json& a = m["cpu_adam"];
      // On a GPU machine the figure is the AdamW run as the offload step runs it
      // (pinned buffers, a worker thread, copies to the device beside it; the
      // median of 5 steps); the plain one (one buffer, best of 5) is kept in
      // the measured points for comparison.
      const bool offload_like = a.contains("as_offload_runs_it") && a["as_offload_runs_it"].value("seconds", 0.0) > 0;
      const json& x = offload_like ? a["as_offload_runs_it"] : a;
      const double r = x["params"].get<double>() / x["seconds"].get<double>();
      p.cpu_adam_params_per_second = r;
      set("cpu_adam_params_per_second", r,
          offload_like
              ? fmt::format("median of 5 offload steps of {} parameters (the Engine's adam_range on its worker thread, "
                            "pinned buffers, copies to the device beside it, {} threads); one buffer on the main "
                            "thread, best of 5: {:.4g}/s",
                            x["params"].get<int64_t>(), x.value("threads", 0),
                            a["params"].get<double>() / a["seconds"].get<double>())
              : fmt::format("{} parameters through the runtime's CPU AdamW (at::_fused_adamw_, {} threads)",
                            a["params"].get<int64_t>(), a.value("threads", 0)));
    }
    if (m.contains("cpu_adam_node") && m["cpu_adam_node"].value("node_params_per_second", 0.0) > 0) {
      // Under mpirun with several ranks on the node: every rank ran the CPU
      // AdamW at once with its share of the cores, as offload plans run it.
      // The node's rate is what the time model divides between its processes.
      const json& a = m["cpu_adam_node"];
      const double one = p.cpu_adam_params_per_second;
      p.cpu_adam_params_per_second = a["node_params_per_second"].get<double>();
      if (one > 0 && a.value("processes_per_node", 1) > 1) {
        p.cpu_adam_params_per_second_one_process = one;
        set("cpu_adam_params_per_second_one_process", one,
            "one process alone with every core (the single-process figure above), for plans with one process on "
            "the node");
      }
      set("cpu_adam_params_per_second", p.cpu_adam_params_per_second,
          fmt::format("{} processes on the node at once, {} threads each, {}: {:.4g} parameters/s per process{}",
                      a.value("processes_per_node", 0), a.value("threads", 0), a.value("how", std::string()),
                      p.cpu_adam_params_per_second / std::max(1, a.value("processes_per_node", 1)),
                      one > 0 ? fmt::format("; one process alone with every core: {:.4g}/s", one) : std::string()));
    }
    if (!gpu || !m.contains("host_copies")) return;
    std::vector<double> rates;
    for (const auto& c : m["host_copies"])
      if (c.value("pinned", false)) rates.push_back(c["bytes"].get<double>() / c["seconds"].get<double>());
    if (rates.empty()) return;
    double mean = 0;
    for (double r : rates) mean += r / double(rates.size());
    const ClusterSpec one = parse_cluster("1x" + gpu->name);
    const double link = Topology(one, p).host_copy_Bps(1);
    const double eff = fraction(mean / link, "host_copy_efficiency", notes);
    if (eff > 0) {
      p.host_copy_efficiency = eff;
      set("host_copy_efficiency", eff,
          fmt::format("mean pinned H2D/D2H {:.4g} GB/s / the {} link's {:.4g} GB/s", mean / 1e9,
                      to_string(one.pcie.kind), link / 1e9));
    }
  }

  void memory() {
    if (m.contains("memory")) {
      const json& g = m["memory"];
      const int64_t total = g.value("total_bytes", int64_t(0));
      if (g.contains("probe")) {
        const int64_t got = g["probe"].value("reserved_bytes", int64_t(0)) + g["probe"].value("outside_allocator_bytes", int64_t(0));
        const int64_t cap = total > 0 ? std::min(total, got) : got;
        if (cap > 0) {
          p.gpu_memory_bytes = cap;
          set("gpu_memory_bytes", double(cap),
              fmt::format("what the caching allocator reserved before running out ({:.2f} GiB) + memory outside it "
                          "({:.2f} GiB); cudaMemGetInfo total {:.2f} GiB",
                          g["probe"].value("reserved_bytes", 0.0) / double(1 << 30),
                          g["probe"].value("outside_allocator_bytes", 0.0) / double(1 << 30), double(total) / double(1 << 30)));
        }
      }
      if (g.value("context_bytes", int64_t(-1)) >= 0) {
        p.context_bytes = g["context_bytes"].get<int64_t>();
        set("context_bytes", double(p.context_bytes),
            "memory outside the caching allocator after the GEMM and attention benchmarks (context, handles, kernels)");
      }
      if (g.value("workspace_bytes", int64_t(-1)) >= 0) {
        p.workspace_bytes = g["workspace_bytes"].get<int64_t>();
        set("workspace_bytes", double(p.workspace_bytes), "allocator bytes still allocated with no tensor alive");
      }
    }
    if (m.value("nccl_communicator_bytes", int64_t(-1)) >= 0) {
      p.nccl_communicator_bytes = m["nccl_communicator_bytes"].get<int64_t>();
      set("nccl_communicator_bytes", double(p.nccl_communicator_bytes),
          m.contains("nccl_send_recv_bytes")
              ? fmt::format("growth of memory outside the allocator across the first communicator's set-up and "
                            "its collectives (send/recv then added {:.0f} MiB)",
                            m["nccl_send_recv_bytes"].get<double>() / 1048576.0)
              : "growth of memory outside the allocator across the first communicator's set-up and first "
                "all-reduce (measured before the other collectives ran)");
    }
    if (m.value("nccl_pipe_link_bytes", int64_t(-1)) > 0) {
      p.nccl_pipe_link_bytes = m["nccl_pipe_link_bytes"].get<int64_t>();
      set("nccl_pipe_link_bytes", double(p.nccl_pipe_link_bytes),
          "growth of memory outside the allocator across the set-up and first send of the pipeline links of a "
          "two-stage ring (make_pipe_links, as the interleaved schedule makes them), per link of rank 0");
    }
  }

  // calibrate's compute loop with and without the collectives beside it
  // (calibration/measure_host.cpp measure_contention): the median slowdown over
  // the collectives measured, per second of overlap. GPU only: on the CPU the
  // MPI collectives share the cores, not SMs.
  // Tensor-parallel collectives between GEMMs (measure_tp_chain): the time
  // each adds beyond its own transfer, a line in the activation's bytes by
  // least squares over the points (a negative slope: the mean, flat). GPU
  // only: on the CPU the MPI collectives share the cores with the GEMMs.
  void tp_chain() {
    if (!m.contains("tp_chain") || !m["tp_chain"].is_array() || m["tp_chain"].empty()) return;
    std::vector<std::pair<double, double>> pts;  // (bytes, extra seconds)
    for (const auto& x : m["tp_chain"]) {
      const double b = x.value("bytes", 0.0), e = x.value("extra_seconds", std::nan(""));
      if (b > 0 && std::isfinite(e)) pts.push_back({b, e});
    }
    if (pts.empty()) return;
    double mb = 0, me = 0;
    for (auto [b, e] : pts) mb += b, me += e;
    mb /= double(pts.size()), me /= double(pts.size());
    double sbb = 0, sbe = 0;
    for (auto [b, e] : pts) sbb += (b - mb) * (b - mb), sbe += (b - mb) * (e - me);
    double slope = sbb > 0 ? sbe / sbb : 0;
    double at0 = me - slope * mb;
    if (slope < 0 || at0 < 0) {  // keep both non-negative: flat at the mean, or through zero
      if (slope < 0) slope = 0, at0 = me;
      else slope = std::max(0.0, me / mb), at0 = 0;
    }
    at0 = std::clamp(at0, 0.0, 1e-3);
    slope = std::clamp(slope, 0.0, 1e-9);
    const std::string how =
        fmt::format("{} tensor-parallel collectives between GEMMs (all-reduce, all-gather, reduce-scatter): (chain - "
                    "GEMMs - collectives alone) / calls, a line in bytes by least squares",
                    pts.size());
    if (!gpu) {
      notes.push_back(fmt::format("tp_collective_extra: the CPU's {:.3g} s + {:.3g} s/byte is not applied", at0, slope));
      return;
    }
    p.tp_collective_extra_seconds = at0;
    p.tp_collective_extra_seconds_per_byte = slope;
    set("tp_collective_extra_seconds", at0, how);
    set("tp_collective_extra_seconds_per_byte", slope, how);
  }

  void contention() {
    const std::vector<json> pts = contention_points(m, 0);
    const bool layers = !pts.empty() && pts.front().value("payload", "") == "layers";
    std::vector<double> v;
    for (const auto& x : pts) {
      const double s = x.value("slowdown", 0.0);
      if (std::isfinite(s) && s > 0) v.push_back(s);
    }
    if (v.empty()) return;
    const double s = std::clamp(median(v), 1.0, 3.0);
    if (!gpu) {
      notes.push_back(fmt::format("compute_slowdown_beside_comm: the CPU's {:.3f} is not applied (MPI shares the cores)", s));
      return;
    }
    p.compute_slowdown_beside_comm = s;
    set("compute_slowdown_beside_comm", s,
        layers ? fmt::format("median over {} chains of a decoder layer's backward, each layer followed by a collective "
                             "as a data-parallel backward queues them, of the slowdown that gives the chain's end "
                             "under the simulator's rules (chain_slowdowns_from)",
                             v.size())
               : fmt::format("median over {} collectives (64 MiB, queued on the communicator's stream) of 1 + (GEMM "
                             "and copy loop beside them - alone) / their overlap",
                             v.size()));
    // The collectives' own rate beside the compute (measured from the GPU's
    // events; absent from profiles measured before it was).
    std::vector<double> c;
    for (const auto& x : pts)
      if (x.contains("comm_slowdown") && x["comm_slowdown"].is_number()) {
        const double k = x["comm_slowdown"].get<double>();
        if (std::isfinite(k) && k > 0) c.push_back(k);
      }
    if (c.empty()) return;
    const double k = std::clamp(median(c), 1.0, HardwareProfile::kMaxCommSlowdown);
    p.comm_slowdown_beside_compute = k;
    set("comm_slowdown_beside_compute", k,
        layers ? fmt::format("median over {} such chains of the collectives' slowdown that gives their last end",
                             c.size())
               : fmt::format("median over {} collectives of the rate that gives their end beside the same loop: "
                             "slowed by it while it runs, at their own rate after (comm_slowdown_from)",
                             c.size()));
  }

  // After collectives() and contention(): the per-group-size table.
  void collective_table() {
    if (!gpu || !m.contains("collectives") || m["collectives"].empty() ||
        m["collectives"][0].value("backend", "") != "nccl")
      return;
    std::string how;
    if (const double net = fit_network_efficiency(m, *gpu, p, notes, how); net > 0) {
      p.network_efficiency = net;
      set("network_efficiency", net, how);
    }
    p.collective_groups = fit_collective_groups(m, *gpu, p, notes);
    if (!p.collective_groups.empty())
      fits["collective_groups"] = {
          {"value", collective_groups_to_json(p.collective_groups)},
          {"from", "per group size: each operation's model time between its smallest and largest size at the link's "
                   "datasheet rate / the measured difference; latency from the smallest all-reduce; slowdowns the "
                   "medians beside that group's collectives"}};
    annotate_collectives();
  }

  void collectives() {
    if (!m.contains("collectives") || m["collectives"].empty()) return;
    if (!gpu || m["collectives"][0].value("backend", "") != "nccl") {
      notes.push_back("collectives measured over MPI (CPU): kept as points, no link efficiency fitted");
      return;
    }
    const int W = m.value("ranks", 1);
    const ClusterSpec cluster = calibration_cluster(m, *gpu);
    auto groups_of = [&](int g) {
      std::vector<std::vector<int>> gs;
      for (int s = 0; s + g <= W; s += g) {
        gs.emplace_back();
        for (int r = s; r < s + g; ++r) gs.back().push_back(r);
      }
      return gs;
    };
    const bool nvlink = cluster.intra != IntraNode::PCIe;
    // The largest group's all-reduce: slope between the smallest and the largest size.
    const json* lo = nullptr;
    const json* hi = nullptr;
    int gmax = 0;
    // Groups inside one node: the link efficiency is the node's link's (across
    // nodes, the network's: fitted from send/recv between nodes below).
    for (const auto& c : m["collectives"])
      if (c["op"] == "all_reduce" && c.value("nodes", 1) == 1) gmax = std::max(gmax, c["group_size"].get<int>());
    for (const auto& c : m["collectives"]) {
      if (c["op"] != "all_reduce" || c["group_size"].get<int>() != gmax || c.value("nodes", 1) != 1) continue;
      if (!lo || c["bytes"].get<double>() < (*lo)["bytes"].get<double>()) lo = &c;
      if (!hi || c["bytes"].get<double>() > (*hi)["bytes"].get<double>()) hi = &c;
    }
    if (lo && hi && lo != hi) {
      HardwareProfile unit = p;
      unit.nvlink_efficiency = unit.pcie_efficiency = unit.network_efficiency = 1.0;
      const GroupLink g1 = Topology(cluster, unit).ring(groups_of(gmax), 0);
      const double S0 = (*lo)["bytes"].get<double>(), S1 = (*hi)["bytes"].get<double>();
      const double model_slope = all_reduce_seconds(S1, g1, 0) - all_reduce_seconds(S0, g1, 0);
      const double meas_slope = (*hi)["seconds"].get<double>() - (*lo)["seconds"].get<double>();
      const char* field = nvlink ? "nvlink_efficiency" : "pcie_efficiency";
      const double eff = meas_slope > 0 ? fraction(model_slope / meas_slope, field, notes) : 0;
      if (eff > 0) {
        (nvlink ? p.nvlink_efficiency : p.pcie_efficiency) = eff;
        set(field, eff,
            fmt::format("all-reduce over {} GPUs ({}): the model's time from {:.0f} B to {:.0f} MiB at full link "
                        "rate / the measured difference",
                        gmax, to_string(cluster.intra), S0, S1 / double(1 << 20)));
      }
      const GroupLink gf = Topology(cluster, p).ring(groups_of(gmax), 0);
      const double base = std::max(0.0, (*lo)["seconds"].get<double>() - all_reduce_seconds(S0, gf, 0));
      p.collective_base_latency_seconds = base;
      set("collective_base_latency_seconds", base,
          fmt::format("the {:.0f}-byte all-reduce over {} GPUs less the model's link latency and transfer", S0, gmax));
      // Each other operation's rate relative to the all-reduce's: the model's
      // slope between its smallest and largest size (at the rate just fitted,
      // relative 1) over the measured one, in the largest group (send/recv:
      // pairs).
      HardwareProfile rel_one = p;
      rel_one.reduce_scatter_relative = rel_one.all_gather_relative = rel_one.broadcast_relative =
          rel_one.send_recv_relative = 1;
      const Topology at_one(cluster, rel_one);
      struct Op {
        const char* name;
        double HardwareProfile::*field;
      };
      for (const Op& o : {Op{"reduce_scatter", &HardwareProfile::reduce_scatter_relative},
                          Op{"all_gather", &HardwareProfile::all_gather_relative},
                          Op{"broadcast", &HardwareProfile::broadcast_relative},
                          Op{"send_recv", &HardwareProfile::send_recv_relative}}) {
        const std::string op = o.name;
        const int g = op == "send_recv" ? 2 : gmax;
        const json* a = nullptr;
        const json* b = nullptr;
        for (const auto& c : m["collectives"]) {
          if (c["op"] != op || c["group_size"].get<int>() != g) continue;
          if (c.value("pair", "same_node") == "across_nodes") continue;  // across nodes: the network link, not this figure
          if (!a || c["bytes"].get<double>() < (*a)["bytes"].get<double>()) a = &c;
          if (!b || c["bytes"].get<double>() > (*b)["bytes"].get<double>()) b = &c;
        }
        if (!a || !b || a == b) continue;
        const double s0 = (*a)["bytes"].get<double>(), s1 = (*b)["bytes"].get<double>();
        auto model = [&](double S) {
          if (op == "send_recv") {
            std::vector<std::pair<int, int>> pairs;
            for (int s = 0; s + 1 < W; s += 2) pairs.push_back({s, s + 1});
            return send_recv_seconds(S, at_one.p2p(pairs, 0), 0);
          }
          const GroupLink gl = at_one.ring(groups_of(g), 0);
          return op == "reduce_scatter" ? reduce_scatter_seconds(S, gl, 0)
                 : op == "all_gather"   ? all_gather_seconds(S, gl, 0)
                                        : broadcast_seconds(S, gl, 0);
        };
        const double meas = (*b)["seconds"].get<double>() - (*a)["seconds"].get<double>();
        const double mod = model(s1) - model(s0);
        if (!(meas > 0 && mod > 0)) continue;
        const double rel = std::clamp(mod / meas, 0.2, 5.0);
        p.*(o.field) = rel;
        set(op + "_relative", rel,
            fmt::format("{} over {} GPUs: the model's time from {:.0f} B to {:.0f} MiB at the all-reduce's rate / "
                        "the measured difference",
                        op, g, s0, s1 / double(1 << 20)));
      }
    }
  }

  // The model's time for every measured point at the fitted profile (its
  // table and network efficiency included), with its error and bus rate.
  void annotate_collectives() {
    const int W = m.value("ranks", 1);
    const ClusterSpec cluster = calibration_cluster(m, *gpu);
    const Topology topo(cluster, p);
    auto blocks = [&](int g) {
      std::vector<std::vector<int>> gs;
      for (int s = 0; s + g <= W; s += g) {
        gs.emplace_back();
        for (int r = s; r < s + g; ++r) gs.back().push_back(r);
      }
      return gs;
    };
    for (auto& c : m["collectives"]) {
      const int g = c["group_size"].get<int>();
      const double S = c["bytes"].get<double>();
      const std::string op = c["op"].get<std::string>();
      const double base = p.collective_base_latency_seconds;
      double model;
      if (op == "send_recv") {
        std::vector<std::pair<int, int>> pairs;
        if (c.value("pair", "") == "across_nodes" && cluster.nodes > 1) {
          const int per = cluster.gpus_per_node;
          for (int n = 0; n + 1 < cluster.nodes; n += 2)
            for (int i = 0; i < per; ++i) pairs.push_back({n * per + i, (n + 1) * per + i});
        } else {
          for (int s = 0; s + 1 < W; s += 2) pairs.push_back({s, s + 1});
        }
        model = send_recv_seconds(S, topo.p2p(pairs, 0), base);
      } else {
        const GroupLink gl = topo.ring(blocks(g), 0);
        model = op == "all_reduce"       ? all_reduce_seconds(S, gl, base)
                : op == "reduce_scatter" ? reduce_scatter_seconds(S, gl, base)
                : op == "all_gather"     ? all_gather_seconds(S, gl, base)
                                         : broadcast_seconds(S, gl, base);
      }
      c["model_seconds"] = model;
      c["error_pct"] = pct_error(model, c["seconds"].get<double>());
      c["bus_GBps"] = S / c["seconds"].get<double>() / 1e9 *
                      (op == "all_reduce" ? 2.0 * (g - 1) / g : op == "send_recv" || op == "broadcast" ? 1.0
                                                                                                        : double(g - 1) / g);
    }
  }
};

HardwareProfile cpu_base(const json& m) {
  HardwareProfile p;
  p.gpu = "cpu";
  // Placeholders until the fits below replace them with the fastest measured rates.
  p.peak_fp32_flops = 1e12;
  p.memory_bandwidth_Bps = 1e11;
  p.sm_count = 1;  // no waves of thread blocks on a CPU
  p.flash_attention = true;
  (void)m;
  return p;
}

}  // namespace

std::optional<GpuSpec> match_gpu(const std::string& device_name) {
  std::string s = to_lower(device_name);
  for (char& ch : s)
    if (ch == ' ' || ch == '_') ch = '-';
  std::optional<GpuSpec> best;
  size_t best_len = 0;
  for (const auto& n : gpu_names()) {
    const GpuSpec& g = gpu_by_name(n);
    std::vector<std::string> keys = g.aliases;
    keys.push_back(to_lower(g.name));
    for (const auto& k : keys)
      if (k.size() > best_len && s.find(k) != std::string::npos) best = g, best_len = k.size();
  }
  return best;
}

HardwareProfile fit_profile(const nlohmann::json& measured, const GpuSpec* gpu) {
  if (!measured.is_object() || measured.value("format", "") != "planner-calibration")
    throw InputError("calibrate: not a calibration document (format 'planner-calibration')");
  Fitter f;
  f.gpu = gpu;
  f.m = measured;
  f.p = gpu ? datasheet_profile(*gpu) : cpu_base(measured);  // efficiencies over the datasheet, not over an earlier calibration
  // The runtime runs fp32 matmuls on TF32 tensor cores where there are some.
  if (gpu && gpu->peak_tf32 > 0) f.p.allow_tf32 = true;
  f.memory_kernels();
  f.kernel_overhead();
  f.gemms();
  f.attention();
  f.attention_window();
  f.in_step_classes();  // after the memory-bound and attention rates it scales
  f.host();
  f.moe_host();
  f.memory();
  f.collectives();
  f.contention();
  f.tp_chain();
  f.collective_table();
  if (!gpu && f.p.peak_fp32_flops <= 1e12 && !f.fits.contains("peak_fp32_flops"))
    f.notes.push_back("CPU: no fp32 GEMM measured; peak_fp32_flops is a placeholder");
  const json mach = measured.value("machine", json::object());
  f.p.source = fmt::format("planner calibrate, {}, on {} ({}){}; efficiencies = measured / {}", measured.value("created", ""),
                           gpu ? mach.value("gpu_name", gpu->name) : "the CPU: " + mach.value("cpu", std::string("?")),
                           mach.value("hostname", ""), measured.value("quick", false) ? ", quick sizes" : "",
                           gpu ? "the " + gpu->name + " datasheet (specs/gpu_catalog.cpp)" : "the fastest measured rate");
  json cal = f.m;
  cal["fits"] = f.fits;
  cal["fit_notes"] = f.notes;  // the measurement's own notes stay under "notes"
  cal["catalog_gpu"] = gpu ? json(gpu->name) : json(nullptr);
  f.p.calibration = std::make_shared<const json>(std::move(cal));
  f.p.validate();
  return f.p;
}

std::string calibration_table(const HardwareProfile& p) {
  std::string out = fmt::format("Profile for {}: {}\n", p.gpu, p.source);
  if (!p.calibration) return out + "(not calibrated)\n";
  const json& c = *p.calibration;
  out += fmt::format("{:<34} {:>14}  {}\n", "field", "value", "from");
  const json fits = c.value("fits", json::object());
  for (const auto& [k, v] : fits.items()) {
    if (k == "collective_groups" && v.contains("value") && v["value"].is_array()) {
      out += fmt::format("{:<34} {:>14}  {}\n", k, fmt::format("{} sizes", v["value"].size()), v.value("from", ""));
      for (const auto& r : v["value"])
        out += fmt::format("  {:>4} GPUs ({}): all-reduce {:.3f}, reduce-scatter {:.3f}, all-gather {:.3f}, broadcast "
                           "{:.3f} of the link; latency {:.1f} us; compute beside {:.3f}x, collectives beside {:.3f}x\n",
                           r.value("group_size", 0), r.value("link", ""), r.value("all_reduce_efficiency", 0.0),
                           r.value("reduce_scatter_efficiency", 0.0), r.value("all_gather_efficiency", 0.0),
                           r.value("broadcast_efficiency", 0.0), r.value("base_latency_seconds", 0.0) * 1e6,
                           r.value("compute_slowdown_beside_comm", 1.0), r.value("comm_slowdown_beside_compute", 1.0));
      continue;
    }
    if (v.contains("value") && v["value"].is_array()) {  // a table: one line per point
      out += fmt::format("{:<34} {:>14}  {}\n", k, fmt::format("{} points", v["value"].size()), v.value("from", ""));
      for (const auto& r : v["value"]) {
        const bool window = r.contains("window");
        out += fmt::format("  {:<6} head dim {:>4}, {} {:>6}: forward {:.4f}, backward {:.4f} ({} cases)\n",
                           r.value("precision", window ? "16-bit" : ""), r.value("head_dim", 0), window ? "window" : "seq",
                           r.value(window ? "window" : "seq", 0), r.value("forward", 0.0), r.value("backward", 0.0),
                           r.value("cases", 0));
      }
      continue;
    }
    const double x = v.value("value", 0.0);
    std::string val = fmt::format("{:.4g}", x);
    if (k.find("bytes") != std::string::npos) val = format_bytes(x);
    out += fmt::format("{:<34} {:>14}  {}\n", k, val, v.value("from", ""));
  }
  for (const char* key : {"notes", "fit_notes"}) {
    const json notes = c.value(key, json::array());
    for (const auto& n : notes) out += "note: " + n.get<std::string>() + "\n";
  }
  // How well the fitted model reproduces the measured points.
  auto spread = [&](const char* key, const char* err) {
    std::vector<double> e;
    const json points = c.value(key, json::array());
    for (const auto& x : points)
      if (x.contains(err)) e.push_back(std::abs(x[err].get<double>()));
    if (e.empty()) return;
    out += fmt::format("model vs measured, {} ({} points): mean |error| {:.1f}%, worst {:.1f}%\n", key, e.size(),
                       std::accumulate(e.begin(), e.end(), 0.0) / double(e.size()), *std::max_element(e.begin(), e.end()));
  };
  spread("gemm", "error_pct");
  spread("attention", "forward_error_pct");
  spread("memory_kernels", "error_pct");
  spread("collectives", "error_pct");
  return out;
}

}  // namespace planner

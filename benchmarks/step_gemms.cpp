// Where does a training step's GEMM time differ from calibrate's? The same
// GEMMs timed five ways on one GPU, for a model of a few layers:
//
//   step        the executor's forward + backward (Engine::compute_pass: the
//               step program's F and B actions) under the Kineto profiler:
//               the GEMM kernels' summed durations (what exec --kernels reports)
//   replay      the captured GEMMs (calibration/measure_detail.hpp capture_ops),
//               called as the step called them (mm, addmm with its bias, addmm_
//               into its accumulator), in the step's order, back to back,
//               under the profiler
//   replay-mm   the same GEMMs in the same order as mm_out (calibrate's call)
//   random-mm   the same in order on random normal operands
//   alone       each GEMM as calibrate times a shape: interleaved with a
//               memory-bound copy of its own duration, CUDA events, the median
//               call; summed over the captured GEMMs
//
//   step_gemms [--model gpt-neo-1.3b|opt-1.3b|tinyllama] [--layers N]
//              [--precision bf16|fp16|fp32] [--mbs N] [--seq N] [--reps N]
//              [--seconds S] [--json FILE]
//
// --seconds S: each way first runs unrecorded for S seconds (default 0), so
// that it is timed in the GPU's sustained state (its clock under the power
// limit) rather than in a burst after a pause.
//
// Prints one line per way with the summed GEMM seconds and the ratio to
// `step`, and the GEMM kernels by name for step and replay-mm; --json writes
// all of it with the wall-clock time of each phase (to line up with a clock
// and power log).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "specs/model_spec.hpp"
#include "benchmarks/bench_args.hpp"
#include "calibration/measure_detail.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_profile.hpp"
#include "runtime/engine.hpp"
#include "runtime/run_config.hpp"

using namespace planner;
using namespace planner::rt;
using nlohmann::json;

namespace {

[[noreturn]] void usage_error(const std::string& what) { bench::usage_error("step_gemms", what); }

int64_t parse_int(const char* s, const char* flag) { return bench::parse_positive_int("step_gemms", s, flag); }

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

json gemm_rows(const KernelProfile& p) {
  json rows = json::array();
  for (const auto& k : p.kernels)
    if (k.cls == KernelClass::Gemm) rows.push_back({{"name", k.name}, {"count", k.count}, {"seconds", k.seconds}});
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt-neo-1.3b", prec = "bf16", json_path;
  int64_t layers = 4, mbs = 4, seq = 2048, reps = 3;
  double warm_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--layers") layers = parse_int(next(), "--layers");
    else if (a == "--precision") prec = next();
    else if (a == "--mbs") mbs = parse_int(next(), "--mbs");
    else if (a == "--seq") seq = parse_int(next(), "--seq");
    else if (a == "--reps") reps = parse_int(next(), "--reps");
    else if (a == "--json") json_path = next();
    else if (a == "--seconds") {
      const char* v = next();
      char* end = nullptr;
      warm_seconds = std::strtod(v, &end);
      if (!end || *end || !(warm_seconds >= 0) || warm_seconds > 600) usage_error("--seconds needs 0..600, got '" + std::string(v) + "'");
    }
    else if (a == "-h" || a == "--help") {
      std::printf("step_gemms [--model gpt-neo-1.3b|opt-1.3b|tinyllama] [--layers N] [--precision bf16|fp16|fp32]\n"
                  "           [--mbs N] [--seq N] [--reps N] [--seconds S] [--json FILE]\n");
      return 0;
    } else usage_error("unknown argument '" + a + "'");
  }
  if (prec != "bf16" && prec != "fp16" && prec != "fp32") usage_error("--precision must be bf16, fp16 or fp32");
  ModelSpec spec;
  if (model == "tinyllama") {
    spec = model_preset("llama-2-7b");
    spec.hidden = 2048, spec.heads = 32, spec.kv_heads = 4, spec.ffn = 5632;
  } else if (model == "gpt-neo-1.3b" || model == "opt-1.3b") {
    spec = model_preset(model);
  } else {
    usage_error("--model must be gpt-neo-1.3b, opt-1.3b or tinyllama");
  }
  spec.layers = layers;
  std::ofstream jf;
  if (!json_path.empty()) {
    jf.open(json_path);
    if (!jf) usage_error("cannot write " + json_path);
  }
  if (!cuda_available()) usage_error("no CUDA GPU: the five ways differ only on a GPU");
  const at::Device dev(at::kCUDA, 0);
  at::globalContext().setFloat32MatmulPrecision("high");
  calib::Ctx c;
  c.cuda = true;
  c.device = dev;
  c.progress = false;
  Strategy st;
  st.precision = prec == "bf16" ? Precision::BF16 : prec == "fp16" ? Precision::FP16 : Precision::FP32;
  st.mbs = int(mbs), st.gas = 1;
  const RunConfig cfg = make_run_config(spec, st, seq);
  json out = {{"model", model}, {"layers", layers}, {"precision", prec}, {"mbs", mbs}, {"seq", seq}};
  json phases = json::array();
  auto phase = [&](const std::string& name) { phases.push_back({{"phase", name}, {"unix", now_unix()}}); };

  Engine tr(cfg, dev, std::make_shared<SyntheticTokens>(spec.vocab, cfg.options.seed), nullptr);
  tr.step(0);
  tr.step(1);
  synchronize(true);

  // Runs fn unrecorded for --seconds (the sustained state).
  auto sustain = [&](const std::function<void()>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < warm_seconds) {
      fn();
      synchronize(true);
    }
  };
  // step: the forward + backward under the profiler.
  phase("step");
  sustain([&] {
    tr.zero_grad();
    const int64_t batch_step = 2;
    tr.compute_pass(batch_step, 0);
  });
  std::vector<double> step_s;
  KernelProfile step_prof;
  for (int64_t r = 0; r < reps; ++r) {
    tr.zero_grad();
    const int64_t batch_step = 2 + r;
    synchronize(true);
    KernelRecorder rec;
    rec.start();
    tr.compute_pass(batch_step, 0);
    synchronize(true);
    step_prof = rec.stop();
    step_s.push_back(step_prof.gemm_seconds);
  }
  // The GEMMs of one more forward + backward.
  calib::Captured cap;
  {
    tr.zero_grad();
    const int64_t batch_step = 2 + reps;
    calib::capture_ops(cap, [&] {
      tr.compute_pass(batch_step, 0);
      synchronize(true);
    });
  }
  empty_cache(true);
  std::vector<at::Tensor> outs, ra, rb;
  for (const auto& g : cap.gemms) {
    outs.push_back(at::empty({g.a.size(0), g.b.size(1)}, g.a.options()));
    ra.push_back(at::randn_like(g.a, at::MemoryFormat::Preserve));
    rb.push_back(at::randn_like(g.b, at::MemoryFormat::Preserve));
  }
  auto profiled = [&](const std::string& name, const std::function<void()>& seq_fn, KernelProfile* keep) {
    phase(name);
    seq_fn();  // warm-up
    synchronize(true);
    sustain(seq_fn);
    std::vector<double> s;
    for (int64_t r = 0; r < reps; ++r) {
      KernelRecorder rec;
      rec.start();
      seq_fn();
      synchronize(true);
      KernelProfile p = rec.stop();
      s.push_back(p.gemm_seconds);
      if (keep) *keep = p;
    }
    return median(s);
  };
  KernelProfile replay_mm_prof;
  const double replay = profiled("replay", [&] {
    for (const auto& g : cap.gemms) calib::replay_gemm(g);
  }, nullptr);
  const double replay_mm = profiled("replay-mm", [&] {
    for (size_t i = 0; i < cap.gemms.size(); ++i) at::mm_out(outs[i], cap.gemms[i].a, cap.gemms[i].b);
  }, &replay_mm_prof);
  const double random_mm = profiled("random-mm", [&] {
    for (size_t i = 0; i < cap.gemms.size(); ++i) at::mm_out(outs[i], ra[i], rb[i]);
  }, nullptr);
  // alone: calibrate's method per GEMM (the Filler copy of its own duration).
  phase("alone");
  at::Tensor src = at::randn({int64_t(1) << 26}, at::TensorOptions().device(dev).dtype(at::kBFloat16));
  at::Tensor dst = at::empty_like(src);
  const double per_el = calib::time_per_call(c, [&] { dst.copy_(src); }) / double(src.numel());
  double alone = 0;
  for (size_t i = 0; i < cap.gemms.size(); ++i) {
    auto fn = [&] { at::mm_out(outs[i], cap.gemms[i].a, cap.gemms[i].b); };
    const double t1 = calib::time_per_call(c, fn, 0.004);
    const int64_t n = std::clamp<int64_t>(int64_t(t1 / per_el), 1 << 16, src.numel());
    at::Tensor s = src.narrow(0, 0, n), d = dst.narrow(0, 0, n);
    const int calls = int(std::clamp(0.05 / (2 * t1), 10.0, 1000.0));
    IntervalTimer t(true);
    for (int k = 0; k < calls; ++k) {
      t.start();
      fn();
      t.stop();
      d.copy_(s);
    }
    alone += median(t.seconds());
  }
  phase("end");
  const double step = median(step_s);
  std::printf("%s, %lld layers, %s, %lld x %lld tokens: %zu GEMMs per forward + backward\n", model.c_str(),
              (long long)layers, prec.c_str(), (long long)mbs, (long long)seq, cap.gemms.size());
  for (auto [name, v] : std::vector<std::pair<const char*, double>>{
           {"step", step}, {"replay", replay}, {"replay-mm", replay_mm}, {"random-mm", random_mm}, {"alone", alone}})
    std::printf("  %-10s %9.4f s  %6.3f x step\n", name, v, v / step);
  std::printf("GEMM kernels in the step:\n");
  for (const auto& k : step_prof.kernels)
    if (k.cls == KernelClass::Gemm)
      std::printf("  %5lld  %8.4f s  %s\n", (long long)k.count, k.seconds, k.name.substr(0, 110).c_str());
  std::printf("GEMM kernels of replay-mm:\n");
  for (const auto& k : replay_mm_prof.kernels)
    if (k.cls == KernelClass::Gemm)
      std::printf("  %5lld  %8.4f s  %s\n", (long long)k.count, k.seconds, k.name.substr(0, 110).c_str());
  out["gemms"] = cap.gemms.size();
  out["seconds"] = {{"step", step}, {"replay", replay}, {"replay_mm", replay_mm}, {"random_mm", random_mm}, {"alone", alone}};
  out["step_reps"] = step_s;
  out["step_kernels"] = gemm_rows(step_prof);
  out["replay_mm_kernels"] = gemm_rows(replay_mm_prof);
  out["phases"] = phases;
  if (jf) jf << out.dump(1) << "\n";
  return 0;
}

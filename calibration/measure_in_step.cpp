// planner calibrate: GEMMs and attention as a training step runs them, against
// the same kernels timed as calibrate times its points (calibration/measure.hpp).
//
// Why: a data-center GPU trains at its power limit, and its clock then
// depends on the mix of kernels it runs. On an H100 (700 W; validation/h100/
// in-step), the GEMMs of a few-layer model's training step, sustained for
// seconds, ran at about 1725 MHz; the same GEMMs back to back at about 1365
// MHz, and timed as calibrate times its points (each interleaved with a
// memory-bound copy, the median call) 14-18% slower than in the step. A
// step's norms, activations, attention and launch gaps draw less power than
// GEMMs, which then run at a higher clock. (The operands' values do not
// explain it: the same GEMMs on the step's own operands and on random normal
// ones of the same shapes ran within 1% of each other, median over 45 GEMMs
// per precision.)
//
// How: for each model family the runtime executes (a GPT-style decoder with
// GELU, an OPT-style one with ReLU, a LLaMA-style one with SwiGLU and
// grouped-query attention; eight layers each at calibrate's GEMM width 2048,
// and 24 for 16-bit on a GPU, fewer on a GPU too small for them, 4 x 2048
// tokens) and each precision, a
// the runtime's executor (the Engine, one process) walks the step program
// for two optimizer steps on the synthetic tokens `planner exec` trains on,
// then the program's forward and backward actions alone
// (Engine::compute_pass) back to back for four seconds unrecorded (the
// sustained state), then four more under the Kineto profiler
// while the GPU still runs the queued ones (runtime/kernel_profile.hpp: the
// GEMM and attention kernels' summed durations over the last three, per pass;
// three single passes after a pause are kept beside them), then one more
// under a RecordFunction observer that copies the
// operands of each distinct GEMM (aten::mm, addmm, addmm_; counting the calls)
// and of the first fused attention. Each distinct GEMM is then timed as
// calibrate times its shapes (mm_out interleaved with a copy of its own
// duration, the median call) and the attention as measure_attention does
// (forward + backward, the fastest batch of calls). The fit
// (costmodel/calibration.cpp) scales the GPU's GEMM rate per precision by the
// median ratio, calibrate's time over the step's (the attention's ratio is
// kept, not applied: calibration.cpp says why), and the attention by its
// summed time in the recorded passes over the layer model's for the same
// model (each row carries the model's spec, mbs and seq for it; the
// memory-bound kernels' sum is compared the same way and kept).
// Why eight layers: with two the vocabulary head and its loss are half the
// step, and their low-power mix can raise the clock (benchmarks/step_gemms on
// one H200: 1.17-1.18 with two layers, 1.12-1.15 with 6 to 24;
// validation/archive/h200/in-step-depth). This part's own eight-layer ratios on two
// H200s stayed at 1.17-1.19 (validation/archive/h200x2/calib13).
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <tuple>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "specs/model_spec.hpp"
#include "calibration/measure_detail.hpp"
#include "calibration/measure_in_step.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_profile.hpp"
#include "runtime/model/fp8_linear.hpp"
#include "runtime/engine.hpp"
#include "runtime/run_config.hpp"

namespace planner::rt::calib {

namespace {

using nlohmann::json;

struct Family {
  std::string label;
  ModelSpec spec;
};

// Each family the runtime executes at calibrate's GEMM width 2048
// (measure_compute.cpp): gpt-neo-1.3b's layers (GELU, 16 heads of 128),
// opt-1.3b's (ReLU, 32 heads of 64) and TinyLlama's (SwiGLU 5632, 32 heads of
// 64 with 4 kv heads); measure_in_step sets the depth. Quick: 64 wide.
std::vector<Family> families(bool quick) {
  std::vector<Family> f;
  ModelSpec gpt = model_preset("gpt-neo-1.3b"), opt = model_preset("opt-1.3b"), llama = model_preset("llama-2-7b");
  llama.hidden = 2048, llama.heads = 32, llama.kv_heads = 4, llama.ffn = 5632;
  if (quick) {
    for (ModelSpec* s : {&gpt, &opt, &llama}) s->hidden = 64, s->heads = 4, s->kv_heads = 4, s->ffn = 256, s->vocab = 512;
    llama.kv_heads = 2, llama.ffn = 176;
  }
  f.push_back({"gpt-neo-1.3b", gpt});
  f.push_back({"opt-1.3b", opt});
  f.push_back({"tinyllama-1.1b", llama});
  for (auto& x : f) x.spec.validate();
  return f;
}

}  // namespace

namespace {

// What the recorded passes of one model give (GPU only; empty on the CPU).
struct InStep {
  std::vector<double> paused_gemm, paused_attention, paused_memory;
  KernelProfile sustained;  // the gap-free passes, summed
  int sustained_passes = 0;
  bool sliced = false;
};

// The model of one row: a family at a depth, in a precision.
struct RowModel {
  Family fam;
  Strategy st;  // one process: mbs sequences, one micro-batch
  int64_t seq = 0;
};

// The recorded passes on the GPU: kPasses back to back while the GPU still
// runs the queued ones (their gradients accumulate, as a step's
// micro-batches' do; the last kPasses - 1 of them, split by the kernel count
// of one pass, followed a pass without a gap), then three single passes after
// a pause (the zeroing ends before each).
void record_passes(Engine& eng, const std::function<void()>& pass, InStep& out) {
  constexpr int kPasses = 4;
  std::vector<KernelEvent> events;
  {
    KernelRecorder rec;
    rec.start();
    for (int r = 0; r < kPasses; ++r) pass();
    synchronize(true);
    events = rec.stop_events();
  }
  int64_t per_pass = 0;
  for (int r = 0; r < 3; ++r) {
    eng.zero_grad();
    synchronize(true);
    KernelRecorder rec;
    rec.start();
    pass();
    synchronize(true);
    const KernelProfile kp = rec.stop();
    out.paused_gemm.push_back(kp.gemm_seconds);
    out.paused_attention.push_back(kp.attention_seconds);
    out.paused_memory.push_back(kp.memory_seconds);
    per_pass = kp.launches;
  }
  const size_t keep = size_t(per_pass) * (kPasses - 1);
  out.sliced = per_pass > 0 && events.size() >= keep;
  if (out.sliced) events.erase(events.begin(), events.end() - std::ptrdiff_t(keep));
  out.sustained = summarize_kernels(events);
  out.sustained_passes = out.sliced ? kPasses - 1 : kPasses;
}

// One model through the runtime's executor: the Engine walks the step
// program of one process (dp = tp = pp = 1, ZeRO-0, one micro-batch) for two
// whole optimizer steps, then its forward and backward actions alone
// (Engine::compute_pass: the handlers `planner exec` runs, without the step's
// reductions and optimizer) back to back for `sustain_seconds` unrecorded
// (the sustained state), then recorded (GPU), then once more under the
// operand observer.
void run_model(const Ctx& c, const RowModel& m, double sustain_seconds, InStep& out, Captured& cap) {
  const RunConfig cfg = make_run_config(m.fam.spec, m.st, m.seq);
  Engine eng(cfg, c.device, std::make_shared<SyntheticTokens>(m.fam.spec.vocab, cfg.options.seed), nullptr);
  eng.step(0);
  eng.step(1);
  synchronize(c.cuda);
  int64_t k = 0;
  // One forward and backward of a fresh micro-batch (steps 2..5 in turn).
  auto pass = [&] { eng.compute_pass(2 + k++ % 4, 0); };
  // The passes back to back, as a training step runs its micro-batches: no
  // host synchronisation between them, so the GPU never waits. (A GPU that
  // sat idle resumes at a higher clock for a while:
  // validation/archive/h200x2-3d/run11's pipeline stage 0 ran the
  // micro-batches after its bubble up to 8% faster than the later ones. Until
  // 2026-11-26 this part recorded single passes after a host synchronisation
  // and the profiler's start; those are kept as *_after_pause_seconds.)
  const auto t0 = std::chrono::steady_clock::now();
  do {
    eng.zero_grad();
    pass();
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < sustain_seconds);
  if (c.cuda) record_passes(eng, pass, out);
  eng.zero_grad();
  capture_ops(cap, [&] {
    pass();
    synchronize(c.cuda);
  });
}

void clear(Captured& cap) {
  cap.gemms.clear(), cap.attention.clear(), cap.attention_grads.clear();
  cap.attention_calls = 0;
}

// run_model at `m`'s depth, halved on running out of memory down to two
// layers (m.fam.spec.layers is the depth that ran).
void run_fitting(const Ctx& c, RowModel& m, double sustain_seconds, InStep& out, Captured& cap) {
  for (int64_t layers = m.fam.spec.layers;; layers /= 2) {
    m.fam.spec.layers = layers;
    out = InStep{};
    clear(cap);
    try {
      run_model(c, m, sustain_seconds, out, cap);
      return;
    } catch (const c10::OutOfMemoryError&) {
      clear(cap);
      empty_cache(c.cuda);
      if (layers <= 2) throw;
      say(c, std::string("in a step ") + to_string(m.st.precision) + " " + m.fam.label + ": out of memory with " +
                 std::to_string(layers) + " layers, trying " + std::to_string(layers / 2));
    }
  }
}

// The GPU's figures of the recorded passes, per pass.
void add_step_times(const InStep& in, json& row) {
  InStep x = in;
  const double n = double(x.sustained_passes);
  row["step_gemm_seconds"] = x.sustained.gemm_seconds / n;
  row["step_attention_seconds"] = x.sustained.attention_seconds / n;
  // Every other kernel of the pass (norms, activations, residuals, the
  // loss): the fit compares it with the layer model's memory-bound time
  // for the same model.
  row["step_memory_bound_seconds"] = x.sustained.memory_seconds / n;
  // The GPU's idle time between those passes' kernels, per pass.
  row["step_idle_seconds"] = x.sustained.idle_seconds() / n;
  row["step_passes"] = x.sustained_passes;
  row["step_passes_sliced"] = x.sliced;  // false: the whole recording over all its passes
  // The single passes after a pause: the median one.
  std::sort(x.paused_gemm.begin(), x.paused_gemm.end());
  std::sort(x.paused_attention.begin(), x.paused_attention.end());
  std::sort(x.paused_memory.begin(), x.paused_memory.end());
  row["step_gemm_after_pause_seconds"] = x.paused_gemm[x.paused_gemm.size() / 2];
  row["step_attention_after_pause_seconds"] = x.paused_attention[x.paused_attention.size() / 2];
  row["step_memory_bound_after_pause_seconds"] = x.paused_memory[x.paused_memory.size() / 2];
  // The kernel profile counts the fused backward's helper kernels as
  // attention (runtime/kernel_profile.cpp), as the layer model does.
  row["attention_with_helpers"] = true;
}

// One row: the model run, its GEMMs and attention timed alone.
json measure_row(const Ctx& c, const RowModel& m, const InStep& in, const Captured& cap, const Filler* filler) {
  double alone_gemm = 0, alone_attention = 0;
  int64_t calls = 0;
  json shapes = time_gemms(c, cap, filler, alone_gemm, calls);
  json attention = time_attention(c, cap, alone_attention);
  const std::string p = to_string(m.st.precision);
  json row = {{"precision", p},
              {"model", m.fam.label},
              {"layers", m.fam.spec.layers},
              {"tokens", m.st.mbs * m.seq},
              {"mbs", m.st.mbs},
              {"seq", m.seq},
              {"spec", m.fam.spec},
              {"gemms", calls},
              {"shapes", shapes},
              {"attention", attention},
              {"alone_gemm_seconds", alone_gemm},
              {"alone_attention_seconds", alone_attention}};
  if (c.cuda) add_step_times(in, row);
  auto ms = [&](const char* key) { return fmt_num(row[key].get<double>() * 1e3); };
  say(c, "in a step " + p + " " + m.fam.label + " (" + std::to_string(m.fam.spec.layers) + " layers): " +
             std::to_string(calls) + " GEMMs " +
             (c.cuda ? ms("step_gemm_seconds") + " ms in the step (" + ms("step_gemm_after_pause_seconds") +
                           " after a pause), "
                     : std::string()) +
             fmt_num(alone_gemm * 1e3) + " ms as calibrate times them; attention " +
             (c.cuda ? ms("step_attention_seconds") + " ms in the step, " : std::string()) +
             fmt_num(alone_attention * 1e3) + " ms" +
             (c.cuda ? "; memory-bound " + ms("step_memory_bound_seconds") + " ms" : std::string()));
  return row;
}

}  // namespace

json measure_in_step(const Ctx& c) {
  json out = json::array();
  std::vector<Precision> precisions = c.cuda ? std::vector<Precision>{Precision::BF16, Precision::FP16, Precision::FP32}
                                             : std::vector<Precision>{Precision::FP32};
  // precision=fp8 where the GPU runs FP8 GEMMs: its layers' GEMMs in a step
  // against calibrate's timing of the same at::_scaled_mm calls, for
  // gemm_efficiency_fp8's in-step factor (FP8 GEMMs draw more power than
  // bf16's: their points alone do not say how fast they run between a
  // step's other kernels).
  if (c.cuda && fp8_gemm_available(c.device)) precisions.push_back(Precision::FP8);
  // The memory-bound copy that comes between calibrate's GEMMs.
  std::unique_ptr<Filler> filler;
  if (c.cuda) filler = std::make_unique<Filler>(c);
  // Four seconds: the board's power reading reaches the cap about a second
  // into a sustained run and the temperature still rises seconds later
  // (validation/archive/h200/in-step-depth/clocks.csv), the state a training step
  // runs in. (Measured on two H200s, the ratios after one second and after
  // four were the same within 1%: validation/archive/h200x2/calib13-try1, calib13.)
  const double sustain_seconds = c.quick ? 0.0 : 4.0;
  // Deep enough that the layers, not the vocabulary head and its loss, set
  // the kernel mix (see the top of this file). Halved down to two on a GPU
  // too small for eight.
  const int64_t deepest = c.quick ? 2 : 8;  // quick: two, so that the layers repeat their GEMMs
  // The 16-bit models also at 24 layers, the depth of the models people
  // train: the fit takes each model's deepest row for the GEMM rate and the
  // attention, and the difference between the two depths for the layers'
  // memory-bound kernels (the vocabulary head and loss cancel out of it).
  auto depths_of = [&](Precision pr) {
    return c.cuda && !c.quick && pr != Precision::FP32 ? std::vector<int64_t>{deepest, 24}
                                                        : std::vector<int64_t>{deepest};
  };
  for (const Family& base : families(c.quick)) {
    for (Precision pr : precisions) {
      int64_t done_layers = 0;  // the depth of the row before (a smaller GPU halves them)
      for (int64_t depth : depths_of(pr)) {
        RowModel m{base, Strategy{}, c.quick ? 32 : 2048};
        m.st.precision = pr;
        m.st.mbs = c.quick ? 2 : 4;
        m.st.gas = 1;
        m.fam.spec.layers = depth;
        Captured cap;
        cap.distinct = true;  // one copy per GEMM shape: a deep model's capture costs about a layer's memory
        InStep in;
        run_fitting(c, m, sustain_seconds, in, cap);
        empty_cache(c.cuda);
        if (m.fam.spec.layers > done_layers) {  // else halved down to a depth already measured
          done_layers = m.fam.spec.layers;
          out.push_back(measure_row(c, m, in, cap, filler.get()));
        }
        clear(cap);
        empty_cache(c.cuda);
      }
    }
  }
  return out;
}

}  // namespace planner::rt::calib

// planner calibrate under mpirun: compute beside the collectives, both ways,
// and the tensor-parallel collectives between GEMMs, over one communicator
// (calibration/measure_detail.hpp; called per group size by
// calibration/measure_collectives.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/simulator.hpp"
#include "calibration/measure_detail.hpp"
#include "runtime/device.hpp"
#include "runtime/buffers/streams.hpp"
#include "runtime/model/transformer.hpp"

namespace planner::rt::calib {

namespace {

using nlohmann::json;

// Compute beside NCCL (every rank of `comm` at once, GPU): a loop of GEMMs
// (16384 x 8192 x 2048 bf16, a transformer MLP's) each followed by a copy,
// timed alone (CUDA events on the compute stream, the faster of two), then
// with `calls` collectives of 64 MiB queued on the communicator's stream just
// before it; and the collectives alone. Both sides slow down:
//  - the collectives, measured from the compute's start to their end (an event
//    on a side stream that waits for them): while the compute runs they
//    progress at 1/comm_slowdown of their own rate, after it at their own
//    (comm_slowdown_beside_compute, the inverse of the simulator's rule);
//  - the compute, for the time the two overlap:
//    slowdown = 1 + (with - alone) / min(alone, collectives' time beside it).
// On the CPU (MPI) the collectives' time beside the compute is not measured.
// Each figure's largest over the ranks of `comm` (every rank calls at once):
// what every rank must size its calls by.
std::vector<double> slowest_rank(const Ctx& c, Communicator& comm, const std::vector<double>& mine) {
  const int g = comm.size();
  const int64_t n = int64_t(mine.size());
  at::Tensor t = at::tensor(mine, at::TensorOptions().dtype(at::kDouble)).to(c.device);
  at::Tensor all = at::empty({g * n}, t.options());
  comm.all_gather(t, all)->wait();
  synchronize(c.cuda);
  const at::Tensor worst = all.view({g, n}).amax(0).cpu();
  std::vector<double> out(mine.size());
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = worst[i].item<double>();
  return out;
}

struct ContentionRig {
  const Ctx& c;
  Communicator& comm;
  at::Tensor x, w, y, src, dst;
  int loops = 0;
  std::optional<SideStream> side;
  int64_t bytes = 0;
  // NCCL runs a communicator's collectives one after another on its stream:
  // one buffer serves them all. MPI may run its non-blocking ones at once:
  // each gets its own (small, quick sizes).
  std::vector<at::Tensor> fulls, parts;

  ContentionRig(const Ctx& ctx, Communicator& cm) : c(ctx), comm(cm) {
    // The CPU (MPI, quick sizes in CI) runs the same code on fp32, small.
    const auto opt = at::TensorOptions().device(c.device).dtype(c.cuda ? at::kBFloat16 : at::kFloat);
    const int64_t T = c.quick ? 256 : 16384, h = c.quick ? 64 : 2048;
    x = at::randn({T, h}, opt), w = at::randn({4 * h, h}, opt), y = at::empty({T, 4 * h}, opt);
    src = at::randn({T * h}, opt), dst = at::empty_like(src);
    loops = c.quick ? 4 : 40;  // about 35 ms on an H100; the same on every rank
    if (c.cuda) side.emplace(true);
    bytes = c.quick ? int64_t(64) << 10 : int64_t(64) << 20;
  }
  void compute() {
    for (int i = 0; i < loops; ++i) {
      at::mm_out(y, x, w.t());
      dst.copy_(src);
    }
  }
  std::pair<at::Tensor, at::Tensor> buffers(int i) {
    const size_t k = c.cuda ? 0 : size_t(i);
    const int64_t n = bytes / 4;  // floats
    const auto fopt = at::TensorOptions().device(c.device).dtype(at::kFloat);
    while (fulls.size() <= k) fulls.push_back(at::ones({n}, fopt)), parts.push_back(at::ones({n / comm.size()}, fopt));
    return {fulls[k], parts[k]};
  }
  // The compute loop's time (the faster of two), with the collectives that
  // `before` queues running beside it; they are waited for after each.
  // Returns the compute's time and (GPU, with collectives) the collectives'
  // end after the compute's start, of the faster of the two runs.
  std::pair<double, double> timed(const std::function<std::vector<WorkPtr>()>& before) {
    std::pair<double, double> best{1e30, -1};
    for (int r = 0; r < 2; ++r) {
      comm.barrier();
      IntervalTimer t(c.cuda), tc(c.cuda);
      std::vector<WorkPtr> works;
      if (before) works = before();
      t.start();
      const bool comm_end = c.cuda && !works.empty();
      if (comm_end) {
        tc.start();
        // The side stream waits for the two starts only, then for the collectives.
        side->run([&] {
          for (auto& wk : works) wk->wait();
          tc.stop();
        });
      }
      compute();
      t.stop();
      const double s = t.seconds().at(0);
      if (s < best.first) best = {s, comm_end ? tc.seconds().at(0) : -1.0};
      for (auto& wk : works) wk->wait();
      synchronize(c.cuda);
    }
    return best;
  }
  // Every rank must queue the same number of collectives: as many as take
  // about as long as the compute on the slowest rank.
  int calls_like_compute(double per_call, double alone) {
    const auto worst = slowest_rank(c, comm, {per_call, alone});
    return int(std::clamp(worst[1] / std::max(worst[0], 1e-6), 4.0, 400.0));
  }
  json point(const std::string& o);
};

json ContentionRig::point(const std::string& o) {
  const int g = comm.size();
  int next = 0;
  auto one = [&]() -> WorkPtr {
    auto [full, part] = buffers(next++);
    return o == "all_reduce" ? comm.all_reduce(full) : comm.all_gather(part, full);
  };
  auto queue = [&](int calls) {
    next = 0;
    std::vector<WorkPtr> works;
    for (int i = 0; i < calls; ++i) works.push_back(one());
    return works;
  };
  next = 0;
  one()->wait();
  synchronize(c.cuda);
  const double alone = timed(nullptr).first;
  comm.barrier();
  const auto c0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) next = 0, one()->wait();
  synchronize(c.cuda);
  const double per_call = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() / 10;
  const int calls = calls_like_compute(per_call, alone);
  comm.barrier();
  const auto q0 = std::chrono::steady_clock::now();
  for (auto& wk : queue(calls)) wk->wait();
  synchronize(c.cuda);
  const double comm_alone = std::chrono::duration<double>(std::chrono::steady_clock::now() - q0).count();
  const auto [with, comm_with] = timed([&] { return queue(calls); });
  const double comm_slow = comm_with > 0 ? comm_slowdown_from(with, comm_alone, comm_with) : 1.0;
  const double overlap = std::min(alone, comm_with > 0 ? std::min(comm_with, comm_alone * comm_slow) : comm_alone);
  const double slowdown = 1 + std::max(0.0, with - alone) / std::max(overlap, 1e-9);
  say(c, "compute beside " + o + " (" + std::to_string(calls) + " x " + fmt_num(double(bytes) / 1048576.0) +
             " MiB over " + std::to_string(g) + " ranks): " + fmt_num(alone * 1e3) + " ms alone, " +
             fmt_num(with * 1e3) + " ms beside " + fmt_num(comm_alone * 1e3) + " ms of collectives: slowdown " +
             fmt_num(slowdown, 4) +
             (comm_with > 0 ? "; the collectives beside it end after " + fmt_num(comm_with * 1e3) +
                                  " ms: their slowdown " + fmt_num(comm_slow, 4)
                            : std::string()));
  json p = {{"op", o}, {"bytes", bytes}, {"calls", calls}, {"group_size", g},
            {"compute_alone_seconds", alone}, {"compute_beside_seconds", with},
            {"collectives_alone_seconds", comm_alone}, {"slowdown", slowdown}};
  if (comm_with > 0) p["collectives_beside_seconds"] = comm_with, p["comm_slowdown"] = comm_slow;
  return p;
}

// The probe of measure_contention_layers: the runtime's decoder layer of
// Llama-3.2-1B (hidden 2048, 32 heads, 8 kv heads, SwiGLU 8192, RMSNorm,
// rotary), six of them; on the CPU (MPI, CI) three tiny ones.
ModelSpec layer_probe_spec(bool quick) {
  ModelSpec m;
  m.name = "calibrate-contention-probe";
  m.arch = Arch::Decoder;
  m.layers = quick ? 3 : 6;
  m.hidden = quick ? 64 : 2048, m.heads = quick ? 4 : 32, m.kv_heads = quick ? 2 : 8;
  m.ffn = quick ? 128 : 8192, m.vocab = 1024;
  m.mlp = MlpKind::SwiGlu, m.norm = NormKind::RmsNorm, m.pos = PosEmbed::Rotary;
  m.qkv_bias = m.out_bias = m.mlp_bias = false;
  return m;
}

}  // namespace

json measure_contention(const Ctx& c, Communicator& comm) {
  ContentionRig rig(c, comm);
  rig.compute();
  synchronize(c.cuda);
  json ops = json::array();
  for (const char* op : {"all_reduce", "all_gather"}) ops.push_back(rig.point(op));
  return ops;
}

// Compute beside the collectives as a data-parallel backward has them: the
// runtime's own layers' backward (layer_probe_spec, 2 x 4096 tokens), one
// layer at a time, every layer's but the last followed by a collective queued
// on the communicator as the engine queues a unit's gradient reduction (an
// all-reduce under ZeRO-0/1, a reduce-scatter under ZeRO-2/3;
// runtime/engine_zero.cpp). The last collective so ends beside the last
// layer's backward, and the chain's two ends (the compute's, the
// collectives') give both slowdowns under the simulator's own rules
// (chain_slowdowns_from), whether the collectives queue up or not. Two sizes:
// each layer's own gradients ("layers", the points the fit reads) and, as a
// diagnosis, as many bytes as take a layer's backward alone ("layers_time").
// The GEMM loop of measure_contention has one synthetic kernel beside
// collectives all queued before it.
json measure_contention_layers(const Ctx& c, Communicator& comm) {
  const ModelSpec m = layer_probe_spec(c.quick);
  const int64_t seq = c.quick ? 64 : 4096, batch = c.quick ? 1 : 2;
  const int L = int(m.layers), g = comm.size();
  TransformerModel model(m, seq, nullptr, false, nullptr);
  const at::ScalarType dt = c.cuda ? at::kBFloat16 : at::kFloat;
  model.materialize(c.device, dt, 17);
  const auto opt = at::TensorOptions().device(c.device).dtype(dt);
  at::manual_seed(3);
  const at::Tensor x = at::randn({batch, seq, m.hidden}, opt), dy = at::randn({batch, seq, m.hidden}, opt);
  std::optional<SideStream> side;
  if (c.cuda) side.emplace(true);
  // One chain: the forward (not timed), then the backward layer by layer with
  // `after` queued after each layer's but the last; the compute's time and
  // (GPU, with collectives) the collectives' end, both from the backward's start.
  auto chain = [&](const std::function<WorkPtr()>& after) {
    std::vector<at::Tensor> xs(static_cast<size_t>(L)), ys(static_cast<size_t>(L));
    for (int l = 0; l < L; ++l) {
      xs[size_t(l)] = (l == 0 ? x : ys[size_t(l) - 1]).detach().requires_grad_(true);
      ys[size_t(l)] = model.layer(l, xs[size_t(l)], false);
    }
    synchronize(c.cuda);
    comm.barrier();
    IntervalTimer t(c.cuda), tc(c.cuda);
    std::vector<WorkPtr> works;
    t.start();
    tc.start();
    at::Tensor grad = dy;
    for (int l = L - 1; l >= 0; --l) {
      ys[size_t(l)].backward(grad);
      grad = xs[size_t(l)].grad();
      if (after && l > 0) works.push_back(after());
      // The collectives' end on a side stream that waits for the compute only
      // up to the last one's queuing: waiting for the whole backward there
      // would clip their end at the compute's.
      if (after && l == 1 && side) side->run([&] {
          for (auto& w : works) w->wait();
          tc.stop();
        });
    }
    t.stop();
    if (!after || !side) tc.stop();
    for (auto& w : works) w->wait();
    const double compute = t.seconds().at(0), end = tc.seconds().at(0);
    synchronize(c.cuda);
    return std::pair<double, double>{compute, end};
  };
  auto best = [&](const std::function<WorkPtr()>& after) {
    std::pair<double, double> b{1e30, 0};
    for (int r = 0; r < 2; ++r) b = std::min(b, chain(after));
    return b;
  };
  chain(nullptr);  // warm-up: kernels chosen, the allocator's blocks in place
  const double pass = best(nullptr).first / L;
  // One layer's gradients (no biases): q, k, v and out projections, the
  // SwiGLU's three matrices, two norms.
  const int64_t h = m.hidden, kv = m.kv_heads * (h / m.heads);
  const int64_t layer_numel = h * (h + 2 * kv) + h * h + 3 * h * m.ffn + 2 * h;
  json points = json::array();
  for (const char* op : {"all_reduce", "reduce_scatter"})
    for (const bool by_time : {false, true}) {
      const std::string o = op;
      auto run_one = [&](at::Tensor& full, at::Tensor& part) {
        return o == "all_reduce" ? comm.all_reduce(full) : comm.reduce_scatter(full, part);
      };
      int64_t n = std::max<int64_t>(g, layer_numel / g * g);
      at::Tensor full = at::ones({n}, opt), part = at::empty({n / g}, opt);
      run_one(full, part)->wait();
      synchronize(c.cuda);
      if (by_time) {
        // As many elements as take one layer's backward alone, in whole
        // multiples of the group size (the slowest rank's figures decide).
        const double one = time_fixed(c, [&] { run_one(full, part)->wait(); }, 5);
        const auto worst = slowest_rank(c, comm, {one, pass});
        const double scale = std::clamp(worst[1] / std::max(worst[0], 1e-9), 1.0 / 16, 64.0);
        n = std::max<int64_t>(g, int64_t(double(n) * scale) / g * g);
        full = at::ones({n}, opt), part = at::empty({n / g}, opt);
        run_one(full, part)->wait();
        synchronize(c.cuda);
      }
      // The collectives alone: L - 1 of them back to back from one start.
      comm.barrier();
      IntervalTimer ta(c.cuda);
      ta.start();
      for (int l = 1; l < L; ++l) run_one(full, part)->wait();
      ta.stop();
      synchronize(c.cuda);
      const double alone = ta.seconds().at(0), coll = alone / (L - 1);
      const auto [with, end] = best([&] { return run_one(full, part); });
      // On the CPU (MPI shares the cores; the fit does not apply it) only the
      // compute's ratio, with no collectives' end to solve from.
      const auto [slow, comm_slow] = c.cuda ? chain_slowdowns_from(L, L - 1, pass, coll, with, end)
                                            : std::pair<double, double>{std::max(1.0, with / (pass * L)), 1.0};
      const int64_t bytes = n * full.element_size();
      say(c, "layers' backward beside " + o + " (" + std::to_string(L - 1) + " x " +
                 fmt_num(double(bytes) / 1048576.0) + " MiB over " + std::to_string(g) + " ranks" +
                 (by_time ? ", sized to a layer's time" : "") + "): " + fmt_num(pass * 1e3) + " ms a layer alone, " +
                 fmt_num(coll * 1e3) + " ms a collective alone; beside each other the backward takes " +
                 fmt_num(with * 1e3) + " ms (alone " + fmt_num(pass * L * 1e3) + "), the collectives end after " +
                 fmt_num(end * 1e3) + " ms: slowdowns " + fmt_num(slow, 4) + " (compute), " + fmt_num(comm_slow, 4) +
                 " (collectives)");
      json p = {{"op", o}, {"payload", by_time ? "layers_time" : "layers"}, {"bytes", bytes}, {"calls", L - 1},
                {"layers", L}, {"tokens", batch * seq}, {"group_size", g}, {"layer_seconds", pass},
                {"compute_alone_seconds", pass * L}, {"compute_beside_seconds", with},
                {"collectives_alone_seconds", alone}, {"slowdown", slow}};
      if (c.cuda) p["collectives_beside_seconds"] = end, p["comm_slowdown"] = comm_slow;
      points.push_back(p);
    }
  return points;
}

// Tensor-parallel collectives as the runtime issues them (runtime/model/tensor_parallel.cpp): a
// GEMM writes an activation, the collective runs on it through the
// Communicator (the compute stream waits for it), the next GEMM follows; `n`
// of them back to back on every rank at once. Against the same chain without
// the collectives and the collectives alone back to back, the time each one
// adds beyond its own transfer when it sits between GEMMs (the NCCL kernel
// starting after the GEMM's end on every rank, the skew between the ranks).
json measure_tp_chain(const Ctx& c, Communicator& comm) {
  const auto opt = at::TensorOptions().device(c.device).dtype(c.cuda ? at::kBFloat16 : at::kFloat);
  const int g = comm.size();
  const int64_t h = c.quick ? 32 : 2048;
  const int n = c.quick ? 4 : 30;
  at::Tensor w = at::randn({h, h}, opt).div_(std::sqrt(double(h)));
  json points = json::array();
  for (int64_t T : c.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{2048, 8192}) {
    at::Tensor x = at::randn({T, h}, opt), y = at::empty({T, h}, opt);
    at::Tensor part = at::empty({T / g, h}, opt), full = at::empty({T, h}, opt);
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      const std::string o = op;
      // The collective on the GEMM's output: all-reduce in place; all-gather
      // of this rank's rows into the full activation; reduce-scatter of it.
      auto coll = [&] {
        if (o == "all_reduce") comm.all_reduce(y)->wait();
        else if (o == "all_gather") comm.all_gather(y.narrow(0, 0, T / g), full)->wait();
        else comm.reduce_scatter(y, part)->wait();
      };
      // The fastest of three, each after a barrier (not time_fixed's back-to-back
      // batches): the ranks start every chain together, so its first
      // collective does not absorb the skew the GEMM-only batches leave.
      auto best_of = [&](const std::function<void()>& body) {
        double best = 1e30;
        for (int r = 0; r < 3; ++r) {
          comm.barrier();
          IntervalTimer t(c.cuda);
          t.start();
          body();
          t.stop();
          best = std::min(best, t.seconds().at(0));
          synchronize(c.cuda);
        }
        return best;
      };
      coll();  // the algorithm's first use sets up its buffers
      synchronize(c.cuda);
      const double chain = best_of([&] {
        for (int i = 0; i < n; ++i) {
          at::mm_out(y, x, w);
          coll();
        }
      });
      const double gemms = best_of([&] {
        for (int i = 0; i < n; ++i) at::mm_out(y, x, w);
      });
      const double alone = best_of([&] {
        for (int i = 0; i < n; ++i) coll();
      });
      const double extra = (chain - gemms - alone) / n;
      const int64_t bytes = T * h * int64_t(x.element_size());  // the full activation
      say(c, "tensor-parallel " + o + " between GEMMs (" + fmt_num(double(bytes) / 1048576.0) + " MiB over " +
                 std::to_string(g) + " ranks): " + fmt_num(chain / n * 1e6) + " us a GEMM and its collective, " +
                 fmt_num(gemms / n * 1e6) + " + " + fmt_num(alone / n * 1e6) + " us apart: " + fmt_num(extra * 1e6) +
                 " us more each");
      points.push_back({{"op", o}, {"bytes", bytes}, {"group_size", g}, {"calls", n}, {"chain_seconds", chain},
                        {"gemms_seconds", gemms}, {"collectives_seconds", alone}, {"extra_seconds", extra}});
    }
  }
  return points;
}

}  // namespace planner::rt::calib

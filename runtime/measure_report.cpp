// The measured run's gather and report (runtime/measure_detail.hpp): what is
// read off the Engine after the loop, every rank's figures to every rank, and
// the statistics, throughput and MFU of the report.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "runtime/measure_detail.hpp"
#include "runtime/model/moe.hpp"
#include "specs/flops.hpp"
#include "specs/lora_shapes.hpp"
#include "strategies/rank_grid.hpp"

namespace planner::rt::detail {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Elementwise max (or the concatenation) of a vector of doubles over the world,
// through the CPU (MPI) communicator.
std::vector<double> all_gather_doubles(Communicator* world, const std::vector<double>& mine) {
  if (!world) return mine;
  at::Tensor in = at::tensor(mine, at::TensorOptions().dtype(at::kDouble));
  at::Tensor out = at::empty({int64_t(mine.size()) * world->size()}, in.options());
  world->all_gather(in, out)->wait();
  return std::vector<double>(out.data_ptr<double>(), out.data_ptr<double>() + out.numel());
}

// Every rank's list, padded with -1 to the longest one, concatenated in rank
// order (the same on every rank); `per`: the padded length.
std::vector<double> all_gather_padded(Communicator* world, std::vector<double> mine, size_t& per) {
  per = mine.size();
  for (double n : all_gather_doubles(world, {double(mine.size())})) per = std::max(per, size_t(n));
  mine.resize(per, -1.0);
  return all_gather_doubles(world, mine);
}

// Every rank's spans of the last step to every rank (the same list
// everywhere). Pipeline stages run different action lists: each rank's spans
// are padded to the longest list for the all-gather.
void gather_trace(const RunConfig& cfg, Communicator* world, Engine& engine, Measurement& r) {
  const Strategy& st = cfg.strategy();
  const RankGrid grid(st.dp, st.pp, st.tp, st.cp);
  const auto spans = engine.traced_spans();
  std::vector<double> flat;
  for (const auto& [a, b] : spans) flat.push_back(a), flat.push_back(b);
  size_t per = 0;
  const std::vector<double> all = all_gather_padded(world, std::move(flat), per);
  for (size_t q = 0; per > 0 && q < all.size() / per; ++q) {
    std::vector<std::pair<double, double>> rank_spans;
    for (size_t i = 0; i < per; i += 2)
      if (all[q * per + i + 1] >= 0) rank_spans.push_back({all[q * per + i], all[q * per + i + 1]});
    r.trace_spans.push_back(std::move(rank_spans));
    r.trace_rank_stage.push_back(grid.coord(int(q)).pp);
  }
  for (const auto& stage : engine.program().stages) {
    r.trace_actions.emplace_back();
    for (const auto& a : stage) r.trace_actions.back().push_back(a.to_string());
  }
}

void gather_moe_routing(const RunConfig& cfg, Communicator* world, Engine& engine, Measurement& r) {
  const Strategy& st = cfg.strategy();
  const MoeBlock* moe = engine.model().moe();
  if (!moe) return;
  r.moe_routing = to_string(moe->routing());
  if (moe->routing() == MoeRouting::Balanced)
    r.notes.push_back(
        "mixture of experts: balanced routing (benchmark mode, --moe-routing balanced): token t of a micro-batch went "
        "to experts (t*k + j) mod E, not to the router's top-k; the router, its softmax, the gate weights and the "
        "auxiliary loss still ran. These times are those of exactly balanced routing, not of the model's own");
  if (st.ep <= 1) return;
  // Every rank takes part (padded to the longest list: pipeline stages run
  // different layers); rank 0's ep group is read.
  size_t per = 0;
  const std::vector<double> all = all_gather_padded(world, moe->received_rows, per);
  if (per == 0) return;
  const RankGrid grid(st.dp, st.pp, st.tp, st.cp);
  const std::vector<int> group = grid.ep_group(0, st.ep);
  double busiest = 0, mean = 0, largest = 0;
  for (size_t i = 0; i < per; ++i) {
    double mx = 0, sum = 0;
    int n = 0;
    for (int q : group) {
      const double x = all[size_t(q) * per + i];
      if (x < 0) continue;
      mx = std::max(mx, x), sum += x, ++n;
    }
    if (n == 0 || sum <= 0) continue;
    busiest += mx, mean += sum / n;
    largest = std::max(largest, mx / (sum / n));
  }
  if (mean <= 0) return;
  r.moe_imbalance = busiest / mean, r.moe_imbalance_largest = largest;
  char text[320];
  std::snprintf(text, sizeof text,
                "mixture of experts: the busiest rank of the ep group received %.2fx the group's mean rows per layer "
                "forward (largest single layer %.2fx); every exchange waits for it. The prediction assumed %.2f "
                "(planner predict --moe-imbalance X prices another)",
                r.moe_imbalance, largest, std::max(1.0, cfg.plan.model.moe.imbalance));
  r.notes.push_back(text);
}

// The memory model's categories from the loop's readings (MeasuredMemory says
// what each holds).
void memory_categories(bool cuda, int64_t outside0, const LoopMemory& lm, Measurement& r) {
  MeasuredMemory& mm = r.memory;
  mm.step_start_allocated = lm.step_start;
  mm.before_head_allocated = lm.before_head;
  mm.peak_fwd_bwd_allocated = lm.peak_fwd_bwd;
  mm.peak_step_allocated = lm.peak_alloc;
  mm.peak_step_reserved = cuda ? lm.peak_res : lm.peak_alloc;
  mm.outside_allocator = memory_outside_allocator(cuda);
  mm.device_total = device_total_memory(cuda);
  // ZeRO-2/3 unit buffers (gathered units, unit gradients) are a fixed pool,
  // allocated in the first step: part of the static bytes at a timed step's
  // start, counted as communication buffers with NCCL's own.
  // NCCL's device memory: the growth outside the caching allocator since
  // before the first communicator (NCCL connects peers lazily, at their
  // first operation, so this is read after the timed steps).
  const int64_t comm_bytes = r.world > 1 ? std::max<int64_t>(0, memory_outside_allocator(cuda) - outside0) : 0;
  mm.comm_buffers = lm.transient_peak + comm_bytes;
  if (lm.before_head > 0) {
    mm.activations = std::max<int64_t>(0, lm.before_head - lm.step_start);
    mm.logits_loss = std::max<int64_t>(0, lm.peak_fwd_bwd - lm.before_head);
  } else {  // a pipeline stage without the head: no logits
    mm.activations = std::max<int64_t>(0, lm.peak_fwd_bwd - lm.step_start);
  }
  mm.total = mm.peak_step_reserved + mm.outside_allocator;
  const int64_t known =
      mm.parameters + mm.gradients + mm.optimizer_states + mm.activations + mm.logits_loss + mm.comm_buffers;
  mm.overhead = std::max<int64_t>(0, mm.total - known);
}

// Every rank's figures to every rank; the step's time is the slowest rank's.
void gather_ranks(Communicator* world, Measurement& r) {
  std::vector<double> mine = r.step_seconds;
  std::vector<double> sorted = mine;
  std::sort(sorted.begin(), sorted.end());
  mine.push_back(sorted[sorted.size() / 2]);
  for (int64_t c : r.memory.categories()) mine.push_back(double(c));
  mine.push_back(double(r.memory.total));
  mine.push_back(double(r.memory.comm_buffers));
  mine.push_back(double(host_peak_rss_bytes()));
  const size_t k = mine.size();
  const size_t cats = k - 3 - size_t(kMemCategories);  // after the median
  const std::vector<double> all = all_gather_doubles(world, mine);
  const int n = int(all.size() / k);
  for (int q = 0; q < n; ++q) {
    const double* x = all.data() + size_t(q) * k;
    for (size_t i = 0; i < r.step_seconds.size(); ++i) r.step_seconds[i] = std::max(r.step_seconds[i], x[i]);
    RankMeasurement rm;
    rm.rank = q;
    for (size_t c = 0; c < rm.categories.size(); ++c) rm.categories[c] = int64_t(x[cats + c]);
    rm.median_s = x[cats - 1];
    rm.peak_bytes = int64_t(x[k - 3]);
    rm.comm_bytes = int64_t(x[k - 2]);
    rm.host_peak_bytes = int64_t(x[k - 1]);
    r.host_peak_bytes = std::max(r.host_peak_bytes, rm.host_peak_bytes);
    r.ranks.push_back(rm);
  }
  if (n > 1) {
    // The reported memory is the fullest rank's (all are alike in data parallelism).
    int64_t worst = 0;
    for (const auto& rm : r.ranks) worst = std::max(worst, rm.peak_bytes);
    if (worst > r.memory.total)
      r.notes.push_back("rank 0's memory breakdown is shown; the fullest rank peaked at " + std::to_string(worst) +
                        " bytes");
  }
}

// Timing statistics, throughput, MFU and the notes.
void report(const RunConfig& cfg, bool cuda, Measurement& r) {
  const Strategy& st = cfg.strategy();
  const auto& t = r.step_seconds;
  r.median_s = quantile(t, 0.5);
  r.p10_s = quantile(t, 0.1);
  r.p90_s = quantile(t, 0.9);
  r.min_s = *std::min_element(t.begin(), t.end());
  r.max_s = *std::max_element(t.begin(), t.end());
  double sum = 0;
  for (double x : t) sum += x;
  r.mean_s = sum / static_cast<double>(t.size());
  r.samples_per_second = static_cast<double>(r.samples_per_step) / r.median_s;
  r.tokens_per_second = static_cast<double>(r.tokens_per_step) / r.median_s;
  // LoRA/QLoRA: no weight gradients of the frozen base, the adapters' own;
  // the prediction counts the same (costmodel/predict.cpp fill_prediction).
  const double ft_flops = finetune_flops_adjustment(cfg.model(), st.finetune, r.tokens_per_step);
  r.model_flops_per_step = model_flops(cfg.model(), cfg.seq(), r.tokens_per_step) + ft_flops;
  r.hardware_flops_per_step = hardware_flops(cfg.model(), cfg.seq(), r.tokens_per_step, st.ckpt) + ft_flops;
  r.model_tflops = r.model_flops_per_step / r.median_s / 1e12 / r.world;  // per GPU
  r.hardware_tflops = r.hardware_flops_per_step / r.median_s / 1e12 / r.world;
  const auto& g = cfg.plan.cluster.gpu;
  r.peak_flops = st.precision == Precision::FP32   ? g.peak_fp32
                 : st.precision == Precision::FP16 ? g.peak_fp16
                                                   : g.peak_bf16;
  if (cuda && r.peak_flops > 0) r.mfu = r.model_flops_per_step / r.median_s / (r.peak_flops * r.world);
  // Whether the times compare with the prediction depends on the profile it was
  // made with: the planner's exec report says (planner/cmd_exec.cpp note_devices).
  if (!cuda) r.notes.push_back("ran on the CPU: MFU is not applicable");
  if (r.skipped_steps > 0)
    r.notes.push_back(std::to_string(r.skipped_steps) + " fp16 step(s) skipped for inf/nan gradients (loss scale now " +
                      std::to_string(r.final_loss_scale) + ")");
}

}  // namespace planner::rt::detail

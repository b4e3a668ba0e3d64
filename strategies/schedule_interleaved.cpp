// Interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language
// Model Training on GPU Clusters Using Megatron-LM", sec. 2.2.2), in the order
// of Megatron-LM's forward_backward_pipelining_with_interleaving
// (megatron/core/pipeline_parallel/schedules.py):
//   - the k-th forward of a rank runs chunk (k mod (pp*v)) / pp on micro-batch
//     (k / (pp*v)) * pp + k mod pp: groups of pp micro-batches go through
//     chunk 0, then chunk 1, ...; backwards visit the chunks in reverse;
//   - warm-up: 2 (pp - s - 1) + (v - 1) pp forwards (all of them when m == pp),
//     then one forward one backward, then the remaining backwards.
// Model chunk c of rank s is virtual stage c * pp + s; its input comes from
// virtual stage c * pp + s - 1, which for s == 0 is chunk c - 1 of rank pp - 1
// (add_pipeline_transfers puts in the sends and receives). Compute only.
#include <fmt/format.h>

#include <algorithm>

#include "strategies/errors.hpp"
#include "strategies/schedule.hpp"

namespace planner {

namespace {

struct Slot {
  int microbatch, chunk;
};

Slot slot_of(int k, int pp, int vpp, bool forward) {
  const int group = k / (pp * vpp), in_group = k % (pp * vpp);
  int chunk = in_group / pp;
  if (!forward) chunk = vpp - 1 - chunk;
  return {group * pp + in_group % pp, chunk};
}

}  // namespace

PipelineSchedule interleaved_one_f_one_b(int pp, int m, int vpp) {
  if (pp < 1) throw InputError(fmt::format("schedule: pp={} must be at least 1", pp));
  if (m < 1) throw InputError(fmt::format("schedule: micro-batches={} must be at least 1", m));
  if (vpp < 1) throw InputError(fmt::format("schedule: vpp={} must be at least 1", vpp));
  if (vpp == 1) return one_f_one_b(pp, m);  // one chunk per rank is plain 1F1B
  if (m % pp != 0)
    throw InputError(fmt::format(
        "schedule: the interleaved schedule needs the micro-batches ({}) to be a multiple of pp ({})", m, pp));
  PipelineSchedule out(static_cast<size_t>(pp));
  const int total = m * vpp;
  for (int s = 0; s < pp; ++s) {
    int warmup = m == pp ? total : std::min(total, 2 * (pp - s - 1) + (vpp - 1) * pp);
    StepList& a = out[size_t(s)];
    a.reserve(2 * size_t(total));
    auto push = [&](StepOp op, Slot x) { a.push_back({op, s, x.microbatch, -1, x.chunk}); };
    for (int k = 0; k < warmup; ++k) push(StepOp::Forward, slot_of(k, pp, vpp, true));
    for (int k = 0; k < total - warmup; ++k) {
      push(StepOp::Forward, slot_of(k + warmup, pp, vpp, true));
      push(StepOp::Backward, slot_of(k, pp, vpp, false));
    }
    for (int k = total - warmup; k < total; ++k) push(StepOp::Backward, slot_of(k, pp, vpp, false));
  }
  return out;
}

}  // namespace planner

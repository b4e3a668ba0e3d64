#pragma once
// Internals of the Engine (runtime/engine.hpp), shared by its files:
//   engine.cpp           construction, the walk (step, compute_pass, run_action), inspection
//   engine_layout.cpp    units and their layout, the tied copy, tp's replicated ranges,
//                        the buffers and their initial values
//   engine_pipeline.cpp  F and B per unit, the pipeline's sends and receives
//   engine_zero.cpp      ZeRO: Gather/Release, Reduce, AllGather, the unit buffer pool
//   engine_tail.cpp      the step's tail: ToHost, Sync, the tied, replicated and loss
//                        reductions, Norm, Clip, Opt (device or host), ToDevice
// Not part of the runtime's interface.
#include "runtime/engine.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/edge.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <future>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include "runtime/batch.hpp"
#include "runtime/comm/pipe_links.hpp"
#include "runtime/device.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/buffers/streams.hpp"
#include "runtime/model/tensor_parallel.hpp"
#include "strategies/errors.hpp"
#include "strategies/shard.hpp"

namespace planner::rt {

// The key of a micro-batch's tensor at unit u (activations, inputs, received tensors).
inline int64_t key(int mb, int u) { return int64_t(mb) * 1000003 + u; }

// A range of a unit whose gradients are reduced over one group and whose
// optimizer states are sharded over it. A unit is one piece over the dp-cp
// group, except a MoE layer's with ep > 1: two, its local experts first, over
// the expert-data-parallel group (the dp*cp/ep ranks holding the same
// experts, as Megatron-core shards a MoE model's expert states and as
// costmodel/moe_costs.cpp prices them), then the rest over dp-cp. Each piece
// is padded to a multiple of its world, so that reduce-scatter and all-gather
// work on equal chunks; rank r of the group owns chunk r.
struct Piece {
  int64_t off = 0, padded = 0, chunk = 0;  // in the unit; padded = chunk * world
  int64_t soff = 0;                        // the rank's chunk in the unit's shard (at Unit::sbase + soff)
  int64_t decay = 0;                       // decayed elements at the piece's start
  int world = 1, rank = 0;                 // the optimizer's shards (1 and 0 at ZeRO-0)
  Communicator* comm = nullptr;            // the gradients' (and shards') group; null: nothing to reduce
  bool experts = false;
  int64_t mine() const { return off + int64_t(rank) * chunk; }  // the rank's chunk, in the unit
};

struct Engine::Unit {
  int64_t numel = 0, padded = 0, chunk = 0;  // padded: the pieces' sum; chunk: the rank's shard (their chunks)
  int64_t decay = 0;                         // decayed elements at the unit's start (before padding)
  std::vector<int> ids;                      // parameters of the unit, in layout order
  std::vector<int64_t> offs;                 // their offsets inside the unit (padded layout)
  bool owned = true;                         // held by this rank's pipeline stage
  int64_t base = 0;                          // offset in the full flat buffers (ZeRO-0/1/2)
  int64_t sbase = 0;                         // offset in the shard buffers
  int64_t experts = 0;                       // the local experts' elements at the unit's start (ep > 1)
  std::vector<Piece> pieces;
};

// One Work for several collectives (a unit's pieces): waits for all, done when all are.
struct AllOf : Work {
  std::vector<WorkPtr> works;
  explicit AllOf(std::vector<WorkPtr> w) : works(std::move(w)) {}
  void wait() override {
    for (const WorkPtr& w : works) w->wait();
  }
  bool done() override {
    return std::all_of(works.begin(), works.end(), [](const WorkPtr& w) { return w->done(); });
  }
};
// Null for none, the one itself, or an AllOf.
inline WorkPtr all_of(std::vector<WorkPtr> w) {
  if (w.empty()) return nullptr;
  if (w.size() == 1) return w.front();
  return std::make_shared<AllOf>(std::move(w));
}

// Reused device buffers for ZeRO-2/3 units (DeepSpeed keeps fixed buffers the
// same way): the embedding and the head each have their own, allocated at first
// use; the layers, all of one size, share a pool that grows to the most units in
// use at once (the unit computing and the one prefetched or still reducing).
// Allocating once keeps the caching allocator from fragmenting under the churn
// of unit-sized blocks freed while a collective still reads them.
struct BufferPool {
  std::map<int, at::Tensor> own;          // unit 0 and the head
  std::map<int, WorkPtr> own_busy;        // a collective still reading it
  std::vector<at::Tensor> slots;          // layer-sized
  std::vector<WorkPtr> slot_busy;
  std::vector<int> free;
  std::map<int, int> slot_of;             // unit -> slot (layers)
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& [u, t] : own) b += t.numel() * t.element_size();
    for (const auto& t : slots) b += t.numel() * t.element_size();
    return b;
  }
};

struct Engine::Impl {
  BufferPool gather_pool, grad_pool;
  std::vector<Unit> units;
  int ow = 1, orank = 0, dp_rank = 0;
  at::ScalarType dt = at::kFloat;
  bool mixed = false, offload = false, master_is_param = false;
  at::Tensor params, grads, pshard, gshard, master, m, v, work, step_count, empty;
  at::Tensor host_grad, host_param, host_work;  // offload (pinned)
  std::vector<at::Tensor> gathered, ugrad;  // the pool buffer each unit uses now, or undefined
  std::vector<WorkPtr> gather_work, reduce_work;
  // Offload=all without a dp all-gather: where on the copy stream each unit's
  // parameters have arrived (the compute stream waits for that point only, not
  // for the next unit's prefetch queued behind it).
  std::vector<SideStream::Mark> gather_mark;
  std::vector<int> reduces_done;
  std::vector<StepAction> deferred;  // Reduce/ToHost held for the Sync (overlap_grad_reduce off)
  std::vector<WorkPtr> pending;
  // A pipeline link's latest sends, oldest first (activations on, gradients
  // back): bound_sends keeps at most sends_in_flight of them unwaited.
  std::deque<WorkPtr> sent_f, sent_b;
  size_t sends_in_flight = 2;
  // The gradients sent back go out of sends_in_flight + 1 buffers kept from
  // step to step, used in turn (Engine::send_b): a buffer is written again
  // only after bound_sends waited for the send that last read it. Off with
  // PLANNER_PP_GRAD_BUFFERS=0 or when the sends are held to the Sync.
  bool grad_buffers = true;
  std::vector<at::Tensor> grad_ring;
  size_t grad_next = 0;
  int64_t layer_padded = 0;  // the padded size of a layer unit (the pool's slot size)
  std::vector<at::Tensor> keep;
  std::unordered_map<int64_t, at::Tensor> in, out;
  std::unordered_map<int64_t, at::Tensor> recv;  // received activations (key(mb, first unit)) and gradients (key(mb, -1 - last unit))
  // A chunk's output once sent (send_f): only its gradient edge, for the
  // backward; the tensor goes when the send has arrived.
  std::unordered_map<int64_t, torch::autograd::Edge> sent_out;
  std::unordered_map<int, at::Tensor> labels;
  // The head's logits, their gradient (and Gemma-2's capped logits) as one
  // block per micro-batch in flight on the head's chunk: head_reserve_block_bytes.
  int64_t head_reserve_bytes = 0;
  std::unordered_map<int, at::Tensor> head_reserve;
  at::Tensor loss_sum, divisor;
  at::Tensor norm_sq;  // Norm: the sum of squares of the gradients, summed over the groups by NormReduce
  double divisor_host = 1.0;
  bool skip = false;
  std::unique_ptr<SideStream> copy;
  std::vector<std::future<void>> adam_done;
  std::thread adam_thread;
  std::map<StepOp, std::unique_ptr<IntervalTimer>> timers;
  int tied_id = -1;                   // the word matrix, when the last stage keeps a copy (tied, pp > 1)
  std::unique_ptr<Communicator> emb;  // first and last stage (tied embeddings, pp > 2)
  Communicator* emb_comm = nullptr;   // emb, or the pp group when pp == 2
  // tp > 1: the replicated parameters' ranges in the gradient buffer that Norm
  // measures (the whole units' in `grads` for ZeRO-0/1, the rank's chunks' in
  // `gshard` for ZeRO-2/3), adjacent ones merged; with offload, the same
  // gradients' places in the device buffer and in `host_grad`.
  struct Range {
    int64_t dev = 0, len = 0, host = 0;  // repl: host = dev (unused)
  };
  std::vector<Range> repl, repl_host;

  // A send on a pipeline link, and the wait for the one sends_in_flight
  // before it on the same link: the caller's stream (the compute stream)
  // waits for it there, which on the GPU is an event wait in the stream's
  // order and lets the tensor go at once (nccl_backend.cpp, "Memory"), on the
  // CPU MPI_Wait. reap() alone frees a send only once the host sees it done;
  // with the host running ahead of the GPU it seldom is, and most chunk
  // outputs and gradients sent in a step stayed allocated to its Sync: stage 0
  // of llama-3.2-1b at interleaved pp=2 vpp 8 on two H200s ran 1.56 GiB over
  // the model, about 50 of the 60 (b, s, h) it sends (validation/h200x2/pp70).
  // The send waited for was issued sends_in_flight (default 2) sends
  // earlier, after as many chunks' compute, so the wait seldom stalls the
  // stream (validation/h200x2/pp72: no step time lost against 0, "to the
  // Sync").
  void bound_sends(std::deque<WorkPtr>& link, WorkPtr w) {
    link.push_back(std::move(w));
    while (link.size() > sends_in_flight) {
      link.front()->wait();
      link.pop_front();
    }
  }

  // Waits for every outstanding collective and pipeline send (the step's end).
  void wait_all() {
    for (auto* q : {&sent_f, &sent_b})
      for (auto& w : *q) w->wait();
    for (auto& w : pending) w->wait();
    pending.clear(), sent_f.clear(), sent_b.clear();
  }

  // Drops the outstanding collectives and sends that have finished (a
  // finished Work releases the tensors it held), except the units' latest
  // reductions, which later actions still order themselves after. A
  // pipeline stage's sends were otherwise held to the step's Sync: each
  // activation sent on (and each gradient sent back) stayed allocated after
  // its backward, about 1 GiB on rank 0 of GPT-Neo-1.3B's interleaved pp=2
  // plan on two H200s (validation/h200x2/heldout18).
  void reap() {
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const WorkPtr& w) {
                                   for (const auto& r : reduce_work)
                                     if (r == w) return false;  // still needed for ordering
                                   return w->done();
                                 }),
                  pending.end());
    for (auto* q : {&sent_f, &sent_b})
      q->erase(std::remove_if(q->begin(), q->end(), [](const WorkPtr& w) { return w->done(); }), q->end());
  }
};

// A buffer of `numel` elements for unit u: its own (unit 0, the head) or a
// free layer slot (engine_zero.cpp).
at::Tensor acquire(BufferPool& p, int u, bool layer, int64_t numel, const at::TensorOptions& o);
// Gives unit u's buffer back; `busy`, when set, is the collective still reading it.
void give_back(BufferPool& p, int u, bool layer, WorkPtr busy);

}  // namespace planner::rt

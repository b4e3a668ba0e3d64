#pragma once
// The executor: runs one training step by walking the step program of
// strategies/step_program.hpp action by action (one handler per StepOp), for
// data, tensor, sequence and pipeline parallelism, ZeRO-1/2/3 and CPU offload;
// one device is the dp = tp = pp = 1 list.
//
// Buffers, in the memory model's categories (docs/MEMORY_MODEL.md):
//  - units (strategies/partition.hpp: embedding, each layer, head) are laid out
//    one after another; inside a unit the matrices first (weight decay), then
//    the vectors; each unit padded to a multiple of the optimizer's world so
//    that reduce-scatter and all-gather work on equal chunks, and rank r owns
//    chunk r of every unit (shard(), strategies/shard.hpp); a MoE layer's
//    unit at ep > 1 is two such pieces, its local experts (first) over the
//    expert-data-parallel group and the rest over dp (engine_detail.hpp);
//  - parameters (working precision): the whole model (ZeRO-0/1/2), or the rank's
//    chunks (ZeRO-3; in pinned host memory with offload=all) plus the units
//    gathered at the moment;
//  - gradients (working precision): the whole model (ZeRO-0/1; reduced in
//    place, unit by unit, while the backward goes on), or the rank's chunks
//    (ZeRO-2/3) plus the units whose backward is running or whose
//    reduce-scatter is in flight;
//  - optimizer states: fp32 master weights (16-bit training) and the two Adam
//    moments for the rank's chunks (all of them for ZeRO-0), on the device, or
//    in pinned host memory with offload (then updated by LibTorch's vectorised,
//    multithreaded CPU fused AdamW, unit by unit on a worker thread while the
//    updated units travel back to the device).
// Fine-tuning (strategy finetune=lora|qlora, runtime/model/lora.hpp): the
// units hold the adapters only (each layer's in its layer's unit; the
// embedding and head units are empty), so gradients, reductions over dp,
// ZeRO chunks and AdamW's states are the adapters'. The frozen base is kept
// apart, whole on every dp rank (replicated, as costmodel/finetune.hpp
// prices it), only this stage's layers under pp, in the working precision
// without gradients; for QLoRA the layer matrices in NF4 instead.
// Micro-batch i of data-parallel rank r reads the global micro-batch r*gas + i,
// and every loss is scaled by 1/(gas*dp): a dp-way run computes the same step as
// one process with dp*gas micro-batches.
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "specs/model_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/model/transformer.hpp"
#include "runtime/run_config.hpp"
#include "strategies/step_program.hpp"
#include "strategies/strategy.hpp"

namespace planner::rt {

class SideStream;
class ContextParallel;  // runtime/model/context_parallel.hpp
class LoraAdapters;     // runtime/model/lora.hpp
class Fp8Linears;       // runtime/model/fp8_linear.hpp
struct Piece;           // runtime/engine_detail.hpp: a unit's range reduced and sharded over one group

// The tensor type of the working precision (parameters, gradients, activations).
at::ScalarType working_dtype(Precision p);
// The bytes the head allocates for one micro-batch, reserved as one block when
// the micro-batch enters the head's chunk (runtime/engine.cpp); 0 where no
// block is used (the CPU, GPipe and interleaving, an MLM head, logits under
// 128 MiB). padded_vocab and vocab_rows: this rank's columns of the head.
int64_t head_reserve_block_bytes(const ModelSpec& m, const Strategy& s, int64_t seq, int64_t padded_vocab,
                                 int64_t vocab_rows, bool cuda);
// True where the head's logits go into one tensor kept from micro-batch to
// micro-batch (TransformerModel::keep_head_logits): GPipe on CUDA with
// logits of 128 MiB or more (runtime/engine.cpp).
bool keeps_head_logits(const ModelSpec& m, const Strategy& s, int64_t seq, int64_t padded_vocab, bool cuda);
struct PipeLinks;

// Time spent per action kind on the compute stream's timeline (seconds, summed
// over the step), by op (to_string(StepOp) names it in reports): for
// asynchronous actions this is only the issuing; for Sync it is the exposed
// wait for communication and copies.
struct ActionTimes {
  std::map<StepOp, double> seconds;
  std::map<StepOp, int> count;
};

class Engine {
 public:
  // `config`: the run (runtime/run_config.hpp): its plan's model, strategy
  // (dp, tp, pp, sp, zero, offload, ckpt, mbs, gas, precision) and seq, and
  // its options' seed, optimizer settings and MLM mask fraction.
  // `dp`: the data-parallel communicator (null when strategy.dp == 1).
  // `pp`: the pipeline communicator (null when strategy.pp == 1), its ranks in
  // stage order; this rank runs stage pp->rank() of the program (GPipe, 1F1B or
  // interleaved 1F1B). The constructor makes the send/receive links
  // (runtime/comm/pipe_links.hpp) from it, and for tied embeddings the
  // first-and-last-stage group, collectives over the world. With tied
  // embeddings the last stage keeps a copy of the word matrix (engine_layout.cpp).
  // `tp`: the tensor-parallel communicator (null when strategy.tp == 1). The
  // model holds this rank's parts of the split parameters (runtime/model/transformer.hpp,
  // runtime/model/tensor_parallel.hpp); units, ZeRO chunks and the optimizer work on those local
  // parts as on any parameter (every tp rank of a dp rank has the same local
  // shapes, so the same chunks). Every tp rank of a dp rank reads the same
  // micro-batches. With sp the gradients of the replicated parameters (norms,
  // row-parallel biases, position tables), computed on sequence shards, are
  // summed over tp (the ReplicaReduce action); the gradient norm counts the
  // replicated ranges once.
  // With sp and pp > 1 the stages exchange sequence shards.
  // Context parallelism (cp > 1): `dp` is the dp-cp group (RankGrid::
  // dp_cp_group: gradients, ZeRO shards and the loss over every rank holding
  // the same parameters), `cp` the ring (RankGrid::cp_group); each rank runs
  // its two chunks of every sequence (runtime/model/context_parallel.hpp).
  // Mixture of experts with ep > 1 (runtime/model/moe.hpp): `ep` the
  // expert-parallel group (RankGrid::ep_group: the all-to-all's members),
  // `edp` the expert-data-parallel group (RankGrid::expert_dp_group; null
  // when dp == ep): each MoE layer unit's local experts (one piece at its
  // start, engine_detail.hpp) are reduced over edp and, with ZeRO-1/2/3,
  // their optimizer states (ZeRO-2/3's gradients, ZeRO-3's parameters)
  // sharded over it; the rest of the unit over dp. The gradient norm sums the
  // experts' squares over ep. cp = 1 (specs/runtime_gap.hpp).
  Engine(const RunConfig& config, at::Device device, std::shared_ptr<TokenSource> tokens, Communicator* dp,
         Communicator* pp = nullptr, Communicator* tp = nullptr, Communicator* cp = nullptr,
         Communicator* ep = nullptr, Communicator* edp = nullptr);
  ~Engine();

  // One optimizer step: walks the step program. Returns the mean loss over the
  // whole global batch (all dp ranks) as a device scalar.
  at::Tensor step(int64_t step);
  // Zeroes the flat gradient buffer (ZeRO-0/1), as step() does first.
  void zero_grad();
  // Walks only the forward and backward actions of micro-batch `mb` of this
  // stage's list (step `step`'s tokens): no gradient zeroing, no reduction,
  // no optimizer; the gradients accumulate. What `planner calibrate` records
  // as one pass of a training step (calibration/measure_in_step.cpp). One
  // process (dp = tp = pp = 1) with ZeRO-0/1 only: elsewhere the passes
  // would leave collectives or gathered units behind (std::logic_error).
  void compute_pass(int64_t step, int mb);

  // Every trained parameter (the adapters under fine-tuning) in fp32, laid out as ParamStore::layout() orders them (the
  // layout of one process's flat buffer), gathered from all ranks under ZeRO and tp
  // (full tensors, the single-process layout; a collective: every rank must
  // call it). For tests and checks.
  at::Tensor full_params_fp32();

  const StepProgram& program() const { return program_; }
  TransformerModel& model() { return *model_; }
  // Fine-tuning: the adapters (their merged weights, for checks); null otherwise.
  const LoraAdapters* lora() const { return lora_.get(); }
  int64_t param_bytes() const;            // device bytes of persistent parameters (shards under ZeRO-3; + a frozen base)
  int64_t grad_bytes() const;             // device bytes of persistent gradients (shards under ZeRO-2/3)
  int64_t optimizer_state_bytes() const;  // device bytes of master + moments (0 with offload)
  int64_t host_state_bytes() const;       // pinned host bytes (offload)
  int64_t optimizer_work_bytes() const;
  int64_t skipped_steps() const { return skipped_; }
  double loss_scale() const { return loss_scale_; }
  // Host-side CPU AdamW of the last step (offload): seconds and parameters.
  double cpu_adam_seconds() const { return cpu_adam_seconds_; }
  int64_t cpu_adam_params() const { return shard_numel_; }

  // Measurement hooks: before the head of each micro-batch, after
  // the last backward of the step.
  std::function<void()> before_head;
  std::function<void()> after_backward;
  // When set, every action is timed (CUDA events) into action_times().
  bool time_actions = false;
  // When set, the next step records every action's start and end on the
  // compute stream (CUDA events) for a measured timeline; read with
  // traced_spans() after the step (then cleared).
  bool trace_next_step = false;
  // One (start, end) per action of program().stages[0], seconds from the step's first action.
  std::vector<std::pair<double, double>> traced_spans();
  // Synchronises and sums the recorded intervals per action kind (all steps
  // since time_actions was set).
  void collect_action_times();
  const ActionTimes& action_times() const { return times_; }
  // ZeRO-2/3 buffers alive now: gathered units and unit gradients not yet
  // reduce-scattered (the memory model's comm_buffers).
  int64_t transient_bytes() const;
  // The largest transient_bytes() since the last reset.
  int64_t transient_peak() const { return transient_peak_; }
  void reset_transient_peak() { transient_peak_ = 0; }

 private:
  struct Unit;
  struct Impl;
  // Construction (engine_layout.cpp).
  int64_t lay_out_units();
  void replicated_ranges();
  void allocate_buffers(int64_t full);
  void initial_values();
  void init_base();      // fine-tuning: the frozen base's values (NF4 for QLoRA's matrices)
  ParamStore& tstore();  // the trained tensors' store: the model's, or the adapters' (fine-tuning)
  void init_trained(const ParamInfo& info, at::Tensor t) const;
  void run_action(const StepAction& a, int64_t step);
  void forward(int mb, int u, int chunk, int64_t step);
  void backward(int mb, int u, int chunk);
  void send_f(int mb, int chunk);
  void recv_f(int mb, int chunk);
  // The head's block for micro-batch mb when `chunk` holds the head (once
  // per micro-batch; head_reserve_block_bytes).
  void reserve_head_block(int mb, int chunk);
  void send_b(int mb, int chunk);
  void recv_b(int mb, int chunk);
  at::Tensor I_out_detached(int mb, int u);
  void gather(int u);
  void release(int u);
  void reduce(int u, bool scatter);
  void to_host(int u);
  void sync();
  void issue_deferred();
  void tied_reduce();
  void loss_reduce(CommGroup g);
  void norm();
  void norm_reduce(CommGroup g);
  void clip();
  void opt();
  void to_device(int u);
  void all_gather(int u);
  void ensure_grad(int u);
  void bind_unit(int u, const at::Tensor& data);
  void bind_unit_grad(int u, const at::Tensor& grad);
  at::Tensor replicated_grads(const at::Tensor& g) const;  // tp: the replicated ranges of g, concatenated
  void reduce_replicated();                                // sp: their sum over the tp group
  at::Tensor shard_grad(int u, const Piece& p);  // the rank's reduced gradient chunk of piece p of unit u (working precision)
  at::Tensor tied_grad();
  int64_t stage_seq() const;        // this stage's copy of a tied word matrix's gradient (pp > 1), or undefined

  RunConfig cfg_;
  const ModelSpec& spec_ = cfg_.plan.model;
  const Strategy& st_ = cfg_.plan.strategy;
  at::Device device_;
  bool cuda_;
  std::shared_ptr<TokenSource> tokens_;
  Communicator* dp_;
  Communicator* pp_ = nullptr;
  std::unique_ptr<PipeLinks> links_;  // pipeline send/receive links (pp > 1)
  Communicator* tp_ = nullptr;  // null unless strategy.tp > 1
  Communicator* ep_ = nullptr;   // null unless strategy.ep > 1
  Communicator* edp_ = nullptr;  // null unless dp / ep > 1 with ep > 1
  int stage_ = 0;
  std::unique_ptr<ContextParallel> cp_;  // null unless strategy.cp > 1
  std::unique_ptr<TransformerModel> model_;
  std::unique_ptr<LoraAdapters> lora_;  // fine-tuning only
  std::vector<at::Tensor> base_;        // fine-tuning: the frozen base's tensors this rank keeps
  int64_t base_bytes_ = 0;              // their device bytes (with QLoRA's NF4 storage)
  std::unique_ptr<Fp8Linears> fp8_;  // precision=fp8: the layers' linears on FP8 GEMMs (after model_: unhooks it first)
  StepProgram program_;
  std::unique_ptr<Impl> impl_;
  int64_t shard_numel_ = 0;
  int64_t t_ = 0, skipped_ = 0;
  double loss_scale_ = 1.0;
  int good_steps_ = 0;
  double cpu_adam_seconds_ = 0;
  int64_t transient_peak_ = 0;
  std::unique_ptr<IntervalTimer> trace_;
  ActionTimes times_;
};

}  // namespace planner::rt

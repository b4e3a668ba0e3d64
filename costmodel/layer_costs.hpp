#pragma once
// Durations of one micro-batch through one transformer layer, the embedding and
// the head, on one GPU of a tensor-parallel group, op by op (GEMMs by shape,
// attention, memory-bound kernels, the layer's tensor-parallel collectives).
// The op list and byte counts are in docs/TIME_MODEL.md ("A layer, op by op").
#include <cstdint>

#include "costmodel/hardware_profile.hpp"
#include "specs/model_spec.hpp"
#include "costmodel/topology.hpp"
#include "strategies/strategy.hpp"

namespace planner {

struct OpTimes {
  double gemm_seconds = 0;       // matrix multiplies
  double attention_seconds = 0;  // attention core (fused kernel, or batched GEMMs + softmax)
  double memory_seconds = 0;     // norms, activations, residuals, dropout, loss, embedding lookups
  double tp_comm_seconds = 0;    // tensor-parallel all-reduce / reduce-scatter / all-gather, on the critical path
  double compute_seconds() const { return gemm_seconds + attention_seconds + memory_seconds; }
  double total_seconds() const { return compute_seconds() + tp_comm_seconds; }
  OpTimes& operator+=(const OpTimes& o);
};
OpTimes operator*(double k, const OpTimes& o);

// The tensor-parallel collectives of one pass of a layer (sequence parallel:
// all-gathers and reduce-scatters) that stay on its critical path when the
// profile's tp_comm_overlap of them is pipelined with the pass's GEMMs
// (`comm` if 0; docs/TIME_MODEL.md sec. 3).
double exposed_tp_comm_seconds(const HardwareProfile& p, double comm, double gemm, int tp);

struct PassTimes {
  OpTimes forward, backward, recompute;  // recompute runs inside the backward pass
};

struct LayerShape {
  int64_t seq = 0, mbs = 1;
  int tp = 1;
  bool sp = false;
  Precision precision = Precision::BF16;
  Ckpt ckpt = Ckpt::None;
};

// `tp_link` is the tensor-parallel group on the topology (size 1 when tp == 1).
PassTimes transformer_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                                  const GroupLink& tp_link);
PassTimes embedding_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const GroupLink& tp_link);
// Final norm, logits, cross-entropy (vocabulary-parallel under TP).
PassTimes head_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s, const GroupLink& tp_link);

}  // namespace planner

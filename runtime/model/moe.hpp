#pragma once
// Mixture of experts in the LibTorch runtime (ModelSpec::moe; docs/RUNTIME.md,
// "Mixture of experts"): the MLP of every layer past moe.dense_layers is
// replaced by
//   - a router: logits = x R^T (R: experts x hidden, no bias), probabilities
//     softmax(logits) in fp32, the top_k experts of each token by probability
//     with ties to the lower expert index (a stable descending sort, so the
//     choice is the same on every rank and in one process), their weights
//     renormalised to sum to 1 (Mixtral, Jiang et al. 2024; HF's
//     MixtralSparseMoeBlock);
//   - `experts` routed MLPs of inner width expert_ffn, of the model's MLP kind
//     (SwiGLU: [gate; up] stacked as the dense MLP's fc1), stored as two
//     stacked tensors per layer, (E, up, h) and (E, h, ffn);
//   - optionally the shared MLP of width shared_ffn every token uses, with
//     Qwen2-MoE's sigmoid gate (hidden -> 1) when moe.shared_gate;
//   - the auxiliary load-balancing loss of Switch (Fedus et al. 2022, eq. 4)
//     as Megatron-core normalises it for top-k: aux = E * sum_i f_i * P_i,
//     f_i the share of the T*k routed assignments that chose expert i, P_i the
//     mean router probability of expert i over the T tokens; 1 for perfectly
//     balanced routing. Its coefficient is kAuxLossCoeff (ModelSpec carries
//     none). It is added to the loss through its gradient: the routing
//     weights pass through a function whose backward also gives aux the
//     gradient coeff * (the factor the loss is multiplied by before backward),
//     as Megatron's MoEAuxLossAutoScaler does, so it works on every pipeline
//     stage. The loss the runtime reports stays the language-model loss.
//
// Balanced routing (RunOptions::moe_routing, `planner exec --moe-routing
// balanced`): a benchmark mode that replaces only the top-k choice. Token t of
// the T tokens of a micro-batch (flattened (b, s) index) goes to experts
// (t k + j) mod E, j = 0..k-1 (distinct, as k <= E); the router's logits,
// softmax, the gate weights (the probabilities at those experts, renormalised)
// and the auxiliary loss are computed as in the learned path, so the router's
// cost and gradient stay. When E divides T k every expert gets T k / E rows
// and every ep rank the same. Megatron-LM's --moe-router-force-load-balancing
// is the same idea for benchmarks (megatron/core/transformer/moe/moe_utils.py
// apply_random_logits: the router's logits replaced by normal random ones in
// the forward), balanced in expectation only.
//
// Every GEMM against the layer's weights (router, experts, shared MLP and its
// gate) is an autograd function of runtime/model/moe_gemm.hpp that saves the
// parameter leaf and reads it again in the backward, as the dense layers'
// LinearAccum: ZeRO-3 gathers a unit again, into other memory, for its
// backward, so a view of the weights saved in the forward would read another
// unit's (runtime/engine_zero.cpp).
//
// Routing is dropless (every routed token is computed): capacity_factor > 0
// (token dropping) is refused by name, as are the encoder, the parallel block,
// MLP biases and context parallelism with MoE layers.
//
// Expert parallelism (`ep`, RankGrid::ep_group): rank r of the ep group holds
// experts [r E/ep, (r+1) E/ep). Each layer sends every routed assignment's
// hidden vector to its expert's rank and back with all-to-all-v over the ep
// communicator (dispatch and combine, an autograd function whose backward is
// the reverse exchange); the per-expert counts travel first (one small
// all-to-all). Tensor parallelism (tp) splits each expert's inner width as the
// dense MLP's (Megatron-core's expert tensor-parallel size = tp, what
// costmodel/moe_costs.* prices): the routed and shared outputs are summed over
// tp once, as the dense MLP's, and the routing weights' gradient (partial per
// tp rank) is summed over tp on its way back (copy_to_tp). With sequence
// parallelism (sp) the layer's input and output are sequence shards, as the
// dense MLP's: the router and the shared gate run on the shard and their
// outputs are all-gathered, the experts' input is all-gathered (its gradient
// reduce-scattered) and the output reduce-scattered (MoeBlock::forward).
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/run_config.hpp"
#include "specs/model_spec.hpp"

namespace planner::rt {

class ParamStore;

// The auxiliary loss coefficient: Switch Transformer's alpha = 1e-2 (Fedus et al. 2022, sec. 2.2).
inline constexpr double kAuxLossCoeff = 0.01;

// The top-k experts of each token (probs: (T, E)), ties to the lower index: (T, k) int64.
at::Tensor route_topk(const at::Tensor& probs, int64_t k);
// Balanced routing's experts (above) for T tokens: (T, k) int64, row t = (t k + j) mod E.
at::Tensor route_balanced(int64_t T, int64_t k, int64_t E, const at::TensorOptions& options);
// E * sum_i f_i * P_i (above) for probs (T, E) and the chosen experts idx (T, k): an fp32 scalar,
// differentiable in probs.
at::Tensor load_balancing_loss(const at::Tensor& probs, const at::Tensor& idx);
// The same from the assignments per expert (int64 (E), expert_counts of the
// flattened idx) and top_k: the form forward() uses, which counts them once.
at::Tensor load_balancing_loss(const at::Tensor& probs, const at::Tensor& counts, int64_t k);
// All-to-all of rows: x (sum send_rows, w...) -> (sum recv_rows, w...), rows in rank order;
// the backward sends the gradient back. `ep` null or of size 1: the identity.
at::Tensor all_to_all_rows(const at::Tensor& x, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, Communicator* ep);
// Returns y unchanged (a copy); its backward also gives `aux` the gradient `scale`.
at::Tensor attach_aux_loss(const at::Tensor& y, const at::Tensor& aux, double scale);

// How the local experts' MLPs run their GEMMs (read from the environment once
// per run; validation/h100x4/moe_fix measured the choices):
//   - bf16 (the default, PLANNER_MOE_GROUPED_MM unset or 1): one
//     at::_grouped_mm for all local experts' fc1 and one for their fc2. One GEMM
//     per expert costs the host a kernel choice per new row count: 1.8x slower
//     steps on 2 H100s, 1.9-2.4x on 4;
//   - other precisions, PLANNER_MOE_GROUPED_MM=0, or a LibTorch whose grouped
//     GEMM refuses the device (said once on stderr): one GEMM per expert, each
//     expert's rows padded with zeros to a multiple of PLANNER_MOE_PAD_ROWS=N
//     (N >= 1, default 1: no padding).
// A value outside those is an InputError naming it.
// PLANNER_MOE_HOST_COUNTS=1 (a diagnosis): with ep = 1 the routed counts
// still go to the host each layer, as they did before the grouped GEMM took
// its group ends on the device (MoeBlock::routed).
struct MoeGemm {
  int64_t pad_rows = 1;
  bool grouped = true;
  bool host_counts = false;
};
MoeGemm moe_gemm_from_env();

struct MoeLayerIds {
  int router = -1, fc1 = -1, fc2 = -1, sh_fc1 = -1, sh_fc2 = -1, sh_gate = -1;
};

class MoeBlock {
 public:
  // Throws InputError for what the runtime does not execute (above).
  MoeBlock(const ModelSpec& spec, Communicator* tp, Communicator* ep, bool sp);
  bool is_moe_layer(int64_t layer) const { return spec_.moe.enabled() && layer >= spec_.moe.dense_layers; }
  // Declares layer `layer`'s router, experts and shared MLP in group `group`.
  void declare(ParamStore& store, int64_t layer, const std::string& prefix, int group);
  // The block's output for the normalised input xn (b, s, h), whole on every
  // tp rank (sp: this rank's sequence shard (b, s/tp, h), and so the output);
  // `grad_scale`: the factor the loss is multiplied by before backward.
  at::Tensor forward(const ParamStore& store, int64_t layer, const at::Tensor& xn, double grad_scale) const;
  int ep_size() const { return ep_size_; }
  // The experts' GEMM switches (from the environment unless set; tests set them).
  void set_gemm(const MoeGemm& g) { gemm_ = g; }
  // The router's top-k (the default) or balanced routing (above).
  void set_routing(MoeRouting r) { routing_ = r; }
  MoeRouting routing() const { return routing_; }
  // The aux loss of the last forward of each layer (detached; for tests).
  mutable std::vector<at::Tensor> last_aux;
  // With ep > 1: the rows this rank's experts received in each layer forward
  // (recomputations included), in order; exec gathers them over the ep group
  // to measure the routing's imbalance (runtime/measure_report.cpp).
  mutable std::vector<double> received_rows;

 private:
  at::Tensor experts(const ParamStore& store, const MoeLayerIds& l, const at::Tensor& x,
                     const std::vector<int64_t>& rows) const;
  at::Tensor routed(const ParamStore& store, const MoeLayerIds& l, const at::Tensor& xs, const at::Tensor& counts) const;
  at::Tensor grouped_experts(const ParamStore& store, const MoeLayerIds& l, const at::Tensor& x,
                             const std::vector<int64_t>& rows) const;
  at::Tensor grouped_mlp(const ParamStore& store, const MoeLayerIds& l, const at::Tensor& x,
                         const at::Tensor& ends) const;
  bool grouped_on(const at::Tensor& x) const;
  at::Tensor activation(const at::Tensor& u) const;

  ModelSpec spec_;
  Communicator* tp_ = nullptr;
  Communicator* ep_ = nullptr;
  int tp_size_ = 1, ep_size_ = 1, ep_rank_ = 0;
  bool sp_ = false;  // sequence parallelism (with tp): input and output are sequence shards
  int64_t local_experts_ = 0;
  MoeGemm gemm_;
  MoeRouting routing_ = MoeRouting::Learned;
  std::vector<MoeLayerIds> ids_;
};

}  // namespace planner::rt

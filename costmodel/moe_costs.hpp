#pragma once
// Mixture of experts in the cost model (docs/MEMORY_MODEL.md and
// docs/TIME_MODEL.md, "Mixture of experts"): the parameters per rank split
// into what the data-parallel group shards (attention, norms, router, shared
// MLP, dense layers, embedding, head) and the local experts (experts/ep of
// them, each split by tp as Megatron-core's default expert tensor-parallel
// size = tp does, sharded by ZeRO over the expert-data-parallel group of
// dp/ep ranks); the activations of a MoE layer; and the times of a MoE layer:
// the router, each local expert's GEMMs at its real token count, the
// permutations, and the all-to-all dispatch and combine over the ep group.
//
// Token imbalance is a stated assumption (MoeSpec::imbalance, default 1 =
// balanced): the busiest rank's experts receive `imbalance` times the
// balanced load, and the step waits for it.
//
// Not modelled: an expert tensor-parallel size other than tp; experts on
// every n-th layer only; the per-stage placement of dense first layers in the
// time model (every layer is priced as the model's mean layer; the memory
// model places them on their stages); token dropping's effect on the loss.
#include <cstdint>
#include <vector>

#include "costmodel/activations.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/layer_costs.hpp"
#include "costmodel/model_states.hpp"
#include "costmodel/op_costs.hpp"
#include "costmodel/topology.hpp"
#include "specs/model_spec.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/strategy.hpp"

namespace planner {

// Tokens each local expert computes per micro-batch on the busiest rank: the
// ep group's tokens (tokens * ep) times top_k over the experts, times the
// imbalance; capped by the capacity capacity_factor * balanced when routing
// drops tokens. Rounded up to a whole token.
int64_t tokens_per_local_expert(const ModelSpec& m, int64_t tokens, int ep);
// Tokens (with multiplicity) whose expert inputs land on the busiest rank per
// micro-batch: tokens * top_k * min(imbalance, capacity) = local experts x the above.
double routed_tokens_per_rank(const ModelSpec& m, int64_t tokens);

// Per rank of tensor-parallel degree tp and expert-parallel degree ep.
struct MoeLayerParams {
  int64_t shared = 0;   // a MoE layer's non-expert parameters: attention, norms, router, shared MLP
  int64_t experts = 0;  // its local experts: experts/ep of them, each split by tp
};
MoeLayerParams moe_layer_params_per_rank(const ModelSpec& m, int tp, int ep);

// A stage's parameters per rank: `stage_params` (stage_params_per_rank, which
// counts every layer as a dense one) corrected for the MoE layers the stage
// holds, split into what ZeRO shards over dp and over the expert-dp group.
struct MoeStageParams {
  int64_t dense = 0;    // sharded over the dp group
  int64_t experts = 0;  // sharded over the expert-data-parallel group (dp/ep)
  int moe_layers = 0;   // MoE layers on the stage
};
// `chunk_layers`: the layers of each virtual stage (index chunk * pp + stage).
MoeStageParams moe_stage_params(const ModelSpec& m, const Strategy& s, int stage, const std::vector<int>& chunk_layers,
                                int64_t stage_params);
// The largest layer's parameters per rank beyond a dense layer's (a MoE
// layer's unit buffers under ZeRO-2/3), 0 for a dense model.
int64_t moe_extra_layer_params_per_rank(const ModelSpec& m, const Strategy& s);

// The strategy of the expert-data-parallel group: dp/ep ranks, ep 1.
Strategy expert_data_parallel(const Strategy& s);
void add_model_states(ModelStateBytes& into, const ModelStateBytes& more);

// Bytes the MLP of the model's mean layer saves for the backward, per
// micro-batch of mbs sequences of seq tokens, dense layers and MoE layers by their counts
// (the MLP term of layer_activation_bytes): the router's fp32 probabilities,
// the permuted expert inputs and the expert outputs kept for the weighted
// combine (replicated over tp), the experts' and the shared MLP's
// intermediates (split over tp), at the busiest rank's routed tokens.
LayerActivationBytes mlp_activation_bytes(const ModelSpec& m, double seq, double mbs, double e,
                                          bool fused_glu = true);
// The all-to-all send and receive buffers of one MoE layer's dispatch and
// combine (alive while the layer runs), bytes per rank; 0 when ep == 1.
double moe_dispatch_buffer_bytes(const ModelSpec& m, const Strategy& s, int64_t seq);

// The MoE block's memory-bound kernels around its GEMMs in one forward (fm)
// and backward (bm), as the runtime runs them (runtime/model/moe.cpp): R
// routed rows of width h from T tokens, e bytes per element, ep > 1 adding
// the gathers into and out of local-expert order, a shared MLP's sum (and
// gate). Bytes by kernel class and kernel counts; moe_costs.cpp itemizes them.
void add_moe_dispatch_ops(double e, double T, double R, double h, int ep, bool shared, bool gate, MemoryOps& fm,
                          MemoryOps& bm);

// One micro-batch through the model's mean layer (dense_layers dense layers
// and the rest MoE, by their counts), on one rank, without the all-to-all
// (moe_all_to_all_seconds): as transformer_layer_times for the dense part.
PassTimes moe_mean_layer_times(const HardwareProfile& p, const ModelSpec& m, const LayerShape& s,
                               const GroupLink& tp_link, int ep);
// The all-to-all of one pass of the mean layer (dispatch and combine) over the
// ep group: the forward's, the backward's is the same.
double moe_all_to_all_seconds(const ModelSpec& m, const LayerShape& s, int ep, const GroupLink& ep_link,
                              double base_latency_s);

// The model's mean layer's parameters per rank (dense and MoE layers by their
// counts): `shared` what ZeRO shards over dp, `experts` the local experts';
// {dense_layer, 0} for a dense model.
MoeLayerParams mean_layer_params_per_rank(const ModelSpec& m, const Strategy& s, int64_t dense_layer);

// The host's seconds in one MoE layer of planner exec (forward, backward)
// for `rows` routed rows on the rank, from the profile's moe_host fields
// (calibrate's moe_host part): ep = 1 from the single-GPU figures; ep > 1
// from the ep group's figures (measured at moe_host_ep_size ranks, taken as
// they are for other ep sizes), else from the single-GPU ones (`ep_unmeasured`).
// `shared`: the layer has a shared MLP (ModelSpec::moe.shared_ffn > 0), which
// adds the profile's moe_host_shared_* figures. Zero where the profile has
// none (`measured` false).
struct MoeHostSeconds {
  double forward = 0, backward = 0;
  bool measured = false, ep_unmeasured = false;
};
MoeHostSeconds moe_host_seconds(const HardwareProfile& p, int ep, double rows, bool shared = false);

// What a MoE layer unit's costs need besides its links.
struct MoeUnitContext {
  const ModelSpec& m;
  const Strategy& s;
  const HardwareProfile& p;
  const ClusterSpec& cluster;
  LayerShape shape;
  double e, eg, base_latency_s, host_Bps;  // element bytes, gradient-reduce bytes, launch latency, host copy rate
};
// A MoE layer unit's additions to its UnitCost: the dispatch and combine
// all-to-alls in each pass (again in a full recomputation); the host floor
// (many small kernels, and at ep > 1 each layer's forward waits for its
// routed counts on the host, so a MoE layer's forward and its all-to-all take
// at least the host's forward seconds, and its backward, recomputation
// included, at least the host's backward seconds, weighted by the share of
// MoE layers in the mean layer; moe_host_seconds); and its local experts'
// gradient reduction, ZeRO gathers, offload copies and optimizer share over
// the expert-data-parallel group (`dense_shard`: the unit's other
// parameters' optimizer shard).
void add_moe_unit_costs(UnitCost& u, const MoeUnitContext& c, const GroupLink& ep_link, const GroupLink& expert_dp_link,
                        double expert_params, double dense_shard);

// The representative rank's expert-parallel and expert-data-parallel groups on
// the topology, every such group with a member on its node running at once.
struct MoeLinks {
  std::vector<GroupLink> ep, expert_dp;  // per stage
};
MoeLinks moe_links(const Topology& topo, const Strategy& s, int gpus_per_node);

}  // namespace planner

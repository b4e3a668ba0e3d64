#pragma once
// ModelSpec: the shape of a transformer, enough to count parameters exactly,
// estimate memory and FLOPs, and build the same model in the runtime.
//
// The parameter count is defined here once (layer_params(), embedding_params(),
// head_params()); the LibTorch model in runtime/ builds exactly these tensors, and a
// test checks that the two agree.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace planner {

enum class Arch { Decoder, Encoder };              // GPT-style causal LM, BERT-style MLM encoder
enum class PosEmbed { Learned, Rotary };
enum class MlpKind { Gelu, Relu, SwiGlu };          // SwiGLU has three matrices (LLaMA)
enum class NormKind { LayerNorm, RmsNorm };         // LayerNorm has weight+bias, RMSNorm weight only
// Which layers attend through the sliding window (ModelSpec::window_layers of
// them): the last ones (Mistral: all; Qwen2: from max_window_layers on), the
// even layers 0, 2, ... (Gemma-2: is_sliding = not layer_idx % 2), the odd ones
// (GPT-Neo's [global, local] pattern), or another placement (Gemma-3's five
// local to one global, a layer_types list of no such shape), which the cost
// model prices by the count alone and the runtime does not build.
// Which layers are windowed: the last window_layers (Mistral, Qwen2), the even
// (Gemma-2) or odd (GPT-Neo's local) ones, all but every window_period-th
// (Period: layer i global when (i + 1) % window_period == 0, Gemma-3's five
// local to one global), or another placement (Other: priced by the count only).
enum class WindowPattern { Last, Even, Odd, Period, Other };

// Mixture of experts (absent when experts == 0): the MLP of every layer past
// the first `dense_layers` is replaced by a router (hidden -> experts, no
// bias), `experts` routed MLPs of inner width `expert_ffn` of which each token
// uses `top_k`, and optionally a shared MLP every token uses. Shapes as in
// Mixtral (Jiang et al. 2024: 8 experts, top 2, no shared, no dense layers),
// Qwen-MoE (60/128 fine-grained experts, Qwen1.5-MoE's one shared expert with
// a sigmoid gate hidden -> 1), DeepSeek-MoE (Dai et al. 2024: shared experts,
// first_k_dense_replace dense layers). Each routed or shared MLP has the
// model's MLP kind (three matrices when gated) and its mlp_bias.
struct MoeSpec {
  int64_t experts = 0;          // routed experts per MoE layer (0: a dense model)
  int64_t top_k = 0;            // routed experts each token goes to
  int64_t expert_ffn = 0;       // inner width of one routed expert
  int64_t shared_experts = 0;   // shared experts (their widths summed in shared_ffn; DeepSeek: n_shared_experts)
  int64_t shared_ffn = 0;       // inner width of the shared MLP every token uses (0: none)
  bool shared_gate = false;     // Qwen2-MoE: sigmoid gate on the shared MLP's output (hidden -> 1, no bias)
  int64_t dense_layers = 0;     // the first dense_layers layers keep the dense MLP of width ffn
  // Expert capacity as a multiple of the balanced load tokens*top_k/experts
  // (GShard/Switch: tokens over capacity are dropped); 0 = dropless, every
  // token is computed (Mixtral, Megatron's default --moe-expert-capacity-factor None).
  double capacity_factor = 0;
  // Token imbalance, a stated assumption (the planner's `assumed:` line names
  // it): the busiest expert receives `imbalance` times the balanced load
  // tokens*top_k/experts, and every expert's step waits for it. 1 = balanced
  // routing (what the auxiliary load-balancing loss aims at); at most
  // experts/top_k (all tokens on one expert). Set by --moe-imbalance.
  double imbalance = 1.0;

  bool enabled() const { return experts > 0; }
  friend bool operator==(const MoeSpec&, const MoeSpec&) = default;
};

struct ModelSpec {
  std::string name;                 // "gpt2-xl", "llama-2-7b", or the config path's stem
  Arch arch = Arch::Decoder;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;             // == heads for multi-head attention; fewer for GQA
  int64_t ffn = 0;                  // MLP inner width
  int64_t vocab = 0;
  int64_t max_positions = 0;        // positions of the learned table (0 for rotary); the table has
                                    // max_positions + position_offset rows
  int64_t position_offset = 0;      // OPT: HF's OPTLearnedPositionalEmbedding keeps 2 extra rows
  int64_t type_vocab = 0;           // BERT token-type embeddings (0 for none)
  int64_t word_embed_dim = 0;       // OPT-350m: embeddings of this width with project_in/out (0 = hidden)
  PosEmbed pos = PosEmbed::Learned;
  MlpKind mlp = MlpKind::Gelu;
  NormKind norm = NormKind::LayerNorm;
  bool qkv_bias = true;             // biases on the q, k, v projections
  bool out_bias = true;             // bias on the attention output projection
  bool mlp_bias = true;             // biases on the MLP projections
  bool parallel_block = false;      // GPT-J: attention and MLP share one input norm
  bool tied_embeddings = true;      // LM head shares the token embedding
  bool lm_head_bias = false;        // GPT-J's untied head has a bias
  bool embed_norm = false;          // BERT: LayerNorm after the embeddings
  bool final_norm = true;           // a norm after the last layer (GPT, OPT, LLaMA); false for BERT (post-LN)
  bool pooler = false;              // BERT pooler (hidden x hidden + bias)
  bool mlm_head = false;            // BERT MLM head transform: dense h x h + bias, LayerNorm, vocab bias
  // Fields of today's decoders (all default to "absent", so older plan files read unchanged):
  int64_t head_size = 0;            // per-head width when it is not hidden/heads (Gemma-2, Qwen3); 0 = hidden/heads
  bool qk_norm = false;             // Qwen3: RMSNorm of width head_dim on q and on k, per layer
  bool sandwich_norm = false;       // Gemma-2: a norm after attention and after the MLP too (4 per layer)
  bool gelu_gate = false;           // gated MLP (mlp = swiglu's three matrices) with GELU instead of SiLU (GeGLU, Gemma)
  double logit_softcap = 0;         // Gemma-2: final logits pass through cap * tanh(logits / cap); the cap (30), 0 = none
  int64_t sliding_window = 0;       // keys each query of a windowed layer attends (itself included); 0 = none
  int64_t window_layers = 0;        // how many of the layers use the window (the others attend globally)
  WindowPattern window_pattern = WindowPattern::Last;  // which ones (the runtime needs it; costs need the count)
  int64_t window_period = 0;        // WindowPattern::Period: every window_period-th layer is global (Gemma-3: 6)
  double rope_theta = 0;            // rotary base (HF rope_theta); 0 = 10000, RoFormer's and Llama-2's. Changes
                                    // neither time nor memory; the exports pass it on (Megatron --rotary-base)
  double rotary_base() const { return rope_theta > 0 ? rope_theta : 10000.0; }
  int64_t published_params = 0;     // the count its authors publish (0 when unknown)
  int64_t default_seq = 0;          // the sequence length it was trained with
  MoeSpec moe;                      // mixture of experts (moe.experts == 0: dense)

  int64_t head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  int64_t q_dim() const { return heads * head_dim(); }      // width of q and of the output projection's input
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  // Layers whose attention is windowed (0 when there is no window, or the
  // window covers the whole sequence `seq`).
  int64_t windowed_layers(int64_t seq) const { return sliding_window > 0 && sliding_window < seq ? window_layers : 0; }
  // Whether layer i (0-based) is one of the window_layers windowed layers
  // (window_pattern, window_period say which); false for WindowPattern::Other.
  bool layer_windowed(int64_t i) const;

  int64_t norm_params() const;        // one norm of width hidden
  int64_t attention_params() const;   // q, k, v, o (+ biases) of one layer
  int64_t mlp_params() const;         // the MLP of one layer
  int64_t layer_params() const;       // attention + mlp + the layer's norms
  int norms_per_layer() const;        // 2 (pre-LN/post-LN), 1 (GPT-J parallel block), 4 (Gemma-2 sandwich)
  int64_t embedding_params() const;   // token (+ position) (+ type) (+ embed norm) (+ project_in)
  int64_t head_params() const;        // final norm + untied head (+ bias) + pooler + MLM head (+ project_out)
  int64_t total_params() const;       // embedding + layers' params + head (every expert counted)

  // Mixture of experts (all equal their dense counterparts' zero when moe is absent):
  int64_t moe_layers() const { return moe.enabled() ? layers - moe.dense_layers : 0; }
  int64_t expert_params() const;      // one routed expert's MLP
  int64_t router_params() const;      // the router of one MoE layer (hidden x experts)
  int64_t shared_expert_params() const;  // the shared MLP of one MoE layer (+ its gate)
  int64_t moe_mlp_params() const;     // router + every routed expert + shared, of one MoE layer
  int64_t moe_layer_params() const;   // attention + moe_mlp + norms: one MoE layer
  // Parameters one token passes through (Megatron's and the MoE papers'
  // "activated"/"active" parameters): every MoE layer counts its router, its
  // shared MLP and top_k routed experts instead of all of them. Equal to
  // total_params() for a dense model.
  int64_t active_params() const;

  // Throws InputError naming what is wrong (zero sizes, heads not dividing hidden,
  // kv_heads not dividing heads...).
  void validate() const;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

// Presets named as Hugging Face names them ("gpt2", "opt-1.3b", "llama-2-7b",
// "bert-base", ...; an "org/" prefix such as "facebook/opt-1.3b" is accepted).
std::vector<std::string> model_preset_names();
// Preset name, or a path to a Hugging Face config.json. Throws InputError with the
// nearest preset name for an unknown one.
ModelSpec resolve_model(std::string_view name_or_path);
// A preset or "gpt" family member by name ("org/" prefix, case-insensitive, HF
// suffixes such as "-hf" accepted); InputError with the nearest name otherwise.
ModelSpec model_preset(std::string_view name);
// Parses a Hugging Face config.json of a decoder by its fields (layers, widths,
// heads, head_dim, biases, norms, gating, sliding window...), whatever its
// model_type; the encoder BERT and the older GPT-2/GPT-Neo/GPT-J/OPT schemas by
// theirs. A field that is read but not modelled and moves time or memory by
// less than ~2% is named in `notes` (one line, "field: why"); one that moves
// them more (mixture of experts, latent attention...) throws InputError naming
// it, unless `ignore_unmodelled`, when it becomes a note too.
struct ModelLoadOptions {
  bool ignore_unmodelled = false;
};
ModelSpec model_from_hf_config(const nlohmann::json& config, std::string name, const ModelLoadOptions& opts = {},
                               std::vector<std::string>* notes = nullptr);
// resolve_model with the loader's options; notes of a config file go to
// `notes`, or to stderr as "note: ..." lines when `notes` is null (never dropped).
ModelSpec resolve_model(std::string_view name_or_path, const ModelLoadOptions& opts,
                        std::vector<std::string>* notes = nullptr);
// The process-wide default for the one-argument resolve_model (the CLI's
// --ignore-unmodelled sets it once, before any model is read).
void set_default_model_load_options(const ModelLoadOptions& opts);

// What the planner's LibTorch runtime does not build of this model (empty when
// it builds all of it): `exec` must refuse such a model rather than time a
// different one.
std::string runtime_model_gap(const ModelSpec& m);

// Exact count of (query, key) pairs of causal attention over `seq` tokens where
// each query attends at most `window` keys (itself and the window - 1 before it;
// window <= 0 or >= seq: all earlier keys): sum over i of min(i + 1, window).
double attended_pairs(int64_t seq, int64_t window);

// Families for the largest-model search: an ordered list of sizes, smallest
// first. "gpt" is a continuous family scaled in width and depth with a fixed
// aspect ratio (hidden/layers as in the GPT-3 paper's table); "gpt2", "gpt-neo",
// "opt", "llama-2" are the preset lists.
std::vector<std::string> model_family_names();
std::vector<ModelSpec> model_family(std::string_view family);

void to_json(nlohmann::json& j, const ModelSpec& m);
void from_json(const nlohmann::json& j, ModelSpec& m);

}  // namespace planner

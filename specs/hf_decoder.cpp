// A Hugging Face decoder config read by its fields, not by its model_type:
// widths, heads, head_dim, biases, norms, gating, tied embeddings, sliding
// windows. Field names and defaults follow the transformers configuration
// classes (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, GemmaConfig,
// Gemma2Config, Gemma3TextConfig, Phi3Config); the module structure each implies
// is the one counted in model_spec.cpp. What the config holds and the cost
// model does not price is named in a note, or refused when it moves time or
// memory by more than ~2% (docs/MODELS.md, "What the loader refuses").
#include <fmt/format.h>

#include <algorithm>

#include "specs/hf_config_reader.hpp"
#include "strategies/parse_util.hpp"

namespace planner::hf {

using nlohmann::json;

int64_t ConfigReader::number(const char* key, int64_t max) const {
  used.insert(key);
  const json& v = j.at(key);
  int64_t x = 0;
  if (v.is_number_integer()) x = v.get<int64_t>();
  else if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(max)) x = v.get<int64_t>();
  else if (v.is_number_unsigned()) fail(fmt::format("field '{}' = {} is absurdly large (at most {})", key, json_excerpt(v), max));
  else fail(fmt::format("field '{}' must be a positive whole number, got {}", key, json_excerpt(v)));
  if (x <= 0) fail(fmt::format("field '{}' must be positive, got {}", key, x));
  if (x > max) fail(fmt::format("field '{}' = {} is absurdly large (at most {})", key, x, max));
  return x;
}

int64_t ConfigReader::required(const char* key, int64_t max) const {
  if (!has(key)) fail(fmt::format("missing required field '{}' for model_type '{}'", key, model_type));
  return number(key, max);
}

double ConfigReader::real(const char* key, double fallback, double max) const {
  if (!has(key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) fail(fmt::format("field '{}' must be a number, got {}", key, json_excerpt(v)));
  const double x = v.get<double>();
  if (!(x > 0) || x > max) fail(fmt::format("field '{}' = {} is out of range (0, {:g}]", key, json_excerpt(v), max));
  return x;
}

bool ConfigReader::flag(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j.at(key).is_boolean()) fail(fmt::format("field '{}' must be true or false, got {}", key, json_excerpt(j.at(key))));
  return j.at(key).get<bool>();
}

std::string ConfigReader::text(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j.at(key).is_string()) fail(fmt::format("field '{}' must be a string, got {}", key, json_excerpt(j.at(key))));
  return j.at(key).get<std::string>();
}

std::string ConfigReader::first_of(std::initializer_list<const char*> keys) const {
  std::string found;
  for (const char* k : keys)
    if (has(k) && found.empty()) found = k;
  return found;
}

namespace {

// Fields that change parameters, memory or time by far more than 2% and that
// the cost model does not price: refused unless --ignore-unmodelled.
struct Unmodelled {
  const char* key;
  const char* what;
};
// Mixture of experts is modelled (read_moe below) in the layouts of Mixtral,
// Qwen2-MoE/Qwen3-MoE and DeepSeek-V2/V3; experts placed otherwise are refused.
constexpr Unmodelled kRefused[] = {
    {"moe_num_experts", "a mixture of experts in a layout the loader does not know"},  // JetMoE, DBRX-style
    {"decoder_sparse_step", "experts on every n-th layer only"},                        // Qwen2-MoE when > 1
    {"mlp_only_layers", "dense layers among the MoE layers"},                           // Qwen2/3-MoE when listed
    {"moe_layer_freq", "experts on every n-th layer only"},                             // DeepSeek when > 1
    {"kv_lora_rank", "multi-head latent attention (DeepSeek's compressed KV)"},
    {"q_lora_rank", "multi-head latent attention (DeepSeek's compressed queries)"},
    {"is_encoder_decoder", "an encoder-decoder"},
};

// A field is "in use" when present with a value that switches it on: a
// positive number, true, or a non-empty string/array/object.
bool switched_on(const json& v, const char* key = "") {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  // decoder_sparse_step and moe_layer_freq are the period of the MoE layers:
  // 1 (every layer) is the modelled layout, only a longer period is not.
  const std::string_view k = key;
  if (v.is_number() && (k == "decoder_sparse_step" || k == "moe_layer_freq")) return v.get<double>() > 1;
  if (v.is_number()) return v.get<double>() > 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

void refuse_unmodelled(const ConfigReader& r, const ModelLoadOptions& opts, std::vector<std::string>& notes) {
  std::string found;
  std::string what;
  for (const auto& u : kRefused) {
    if (!r.j.contains(u.key)) continue;
    r.used.insert(u.key);
    if (!switched_on(r.j.at(u.key), u.key)) continue;
    found += fmt::format("{}{}={}", found.empty() ? "" : ", ", u.key, json_excerpt(r.j.at(u.key)));
    if (what.find(u.what) == std::string::npos) what += (what.empty() ? "" : " and ") + std::string(u.what);
  }
  if (found.empty()) return;
  if (!opts.ignore_unmodelled)
    r.fail(fmt::format("{}: {} is not modelled yet (it changes parameters, memory and time far beyond 2%); "
                       "--ignore-unmodelled plans the model without it",
                       found, what));
  notes.push_back(fmt::format("{} ignored (--ignore-unmodelled): {} is not modelled, so this is the prediction of "
                              "the model without it, not of the model the config describes",
                              found, what));
}

struct Family {
  bool tied = false;                 // tie_word_embeddings default
  bool qkv_bias_fixed = false;       // Qwen2: q, k, v always biased, o never (no attention_bias field)
  bool qk_norm = false;              // Qwen3, Gemma-3
  bool sandwich = false;             // Gemma-2, Gemma-3: four norms per layer
  bool alternate_window = false;     // Gemma-2: even layers local, odd global
  bool window_opt_in = false;        // Qwen2/3: the window applies only with use_sliding_window: true
  const char* act = "silu";          // hidden_act default
  int64_t head_dim = 0;              // head_dim default (Gemma: 256), 0 = hidden/heads
};

// Families the loader knows by name, for the defaults of fields a config may
// leave out and for structure no field states; any other model_type is read as
// a Llama-shaped decoder, with a note saying so.
bool family_of(const std::string& type, Family& f) {
  if (type == "llama" || type == "mistral" || type == "phi3" || type == "mixtral") return true;
  if (type == "qwen2" || type == "qwen2_moe") return f.qkv_bias_fixed = f.window_opt_in = true;
  if (type == "qwen3" || type == "qwen3_moe") return f.qk_norm = f.window_opt_in = true;
  if (type == "deepseek_v2" || type == "deepseek_v3") return true;  // Llama-shaped apart from MLA (refused) and MoE
  if (type == "gemma") {
    f.tied = true, f.act = "gelu_pytorch_tanh", f.head_dim = 256;
    return true;
  }
  if (type == "gemma2") {
    f.tied = f.sandwich = f.alternate_window = true, f.act = "gelu_pytorch_tanh", f.head_dim = 256;
    return true;
  }
  if (type == "gemma3_text") {
    f.tied = f.sandwich = f.qk_norm = true, f.act = "gelu_pytorch_tanh", f.head_dim = 256;
    return true;
  }
  return false;
}

// Which layers attend through the window: layer_types when the config lists
// them (transformers >= 4.53), else the family's pattern.
void read_window(const ConfigReader& r, const Family& fam, ModelSpec& m) {
  const bool use = r.flag("use_sliding_window", !fam.window_opt_in);
  const int64_t w = r.has("sliding_window") ? r.number("sliding_window", kMaxPositions) : 0;
  const int64_t pattern = r.optional("sliding_window_pattern", 0, kMaxLayers);
  const int64_t max_window_layers = r.optional("max_window_layers", -1, kMaxLayers);
  const bool listed = r.has("layer_types");
  if (!use || w == 0) return;
  int64_t windowed = m.layers, period = 0;
  WindowPattern placed = WindowPattern::Last;
  if (listed) {
    const json& t = r.j.at("layer_types");
    if (!t.is_array() || int64_t(t.size()) != m.layers)
      r.fail(fmt::format("field 'layer_types' must list one type per layer ({}), got {}", m.layers, json_excerpt(t)));
    std::vector<bool> each;
    for (const auto& k : t) each.push_back(k == json("sliding_attention"));
    windowed = std::count(each.begin(), each.end(), true);
    placed = window_pattern_of(each, &period);
  } else if (pattern > 0) {
    windowed = m.layers - m.layers / pattern;  // Gemma-3: every pattern-th layer is global
    std::vector<bool> each;
    for (int64_t i = 0; i < m.layers; ++i) each.push_back((i + 1) % pattern != 0);
    placed = window_pattern_of(each, &period);
  } else if (fam.alternate_window) {
    windowed = (m.layers + 1) / 2;  // Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2)
    placed = WindowPattern::Even;
  } else if (max_window_layers >= 0) {
    windowed = std::max<int64_t>(0, m.layers - max_window_layers);  // Qwen2: layers from max_window_layers on
  }
  if (windowed == 0) return;
  m.sliding_window = w;
  m.window_layers = windowed;
  m.window_pattern = placed;
  if (placed == WindowPattern::Period) m.window_period = period;
}

// A mixture of experts by its fields: the routed experts' count
// (num_local_experts: MixtralConfig; num_experts: Qwen2MoeConfig,
// Qwen3MoeConfig; n_routed_experts: DeepseekV2Config), top-k
// (num_experts_per_tok), one expert's width (moe_intermediate_size; Mixtral's
// experts have intermediate_size), the shared MLP (Qwen2-MoE:
// shared_expert_intermediate_size, one shared expert with a sigmoid gate;
// DeepSeek: n_shared_experts experts of moe_intermediate_size, no gate) and
// the dense first layers (DeepSeek's first_k_dense_replace). Routing is
// dropless, as in the transformers modules. Router settings that change
// neither time nor memory (aux-loss coefficient, top-k normalisation) are left
// to the note of unread fields.
void read_moe(const ConfigReader& r, ModelSpec& m) {
  const std::string key = r.first_of({"num_local_experts", "num_experts", "n_routed_experts"});
  if (key.empty()) return;
  const json& v = r.j.at(key);
  if (v.is_number() && v.get<double>() == 0) return;  // 0 experts: dense
  MoeSpec& e = m.moe;
  e.experts = r.number(key.c_str(), 1 << 16);
  e.top_k = r.required("num_experts_per_tok", e.experts);
  e.expert_ffn = r.has("moe_intermediate_size") ? r.number("moe_intermediate_size", 16 * kMaxWidth) : m.ffn;
  if (r.has("shared_expert_intermediate_size")) {
    e.shared_experts = 1;
    e.shared_ffn = r.number("shared_expert_intermediate_size", 16 * kMaxWidth);
    e.shared_gate = true;  // Qwen2MoeSparseMoeBlock.shared_expert_gate
  } else if (r.has("n_shared_experts") && switched_on(r.j.at("n_shared_experts"))) {
    e.shared_experts = r.number("n_shared_experts", 1024);
    e.shared_ffn = e.shared_experts * e.expert_ffn;  // DeepseekV2MoE: one MLP of n_shared x moe_intermediate_size
  }
  if (r.has("first_k_dense_replace") && switched_on(r.j.at("first_k_dense_replace")))
    e.dense_layers = r.number("first_k_dense_replace", kMaxLayers);
  if (e.top_k > e.experts || e.dense_layers >= m.layers)
    r.fail(fmt::format("num_experts_per_tok={} and first_k_dense_replace={} must be below {}={} and num_hidden_layers={}",
                       e.top_k, e.dense_layers, key, e.experts, m.layers));
}

}  // namespace

ModelSpec parse_decoder(const ConfigReader& r, std::string name, const ModelLoadOptions& opts,
                        std::vector<std::string>& notes) {
  refuse_unmodelled(r, opts, notes);
  Family fam;
  if (!family_of(r.model_type, fam))
    notes.push_back(fmt::format("model_type '{}' is not one the loader knows: read as a Llama-shaped decoder "
                                "(pre-norm, rotary, gated MLP, biases as attention_bias/mlp_bias say); check that "
                                "its modules are laid out so",
                                r.model_type));
  ModelSpec m;
  m.name = std::move(name);
  m.layers = r.required("num_hidden_layers", kMaxLayers);
  m.hidden = r.required("hidden_size", kMaxWidth);
  m.heads = r.required("num_attention_heads", kMaxWidth);
  m.kv_heads = r.optional("num_key_value_heads", m.heads, kMaxWidth);
  m.ffn = r.required("intermediate_size", 16 * kMaxWidth);
  m.vocab = r.optional("vocab_size", 32000, kMaxVocab);
  const int64_t head_dim = r.optional("head_dim", fam.head_dim, kMaxWidth);
  if (head_dim > 0 && (m.hidden % m.heads != 0 || head_dim != m.hidden / m.heads)) m.head_size = head_dim;
  // Gemma names the MLP's activation hidden_activation; the others hidden_act.
  const std::string act_key = r.first_of({"hidden_activation", "hidden_act"});
  const std::string act = to_lower(act_key.empty() ? std::string(fam.act) : r.text(act_key.c_str(), fam.act));
  m.mlp = MlpKind::SwiGlu;  // gate_proj, up_proj, down_proj
  if (act.find("gelu") != std::string::npos) m.gelu_gate = true;
  else if (act != "silu" && act != "swish")
    r.fail(fmt::format("field '{}' = '{}' is not modelled (a gated MLP with silu or gelu)", act_key, act));
  m.pos = PosEmbed::Rotary;
  m.max_positions = 0;
  // The rotary base: neither time nor memory, but the exports pass it on.
  if (const double theta = r.real("rope_theta", 10000.0, 1e12); theta != 10000.0) m.rope_theta = theta;
  // RMSNorm unless the config gives LayerNorm's epsilon only.
  const bool rms = r.has("rms_norm_eps") || !r.has("layer_norm_eps");
  m.norm = rms ? NormKind::RmsNorm : NormKind::LayerNorm;
  if (fam.qkv_bias_fixed) {
    m.qkv_bias = true;
    m.out_bias = false;
  } else {
    m.qkv_bias = m.out_bias = r.flag("attention_bias", false);
  }
  m.mlp_bias = r.flag("mlp_bias", false);
  m.qk_norm = fam.qk_norm;
  m.sandwich_norm = fam.sandwich;
  m.tied_embeddings = r.flag("tie_word_embeddings", fam.tied);
  if (r.has("final_logit_softcapping") && switched_on(r.j.at("final_logit_softcapping")))
    m.logit_softcap = r.real("final_logit_softcapping", 0, 1e6);
  m.default_seq = r.optional("max_position_embeddings", 2048, kMaxPositions);
  read_window(r, fam, m);
  read_moe(r, m);
  return m;
}

WindowPattern window_pattern_of(const std::vector<bool>& windowed, int64_t* period) {
  const int64_t n = int64_t(windowed.size());
  auto all = [&](auto pred) {
    for (int64_t i = 0; i < n; ++i)
      if (windowed[size_t(i)] != pred(i)) return false;
    return true;
  };
  const int64_t count = std::count(windowed.begin(), windowed.end(), true);
  if (all([&](int64_t i) { return i >= n - count; })) return WindowPattern::Last;
  if (all([](int64_t i) { return i % 2 == 0; })) return WindowPattern::Even;
  if (all([](int64_t i) { return i % 2 == 1; })) return WindowPattern::Odd;
  for (int64_t p = 3; p <= n; ++p)
    if (all([p](int64_t i) { return (i + 1) % p != 0; })) {
      if (period) *period = p;
      return WindowPattern::Period;
    }
  return WindowPattern::Other;
}

std::vector<bool> gpt_neo_local_layers(const ConfigReader& r, int64_t layers) {
  // GPTNeoConfig.expand_attention_types_params: [[["global", "local"], 12]]
  // repeats the pattern 12 times; its length must equal num_layers.
  if (!r.has("attention_types")) return {};
  const json& spec = r.j.at("attention_types");
  int64_t total = 0;
  std::vector<bool> local;
  auto bad = [&] { r.fail(fmt::format("field 'attention_types' must be [[[\"global\"|\"local\", ...], repeats], ...], got {}", json_excerpt(spec))); };
  if (!spec.is_array()) bad();
  for (const auto& item : spec) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_array() || !item[1].is_number_integer()) bad();
    const int64_t repeats = item[1].get<int64_t>();
    if (repeats < 0 || repeats > kMaxLayers) bad();
    for (const auto& kind : item[0])
      if (kind != "local" && kind != "global") bad();
    for (int64_t k = 0; k < repeats && total <= kMaxLayers; ++k)
      for (const auto& kind : item[0]) local.push_back(kind == "local"), ++total;
  }
  if (total != layers)
    r.fail(fmt::format("field 'attention_types' describes {} layers, num_layers is {}", total, layers));
  return local;
}

void note_unread_fields(const ConfigReader& r, std::vector<std::string>& notes) {
  // Bookkeeping, not the model: never noted.
  static const std::set<std::string> meta = {
      "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "use_cache",
      "initializer_range", "auto_map", "tokenizer_class", "return_dict", "output_attentions",
      "output_hidden_states", "id2label", "label2id", "task_specific_params", "_attn_implementation_autoset",
      "cache_implementation", "use_return_dict", "gradient_checkpointing", "pretraining_tp"};
  std::vector<std::string> unread;
  for (const auto& [key, value] : r.j.items())
    if (!r.used.count(key) && !meta.count(key)) unread.push_back(key);
  if (unread.empty()) return;
  std::string list;
  for (const auto& k : unread) list += (list.empty() ? "" : ", ") + k;
  notes.push_back(fmt::format("{}: not modelled, taken to change neither time nor memory: {}", r.source, list));
}

}  // namespace planner::hf

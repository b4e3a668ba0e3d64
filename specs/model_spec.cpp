// ModelSpec: the parameter count (defined once, here), validation and the JSON
// form stored in plan files.
//
// The counts follow the Hugging Face transformers modules tensor by tensor
// (modeling_gpt2.py, modeling_gpt_neo.py, modeling_gptj.py, modeling_opt.py,
// modeling_bert.py, modeling_llama.py), so that a preset's total_params() equals
// `model.num_parameters()` of the HF model (tied weights counted once).
#include "specs/model_spec.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

// Sanity limits: far beyond any published model, small enough that every
// count below stays far from int64 overflow (1e6 * 1e6 * 1e5 < 9.2e18).
constexpr int64_t kMaxWidth = 1 << 20;        // hidden, ffn, word_embed_dim
constexpr int64_t kMaxLayers = 100'000;
constexpr int64_t kMaxVocab = 10'000'000;
constexpr int64_t kMaxPositions = 100'000'000;

int64_t embed_width(const ModelSpec& m) { return m.word_embed_dim > 0 ? m.word_embed_dim : m.hidden; }
bool has_projection(const ModelSpec& m) { return m.word_embed_dim > 0 && m.word_embed_dim != m.hidden; }

}  // namespace

int64_t ModelSpec::norm_params() const {
  // LayerNorm: weight + bias; RMSNorm (LLaMA): weight only.
  return norm == NormKind::LayerNorm ? 2 * hidden : hidden;
}

int64_t ModelSpec::attention_params() const {
  // q (h -> heads * head_dim) and o (heads * head_dim -> h); k and v are
  // (h -> kv_heads * head_dim), GQA shrinks them. q_dim() == h unless head_size
  // is given (Gemma-2, Qwen3).
  int64_t p = 2 * hidden * q_dim() + 2 * hidden * kv_dim();
  if (qkv_bias) p += q_dim() + 2 * kv_dim();
  if (out_bias) p += hidden;
  // Qwen3 (modeling_qwen3.py q_norm, k_norm): one RMSNorm of width head_dim each,
  // shared by all heads.
  if (qk_norm) p += 2 * (norm == NormKind::LayerNorm ? 2 : 1) * head_dim();
  return p;
}

int64_t ModelSpec::mlp_params() const {
  if (mlp == MlpKind::SwiGlu) {
    // gate_proj and up_proj (h -> ffn), down_proj (ffn -> h).
    int64_t p = 3 * hidden * ffn;
    if (mlp_bias) p += 2 * ffn + hidden;
    return p;
  }
  int64_t p = 2 * hidden * ffn;  // fc_in (h -> ffn), fc_out (ffn -> h)
  if (mlp_bias) p += ffn + hidden;
  return p;
}

int64_t ModelSpec::layer_params() const {
  // Pre-LN GPT/OPT/LLaMA and post-LN BERT alike have two norms per layer;
  // GPT-J's parallel block feeds attention and MLP from one ln_1.
  // Gemma-2 (modeling_gemma2.py) adds post_attention and post_feedforward norms
  // to the two pre-norms: four per layer.
  return attention_params() + mlp_params() + norms_per_layer() * norm_params();
}

int ModelSpec::norms_per_layer() const { return parallel_block ? 1 : sandwich_norm ? 4 : 2; }

double attended_pairs(int64_t seq, int64_t window) {
  const double s = double(seq);
  if (window <= 0 || window >= seq) return s * (s + 1) / 2;  // query i attends keys 0..i
  // The first w queries attend 1..w keys (w(w+1)/2 pairs); each of the other
  // s - w attends exactly w: w(w+1)/2 + (s - w) w = w s - w(w-1)/2.
  const double w = double(window);
  return w * s - w * (w - 1) / 2;
}

std::string runtime_model_gap(const ModelSpec& m) {
  std::vector<std::string> gaps;
  if (m.window_layers > 0 && m.window_pattern == WindowPattern::Other)
    gaps.push_back("sliding windows on this pattern of layers (only all/last, even, odd, or all but every n-th layer)");
  std::string out;
  for (const auto& g : gaps) out += (out.empty() ? "" : ", ") + g;
  return out.empty() ? out : "the runtime does not build " + out;
}

bool ModelSpec::layer_windowed(int64_t i) const {
  if (window_layers <= 0 || i < 0 || i >= layers) return false;
  switch (window_pattern) {
    case WindowPattern::Last: return i >= layers - window_layers;
    case WindowPattern::Even: return i % 2 == 0;
    case WindowPattern::Odd: return i % 2 == 1;
    case WindowPattern::Period: return window_period > 0 && (i + 1) % window_period != 0;
    case WindowPattern::Other: return false;
  }
  return false;
}

int64_t ModelSpec::embedding_params() const {
  int64_t p = vocab * embed_width(*this);                                    // token embedding
  if (pos == PosEmbed::Learned) p += (max_positions + position_offset) * hidden;  // position table
  p += type_vocab * hidden;                                                  // BERT token types
  if (embed_norm) p += norm_params();                                        // BERT embeddings.LayerNorm
  if (has_projection(*this)) p += embed_width(*this) * hidden;               // OPT project_in (no bias)
  return p;
}

int64_t ModelSpec::head_params() const {
  int64_t p = 0;
  if (final_norm) p += norm_params();
  if (has_projection(*this)) p += hidden * embed_width(*this);  // OPT project_out (no bias)
  if (!tied_embeddings) p += vocab * embed_width(*this);        // untied lm_head weight
  if (lm_head_bias) p += vocab;                                 // GPT-J lm_head.bias
  if (pooler) p += hidden * hidden + hidden;                    // BertPooler.dense
  if (mlm_head) p += hidden * hidden + hidden + norm_params() + vocab;  // transform.dense, LayerNorm, decoder.bias
  return p;
}

int64_t ModelSpec::total_params() const {
  const int64_t dense = layers - moe_layers();
  return embedding_params() + dense * layer_params() + moe_layers() * moe_layer_params() + head_params();
}

void ModelSpec::validate() const {
  const std::string who = name.empty() ? std::string("model") : fmt::format("model '{}'", name);
  auto positive = [&](int64_t v, const char* field, int64_t max) {
    if (v <= 0) throw InputError(fmt::format("{}: {} must be positive, got {}", who, field, v));
    if (v > max) throw InputError(fmt::format("{}: {}={} is absurdly large (at most {})", who, field, v, max));
  };
  positive(layers, "layers", kMaxLayers);
  positive(hidden, "hidden", kMaxWidth);
  positive(heads, "heads", kMaxWidth);
  positive(kv_heads, "kv_heads", kMaxWidth);
  positive(ffn, "ffn", 16 * kMaxWidth);
  positive(vocab, "vocab", kMaxVocab);
  if (head_size < 0 || head_size > kMaxWidth)
    throw InputError(fmt::format("{}: head_size={} is out of range 0..{}", who, head_size, kMaxWidth));
  if (head_size == 0 && hidden % heads != 0)
    throw InputError(fmt::format("{}: heads={} does not divide hidden={} (head_dim must be a whole number)", who,
                                 heads, hidden));
  if (heads % kv_heads != 0)
    throw InputError(fmt::format("{}: kv_heads={} does not divide heads={} (each KV head serves a whole group)", who,
                                 kv_heads, heads));
  if (pos == PosEmbed::Learned) positive(max_positions, "max_positions (learned positions need a table)", kMaxPositions);
  if (max_positions < 0 || max_positions > kMaxPositions)
    throw InputError(fmt::format("{}: max_positions={} is out of range", who, max_positions));
  if (position_offset < 0 || position_offset > 1024)
    throw InputError(fmt::format("{}: position_offset={} is out of range 0..1024", who, position_offset));
  if (type_vocab < 0 || type_vocab > 1024)
    throw InputError(fmt::format("{}: type_vocab={} is out of range 0..1024", who, type_vocab));
  if (word_embed_dim < 0 || word_embed_dim > kMaxWidth)
    throw InputError(fmt::format("{}: word_embed_dim={} is out of range", who, word_embed_dim));
  if (default_seq < 0 || default_seq > kMaxPositions)
    throw InputError(fmt::format("{}: default_seq={} is out of range", who, default_seq));
  if (sliding_window < 0 || sliding_window > kMaxPositions)
    throw InputError(fmt::format("{}: sliding_window={} is out of range 0..{}", who, sliding_window, kMaxPositions));
  if (window_layers < 0 || window_layers > layers)
    throw InputError(fmt::format("{}: window_layers={} is out of range 0..layers={}", who, window_layers, layers));
  if ((sliding_window > 0) != (window_layers > 0))
    throw InputError(fmt::format("{}: sliding_window={} and window_layers={} go together (both 0, or both positive)", who,
                                 sliding_window, window_layers));
  if (gelu_gate && mlp != MlpKind::SwiGlu)
    throw InputError(fmt::format("{}: gelu_gate needs the gated MLP (mlp=swiglu)", who));
  if (window_layers > 0 && arch != Arch::Decoder)
    throw InputError(fmt::format("{}: a sliding window is modelled for causal decoders only", who));
  if (window_layers > 0 && window_pattern == WindowPattern::Even && window_layers != (layers + 1) / 2)
    throw InputError(fmt::format("{}: window_pattern=even windows layers 0, 2, ...: window_layers must be {}, got {}", who,
                                 (layers + 1) / 2, window_layers));
  if (window_layers > 0 && window_pattern == WindowPattern::Odd && window_layers != layers / 2)
    throw InputError(fmt::format("{}: window_pattern=odd windows layers 1, 3, ...: window_layers must be {}, got {}", who,
                                 layers / 2, window_layers));
  if ((window_pattern == WindowPattern::Period) != (window_period > 0))
    throw InputError(fmt::format("{}: window_period={} goes with window_pattern=period (and only with it)", who,
                                 window_period));
  if (window_pattern == WindowPattern::Period && (window_period < 2 || window_period > layers ||
                                                  window_layers != layers - layers / window_period))
    throw InputError(fmt::format("{}: window_pattern=period with window_period={} needs 2 <= window_period <= layers={} "
                                 "and window_layers = layers - layers / window_period = {}, got {}",
                                 who, window_period, layers, window_period >= 2 ? layers - layers / window_period : 0,
                                 window_layers));
  if (moe.experts != 0 || moe.top_k != 0 || moe.expert_ffn != 0 || moe.shared_ffn != 0 || moe.dense_layers != 0 ||
      moe.shared_experts != 0 || moe.shared_gate || moe.capacity_factor != 0 || moe.imbalance != 1.0) {
    positive(moe.experts, "moe.experts", 1 << 16);
    if (moe.top_k < 1 || moe.top_k > moe.experts)
      throw InputError(fmt::format("{}: moe.top_k={} must be between 1 and moe.experts={}", who, moe.top_k, moe.experts));
    positive(moe.expert_ffn, "moe.expert_ffn", 16 * kMaxWidth);
    if (moe.shared_ffn < 0 || moe.shared_ffn > 16 * kMaxWidth)
      throw InputError(fmt::format("{}: moe.shared_ffn={} is out of range 0..{}", who, moe.shared_ffn, 16 * kMaxWidth));
    if (moe.shared_experts < 0 || moe.shared_experts > 1024 || (moe.shared_experts > 0) != (moe.shared_ffn > 0))
      throw InputError(fmt::format("{}: moe.shared_experts={} and moe.shared_ffn={} go together (both 0, or both positive)",
                                   who, moe.shared_experts, moe.shared_ffn));
    if (moe.shared_gate && moe.shared_ffn == 0)
      throw InputError(fmt::format("{}: moe.shared_gate needs a shared MLP (moe.shared_ffn > 0)", who));
    if (moe.dense_layers < 0 || moe.dense_layers >= layers)
      throw InputError(fmt::format("{}: moe.dense_layers={} is out of range 0..layers-1={}", who, moe.dense_layers, layers - 1));
    if (!(moe.capacity_factor == 0 || (moe.capacity_factor >= 1.0 / double(moe.top_k) && moe.capacity_factor <= 1024)))
      throw InputError(fmt::format("{}: moe.capacity_factor={} must be 0 (dropless) or between 1/top_k and 1024", who,
                                   moe.capacity_factor));
    if (!(moe.imbalance >= 1.0 && moe.imbalance <= double(moe.experts) / double(moe.top_k)))
      throw InputError(fmt::format("{}: moe.imbalance={} must be between 1 (balanced) and experts/top_k = {}", who,
                                   moe.imbalance, double(moe.experts) / double(moe.top_k)));
    if (arch != Arch::Decoder) throw InputError(fmt::format("{}: mixture of experts is modelled for decoders only", who));
  }
  if (published_params < 0) throw InputError(fmt::format("{}: published_params must not be negative", who));
  if (pooler && arch != Arch::Encoder)
    throw InputError(fmt::format("{}: a pooler only exists on encoders (arch=encoder)", who));
}

// ---------------------------------------------------------------- JSON

namespace {

const char* arch_name(Arch a) { return a == Arch::Encoder ? "encoder" : "decoder"; }
const char* pos_name(PosEmbed p) { return p == PosEmbed::Rotary ? "rotary" : "learned"; }
const char* mlp_name(MlpKind k) {
  switch (k) {
    case MlpKind::Relu: return "relu";
    case MlpKind::SwiGlu: return "swiglu";
    default: return "gelu";
  }
}
const char* norm_name(NormKind n) { return n == NormKind::RmsNorm ? "rmsnorm" : "layernorm"; }

template <typename E>
E enum_field(const nlohmann::json& j, const char* key, std::initializer_list<std::pair<const char*, E>> options,
             const std::string& who) {
  const auto& v = j.at(key);
  std::string allowed;
  for (const auto& [n, e] : options) allowed += (allowed.empty() ? "" : "|") + std::string(n);
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const auto& [n, e] : options)
      if (s == n) return e;
  }
  throw InputError(fmt::format("{}: field '{}' must be one of {}, got {}", who, key, allowed, json_excerpt(v)));
}

int64_t int_field(const nlohmann::json& j, const char* key, const std::string& who) {
  const auto& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return v.get<int64_t>();
  throw InputError(fmt::format("{}: field '{}' must be a whole number, got {}", who, key, json_excerpt(v)));
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& who) {
  const auto& v = j.at(key);
  if (!v.is_boolean()) throw InputError(fmt::format("{}: field '{}' must be true or false, got {}", who, key, json_excerpt(v)));
  return v.get<bool>();
}

}  // namespace

void to_json(nlohmann::json& j, const ModelSpec& m) {
  j = nlohmann::json{
      {"name", m.name},
      {"arch", arch_name(m.arch)},
      {"layers", m.layers},
      {"hidden", m.hidden},
      {"heads", m.heads},
      {"kv_heads", m.kv_heads},
      {"ffn", m.ffn},
      {"vocab", m.vocab},
      {"max_positions", m.max_positions},
      {"position_offset", m.position_offset},
      {"type_vocab", m.type_vocab},
      {"word_embed_dim", m.word_embed_dim},
      {"pos", pos_name(m.pos)},
      {"mlp", mlp_name(m.mlp)},
      {"norm", norm_name(m.norm)},
      {"qkv_bias", m.qkv_bias},
      {"out_bias", m.out_bias},
      {"mlp_bias", m.mlp_bias},
      {"parallel_block", m.parallel_block},
      {"tied_embeddings", m.tied_embeddings},
      {"lm_head_bias", m.lm_head_bias},
      {"embed_norm", m.embed_norm},
      {"final_norm", m.final_norm},
      {"pooler", m.pooler},
      {"mlm_head", m.mlm_head},
      {"published_params", m.published_params},
      {"default_seq", m.default_seq},
  };
  // Written only when present, so that plan files of older models read and
  // compare unchanged.
  if (m.head_size > 0) j["head_size"] = m.head_size;
  if (m.qk_norm) j["qk_norm"] = true;
  if (m.sandwich_norm) j["sandwich_norm"] = true;
  if (m.gelu_gate) j["gelu_gate"] = true;
  if (m.logit_softcap > 0) j["logit_softcap"] = m.logit_softcap;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (m.window_layers > 0) j["window_layers"] = m.window_layers;
  if (m.window_layers > 0 && m.window_pattern != WindowPattern::Last) {
    const WindowPattern w = m.window_pattern;
    j["window_pattern"] = w == WindowPattern::Even     ? "even"
                          : w == WindowPattern::Odd    ? "odd"
                          : w == WindowPattern::Period ? "period"
                                                       : "other";
    if (w == WindowPattern::Period) j["window_period"] = m.window_period;
  }
  if (m.rope_theta > 0) j["rope_theta"] = m.rope_theta;
  if (m.moe.enabled()) {
    nlohmann::json e{{"experts", m.moe.experts}, {"top_k", m.moe.top_k}, {"expert_ffn", m.moe.expert_ffn}};
    if (m.moe.shared_ffn > 0) e["shared_experts"] = m.moe.shared_experts, e["shared_ffn"] = m.moe.shared_ffn;
    if (m.moe.shared_gate) e["shared_gate"] = true;
    if (m.moe.dense_layers > 0) e["dense_layers"] = m.moe.dense_layers;
    if (m.moe.capacity_factor > 0) e["capacity_factor"] = m.moe.capacity_factor;
    if (m.moe.imbalance != 1.0) e["imbalance"] = m.moe.imbalance;
    j["moe"] = std::move(e);
  }
}

namespace {
// The "moe" object of a model's JSON form (the keys to_json writes; unknown
// keys are errors, as for the model).
MoeSpec moe_from_json(const nlohmann::json& j, const std::string& who) {
  if (!j.is_object()) throw InputError(fmt::format("{}: field 'moe' must be an object, got {}", who, json_excerpt(j)));
  static const std::set<std::string> known = {"experts",      "top_k",        "expert_ffn",     "shared_experts",
                                              "shared_ffn",   "shared_gate",  "dense_layers",   "capacity_factor",
                                              "imbalance"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw InputError(fmt::format("{}: unknown field 'moe.{}'", who, key));
  for (const char* req : {"experts", "top_k", "expert_ffn"})
    if (!j.contains(req)) throw InputError(fmt::format("{}: missing required field 'moe.{}'", who, req));
  MoeSpec e;
  e.experts = int_field(j, "experts", who);
  e.top_k = int_field(j, "top_k", who);
  e.expert_ffn = int_field(j, "expert_ffn", who);
  if (j.contains("shared_experts")) e.shared_experts = int_field(j, "shared_experts", who);
  if (j.contains("shared_ffn")) e.shared_ffn = int_field(j, "shared_ffn", who);
  if (j.contains("shared_gate")) e.shared_gate = bool_field(j, "shared_gate", who);
  if (j.contains("dense_layers")) e.dense_layers = int_field(j, "dense_layers", who);
  if (j.contains("capacity_factor")) {
    const auto& v = j.at("capacity_factor");
    if (!v.is_number()) throw InputError(fmt::format("{}: field 'moe.capacity_factor' must be a number, got {}", who, json_excerpt(v)));
    e.capacity_factor = v.get<double>();
  }
  if (j.contains("imbalance")) {
    const auto& v = j.at("imbalance");
    if (!v.is_number()) throw InputError(fmt::format("{}: field 'moe.imbalance' must be a number, got {}", who, json_excerpt(v)));
    e.imbalance = v.get<double>();
  }
  return e;
}
}  // namespace

// Reads the schema that to_json writes. Only layers, hidden, heads and vocab are
// required; kv_heads defaults to heads, ffn to 4 * hidden, the rest to the
// ModelSpec defaults (a GPT-2-style decoder). Unknown keys are errors, so a typo
// is never silently ignored.
void from_json(const nlohmann::json& j, ModelSpec& m) {
  std::string who = "model";
  if (!j.is_object()) throw InputError(fmt::format("model: expected a JSON object, got {}", json_excerpt(j)));
  if (j.contains("name")) {
    if (!j.at("name").is_string()) throw InputError("model: field 'name' must be a string");
    who = fmt::format("model '{}'", j.at("name").get<std::string>());
  }
  static const std::set<std::string> known = {
      "name",     "arch",           "layers",          "hidden",       "heads",      "kv_heads",         "ffn",
      "vocab",    "max_positions",  "position_offset", "type_vocab",   "word_embed_dim", "pos",            "mlp",
      "norm",     "qkv_bias",       "out_bias",        "mlp_bias",     "parallel_block", "tied_embeddings", "lm_head_bias",
      "embed_norm", "final_norm",   "pooler",          "mlm_head",     "published_params", "default_seq",
      "head_size", "qk_norm", "sandwich_norm", "gelu_gate", "logit_softcap", "sliding_window", "window_layers",
      "window_pattern", "window_period", "rope_theta", "moe"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw InputError(fmt::format("{}: unknown field '{}'", who, key));
  for (const char* req : {"layers", "hidden", "heads", "vocab"})
    if (!j.contains(req)) throw InputError(fmt::format("{}: missing required field '{}'", who, req));

  ModelSpec r;
  if (j.contains("name")) r.name = j.at("name").get<std::string>();
  if (j.contains("arch"))
    r.arch = enum_field<Arch>(j, "arch", {{"decoder", Arch::Decoder}, {"encoder", Arch::Encoder}}, who);
  r.layers = int_field(j, "layers", who);
  r.hidden = int_field(j, "hidden", who);
  r.heads = int_field(j, "heads", who);
  r.kv_heads = j.contains("kv_heads") ? int_field(j, "kv_heads", who) : r.heads;
  r.ffn = j.contains("ffn") ? int_field(j, "ffn", who) : 4 * r.hidden;
  r.vocab = int_field(j, "vocab", who);
  if (j.contains("max_positions")) r.max_positions = int_field(j, "max_positions", who);
  if (j.contains("position_offset")) r.position_offset = int_field(j, "position_offset", who);
  if (j.contains("type_vocab")) r.type_vocab = int_field(j, "type_vocab", who);
  if (j.contains("word_embed_dim")) r.word_embed_dim = int_field(j, "word_embed_dim", who);
  if (j.contains("pos"))
    r.pos = enum_field<PosEmbed>(j, "pos", {{"learned", PosEmbed::Learned}, {"rotary", PosEmbed::Rotary}}, who);
  if (j.contains("mlp"))
    r.mlp = enum_field<MlpKind>(j, "mlp", {{"gelu", MlpKind::Gelu}, {"relu", MlpKind::Relu}, {"swiglu", MlpKind::SwiGlu}},
                                who);
  if (j.contains("norm"))
    r.norm = enum_field<NormKind>(j, "norm", {{"layernorm", NormKind::LayerNorm}, {"rmsnorm", NormKind::RmsNorm}}, who);
  struct BoolField { const char* key; bool ModelSpec::*member; };
  static const BoolField bools[] = {
      {"qkv_bias", &ModelSpec::qkv_bias},       {"out_bias", &ModelSpec::out_bias},
      {"mlp_bias", &ModelSpec::mlp_bias},       {"parallel_block", &ModelSpec::parallel_block},
      {"tied_embeddings", &ModelSpec::tied_embeddings}, {"lm_head_bias", &ModelSpec::lm_head_bias},
      {"embed_norm", &ModelSpec::embed_norm},   {"final_norm", &ModelSpec::final_norm},
      {"pooler", &ModelSpec::pooler},           {"mlm_head", &ModelSpec::mlm_head},
      {"qk_norm", &ModelSpec::qk_norm},         {"sandwich_norm", &ModelSpec::sandwich_norm},
      {"gelu_gate", &ModelSpec::gelu_gate},
  };
  for (const auto& b : bools)
    if (j.contains(b.key)) r.*(b.member) = bool_field(j, b.key, who);
  if (j.contains("logit_softcap")) {
    // The cap of cap * tanh(logits / cap); plan files before 2026-11-29 wrote
    // true, which was Gemma-2's 30 (Gemma2Config final_logit_softcapping).
    const auto& v = j.at("logit_softcap");
    if (v.is_boolean()) r.logit_softcap = v.get<bool>() ? 30.0 : 0.0;
    else if (v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1e6) r.logit_softcap = v.get<double>();
    else throw InputError(fmt::format("{}: field 'logit_softcap' must be true/false or a cap in (0, 1e6], got {}", who,
                                      json_excerpt(v)));
  }
  if (j.contains("published_params")) r.published_params = int_field(j, "published_params", who);
  if (j.contains("default_seq")) r.default_seq = int_field(j, "default_seq", who);
  if (j.contains("head_size")) r.head_size = int_field(j, "head_size", who);
  if (j.contains("sliding_window")) r.sliding_window = int_field(j, "sliding_window", who);
  if (j.contains("window_layers")) r.window_layers = int_field(j, "window_layers", who);
  if (j.contains("window_pattern"))
    r.window_pattern = enum_field<WindowPattern>(
        j, "window_pattern",
        {{"last", WindowPattern::Last}, {"even", WindowPattern::Even}, {"odd", WindowPattern::Odd},
         {"period", WindowPattern::Period}, {"other", WindowPattern::Other}},
        who);
  if (j.contains("window_period")) r.window_period = int_field(j, "window_period", who);
  if (j.contains("rope_theta")) {
    const auto& v = j.at("rope_theta");
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1e12)
      throw InputError(fmt::format("{}: field 'rope_theta' must be a number in (0, 1e12], got {}", who, json_excerpt(v)));
    r.rope_theta = v.get<double>() == 10000.0 ? 0 : v.get<double>();
  }
  if (j.contains("moe")) r.moe = moe_from_json(j.at("moe"), who);
  r.validate();
  m = std::move(r);
}

}  // namespace planner

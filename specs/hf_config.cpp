// Hugging Face config.json import, and resolve_model (preset name or file).
//
// Field names and defaults follow the transformers configuration classes
// (GPT2Config, GPTNeoConfig, GPTJConfig, OPTConfig, BertConfig, LlamaConfig);
// the module structure each implies (biases, norms, tied heads) is the one
// counted in model_spec.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kMaxWidth = 1 << 20;
constexpr int64_t kMaxLayers = 100'000;
constexpr int64_t kMaxVocab = 10'000'000;
constexpr int64_t kMaxPositions = 100'000'000;

const std::vector<std::string> kSupportedTypes = {"gpt2", "gpt_neo", "gptj", "opt", "bert", "llama", "mistral"};

// Reads typed fields of one config, with errors naming the source and the field.
struct ConfigReader {
  const json& j;
  std::string source;     // "config 'path/config.json'" or "config of 'name'"
  std::string model_type;

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", source, what)); }

  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  int64_t number(const char* key, int64_t max) const {
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
  int64_t required(const char* key, int64_t max) const {
    if (!has(key)) fail(fmt::format("missing required field '{}' for model_type '{}'", key, model_type));
    return number(key, max);
  }
  int64_t optional(const char* key, int64_t fallback, int64_t max) const { return has(key) ? number(key, max) : fallback; }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_boolean()) fail(fmt::format("field '{}' must be true or false, got {}", key, json_excerpt(j.at(key))));
    return j.at(key).get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_string()) fail(fmt::format("field '{}' must be a string, got {}", key, json_excerpt(j.at(key))));
    return j.at(key).get<std::string>();
  }
};

MlpKind activation(const ConfigReader& r, const char* key, const std::string& fallback) {
  std::string act = to_lower(r.text(key, fallback));
  if (act.find("relu") != std::string::npos) return MlpKind::Relu;
  if (act.find("gelu") != std::string::npos) return MlpKind::Gelu;
  r.fail(fmt::format("field '{}' = '{}' is not supported here (gelu or relu)", key, act));
}

ModelSpec parse_hf(const json& config, std::string name, const std::string& source) {
  if (!config.is_object()) throw InputError(fmt::format("{}: expected a JSON object", source));
  if (!config.contains("model_type"))
    throw InputError(fmt::format("{}: missing field 'model_type' (supported: {})", source, fmt::join(kSupportedTypes, ", ")));
  if (!config.at("model_type").is_string())
    throw InputError(fmt::format("{}: field 'model_type' must be a string, one of {}; got {}", source,
                                 fmt::join(kSupportedTypes, ", "), json_excerpt(config.at("model_type"))));
  ConfigReader r{config, source, config.at("model_type").get<std::string>()};
  const std::string& type = r.model_type;

  ModelSpec m;
  m.name = std::move(name);
  if (type == "gpt2") {
    // GPT2Config: n_inner None -> 4 * n_embd; biases everywhere (Conv1D), tied head.
    m.layers = r.required("n_layer", kMaxLayers);
    m.hidden = r.required("n_embd", kMaxWidth);
    m.heads = m.kv_heads = r.required("n_head", kMaxWidth);
    m.max_positions = r.optional("n_positions", 1024, kMaxPositions);
    m.ffn = r.optional("n_inner", 4 * m.hidden, 16 * kMaxWidth);
    m.vocab = r.optional("vocab_size", 50257, kMaxVocab);
    m.mlp = activation(r, "activation_function", "gelu_new");
    m.tied_embeddings = r.flag("tie_word_embeddings", true);
    m.default_seq = m.max_positions;
  } else if (type == "gpt_neo") {
    // GPTNeoConfig: q/k/v without bias, out_proj with bias; intermediate_size None -> 4h.
    m.layers = r.required("num_layers", kMaxLayers);
    m.hidden = r.required("hidden_size", kMaxWidth);
    m.heads = m.kv_heads = r.required("num_heads", kMaxWidth);
    m.max_positions = r.optional("max_position_embeddings", 2048, kMaxPositions);
    m.ffn = r.optional("intermediate_size", 4 * m.hidden, 16 * kMaxWidth);
    m.vocab = r.optional("vocab_size", 50257, kMaxVocab);
    m.mlp = activation(r, "activation_function", "gelu_new");
    m.qkv_bias = false;
    m.tied_embeddings = r.flag("tie_word_embeddings", true);
    m.default_seq = m.max_positions;
  } else if (type == "gptj") {
    // GPTJConfig: rotary, attention without biases, one ln_1 per block (parallel
    // attention + MLP), untied lm_head with bias.
    m.layers = r.required("n_layer", kMaxLayers);
    m.hidden = r.required("n_embd", kMaxWidth);
    m.heads = m.kv_heads = r.required("n_head", kMaxWidth);
    m.ffn = r.optional("n_inner", 4 * m.hidden, 16 * kMaxWidth);
    m.vocab = r.optional("vocab_size", 50400, kMaxVocab);
    m.mlp = activation(r, "activation_function", "gelu_new");
    m.pos = PosEmbed::Rotary;
    m.max_positions = 0;
    m.qkv_bias = m.out_bias = false;
    m.parallel_block = true;
    m.tied_embeddings = r.flag("tie_word_embeddings", false);
    m.lm_head_bias = !m.tied_embeddings;
    m.default_seq = r.optional("n_positions", 2048, kMaxPositions);
  } else if (type == "opt") {
    // OPTConfig: learned positions with 2 extra rows, optional project_in/out
    // when word_embed_proj_dim != hidden_size, post-LN when do_layer_norm_before
    // is false (then no final LayerNorm), enable_bias for all linear biases.
    m.layers = r.required("num_hidden_layers", kMaxLayers);
    m.hidden = r.required("hidden_size", kMaxWidth);
    m.heads = m.kv_heads = r.required("num_attention_heads", kMaxWidth);
    m.ffn = r.required("ffn_dim", 16 * kMaxWidth);
    m.max_positions = r.optional("max_position_embeddings", 2048, kMaxPositions);
    m.position_offset = 2;
    m.vocab = r.optional("vocab_size", 50272, kMaxVocab);
    int64_t proj = r.optional("word_embed_proj_dim", m.hidden, kMaxWidth);
    m.word_embed_dim = proj == m.hidden ? 0 : proj;
    m.mlp = activation(r, "activation_function", "relu");
    bool bias = r.flag("enable_bias", true);
    m.qkv_bias = m.out_bias = m.mlp_bias = bias;
    m.final_norm = r.flag("do_layer_norm_before", true) && !r.flag("_remove_final_layer_norm", false);
    if (!r.flag("layer_norm_elementwise_affine", true))
      r.fail("layer_norm_elementwise_affine=false is not supported (norms without parameters)");
    m.tied_embeddings = r.flag("tie_word_embeddings", true);
    m.default_seq = m.max_positions;
  } else if (type == "bert") {
    // BertConfig: post-LN encoder with embeddings LayerNorm; the BertForPreTraining
    // checkpoint holds the pooler and the MLM head (decoder tied, own bias).
    m.arch = Arch::Encoder;
    m.layers = r.required("num_hidden_layers", kMaxLayers);
    m.hidden = r.required("hidden_size", kMaxWidth);
    m.heads = m.kv_heads = r.required("num_attention_heads", kMaxWidth);
    m.ffn = r.required("intermediate_size", 16 * kMaxWidth);
    m.max_positions = r.optional("max_position_embeddings", 512, kMaxPositions);
    m.type_vocab = r.optional("type_vocab_size", 2, 1024);
    m.vocab = r.optional("vocab_size", 30522, kMaxVocab);
    m.mlp = activation(r, "hidden_act", "gelu");
    if (r.text("position_embedding_type", "absolute") != "absolute")
      r.fail("only position_embedding_type 'absolute' is supported");
    m.embed_norm = true;
    m.final_norm = false;
    m.pooler = true;
    m.mlm_head = true;
    m.tied_embeddings = r.flag("tie_word_embeddings", true);
    m.default_seq = m.max_positions;
  } else if (type == "llama" || type == "mistral") {
    // LlamaConfig: rotary, RMSNorm, SwiGLU; num_key_value_heads defaults to
    // num_attention_heads; attention_bias/mlp_bias default false; untied head.
    m.layers = r.required("num_hidden_layers", kMaxLayers);
    m.hidden = r.required("hidden_size", kMaxWidth);
    m.heads = r.required("num_attention_heads", kMaxWidth);
    m.kv_heads = r.optional("num_key_value_heads", m.heads, kMaxWidth);
    m.ffn = r.required("intermediate_size", 16 * kMaxWidth);
    m.vocab = r.optional("vocab_size", 32000, kMaxVocab);
    if (r.has("head_dim") && m.hidden % m.heads == 0 && r.number("head_dim", kMaxWidth) != m.hidden / m.heads)
      r.fail(fmt::format("head_dim={} differs from hidden_size/num_attention_heads={}; not supported",
                         r.number("head_dim", kMaxWidth), m.hidden / m.heads));
    std::string act = to_lower(r.text("hidden_act", "silu"));
    if (act != "silu" && act != "swish") r.fail(fmt::format("hidden_act '{}' is not supported (silu)", act));
    m.pos = PosEmbed::Rotary;
    m.max_positions = 0;
    m.mlp = MlpKind::SwiGlu;
    m.norm = NormKind::RmsNorm;
    m.qkv_bias = m.out_bias = r.flag("attention_bias", false);
    m.mlp_bias = r.flag("mlp_bias", false);
    m.tied_embeddings = r.flag("tie_word_embeddings", false);
    m.default_seq = r.optional("max_position_embeddings", 2048, kMaxPositions);
  } else {
    r.fail(fmt::format("model_type '{}' is not supported (supported: {})", type, fmt::join(kSupportedTypes, ", ")));
  }
  try {
    m.validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", source, e.what()));
  }
  return m;
}

std::string model_name_for(const fs::path& path, const json& config) {
  std::string stem = path.stem().string();
  if (stem != "config") return stem;
  // ".../Llama-2-7b-hf/config.json": the folder names the model.
  if (config.is_object() && config.contains("_name_or_path") && config.at("_name_or_path").is_string()) {
    std::string n = config.at("_name_or_path").get<std::string>();
    if (!n.empty()) return fs::path(n).filename().string();
  }
  std::string dir = fs::absolute(path).parent_path().filename().string();
  return dir.empty() ? stem : dir;
}

ModelSpec load_model_file(const fs::path& path) {
  std::string shown = path.string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(fmt::format("model config '{}' not found (give a preset name such as 'gpt2' or a path to a "
                                 "Hugging Face config.json)",
                                 shown));
  if (!fs::is_regular_file(path, ec)) throw InputError(fmt::format("model config '{}' is not a file", shown));
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("model config '{}' cannot be read", shown));
  std::stringstream ss;
  ss << in.rdbuf();
  const json config = parse_json_text(ss.str(), "model config", fmt::format("'{}'", shown));
  std::string source = fmt::format("model config '{}'", shown);
  if (config.is_object() && !config.contains("model_type") && config.contains("layers")) {
    // The planner's own ModelSpec schema (as written into plan files).
    try {
      ModelSpec m;
      from_json(config, m);
      if (m.name.empty()) m.name = valid_utf8(path.stem().string());
      return m;
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", source, e.what()));
    }
  }
  return parse_hf(config, valid_utf8(model_name_for(path, config)), source);
}

}  // namespace

ModelSpec model_from_hf_config(const json& config, std::string name) {
  std::string source = fmt::format("Hugging Face config of '{}'", name);
  return parse_hf(config, std::move(name), source);
}

ModelSpec resolve_model(std::string_view name_or_path) {
  std::string s = trim(name_or_path);
  if (s.empty()) throw InputError("model: expected a preset name (e.g. gpt2, llama-2-7b) or a path to a config.json, got nothing");
  std::error_code ec;
  fs::path p(s);
  if (to_lower(s).ends_with(".json") || fs::is_regular_file(p, ec)) return load_model_file(p);
  if (fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec)) return load_model_file(p / "config.json");
  return model_preset(s);
}

}  // namespace planner

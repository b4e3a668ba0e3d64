// Hugging Face config.json import, and resolve_model (preset name or file).
//
// Field names and defaults follow the transformers configuration classes
// (GPT2Config, GPTNeoConfig, GPTJConfig, OPTConfig, BertConfig, LlamaConfig);
// the module structure each implies (biases, norms, tied heads) is the one
// counted in model_spec.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "specs/hf_config_reader.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using hf::ConfigReader;
using hf::kMaxLayers;
using hf::kMaxPositions;
using hf::kMaxVocab;
using hf::kMaxWidth;

// The older schemas, read by their own field names; every other model_type is
// read as a decoder by its fields (hf_decoder.cpp).
const std::vector<std::string> kOwnSchemas = {"gpt2", "gpt_neo", "gptj", "opt", "bert"};

ModelLoadOptions& default_options() {
  static ModelLoadOptions opts;
  return opts;
}

MlpKind activation(const ConfigReader& r, const char* key, const std::string& fallback) {
  std::string act = to_lower(r.text(key, fallback));
  if (act.find("relu") != std::string::npos) return MlpKind::Relu;
  if (act.find("gelu") != std::string::npos) return MlpKind::Gelu;
  r.fail(fmt::format("field '{}' = '{}' is not supported here (gelu or relu)", key, act));
}

ModelSpec parse_hf(const json& config, std::string name, const std::string& source, const ModelLoadOptions& opts,
                   std::vector<std::string>& notes) {
  if (!config.is_object()) throw InputError(fmt::format("{}: expected a JSON object", source));
  if (!config.contains("model_type"))
    throw InputError(fmt::format("{}: missing field 'model_type' (a decoder's, or one of {})", source,
                                 fmt::join(kOwnSchemas, ", ")));
  if (!config.at("model_type").is_string())
    throw InputError(fmt::format("{}: field 'model_type' must be a string (a decoder's, or one of {}); got {}", source,
                                 fmt::join(kOwnSchemas, ", "), json_excerpt(config.at("model_type"))));
  ConfigReader r{config, source, config.at("model_type").get<std::string>(), {}};
  const std::string& type = r.model_type;

  ModelSpec m;
  m.name = std::move(name);
  if (type == "gpt2") {
    // GPT2Config: n_inner None -> 4 * n_embd; biases everywhere (Conv1D), tied head.
    m.layers = r.required("n_layer", kMaxLayers);
    m.hidden = r.required("n_embd", kMaxWidth);
    m.heads = m.kv_heads = r.required("n_head", kMaxWidth);
    m.max_positions = r.optional("n_positions", 1024, kMaxPositions);
    // n_ctx: the context length older GPT-2 configs carry beside n_positions (the
    // same number in every published one); the position table is n_positions.
    r.optional("n_ctx", m.max_positions, kMaxPositions);
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
    // Local layers (GPTNeoSelfAttention, attention_type "local") see the last
    // window_size keys. The gpt-neo presets keep them global, as the runtime
    // builds GPT-Neo and as the validation sweeps measured it (docs/MODELS.md).
    const std::vector<bool> local = hf::gpt_neo_local_layers(r, m.layers);
    if (const int64_t n = std::count(local.begin(), local.end(), true); n > 0) {
      m.sliding_window = r.optional("window_size", 256, kMaxPositions);
      m.window_layers = n;
      m.window_pattern = hf::window_pattern_of(local, &m.window_period);
    }
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
  } else {
    m = hf::parse_decoder(r, std::move(m.name), opts, notes);
  }
  try {
    m.validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", source, e.what()));
  }
  hf::note_unread_fields(r, notes);
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

ModelSpec load_model_file(const fs::path& path, const ModelLoadOptions& opts, std::vector<std::string>& notes) {
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
  return parse_hf(config, valid_utf8(model_name_for(path, config)), source, opts, notes);
}

}  // namespace

ModelSpec model_from_hf_config(const json& config, std::string name, const ModelLoadOptions& opts,
                               std::vector<std::string>* notes) {
  std::string source = fmt::format("Hugging Face config of '{}'", name);
  std::vector<std::string> local;
  ModelSpec m = parse_hf(config, std::move(name), source, opts, notes ? *notes : local);
  for (const auto& n : local) std::cerr << "note: " << n << "\n";
  return m;
}

void set_default_model_load_options(const ModelLoadOptions& opts) { default_options() = opts; }

ModelSpec resolve_model(std::string_view name_or_path) { return resolve_model(name_or_path, default_options()); }

ModelSpec resolve_model(std::string_view name_or_path, const ModelLoadOptions& opts, std::vector<std::string>* notes) {
  std::string s = trim(name_or_path);
  if (s.empty()) throw InputError("model: expected a preset name (e.g. gpt2, llama-2-7b) or a path to a config.json, got nothing");
  std::error_code ec;
  fs::path p(s);
  std::vector<std::string> local;
  std::vector<std::string>& out = notes ? *notes : local;
  ModelSpec m;
  if (to_lower(s).ends_with(".json") || fs::is_regular_file(p, ec)) m = load_model_file(p, opts, out);
  else if (fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec)) m = load_model_file(p / "config.json", opts, out);
  else m = model_preset(s);
  // Nothing the loader noted is dropped: without a caller to take the notes, stderr.
  for (const auto& n : local) std::cerr << "note: " << n << "\n";
  return m;
}

}  // namespace planner

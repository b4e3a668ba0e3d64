// Model presets (named as Hugging Face names them) and model families.
//
// Every preset's shape is the published config.json of its checkpoint on the
// Hugging Face hub; published_params is the count its authors or the hub
// publish, and tests check total_params() against it within 1%. Where the only
// published figure is the model's rounded name and that rounding is coarser
// than 1% (GPT-Neo 1.3B/2.7B, OPT-1.3b/2.7b/13b), published_params holds the
// count that transformers reports for the checkpoint (model.num_parameters(),
// tied weights counted once) and the comment says so. Every preset's
// total_params() was checked equal to num_parameters() of transformers 5.17
// (each model built from its config on the meta device); the unit test keeps
// those counts.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <map>
#include <set>

#include "specs/model_presets_current.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

// GPT-2 (Radford et al. 2019; openai-community/gpt2*): learned positions,
// LayerNorm, biases everywhere, GELU, tied head, vocab 50257, 1024 positions.
ModelSpec gpt2(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t published) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = m.kv_heads = heads;
  m.ffn = 4 * hidden;
  m.vocab = 50257;
  m.max_positions = 1024;
  m.published_params = published;
  m.default_seq = 1024;
  return m;
}

// GPT-Neo (EleutherAI/gpt-neo-*): GPT-2 layout, but q/k/v have no bias
// (GPTNeoSelfAttention: bias=False; out_proj has one), 2048 positions.
ModelSpec gpt_neo(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t published) {
  ModelSpec m = gpt2(std::move(name), layers, hidden, heads, published);
  m.qkv_bias = false;
  m.max_positions = 2048;
  m.default_seq = 2048;
  return m;
}

// OPT (Zhang et al. 2022, facebook/opt-*): ReLU MLP with biases, learned
// positions with HF's offset of 2 rows (OPTLearnedPositionalEmbedding),
// vocab 50272, tied head, pre-LN with a final LayerNorm except opt-350m.
ModelSpec opt(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t ffn, int64_t published) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = m.kv_heads = heads;
  m.ffn = ffn;
  m.vocab = 50272;
  m.max_positions = 2048;
  m.position_offset = 2;
  m.mlp = MlpKind::Relu;
  m.published_params = published;
  m.default_seq = 2048;
  return m;
}

// BERT (Devlin et al. 2019, bert-*-uncased): post-LN encoder, embeddings
// LayerNorm, token types, pooler, MLM head (transform + LayerNorm + vocab bias,
// decoder tied to the word embedding), 512 positions.
ModelSpec bert(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t published) {
  ModelSpec m;
  m.name = std::move(name);
  m.arch = Arch::Encoder;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = m.kv_heads = heads;
  m.ffn = 4 * hidden;
  m.vocab = 30522;
  m.max_positions = 512;
  m.type_vocab = 2;
  m.embed_norm = true;
  m.final_norm = false;
  m.pooler = true;
  m.mlm_head = true;
  m.published_params = published;
  m.default_seq = 512;
  return m;
}

// LLaMA (Touvron et al. 2023; meta-llama/*): rotary positions, RMSNorm, SwiGLU
// (gate, up, down), no biases, untied head.
ModelSpec llama(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                int64_t vocab, int64_t seq, int64_t published) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn = ffn;
  m.vocab = vocab;
  m.max_positions = 0;
  m.pos = PosEmbed::Rotary;
  m.mlp = MlpKind::SwiGlu;
  m.norm = NormKind::RmsNorm;
  m.qkv_bias = m.out_bias = m.mlp_bias = false;
  m.tied_embeddings = false;
  m.published_params = published;
  m.default_seq = seq;
  return m;
}

const std::vector<ModelSpec>& presets() {
  static const std::vector<ModelSpec> all = [] {
    std::vector<ModelSpec> v;
    // GPT-2: 124,439,808 is transformers' count of openai-community/gpt2; the
    // others are OpenAI's release names (models 355M, 774M, 1558M in openai/gpt-2).
    v.push_back(gpt2("gpt2", 12, 768, 12, 124'439'808));
    v.push_back(gpt2("gpt2-medium", 24, 1024, 16, 355'000'000));
    v.push_back(gpt2("gpt2-large", 36, 1280, 20, 774'000'000));
    v.push_back(gpt2("gpt2-xl", 48, 1600, 25, 1'558'000'000));
    // GPT-Neo: EleutherAI's names are 125M, 1.3B, 2.7B. The two larger names are
    // 1.2% and 1.8% from the checkpoints' counts, so those hold transformers'
    // num_parameters() of EleutherAI/gpt-neo-1.3B and -2.7B.
    v.push_back(gpt_neo("gpt-neo-125m", 12, 768, 12, 125'000'000));
    v.push_back(gpt_neo("gpt-neo-1.3b", 24, 2048, 16, 1'315'575'808));
    v.push_back(gpt_neo("gpt-neo-2.7b", 32, 2560, 20, 2'651'307'520));
    {
      // GPT-J-6B (EleutherAI/gpt-j-6b model card: n_parameters 6,053,381,344,
      // 28 layers, d_model 4096, d_ff 16384, 16 heads, rotary dim 64, n_vocab
      // 50257 padded to 50400 in the checkpoint). Attention has no biases; one
      // ln_1 feeds attention and MLP in parallel; untied lm_head with a bias.
      ModelSpec m = gpt2("gpt-j-6b", 28, 4096, 16, 6'053'381'344);
      m.vocab = 50400;
      m.max_positions = 0;
      m.pos = PosEmbed::Rotary;
      m.qkv_bias = false;
      m.out_bias = false;
      m.parallel_block = true;
      m.tied_embeddings = false;
      m.lm_head_bias = true;
      m.default_seq = 2048;
      v.push_back(m);
    }
    // OPT: sizes from Zhang et al. 2022, Table 1 (125M ... 175B). opt-350m's
    // 331M, and opt-1.3b/2.7b/13b, are transformers' counts of the facebook/
    // checkpoints (their names are 1.2%, 1.8% and 1.1% off).
    v.push_back(opt("opt-125m", 12, 768, 12, 3072, 125'000'000));
    {
      // opt-350m: 512-wide word embeddings with project_in/project_out, and
      // post-LN (do_layer_norm_before=false), so no final LayerNorm.
      ModelSpec m = opt("opt-350m", 24, 1024, 16, 4096, 331'196'416);
      m.word_embed_dim = 512;
      m.final_norm = false;
      v.push_back(m);
    }
    v.push_back(opt("opt-1.3b", 24, 2048, 32, 8192, 1'315'758'080));
    v.push_back(opt("opt-2.7b", 32, 2560, 32, 10240, 2'651'596'800));
    v.push_back(opt("opt-6.7b", 32, 4096, 32, 16384, 6'700'000'000));
    v.push_back(opt("opt-13b", 40, 5120, 40, 20480, 12'853'473'280));
    v.push_back(opt("opt-30b", 48, 7168, 56, 28672, 30'000'000'000));
    v.push_back(opt("opt-66b", 64, 9216, 72, 36864, 66'000'000'000));
    v.push_back(opt("opt-175b", 96, 12288, 96, 49152, 175'000'000'000));
    // BERT: 110M (Devlin et al. 2019 and the bert-base-uncased card). For
    // BERT-Large the paper says 340M but the bert-large-uncased card says 336M,
    // which is what the checkpoint holds (the paper's figure is 1.1% high).
    v.push_back(bert("bert-base", 12, 768, 12, 110'000'000));
    v.push_back(bert("bert-large", 24, 1024, 16, 336'000'000));
    // LLaMA 2 (Touvron et al. 2023, Llama-2-*-hf configs; 70B uses GQA with 8
    // KV heads). Published sizes as on the hub's model pages: 6.74B, 13.0B, 69.0B.
    v.push_back(llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6'740'000'000));
    v.push_back(llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13'000'000'000));
    v.push_back(llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 69'000'000'000));
    // Llama 3 (Meta-Llama-3-8B / -70B configs: vocab 128256, GQA with 8 KV
    // heads, 8192 context). Hub sizes 8.03B and 70.6B.
    // Rotary base 500000 (rope_theta of both configs).
    for (auto m : {llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8'030'000'000),
                   llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 70'600'000'000)}) {
      m.rope_theta = 500000;
      v.push_back(m);
    }
    add_current_presets(v);
    return v;
  }();
  return all;
}

// ------------------------------------------------------------ "gpt" family
//
// A continuous GPT family for the largest-model search. Shape rules:
//  * aspect ratio hidden / layers = 128, as in the GPT-3 paper's Table 2.1
//    for its 6.7B (4096/32), 13B (5140/40) and 175B (12288/96) models; the
//    smaller GPT-3 models are deeper (64-85), but one fixed ratio keeps the
//    family a single curve, so that "the largest that fits" is well defined;
//  * hidden a multiple of 128, layers = round(hidden / 128);
//  * head_dim 128 (as GPT-3 from 6.7B on), 64 below hidden 2048;
//  * otherwise GPT-2/GPT-3: ffn 4h, vocab 50257, 2048 learned positions,
//    biases, LayerNorm, GELU, tied head.
// Sizes grow from ~100M to ~1.5T; a size is kept when it has at least 10%
// more parameters than the last one kept. With hidden = 128k and layers = k,
// params grow as ~k^3, so the candidates are (1 + 1/k)^3 apart: below ~4B
// (k < 31) every k is kept and steps are 10-40%; above, steps are 10-20%
// (largest around 4-5B, where one k is just under 10% and two are ~20%).
constexpr int64_t kGptAspect = 128;
constexpr double kGptStep = 1.10;

ModelSpec gpt_family_member(int64_t hidden) {
  ModelSpec m;
  m.layers = (hidden + kGptAspect / 2) / kGptAspect;
  m.hidden = hidden;
  int64_t head_dim = hidden < 2048 ? 64 : 128;
  m.heads = m.kv_heads = hidden / head_dim;
  m.ffn = 4 * hidden;
  m.vocab = 50257;
  m.max_positions = 2048;
  m.default_seq = 2048;
  return m;
}

// "gpt-125m", "gpt-1.3b", "gpt-13b", "gpt-175b", "gpt-1.2t"; the steps between
// sizes (>= 12%) are wider than each format's rounding, so names are unique.
std::string gpt_family_name(int64_t params, int extra_digits) {
  double p = static_cast<double>(params);
  std::string num;
  char unit;
  if (p < 999.5e6) { num = fmt::format("{:.{}f}", p / 1e6, extra_digits); unit = 'm'; }
  else if (p < 9.95e9) { num = fmt::format("{:.{}f}", p / 1e9, 1 + extra_digits); unit = 'b'; }
  else if (p < 999.5e9) { num = fmt::format("{:.{}f}", p / 1e9, extra_digits); unit = 'b'; }
  else { num = fmt::format("{:.{}f}", p / 1e12, 1 + extra_digits); unit = 't'; }
  if (extra_digits == 0 && num.size() > 2 && num.ends_with(".0")) num.resize(num.size() - 2);
  return "gpt-" + num + unit;
}

const std::vector<ModelSpec>& gpt_family() {
  static const std::vector<ModelSpec> all = [] {
    std::vector<ModelSpec> v;
    std::set<std::string> names;
    int64_t last = 0;
    for (int64_t hidden = 7 * 128; hidden <= 256 * 128; hidden += 128) {
      ModelSpec m = gpt_family_member(hidden);
      int64_t p = m.total_params();
      if (last > 0 && static_cast<double>(p) < kGptStep * static_cast<double>(last)) continue;
      int extra = 0;
      do m.name = gpt_family_name(p, extra++);
      while (names.count(m.name));  // defensive: the rounding argument above says never
      names.insert(m.name);
      last = p;
      v.push_back(m);
      if (p > 1.5e12) break;
    }
    return v;
  }();
  return all;
}

// ------------------------------------------------------------ name lookup

// Lower-cases, drops an "org/" prefix and the hub's variant suffixes that do
// not change the shape ("-hf", "-chat", "-instruct", "-uncased").
std::string normalize_model_name(std::string_view raw) {
  std::string s = to_lower(trim(raw));
  if (auto slash = s.find('/'); slash != std::string::npos && s.find('/', slash + 1) == std::string::npos)
    s = s.substr(slash + 1);
  // "-base" only for Qwen's names (Qwen3-8B-Base): bert-base is a preset's own name.
  if (s.starts_with("qwen") && s.ends_with("-base")) s.resize(s.size() - 5);
  for (const char* suffix : {"-hf", "-chat", "-instruct", "-uncased", "-it"})
    if (s.size() > std::string_view(suffix).size() && s.ends_with(suffix)) s.resize(s.size() - std::string_view(suffix).size());
  if (s.starts_with("meta-llama-")) s = s.substr(5);  // Meta-Llama-3-8B
  if (s.starts_with("llama2-")) s = "llama-2-" + s.substr(7);
  if (s.starts_with("llama3-")) s = "llama-3-" + s.substr(7);
  static const std::map<std::string, std::string> aliases = {
      {"gpt2-small", "gpt2"}, {"gpt-2", "gpt2"}, {"gpt-j", "gpt-j-6b"}, {"gptj-6b", "gpt-j-6b"},
      // Only v0.1 has the 4096-token window and 32000-token vocabulary of the preset.
      {"mistral-7b-v0.1", "mistral-7b"}, {"mixtral-8x7b-v0.1", "mixtral-8x7b"}, {"mixtral-8x22b-v0.1", "mixtral-8x22b"},
  };
  if (auto it = aliases.find(s); it != aliases.end()) return it->second;
  return s;
}

const std::map<std::string, std::vector<std::string>>& family_members() {
  static const std::map<std::string, std::vector<std::string>> f = [] {
    std::map<std::string, std::vector<std::string>> all = {
      {"gpt2", {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}},
      {"gpt-neo", {"gpt-neo-125m", "gpt-neo-1.3b", "gpt-neo-2.7b"}},
      {"opt", {"opt-125m", "opt-350m", "opt-1.3b", "opt-2.7b", "opt-6.7b", "opt-13b", "opt-30b", "opt-66b", "opt-175b"}},
      {"llama-2", {"llama-2-7b", "llama-2-13b", "llama-2-70b"}},
      {"llama-3", {"llama-3-8b", "llama-3-70b"}},
      {"bert", {"bert-base", "bert-large"}},
    };
    for (auto& [name, members] : current_families()) all[name] = members;
    return all;
  }();
  return f;
}

}  // namespace

ModelSpec llama_layout(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                       int64_t vocab, int64_t seq, int64_t published) {
  return llama(std::move(name), layers, hidden, heads, kv_heads, ffn, vocab, seq, published);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : presets()) names.push_back(m.name);
  return names;
}

ModelSpec model_preset(std::string_view name) {
  std::string key = normalize_model_name(name);
  for (const auto& m : presets())
    if (m.name == key) return m;
  for (const auto& m : gpt_family())
    if (m.name == key) return m;
  if (const std::string moe = moe_refusal(key); !moe.empty()) throw InputError(moe);
  throw InputError(fmt::format("unknown model '{}'; did you mean '{}'? (or give a path to a Hugging Face config.json)",
                               clip(name), nearest(key, model_preset_names())));
}

std::vector<std::string> model_family_names() {
  std::vector<std::string> names = {"gpt"};
  for (const auto& [family, members] : family_members()) names.push_back(family);
  return names;
}

std::vector<ModelSpec> model_family(std::string_view family) {
  std::string key = to_lower(trim(family));
  if (key == "gpt") return gpt_family();
  auto it = family_members().find(key);
  if (it == family_members().end())
    throw InputError(fmt::format("unknown model family '{}'; did you mean '{}'? (families: {})", family,
                                 nearest(key, model_family_names()), fmt::join(model_family_names(), ", ")));
  std::vector<ModelSpec> out;
  for (const auto& n : it->second) out.push_back(model_preset(n));
  return out;
}

}  // namespace planner

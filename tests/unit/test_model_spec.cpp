// ModelSpec: parameter counts against published figures, HF config import,
// families, name lookup, validation and the JSON round trip.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "catch.hpp"
#include "test_util.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"

using namespace planner;
namespace fs = std::filesystem;

namespace {

using test_util::contains;
using test_util::error_of;
using test_util::examples_dir;

}  // namespace

TEST_CASE("every preset is within 1% of its published parameter count", "[model]") {
  const auto names = model_preset_names();
  REQUIRE(names.size() >= 24);
  for (const auto& n : names) {
    ModelSpec m = model_preset(n);
    INFO(n << ": " << m.total_params() << " vs published " << m.published_params);
    REQUIRE(m.published_params > 0);
    CHECK(std::abs(static_cast<double>(m.total_params()) / static_cast<double>(m.published_params) - 1.0) < 0.01);
    CHECK(m.default_seq > 0);
    CHECK_NOTHROW(m.validate());
  }
  for (const char* required : {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-neo-125m", "gpt-neo-1.3b",
                               "gpt-neo-2.7b", "gpt-j-6b", "opt-125m", "opt-350m", "opt-1.3b", "opt-2.7b", "opt-6.7b",
                               "opt-13b", "opt-30b", "opt-66b", "opt-175b", "bert-base", "bert-large", "llama-2-7b",
                               "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b"}) {
    INFO(required);
    CHECK(std::find(names.begin(), names.end(), required) != names.end());
  }
}

TEST_CASE("every preset counts exactly as the transformers modules", "[model]") {
  // model.num_parameters() of transformers 5.17.0, each model built from its
  // config on the meta device (BERT: BertForPreTraining less the 2h+2 NSP head).
  const std::pair<const char*, int64_t> hf[] = {
      {"gpt2", 124'439'808},          {"gpt2-medium", 354'823'168},     {"gpt2-large", 774'030'080},
      {"gpt2-xl", 1'557'611'200},     {"gpt-neo-125m", 125'198'592},    {"gpt-neo-1.3b", 1'315'575'808},
      {"gpt-neo-2.7b", 2'651'307'520}, {"gpt-j-6b", 6'050'882'784},     {"opt-125m", 125'239'296},
      {"opt-350m", 331'196'416},      {"opt-1.3b", 1'315'758'080},      {"opt-2.7b", 2'651'596'800},
      {"opt-6.7b", 6'658'473'984},    {"opt-13b", 12'853'473'280},      {"opt-30b", 29'974'540'288},
      {"opt-66b", 65'719'701'504},    {"opt-175b", 174'604'468'224},    {"bert-base", 110'104'890},
      {"bert-large", 336'224'058},    {"llama-2-7b", 6'738'415'616},    {"llama-2-13b", 13'015'864'320},
      {"llama-2-70b", 68'976'648'192}, {"llama-3-8b", 8'030'261'248},   {"llama-3-70b", 70'553'706'496},
  };
  for (const auto& [name, count] : hf) {
    INFO(name);
    CHECK(model_preset(name).total_params() == count);
  }
}

TEST_CASE("GPT-2 small counts exactly as GPT2LMHeadModel", "[model]") {
  ModelSpec m = model_preset("gpt2");
  // wte 50257x768 + wpe 1024x768
  CHECK(m.embedding_params() == 50257 * 768 + 1024 * 768);
  // ln_1, c_attn (768x2304 + 2304), c_proj (768x768 + 768), ln_2, c_fc (768x3072 + 3072), c_proj (3072x768 + 768)
  CHECK(m.layer_params() == 2 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + 2 * 768 + (768 * 3072 + 3072) +
                                (3072 * 768 + 768));
  CHECK(m.head_params() == 2 * 768);  // ln_f; lm_head tied
  CHECK(m.total_params() == 124'439'808);
  CHECK(m.default_seq == 1024);
}

TEST_CASE("BERT-base counts exactly as BertForPreTraining without the NSP head", "[model]") {
  ModelSpec m = model_preset("bert-base-uncased");
  CHECK(m.name == "bert-base");
  CHECK(m.arch == Arch::Encoder);
  // word 30522x768, position 512x768, token type 2x768, LayerNorm
  CHECK(m.embedding_params() == 30522 * 768 + 512 * 768 + 2 * 768 + 2 * 768);
  // q, k, v, o with bias; attention LayerNorm; intermediate + output with bias; output LayerNorm
  CHECK(m.layer_params() == 4 * (768 * 768 + 768) + 2 * 768 + (768 * 3072 + 3072) + (3072 * 768 + 768) + 2 * 768);
  // pooler dense; MLM transform dense + LayerNorm + decoder bias (decoder weight tied)
  CHECK(m.head_params() == (768 * 768 + 768) + (768 * 768 + 768) + 2 * 768 + 30522);
  CHECK(m.total_params() == 110'104'890);
  CHECK(m.default_seq == 512);
}

TEST_CASE("exact counts of OPT, LLaMA and GPT-J details", "[model]") {
  // OPT-350m: 512-wide embeddings, project_in/out, 2050 position rows, no final norm.
  ModelSpec opt350 = model_preset("facebook/opt-350m");
  CHECK(opt350.total_params() == 331'196'416);
  CHECK(opt350.max_positions == 2048);
  CHECK(opt350.position_offset == 2);
  CHECK(model_preset("opt-125m").total_params() == 125'239'296);
  CHECK(model_preset("meta-llama/Llama-2-7b-hf").total_params() == 6'738'415'616);
  CHECK(model_preset("llama-2-70b").total_params() == 68'976'648'192);
  CHECK(model_preset("Meta-Llama-3-8B").total_params() == 8'030'261'248);
  CHECK(model_preset("llama-3-70b").total_params() == 70'553'706'496);
  ModelSpec gptj = model_preset("EleutherAI/gpt-j-6B");
  CHECK(gptj.layer_params() == 2 * 4096 + 4 * 4096 * 4096 + 2 * 4096 * 16384 + 16384 + 4096);
  CHECK(gptj.head_params() == 2 * 4096 + 50400 * 4096 + 50400);
  ModelSpec l3 = model_preset("llama-3-8b");
  CHECK(l3.kv_dim() == 1024);
  CHECK(l3.attention_params() == 2 * 4096 * 4096 + 2 * 4096 * 1024);
  CHECK(l3.mlp_params() == 3 * 4096 * 14336);
  CHECK(l3.norm_params() == 4096);
  CHECK(l3.default_seq == 8192);
  CHECK(model_preset("llama-2-13b").default_seq == 4096);
}

TEST_CASE("preset names accept org prefixes, case and hub suffixes", "[model]") {
  CHECK(model_preset("facebook/opt-1.3b").name == "opt-1.3b");
  CHECK(model_preset("EleutherAI/gpt-neo-1.3B").name == "gpt-neo-1.3b");
  CHECK(model_preset("meta-llama/Llama-2-7b-hf").name == "llama-2-7b");
  CHECK(model_preset("meta-llama/Llama-2-13b-chat-hf").name == "llama-2-13b");
  CHECK(model_preset("meta-llama/Meta-Llama-3-8B-Instruct").name == "llama-3-8b");
  CHECK(model_preset("bert-base-uncased").name == "bert-base");
  CHECK(model_preset("google-bert/bert-large-uncased").name == "bert-large");
  CHECK(model_preset("openai-community/GPT2-XL").name == "gpt2-xl");
  CHECK(resolve_model("gpt2").name == "gpt2");
}

TEST_CASE("a LLaMA config without a preset: TinyLlama-1.1B", "[model]") {
  // TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T: 1,100,048,384 parameters
  // (22 layers, hidden 2048, 32 heads, 4 kv-heads, SwiGLU 5632, untied, vocab 32000).
  ModelSpec m = resolve_model((examples_dir() / "models" / "tinyllama-1.1b.json").string());
  CHECK(m.total_params() == 1100048384);
  CHECK(m.kv_heads == 4);
  CHECK(m.mlp == MlpKind::SwiGlu);
}

TEST_CASE("unknown model names suggest the nearest preset", "[model]") {
  std::string msg = error_of([] { resolve_model("gtp2"); });
  CHECK(msg == "unknown model 'gtp2'; did you mean 'gpt2'? (or give a path to a Hugging Face config.json)");
  CHECK(contains(error_of([] { resolve_model("llama-2-8b"); }), "did you mean 'llama-2-7b'"));
  REQUIRE_THROWS_AS(resolve_model(""), InputError);
  REQUIRE_THROWS_AS(resolve_model("bert-base-cased"), InputError);  // different vocab: not silently bert-base
}

TEST_CASE("HF config.json import matches the presets", "[model]") {
  fs::path dir = examples_dir() / "models";
  REQUIRE(fs::is_directory(dir));
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++seen;
    std::string stem = entry.path().stem().string();
    INFO(entry.path().string());
    ModelSpec imported = resolve_model(entry.path().string());
    const auto names = model_preset_names();
    if (std::find(names.begin(), names.end(), stem) == names.end()) continue;  // a config with no preset
    ModelSpec preset = model_preset(stem);
    CHECK(imported.name == stem);
    CHECK(imported.total_params() == preset.total_params());
    CHECK(imported.layer_params() == preset.layer_params());
    CHECK(imported.default_seq == preset.default_seq);
    CHECK(imported.kv_heads == preset.kv_heads);
  }
  CHECK(seen >= 7);
}

TEST_CASE("HF config import: defaults and errors", "[model]") {
  using nlohmann::json;
  json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2}, {"n_embd", 128}, {"n_head", 4}, {"n_inner", nullptr}};
  ModelSpec m = model_from_hf_config(gpt2, "tiny");
  CHECK(m.ffn == 512);
  CHECK(m.vocab == 50257);
  CHECK(m.max_positions == 1024);

  json llama = {{"model_type", "llama"}, {"num_hidden_layers", 2}, {"hidden_size", 256},
                {"num_attention_heads", 8}, {"intermediate_size", 688}, {"vocab_size", 1000}};
  ModelSpec l = model_from_hf_config(llama, "tiny-llama");
  CHECK(l.kv_heads == 8);
  CHECK_FALSE(l.tied_embeddings);
  llama["tie_word_embeddings"] = true;
  CHECK(model_from_hf_config(llama, "t").total_params() == l.total_params() - 1000 * 256);
  llama["num_key_value_heads"] = 3;  // does not divide 8
  CHECK(contains(error_of([&] { model_from_hf_config(llama, "t"); }), "kv_heads=3 does not divide heads=8"));

  json missing = {{"model_type", "gpt2"}, {"n_layer", 2}, {"n_head", 4}};
  CHECK(contains(error_of([&] { model_from_hf_config(missing, "x"); }), "'n_embd'"));
  json bad_type = {{"model_type", "t5"}};
  std::string msg = error_of([&] { model_from_hf_config(bad_type, "x"); });
  CHECK(contains(msg, "'t5'"));
  CHECK(contains(msg, "missing required field 'num_hidden_layers'"));  // read as a decoder by its fields
  json negative = {{"model_type", "gpt2"}, {"n_layer", -2}, {"n_embd", 128}, {"n_head", 4}};
  CHECK(contains(error_of([&] { model_from_hf_config(negative, "x"); }), "'n_layer'"));
  json absurd = {{"model_type", "gpt2"}, {"n_layer", 2}, {"n_embd", 1'000'000'000}, {"n_head", 4}};
  CHECK(contains(error_of([&] { model_from_hf_config(absurd, "x"); }), "absurdly large"));
  json text = {{"model_type", "gpt2"}, {"n_layer", "12"}, {"n_embd", 128}, {"n_head", 4}};
  REQUIRE_THROWS_AS(model_from_hf_config(text, "x"), InputError);
  json indivisible = {{"model_type", "gpt2"}, {"n_layer", 2}, {"n_embd", 100}, {"n_head", 3}};
  REQUIRE_THROWS_AS(model_from_hf_config(indivisible, "x"), InputError);
}

TEST_CASE("model files: missing, malformed, incomplete", "[model]") {
  fs::path tmp = fs::temp_directory_path() / "planner_test_model_spec";
  fs::create_directories(tmp);
  std::string missing = (tmp / "nope.json").string();
  CHECK(contains(error_of([&] { resolve_model(missing); }), "nope.json"));

  std::string bad = (tmp / "bad.json").string();
  std::ofstream(bad) << "{\"model_type\": \"gpt2\", ";
  std::string msg = error_of([&] { resolve_model(bad); });
  CHECK(contains(msg, "bad.json"));
  CHECK(contains(msg, "not valid JSON"));

  std::string incomplete = (tmp / "incomplete.json").string();
  std::ofstream(incomplete) << R"({"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64})";
  msg = error_of([&] { resolve_model(incomplete); });
  CHECK(contains(msg, "incomplete.json"));
  CHECK(contains(msg, "'num_attention_heads'"));

  // A folder holding config.json names the model after the folder.
  fs::create_directories(tmp / "My-Model");
  std::ofstream((tmp / "My-Model" / "config.json").string())
      << R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2})";
  CHECK(resolve_model((tmp / "My-Model").string()).name == "My-Model");
  CHECK(resolve_model((tmp / "My-Model" / "config.json").string()).name == "My-Model");
  fs::remove_all(tmp);
}

TEST_CASE("families are ordered and increasing", "[model]") {
  for (const auto& f : model_family_names()) {
    INFO(f);
    auto members = model_family(f);
    REQUIRE(members.size() >= 2);
    for (size_t i = 1; i < members.size(); ++i) CHECK(members[i].total_params() > members[i - 1].total_params());
  }
  CHECK(model_family("opt").front().name == "opt-125m");
  CHECK(model_family("opt").back().name == "opt-175b");
  CHECK(model_family("llama-2").size() == 3);
  CHECK(model_family("gpt2").size() == 4);
  CHECK(model_family("gpt-neo").size() == 3);
  REQUIRE_THROWS_AS(model_family("lama-2"), InputError);
  CHECK(contains(error_of([] { model_family("lama-2"); }), "did you mean 'llama-2'"));
}

TEST_CASE("the gpt family spans ~100M to ~1T+ in fine steps with a fixed aspect ratio", "[model]") {
  auto gpt = model_family("gpt");
  CHECK(gpt.size() >= 60);
  CHECK(gpt.front().total_params() < 150e6);
  CHECK(gpt.front().total_params() > 80e6);
  CHECK(gpt.back().total_params() > 1e12);
  std::set<std::string> names;
  for (size_t i = 0; i < gpt.size(); ++i) {
    const ModelSpec& m = gpt[i];
    INFO(m.name << " hidden=" << m.hidden << " layers=" << m.layers);
    CHECK(m.hidden % 128 == 0);
    CHECK(m.hidden % m.heads == 0);
    CHECK((m.head_dim() == 128 || (m.head_dim() == 64 && m.hidden < 2048)));
    CHECK(m.layers == (m.hidden + 64) / 128);
    CHECK(m.ffn == 4 * m.hidden);
    CHECK(m.vocab == 50257);
    CHECK(m.tied_embeddings);
    CHECK(m.name.rfind("gpt-", 0) == 0);
    CHECK(names.insert(m.name).second);
    CHECK_NOTHROW(m.validate());
    CHECK(model_preset(m.name) == m);  // family members resolve by name
    if (i > 0) {
      double step = static_cast<double>(m.total_params()) / static_cast<double>(gpt[i - 1].total_params());
      CHECK(step >= 1.10);
      if (gpt[i - 1].total_params() > 1e9) CHECK(step <= 1.21);
      if (gpt[i - 1].total_params() > 20e9) CHECK(step <= 1.16);
    }
  }
  // Names round the count: e.g. the member nearest 1.3B.
  bool found = false;
  for (const auto& m : gpt)
    if (m.name.find('b') != std::string::npos && m.total_params() > 1e9 && m.total_params() < 1.5e9) found = true;
  CHECK(found);
}

TEST_CASE("validate rejects nonsense", "[model]") {
  ModelSpec good = model_preset("gpt2");
  auto broken = [&](auto change) {
    ModelSpec m = good;
    change(m);
    return m;
  };
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.layers = 0; }).validate(), InputError);
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.hidden = 0; }).validate(), InputError);
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.heads = 5; }).validate(), InputError);  // 768 % 5
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.kv_heads = 5; }).validate(), InputError);  // 12 % 5
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.kv_heads = 0; }).validate(), InputError);
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.ffn = -1; }).validate(), InputError);
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.vocab = 0; }).validate(), InputError);
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.max_positions = 0; }).validate(), InputError);  // learned needs a table
  REQUIRE_THROWS_AS(broken([](ModelSpec& m) { m.hidden = int64_t{1} << 40; }).validate(), InputError);
  CHECK(contains(error_of([&] { broken([](ModelSpec& m) { m.heads = 5; }).validate(); }), "heads=5 does not divide hidden=768"));
}

TEST_CASE("ModelSpec JSON round trip is exact", "[model]") {
  std::vector<ModelSpec> all;
  for (const auto& n : model_preset_names()) all.push_back(model_preset(n));
  auto gpt = model_family("gpt");
  all.insert(all.end(), gpt.begin(), gpt.end());
  for (const auto& m : all) {
    INFO(m.name);
    nlohmann::json j = m;
    ModelSpec back = j.get<ModelSpec>();
    CHECK(back == m);
    CHECK(nlohmann::json(back) == j);
    CHECK(nlohmann::json::parse(j.dump()).get<ModelSpec>() == m);
  }
  // Our own schema is accepted with defaults, and typos are caught.
  nlohmann::json small = {{"name", "tiny"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 100},
                          {"max_positions", 128}};
  ModelSpec t = small.get<ModelSpec>();
  CHECK(t.kv_heads == 4);
  CHECK(t.ffn == 256);
  small["hiden"] = 64;
  CHECK(contains(error_of([&] { (void)small.get<ModelSpec>(); }), "unknown field 'hiden'"));
  nlohmann::json bad_enum = {{"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 100}, {"max_positions", 8},
                             {"mlp", "tanh"}};
  CHECK(contains(error_of([&] { (void)bad_enum.get<ModelSpec>(); }), "'mlp'"));
}

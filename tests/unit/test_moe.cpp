// Mixture of experts and expert parallelism: the parameter counts of a small
// MoE by hand, the JSON form, validation, the strategy's ep and the rank
// grid's expert groups (hand-written rank lists).
#include <cmath>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/strategy.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;
using test_util::error_of;

namespace {

// hidden 8, 2 heads (MHA), SwiGLU, RMSNorm, no biases, vocab 10, untied head,
// rotary; 3 layers of which the first is dense (ffn 16) and two are MoE: 4
// experts of width 6, top 2, one shared expert of width 12 with its gate.
ModelSpec tiny_moe() {
  ModelSpec m;
  m.name = "tiny-moe";
  m.layers = 3, m.hidden = 8, m.heads = 2, m.kv_heads = 2, m.ffn = 16, m.vocab = 10;
  m.pos = PosEmbed::Rotary, m.mlp = MlpKind::SwiGlu, m.norm = NormKind::RmsNorm;
  m.qkv_bias = m.out_bias = m.mlp_bias = false;
  m.tied_embeddings = false;
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.expert_ffn = 6;
  m.moe.shared_experts = 1, m.moe.shared_ffn = 12, m.moe.shared_gate = true;
  m.moe.dense_layers = 1;
  return m;
}

}  // namespace

TEST_CASE("a small MoE's parameters counted by hand", "[moe]") {
  const ModelSpec m = tiny_moe();
  REQUIRE_NOTHROW(m.validate());
  CHECK(m.attention_params() == 4 * 8 * 8);          // q, k, v, o: 256
  CHECK(m.mlp_params() == 3 * 8 * 16);               // the dense layer's MLP: 384
  CHECK(m.expert_params() == 3 * 8 * 6);             // 144
  CHECK(m.router_params() == 4 * 8);                 // 32
  CHECK(m.shared_expert_params() == 3 * 8 * 12 + 8);  // 288 + gate 8 = 296
  CHECK(m.moe_mlp_params() == 32 + 4 * 144 + 296);   // 904
  CHECK(m.layer_params() == 256 + 384 + 2 * 8);      // 656
  CHECK(m.moe_layer_params() == 256 + 904 + 2 * 8);  // 1176
  CHECK(m.moe_layers() == 2);
  // embedding 80 + dense layer 656 + 2 MoE layers 2352 + final norm 8 + head 80.
  CHECK(m.total_params() == 3176);
  // Each token passes 2 of 4 experts: 2 layers x 2 unused experts x 144 fewer.
  CHECK(m.active_params() == 3176 - 2 * 2 * 144);
  // A dense model's active parameters are all of them.
  ModelSpec d = m;
  d.moe = {};
  CHECK(d.active_params() == d.total_params());
  CHECK(d.total_params() == 80 + 3 * 656 + 88);
}

TEST_CASE("the MoE description round-trips through JSON and is validated", "[moe]") {
  ModelSpec m = tiny_moe();
  m.moe.capacity_factor = 1.25;
  const nlohmann::json j = m;
  CHECK(j.at("moe").at("experts") == 4);
  CHECK(j.get<ModelSpec>() == m);
  // A dense model's JSON carries no moe key (older plan files unchanged).
  ModelSpec d = m;
  d.moe = {};
  CHECK_FALSE(nlohmann::json(d).contains("moe"));

  auto bad = [&](auto edit) {
    nlohmann::json x = j;
    edit(x);
    return error_of([&] { (void)x.get<ModelSpec>(); });
  };
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["top_k"] = 5; }), "moe.top_k=5"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["top_k"] = 0; }), "moe.top_k"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["dense_layers"] = 3; }), "moe.dense_layers=3"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["shared_experts"] = 0; }), "go together"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["capacity_factor"] = 0.1; }), "capacity_factor"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["routers"] = 1; }), "unknown field 'moe.routers'"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"].erase("expert_ffn"); }), "moe.expert_ffn"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"] = 3; }), "must be an object"));
  // The imbalance knob: written only when set, between 1 and experts/top_k = 2.
  ModelSpec skew = m;
  skew.moe.imbalance = 1.5;
  CHECK(nlohmann::json(skew).at("moe").at("imbalance") == 1.5);
  CHECK(nlohmann::json(skew).get<ModelSpec>() == skew);
  CHECK_FALSE(j.at("moe").contains("imbalance"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["imbalance"] = 2.5; }), "moe.imbalance=2.5"));
  CHECK(contains(bad([](nlohmann::json& x) { x["moe"]["imbalance"] = 0.9; }), "moe.imbalance=0.9"));
}

TEST_CASE("strategy ep: text form, JSON, and the rule that it divides dp", "[moe][strategy]") {
  const Strategy s = Strategy::parse("dp=8,tp=2,ep=4");
  CHECK(s.ep == 4);
  CHECK(s.to_string().ends_with(",ep=4"));
  CHECK(Strategy::parse(s.to_string()) == s);
  const nlohmann::json j = s;
  CHECK(j.at("ep") == 4);
  CHECK(j.get<Strategy>() == s);
  // ep=1 is left out of both forms, so every dense plan reads as before.
  const Strategy d = Strategy::parse("dp=8,tp=2");
  CHECK(d.ep == 1);
  CHECK(d.to_string().find("ep=") == std::string::npos);
  CHECK_FALSE(nlohmann::json(d).contains("ep"));
  CHECK(contains(error_of([] { Strategy::parse("dp=6,ep=4").validate(); }), "ep=4 must divide dp=6"));
  CHECK(contains(error_of([] { Strategy::parse("ep=0"); }), "ep"));
}

TEST_CASE("rank grid: expert-parallel and expert-data-parallel groups, by hand", "[moe][rank_grid]") {
  // dp=4, pp=1, tp=2, ep=2: the worked example of rank_grid.hpp.
  const RankGrid a(4, 1, 2);
  CHECK(a.all_ep_groups(2) == std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(a.all_expert_dp_groups(2) == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // dp=4, pp=2, tp=1 (rank = 2 dp + pp), ep=2.
  const RankGrid b(4, 2, 1);
  CHECK(b.ep_group(0, 2) == std::vector<int>{0, 2});
  CHECK(b.ep_group(4, 2) == std::vector<int>{4, 6});
  CHECK(b.ep_group(7, 2) == std::vector<int>{5, 7});
  CHECK(b.expert_dp_group(0, 2) == std::vector<int>{0, 4});
  CHECK(b.expert_dp_group(3, 2) == std::vector<int>{3, 7});
  // ep = dp: one expert group spans the dp group, the expert-dp groups are single ranks.
  CHECK(b.ep_group(1, 4) == std::vector<int>{1, 3, 5, 7});
  CHECK(b.expert_dp_group(5, 4) == std::vector<int>{5});
  // ep = 1: the expert-dp group is the dp group.
  CHECK(b.expert_dp_group(3, 1) == b.dp_group(3));
  CHECK(b.ep_group(3, 1) == std::vector<int>{3});
  // Every rank is in exactly one group of each kind.
  CHECK(b.all_ep_groups(2).size() == 4);
  CHECK(b.all_expert_dp_groups(2).size() == 4);
  CHECK(contains(error_of([&] { (void)b.ep_group(0, 3); }), "ep=3 must be at least 1 and divide dp=4"));
}

TEST_CASE("MoE presets: total and activated parameters against the published counts", "[moe][published]") {
  struct Card {
    const char* name;
    double active, active_tolerance;
  };
  // Activated counts as their authors publish them: Mixtral 12.9B and 39B
  // (Mistral AI), Qwen1.5-MoE 2.7B, Qwen3 3.3B and 22B (the cards). The Qwen3
  // cards' activated figures are rounded coarser than 0.5%: the layout gives
  // 3.353B and 22.19B (both cards' non-embedding totals, 29.9B and 234B, agree
  // with it to 0.1%), so they are held at 2% and 1%.
  for (const Card& c : {Card{"mixtral-8x7b", 12.9e9, 0.005}, Card{"mixtral-8x22b", 39e9, 0.005},
                        Card{"qwen1.5-moe-a2.7b", 2.7e9, 0.005}, Card{"qwen3-30b-a3b", 3.3e9, 0.02},
                        Card{"qwen3-235b-a22b", 22e9, 0.01}}) {
    const ModelSpec m = model_preset(c.name);
    INFO(c.name << ": " << m.total_params() << " vs " << m.published_params << "; active " << m.active_params());
    CHECK(std::abs(double(m.total_params()) / double(m.published_params) - 1) < 0.005);
    CHECK(std::abs(double(m.active_params()) / c.active - 1) < c.active_tolerance);
  }
  // The hub's exact counts of the safetensors checkpoints.
  CHECK(model_preset("mistralai/Mixtral-8x7B-v0.1").total_params() == 46'702'792'704);
  CHECK(model_preset("Qwen/Qwen1.5-MoE-A2.7B").total_params() == 14'315'784'192);
}

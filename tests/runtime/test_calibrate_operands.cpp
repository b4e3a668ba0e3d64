// planner calibrate's step_operands part (runtime/calibrate_operands.cpp): the
// observer copies every GEMM and the attention of one forward + backward of a
// one-layer model of each family, and each is timed on its own operands and
// on random ones. On the CPU (quick sizes) the captured GEMMs must be exactly
// the model's: per linear layer (out x in) over T tokens, the forward x w^T
// (T, out, in; layout nt), the data gradient g w (T, in, out; nn) and the
// weight gradient g^T x (out, in, T; tn).
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "runtime/calibrate_detail.hpp"
#include "catch.hpp"

using namespace planner::rt;
using nlohmann::json;

TEST_CASE("calibrate captures a training step's GEMMs and attention and times them on both operands",
          "[calibrate][operands]") {
  std::vector<std::string> notes;
  calib::Ctx c;
  c.quick = true;
  c.progress = false;
  c.notes = &notes;
  const json r = calib::measure_step_operands(c);
  // "layout MxNxK", sortable and printable.
  using G = std::string;
  auto gs = [](const std::string& l, int64_t m, int64_t n, int64_t k) {
    return l + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  };
  std::map<std::string, std::vector<G>> got;
  for (const auto& g : r.at("gemms")) {
    CHECK(g.at("precision") == "fp32");
    CHECK(g.at("random_seconds").get<double>() > 0);
    CHECK(g.at("step_seconds").get<double>() > 0);
    got[g.at("model")].push_back(gs(g.at("layout"), g.at("m"), g.at("n"), g.at("k")));
  }
  // Quick sizes: width 64, 4 heads of 16, vocabulary 512 (a multiple of 64:
  // no padding), 2 sequences of 32 tokens. GPT and OPT: MLP 256; the LLaMA
  // one: 2 kv heads (q, k, v: 64 + 2 x 32 rows), SwiGLU 176 (gate and up: one
  // 352-row matrix).
  const int64_t T = 64, h = 64, V = 512;
  auto expect = [&](int64_t qkv, int64_t up, int64_t down_in) {
    std::vector<G> e;
    for (auto [out, in] : std::vector<std::pair<int64_t, int64_t>>{{qkv, h}, {h, h}, {up, h}, {h, down_in}, {V, h}}) {
      e.push_back(gs("nt", T, out, in));
      e.push_back(gs("nn", T, in, out));
      e.push_back(gs("tn", out, in, T));
    }
    std::sort(e.begin(), e.end());
    return e;
  };
  const std::map<std::string, std::vector<G>> want = {{"gpt-neo-1.3b, one layer", expect(3 * h, 256, 256)},
                                                      {"opt-1.3b, one layer", expect(3 * h, 256, 256)},
                                                      {"tinyllama-1.1b, one layer", expect(h + 64, 352, 176)}};
  REQUIRE(got.size() == 3);
  for (auto& [model, v] : got) {
    std::sort(v.begin(), v.end());
    INFO(model);
    REQUIRE(want.count(model));
    CHECK(v == want.at(model));
  }
  // One attention per model, as the layer runs it: (2, 4 heads, 32, 16); kv heads 4, 4 and 2.
  const auto& at = r.at("attention");
  REQUIRE(at.size() == 3);
  std::map<std::string, int64_t> kv;
  for (const auto& a : at) {
    CHECK(a.at("batch") == 2);
    CHECK(a.at("heads") == 4);
    CHECK(a.at("seq") == 32);
    CHECK(a.at("head_dim") == 16);
    for (const char* k : {"random_forward_seconds", "step_forward_seconds", "random_backward_seconds",
                          "step_backward_seconds"})
      CHECK(a.at(k).get<double>() > 0);
    kv[a.at("model")] = a.at("kv_heads");
  }
  CHECK(kv == std::map<std::string, int64_t>{
                  {"gpt-neo-1.3b, one layer", 4}, {"opt-1.3b, one layer", 4}, {"tinyllama-1.1b, one layer", 2}});
}

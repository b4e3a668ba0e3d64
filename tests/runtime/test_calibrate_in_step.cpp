// planner calibrate's in_step part (calibration/measure_in_step.cpp): the
// observer copies each distinct GEMM (counting its calls) and the first
// attention of one forward + backward of a model of each family, and
// calibrate times each distinct GEMM and the attention. On the CPU (quick
// sizes: two layers) the captured GEMMs must be exactly the model's: per
// linear layer (out x in) over T tokens, the forward x w^T (T, out, in;
// layout nt), the data gradient g w (T, in, out; nn) and the weight gradient
// g^T x (out, in, T; tn), once per layer: twice for the layers' shapes, once
// for the vocabulary head's.
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "calibration/measure_detail.hpp"
#include "catch.hpp"

using namespace planner::rt;
using nlohmann::json;

TEST_CASE("calibrate captures a training step's GEMMs and attention and times each",
          "[calibrate][in_step]") {
  std::vector<std::string> notes;
  calib::Ctx c;
  c.quick = true;
  c.progress = false;
  c.notes = &notes;
  const json r = calib::measure_in_step(c);
  // "layout MxNxK", sortable and printable.
  using G = std::string;
  auto gs = [](const std::string& l, int64_t m, int64_t n, int64_t k) {
    return l + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  };
  std::map<std::string, std::vector<G>> got;
  REQUIRE(r.size() == 3);
  for (const auto& row : r) {
    CHECK(row.at("precision") == "fp32");
    CHECK(row.at("layers") == 2);
    CHECK(row.at("tokens") == 64);
    CHECK(row.at("gemms") == 27);  // 4 linear layers x 3 GEMMs x 2 layers + the head's 3
    CHECK(!row.contains("step_gemm_seconds"));  // the CPU has no kernel times
    double sum = 0;
    for (const auto& g : row.at("shapes")) {
      // The head (512 = the vocabulary, as M of its weight gradient or N of the others) once, the layers' twice.
      const bool head = g.at("m") == 512 || g.at("n") == 512 || g.at("k") == 512;
      CHECK(g.at("count") == (head ? 1 : 2));
      CHECK(g.at("seconds").get<double>() > 0);
      sum += g.at("count").get<double>() * g.at("seconds").get<double>();
      got[row.at("model")].push_back(gs(g.at("layout"), g.at("m"), g.at("n"), g.at("k")));
    }
    CHECK(row.at("alone_gemm_seconds").get<double>() == Approx(sum));
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
  const std::map<std::string, std::vector<G>> want = {{"gpt-neo-1.3b", expect(3 * h, 256, 256)},
                                                      {"opt-1.3b", expect(3 * h, 256, 256)},
                                                      {"tinyllama-1.1b", expect(h + 64, 352, 176)}};
  REQUIRE(got.size() == 3);
  for (auto& [model, v] : got) {
    std::sort(v.begin(), v.end());
    INFO(model);
    REQUIRE(want.count(model));
    CHECK(v == want.at(model));
  }
  // One attention per model, as the layer runs it: (2, 4 heads, 32, 16); kv
  // heads 4, 4 and 2; captured once, counted for both layers.
  std::map<std::string, int64_t> kv;
  for (const auto& row : r) {
    REQUIRE(row.at("attention").size() == 1);
    const auto& a = row.at("attention")[0];
    CHECK(a.at("batch") == 2);
    CHECK(a.at("heads") == 4);
    CHECK(a.at("seq") == 32);
    CHECK(a.at("head_dim") == 16);
    CHECK(a.at("seconds").get<double>() > 0);
    CHECK(a.at("count") == 2);
    CHECK(row.at("alone_attention_seconds").get<double>() == Approx(2 * a.at("seconds").get<double>()));
    kv[row.at("model")] = a.at("kv_heads");
  }
  CHECK(kv == std::map<std::string, int64_t>{{"gpt-neo-1.3b", 4}, {"opt-1.3b", 4}, {"tinyllama-1.1b", 2}});
}

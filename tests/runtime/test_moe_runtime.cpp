// The runtime's mixture of experts (runtime/model/moe.hpp): the router's
// top-k and its tie rule, the auxiliary load-balancing loss and its gradient
// by hand on tiny cases, the parameter count against ModelSpec's, one MoE
// layer against a token-by-token reference, and the Engine (one process)
// against the plain Trainer.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdlib>
#include <limits>

#include "runtime/model/moe.hpp"
#include "runtime/model/transformer.hpp"
#include "strategies/errors.hpp"
#include "tiny_models.hpp"
// Last: it includes catch.hpp after LibTorch's headers.
#include "equivalence.hpp"

using namespace planner;
using namespace planner::test;

TEST_CASE("moe: top-k by probability, ties to the lower expert", "[moe]") {
  const at::Tensor probs = at::tensor({0.25, 0.25, 0.25, 0.25, 0.1, 0.4, 0.1, 0.4, 0.05, 0.15, 0.7, 0.1}).view({3, 4});
  const at::Tensor idx = rt::route_topk(probs, 2);
  const std::vector<int64_t> want{0, 1, 1, 3, 2, 1};
  REQUIRE(idx.sizes() == at::IntArrayRef({3, 2}));
  for (size_t i = 0; i < want.size(); ++i) CHECK(idx.view({-1})[int64_t(i)].item<int64_t>() == want[i]);
}

TEST_CASE("moe: load-balancing loss E * sum f_i P_i by hand", "[moe]") {
  // T = 2 tokens, E = 2, k = 1, both to expert 0: f = (1, 0), P = (0.65, 0.35): 2 * 0.65 = 1.3.
  at::Tensor probs = at::tensor({0.7, 0.3, 0.6, 0.4}, at::kFloat).view({2, 2}).requires_grad_(true);
  const at::Tensor idx = at::zeros({2, 1}, at::kLong);
  at::Tensor aux = rt::load_balancing_loss(probs, idx);
  CHECK(aux.item<double>() == Approx(1.3).epsilon(1e-6));
  // d aux / d probs[t][i] = E f_i / T = (1, 0) for every token.
  aux.backward();
  CHECK(probs.grad()[0][0].item<double>() == Approx(1.0));
  CHECK(probs.grad()[1][1].item<double>() == Approx(0.0).margin(1e-7));
  // Balanced routing gives 1: T = 4, E = 4, k = 2, every expert chosen twice, uniform probabilities.
  const at::Tensor uni = at::full({4, 4}, 0.25, at::kFloat);
  const at::Tensor two = at::arange(4, at::kLong).repeat({2}).view({4, 2});  // (0,1) (2,3) (0,1) (2,3)
  CHECK(rt::load_balancing_loss(uni, two).item<double>() == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("moe: the auxiliary loss reaches the gradient with its scale", "[moe]") {
  at::Tensor y = at::ones({3}, at::kFloat).requires_grad_(true);
  at::Tensor a = at::full({}, 2.0, at::kFloat).requires_grad_(true);
  at::Tensor out = rt::attach_aux_loss(y, a * a, 0.5);  // d(a^2)/da * 0.5 = 2
  out.sum().backward();
  CHECK(a.grad().item<double>() == Approx(2.0));
  CHECK(y.grad().sum().item<double>() == Approx(3.0));
}

TEST_CASE("moe: parameters as ModelSpec counts them", "[moe]") {
  ModelSpec m = moe_like();
  CHECK(rt::count_model_params(m, 16) == m.total_params());
  m.moe.dense_layers = 1;
  CHECK(rt::count_model_params(m, 16) == m.total_params());
}

TEST_CASE("moe: a layer equals the token-by-token mixture", "[moe]") {
  const ModelSpec m = moe_like();
  rt::TransformerModel model(m, 8);
  model.materialize(at::kCPU, at::kFloat, 5);
  at::manual_seed(3);
  const at::Tensor xn = at::randn({2, 8, m.hidden}, at::kFloat);
  const at::Tensor got = model.moe()->forward(model.store(), 0, xn, 1.0).view({-1, m.hidden});
  // By hand: the layer's tensors by name.
  auto P = [&](const std::string& n) {
    for (const auto& i : model.store().infos())
      if (i.name == "h.0." + n) return model.store().params.narrow(0, i.offset, i.numel).view(i.shape);
    FAIL("no " << n);
    return at::Tensor();
  };
  const at::Tensor R = P("moe.router.w"), W1 = P("moe.experts.fc1.w"), W2 = P("moe.experts.fc2.w");
  const at::Tensor S1 = P("moe.shared.fc1.w"), S2 = P("moe.shared.fc2.w"), G = P("moe.shared.gate.w");
  auto mlp = [](const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2) {
    const at::Tensor u = at::matmul(x, w1.t());
    const int64_t f = u.size(-1) / 2;
    return at::matmul(at::silu(u.narrow(-1, 0, f)) * u.narrow(-1, f, f), w2.t());
  };
  const at::Tensor x = xn.view({-1, m.hidden});
  for (int64_t t = 0; t < x.size(0); ++t) {
    const at::Tensor p = at::softmax(at::matmul(x[t], R.t()), -1);
    const auto [vals, idx] = at::sort(p, true, -1, true);
    at::Tensor want = at::sigmoid(at::dot(x[t], G[0])) * mlp(x[t], S1, S2);
    const double norm = (vals[0] + vals[1]).item<double>();
    for (int k = 0; k < 2; ++k) {
      const int64_t e = idx[k].item<int64_t>();
      want = want + vals[k] / norm * mlp(x[t], W1[e], W2[e]);
    }
    CHECK(max_abs_diff(got[t], want) <= 1e-5);
  }
}

// The grouped GEMM (bf16's default) and padded rows (runtime/model/moe.hpp):
// the same layer output and gradients as one GEMM per expert, in bf16, on a
// batch where some experts get no rows.
TEST_CASE("moe: grouped and padded expert GEMMs equal one GEMM per expert", "[moe]") {
  const ModelSpec m = moe_like();
  rt::TransformerModel model(m, 8);
  model.materialize(at::kCPU, at::kBFloat16, 5);
  at::manual_seed(4);
  const at::Tensor x0 = at::randn({1, 3, m.hidden}, at::kFloat).to(at::kBFloat16);  // 6 assignments over 8 experts
  auto run = [&](const rt::MoeGemm& g) {
    model.moe()->set_gemm(g);
    model.store().grads.zero_();
    at::Tensor xn = x0.clone().requires_grad_(true);
    at::Tensor y = model.moe()->forward(model.store(), 0, xn, 1.0);
    (y.to(at::kFloat) * at::linspace(-1, 1, y.numel()).view(y.sizes())).sum().backward();
    return std::vector<at::Tensor>{y.to(at::kFloat), xn.grad().to(at::kFloat), model.store().grads.to(at::kFloat)};
  };
  rt::MoeGemm per_expert;
  per_expert.grouped = false;
  const auto loop = run(per_expert);
  rt::MoeGemm grouped;  // its group ends from the counts on the device
  rt::MoeGemm host_counts = grouped;
  host_counts.host_counts = true;  // ... or from the host, as before
  rt::MoeGemm padded = per_expert;
  padded.pad_rows = 5;
  for (const auto& other : {run(grouped), run(host_counts), run(padded)})
    for (size_t i = 0; i < loop.size(); ++i) {
      INFO("output, input gradient, parameter gradients: " << i);
      const double scale = loop[i].abs().max().item<double>();
      REQUIRE(scale > 0);
      CHECK(max_abs_diff(loop[i], other[i]) <= 2e-2 * scale);
    }
}

// ZeRO-3's contract (runtime/engine_zero.cpp): between a unit's forward and
// its backward its parameters are released and gathered again into other
// memory (ParamStore::bind swaps the leaves' storage), and the old memory
// holds another unit's weights. The MoE layer's backward must read the
// weights bound at the backward: here they are moved to a copy after the
// forward and the old storage filled with NaN, and the input and parameter
// gradients must equal those of an undisturbed run. Both expert paths: one
// GEMM per expert (fp32) and the grouped GEMM (bf16).
TEST_CASE("moe: the layer's backward reads the weights bound at the backward", "[moe]") {
  const ModelSpec m = moe_like();
  for (const at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    INFO(c10::toString(dt));
    rt::TransformerModel model(m, 8);
    model.materialize(at::kCPU, dt, 5);
    rt::ParamStore& store = model.store();
    const at::Tensor saved = store.params.clone();
    at::manual_seed(4);
    const at::Tensor x0 = at::randn({2, 8, m.hidden}, at::kFloat).to(dt);
    auto run = [&](bool move) {
      store.params.copy_(saved);
      store.grads.zero_();
      auto bind_all = [&](const at::Tensor& flat) {
        for (size_t id = 0; id < store.infos().size(); ++id) {
          const rt::ParamInfo& i = store.infos()[id];
          store.bind(int(id), flat.narrow(0, i.offset, i.numel).view(i.shape));
        }
      };
      bind_all(store.params);  // the flat buffer again
      at::Tensor xn = x0.clone().requires_grad_(true);
      at::Tensor y = model.moe()->forward(store, 0, xn, 1.0);
      if (move) {
        bind_all(store.params.clone());
        // Written as a collective writes it: not through autograd (no version bump).
        store.params.variable_data().fill_(std::numeric_limits<double>::quiet_NaN());
      }
      (y.to(at::kFloat) * at::linspace(-1, 1, y.numel()).view(y.sizes())).sum().backward();
      return std::vector<at::Tensor>{xn.grad().to(at::kFloat), store.grads.to(at::kFloat).clone()};
    };
    const auto want = run(false), got = run(true);
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("input gradient, parameter gradients: " << i);
      REQUIRE(want[i].abs().max().item<double>() > 0);
      CHECK(max_abs_diff(want[i], got[i]) == 0);
    }
  }
}

TEST_CASE("moe: the experts' GEMM switches refuse what they do not accept", "[moe]") {
  for (const char* bad : {"0", "-3", "12x", "1e9"}) {
    ::setenv("PLANNER_MOE_PAD_ROWS", bad, 1);
    INFO(bad);
    CHECK_THROWS_AS(rt::moe_gemm_from_env(), InputError);
  }
  ::setenv("PLANNER_MOE_PAD_ROWS", "64", 1);
  ::setenv("PLANNER_MOE_GROUPED_MM", "yes", 1);
  CHECK_THROWS_AS(rt::moe_gemm_from_env(), InputError);
  ::setenv("PLANNER_MOE_GROUPED_MM", "1", 1);
  ::setenv("PLANNER_MOE_HOST_COUNTS", "true", 1);
  CHECK_THROWS_AS(rt::moe_gemm_from_env(), InputError);
  ::setenv("PLANNER_MOE_HOST_COUNTS", "1", 1);
  CHECK(rt::moe_gemm_from_env().host_counts);
  ::unsetenv("PLANNER_MOE_HOST_COUNTS");
  CHECK_FALSE(rt::moe_gemm_from_env().host_counts);
  ::setenv("PLANNER_MOE_GROUPED_MM", "0", 1);
  const rt::MoeGemm g = rt::moe_gemm_from_env();
  CHECK(g.pad_rows == 64);
  CHECK_FALSE(g.grouped);
  ::unsetenv("PLANNER_MOE_PAD_ROWS");
  ::unsetenv("PLANNER_MOE_GROUPED_MM");
  CHECK(rt::moe_gemm_from_env().pad_rows == 1);
  CHECK(rt::moe_gemm_from_env().grouped);
}

TEST_CASE("moe: the Engine equals the single-process trainer", "[moe]") {
  ModelSpec m = moe_like();
  m.moe.dense_layers = 1;
  // ZeRO-3 with three MoE layers: its two pooled layer buffers change hands
  // between a layer's forward and its backward.
  ModelSpec m3 = m;
  m3.layers = 4;
  for (const char* text : {"zero=0,mbs=2,gas=2", "zero=1,mbs=1,gas=2,ckpt=full", "zero=2,mbs=2,gas=2",
                           "zero=2,mbs=1,gas=3,ckpt=full", "zero=2,offload=optimizer,mbs=2,gas=2", "zero=3,mbs=2,gas=2",
                           "zero=3,mbs=1,gas=2,ckpt=full", "zero=3,offload=all,mbs=1,gas=2"}) {
    Strategy s = Strategy::parse(text);
    const ModelSpec& m = s.zero == 3 ? m3 : m;
    s.precision = Precision::FP32;
    INFO(text);
    const RunResult a = run_single(m, s, 16, 3);
    const RunResult b = run_engine(m, s, 16, 3, nullptr);
    check_close(a, b);
  }
}

TEST_CASE("moe: what the runtime does not execute is refused by name", "[moe]") {
  ModelSpec m = moe_like();
  m.moe.capacity_factor = 1.25;
  std::string what;
  try {
    rt::TransformerModel model(m, 16);
  } catch (const InputError& e) {
    what = e.what();
  }
  CHECK(what.find("capacity factor") != std::string::npos);
}

// Balanced routing (runtime/model/moe.hpp, `planner exec --moe-routing balanced`).
namespace {

// Layer 0's tensor `n` of a materialized model, by name.
at::Tensor layer0(rt::TransformerModel& model, const std::string& n) {
  for (const auto& i : model.store().infos())
    if (i.name == "h.0." + n) return model.store().params.narrow(0, i.offset, i.numel).view(i.shape);
  FAIL("no " << n);
  return at::Tensor();
}

std::vector<int64_t> as_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous().view({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// The SwiGLU MLP of the experts and the shared MLP (moe_like's kind).
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2) {
  const at::Tensor u = at::matmul(x, w1.t());
  const int64_t f = u.size(-1) / 2;
  return at::matmul(at::silu(u.narrow(-1, 0, f)) * u.narrow(-1, f, f), w2.t());
}

}  // namespace

TEST_CASE("moe: balanced routing's experts by hand, T k / E rows each", "[moe]") {
  // T = 6, k = 2, E = 4: token t to experts 2t mod 4 and 2t+1 mod 4; 3 rows each (6 * 2 / 4).
  const at::Tensor a = rt::route_balanced(6, 2, 4, at::TensorOptions());
  REQUIRE(a.sizes() == at::IntArrayRef({6, 2}));
  CHECK(as_vector(a) == std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  CHECK(as_vector(at::bincount(a.view({-1}), {}, 4)) == std::vector<int64_t>{3, 3, 3, 3});
  // E = 3 does not divide k: the choices wrap inside a token, still distinct: (0,1) (2,0) (1,2), 2 rows each.
  const at::Tensor b = rt::route_balanced(3, 2, 3, at::TensorOptions());
  CHECK(as_vector(b) == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  CHECK(as_vector(at::bincount(b.view({-1}), {}, 3)) == std::vector<int64_t>{2, 2, 2});
  // k = E: every token to every expert once (T rows each).
  const at::Tensor c = rt::route_balanced(5, 4, 4, at::TensorOptions());
  for (int64_t t = 0; t < 5; ++t) CHECK(as_vector(std::get<0>(c[t].sort())) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(as_vector(at::bincount(c.view({-1}), {}, 4)) == std::vector<int64_t>{5, 5, 5, 5});
}

// The layer under balanced routing against the token-by-token mixture with
// experts (t k + j) mod E and the router's probabilities at those experts,
// renormalised; the auxiliary loss is then E * sum_i (1/E) P_i = 1.
TEST_CASE("moe: a layer with balanced routing equals its token-by-token mixture", "[moe]") {
  const ModelSpec m = moe_like();  // 8 experts, top-2, SwiGLU, gated shared MLP
  rt::TransformerModel model(m, 8);
  model.materialize(at::kCPU, at::kFloat, 5);
  model.moe()->set_routing(rt::MoeRouting::Balanced);
  at::manual_seed(3);
  const at::Tensor xn = at::randn({2, 8, m.hidden}, at::kFloat);  // T = 16 tokens, 32 assignments, 4 per expert
  const at::Tensor got = model.moe()->forward(model.store(), 0, xn, 1.0).view({-1, m.hidden});
  CHECK(model.moe()->last_aux[0].item<double>() == Approx(1.0).epsilon(1e-6));
  const at::Tensor R = layer0(model, "moe.router.w"), W1 = layer0(model, "moe.experts.fc1.w"),
                   W2 = layer0(model, "moe.experts.fc2.w"), G = layer0(model, "moe.shared.gate.w");
  const at::Tensor S1 = layer0(model, "moe.shared.fc1.w"), S2 = layer0(model, "moe.shared.fc2.w");
  const at::Tensor x = xn.view({-1, m.hidden});
  const int64_t E = m.moe.experts, k = m.moe.top_k;
  std::vector<int64_t> rows(size_t(E), 0);
  for (int64_t t = 0; t < x.size(0); ++t) {
    const at::Tensor p = at::softmax(at::matmul(x[t], R.t()), -1);
    const int64_t e0 = (t * k) % E, e1 = (t * k + 1) % E;
    ++rows[size_t(e0)], ++rows[size_t(e1)];
    const double norm = (p[e0] + p[e1]).item<double>();
    at::Tensor want = at::sigmoid(at::dot(x[t], G[0])) * swiglu(x[t], S1, S2);
    want = want + p[e0] / norm * swiglu(x[t], W1[e0], W2[e0]) + p[e1] / norm * swiglu(x[t], W1[e1], W2[e1]);
    CHECK(max_abs_diff(got[t], want) <= 1e-5);
  }
  CHECK(rows == std::vector<int64_t>(size_t(E), 16 * 2 / 8));
}

// The gate weights sum to 1 per token: with every expert a copy of expert 0
// the routed part is (sum of the weights) x expert 0's MLP. A zero router
// gives every expert the same probability (all ties, where the learned top-k
// would take experts 0 and 1 for every token); k = E chooses every expert.
TEST_CASE("moe: balanced routing's gate weights sum to 1, with ties and k = E", "[moe]") {
  for (const int64_t k : {int64_t(2), int64_t(8)}) {
    ModelSpec m = moe_like();
    m.moe.top_k = k, m.moe.shared_ffn = 0, m.moe.shared_experts = 0, m.moe.shared_gate = false;
    rt::TransformerModel model(m, 8);
    model.materialize(at::kCPU, at::kFloat, 6);
    model.moe()->set_routing(rt::MoeRouting::Balanced);
    at::Tensor W1 = layer0(model, "moe.experts.fc1.w"), W2 = layer0(model, "moe.experts.fc2.w");
    W1.copy_(W1[0].unsqueeze(0).expand_as(W1)), W2.copy_(W2[0].unsqueeze(0).expand_as(W2));
    at::manual_seed(7);
    const at::Tensor xn = at::randn({1, 5, m.hidden}, at::kFloat);
    const at::Tensor want = swiglu(xn.view({-1, m.hidden}), W1[0], W2[0]);
    INFO("k = " << k);
    CHECK(max_abs_diff(model.moe()->forward(model.store(), 0, xn, 1.0).view({-1, m.hidden}), want) <= 1e-5);
    layer0(model, "moe.router.w").zero_();  // uniform probabilities: every choice a tie
    CHECK(max_abs_diff(model.moe()->forward(model.store(), 0, xn, 1.0).view({-1, m.hidden}), want) <= 1e-5);
  }
}

// The Engine (one process) with balanced routing equals the Trainer with it,
// and the routing is not the learned one: the losses differ.
TEST_CASE("moe: the Engine with balanced routing equals the single-process trainer", "[moe]") {
  ModelSpec m = moe_like();
  m.moe.dense_layers = 1;
  Strategy s = Strategy::parse("zero=1,mbs=2,gas=2");
  s.precision = Precision::FP32;
  rt::RunOptions o;
  o.moe_routing = rt::MoeRouting::Balanced;
  const RunResult a = run_single(m, s, 16, 3, o);
  check_close(a, run_engine(m, s, 16, 3, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, o));
  const RunResult learned = run_single(m, s, 16, 3);
  CHECK(std::abs(learned.losses.back() - a.losses.back()) > 1e-6);
}

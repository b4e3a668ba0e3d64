// --tokens, --price, --prices and plan --objective: hand-computed days,
// GPU-hours and costs, and the ranking over clusters.
#include <filesystem>
#include <fstream>

#include "catch.hpp"
#include "planner/plan_rank.hpp"
#include "planner/train_cost.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;
using test_util::error_of;

TEST_CASE("token counts with K, M, B, T suffixes", "[cost]") {
  CHECK(parse_tokens("300B") == 3e11);
  CHECK(parse_tokens("1.5T") == 1.5e12);
  CHECK(parse_tokens("500m") == 5e8);
  CHECK(parse_tokens("20k") == 2e4);
  CHECK(parse_tokens("2e9") == 2e9);
  CHECK(parse_tokens("1000000") == 1e6);
  for (const char* bad : {"", "0", "-5B", "abc", "B", "1e19", "1.5TT", "nan", "inf"})
    CHECK(contains(error_of([&] { parse_tokens(bad); }), "--tokens"));
  CHECK(parse_price("2.5", "--price") == 2.5);
  for (const char* bad : {"0", "-1", "cheap", "1e7", ""})
    CHECK(contains(error_of([&] { parse_price(bad, "--price"); }), "--price"));
}

TEST_CASE("days, GPU-hours and cost", "[cost]") {
  const ClusterSpec c = parse_cluster("8xH100");
  TrainCostOptions o = parse_train_cost_options("1T", "2.5", "");
  // 1e12 tokens at 1e5 tokens/s: 1e7 s = 115.74 days; 8 GPUs: 22,222 GPU-hours; at 2.5: 55,556.
  const TrainCost t = *train_cost(o, c, 1e5);
  CHECK(t.seconds == Approx(1e7));
  CHECK(t.days == Approx(1e7 / 86400.0));
  CHECK(t.gpu_hours == Approx(1e7 / 3600.0 * 8));
  CHECK(*t.cost == Approx(1e7 / 3600.0 * 8 * 2.5));
  CHECK(contains(train_cost_line(t), "1T tokens: 115.74 days, 22222 GPU-hours, cost 55556"));
  CHECK_FALSE(train_cost(parse_train_cost_options("", "", ""), c, 1e5));
  CHECK(contains(error_of([] { parse_train_cost_options("", "2.5", ""); }), "need --tokens"));
  CHECK(contains(error_of([] { parse_train_cost_options("1T", "2.5", "p.json"); }), "not both"));
}

TEST_CASE("prices per GPU type from a JSON file", "[cost]") {
  const auto path = std::filesystem::temp_directory_path() / "planner_test_prices.json";
  std::ofstream(path) << R"({"H100": 2.5, "a100-80gb": 1.8})";
  const TrainCostOptions o = parse_train_cost_options("300B", "", path.string());
  CHECK(*o.price_for(parse_cluster("8xH100")) == 2.5);      // an alias of H100-SXM
  CHECK(*o.price_for(parse_cluster("8xA100-80GB")) == 1.8);
  CHECK(contains(error_of([&] { o.price_for(parse_cluster("8xV100-32GB")); }), "no price for V100-32GB"));
  std::ofstream(path) << R"({"H1000": 2.5})";
  CHECK(contains(error_of([&] { load_prices(path.string()); }), "did you mean"));
  std::ofstream(path) << R"({"H100": "two"})";
  CHECK(contains(error_of([&] { load_prices(path.string()); }), "positive number"));
  std::filesystem::remove(path);
}

namespace {

RankedPlan fake(const ClusterSpec& c, double tokens_per_second) {
  RankedPlan p;
  p.plan.cluster = c;
  p.prediction.tokens_per_second = tokens_per_second;
  p.prediction.step_seconds = 1e6 / tokens_per_second;
  return p;
}

}  // namespace

TEST_CASE("objectives: time ranks as throughput, cost can differ across clusters", "[cost]") {
  // Cluster A: 8 GPUs at 2.0, 100k tokens/s -> 1e12 tokens in 1e7 s, 22,222 GPU-h, cost 44,444.
  // Cluster B: 32 GPUs at 0.5, 150k tokens/s -> 6.67e6 s, 59,259 GPU-h, cost 29,630: faster and cheaper.
  // Cluster C: 8 GPUs at 4.0, 120k tokens/s -> 8.33e6 s, 18,519 GPU-h, cost 74,074.
  const ClusterSpec a = parse_cluster("8xA100-80GB"), b = parse_cluster("32xV100-32GB"), c = parse_cluster("8xH100");
  std::vector<ClusterSearch> s(3);
  s[0].cluster = a, s[1].cluster = b, s[2].cluster = c;
  s[0].result.plans = {fake(a, 1e5)};
  s[1].result.plans = {fake(b, 1.5e5)};
  s[2].result.plans = {fake(c, 1.2e5), fake(c, 0.5e5)};
  const auto path = std::filesystem::temp_directory_path() / "planner_test_prices2.json";
  std::ofstream(path) << R"({"A100-80GB": 2.0, "V100-32GB": 0.5, "H100": 4.0})";
  const TrainCostOptions o = parse_train_cost_options("1T", "", path.string());
  std::filesystem::remove(path);
  auto order = [&](Objective obj) {
    std::vector<double> v;
    for (const auto& e : rank_by_objective(s, obj, o)) v.push_back(e.plan->prediction.tokens_per_second);
    return v;
  };
  CHECK(order(Objective::Throughput) == std::vector<double>{1.5e5, 1.2e5, 1e5, 0.5e5});
  CHECK(order(Objective::Time) == order(Objective::Throughput));
  // Costs: B 29,630; A 44,444; C(120k) 74,074; C(50k) 177,778.
  CHECK(order(Objective::Cost) == std::vector<double>{1.5e5, 1e5, 1.2e5, 0.5e5});
  const auto ranked = rank_by_objective(s, Objective::Cost, o);
  CHECK(*ranked[0].train->cost == Approx(1e12 / 1.5e5 / 3600 * 32 * 0.5));
  CHECK(ranked[0].search == 1);

  CHECK(contains(error_of([&] { check_objective(Objective::Cost, parse_train_cost_options("1T", "", ""), {a}); }),
                 "needs --tokens and --price"));
  CHECK(contains(error_of([&] { check_objective(Objective::Time, TrainCostOptions{}, {a}); }), "needs --tokens"));
  CHECK(contains(error_of([] { parse_objective("speed"); }), "throughput, time or cost"));
}

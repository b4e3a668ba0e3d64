// planner compare: one best plan per cluster, ranked by cost, time or throughput.
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "planner/compare.hpp"
#include "test_util.hpp"

using namespace planner;
using test_util::contains;

TEST_CASE("compare: default global batch is the lcm of the GPU counts", "[compare]") {
  CHECK(default_compare_batch({parse_cluster("8xA100-80GB"), parse_cluster("8xH100"), parse_cluster("32xV100-32GB")}) ==
        32);
  CHECK(default_compare_batch({parse_cluster("2x8xH100"), parse_cluster("24xV100-32GB")}) == 48);
  CHECK(default_compare_batch({parse_cluster("3xRTX3090")}) == 3);
}

TEST_CASE("compare: best plan per cluster, ranked by cost, then by throughput", "[compare]") {
  SearchRequest req;
  req.model = resolve_model("gpt2-xl");
  req.seq = 1024;
  const std::vector<ClusterSpec> clusters = {parse_cluster("2xRTX3090"), parse_cluster("8xH100")};
  TrainCostOptions cost;
  cost.tokens = 1e10;
  cost.prices = {{"RTX3090", 0.1}, {"H100-SXM", 100.0}};
  const CompareResult by_cost = compare_clusters(req, clusters, 32, cost);
  REQUIRE(by_cost.rows.size() == 2);
  CHECK(by_cost.objective == Objective::Cost);
  CHECK(by_cost.rows[0].cluster.gpu.name == "RTX3090");  // slower but 1000x cheaper
  for (size_t i = 0; i < clusters.size(); ++i) {
    REQUIRE(by_cost.rows[i].best);
    SearchRequest one = req;
    one.cluster = by_cost.rows[i].cluster;
    one.global_batch = 32;
    one.top_k = 1;
    const SearchResult s = search_plans(one);
    CHECK(s.plans.front().prediction.tokens_per_second == by_cost.rows[i].best->prediction.tokens_per_second);
    CHECK(by_cost.rows[i].headroom_bytes() ==
          s.plans.front().prediction.memory.gpu_capacity_bytes - s.plans.front().prediction.memory.per_gpu_peak_bytes);
  }
  const CompareResult by_tput = compare_clusters(req, clusters, 32, TrainCostOptions{});
  CHECK(by_tput.objective == Objective::Throughput);
  CHECK(by_tput.rows[0].cluster.gpu.name == "H100-SXM");
  const nlohmann::json j = compare_json(by_cost);
  CHECK(j["objective"] == "cost");
  CHECK(j["clusters"][0]["rank"] == 1);
  CHECK(j["clusters"][1]["train"]["cost"].get<double>() > j["clusters"][0]["train"]["cost"].get<double>());
  CHECK(contains(compare_table(by_cost), "ranked by cost to train 10B tokens"));
}

#include "catch.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#include "strategies/rank_grid.hpp"
#include "strategies/shard.hpp"
#include "strategies/strategy.hpp"

#include <nlohmann/json.hpp>
#include <set>

using namespace planner;

TEST_CASE("strategy text form parses and round-trips", "[strategy]") {
  std::vector<std::string> given;
  Strategy s = Strategy::parse("dp=2,tp=1,pp=1,zero=2,offload=none,ckpt=full,mbs=4,gas=8,precision=bf16", &given);
  CHECK(s.dp == 2);
  CHECK(s.zero == 2);
  CHECK(s.ckpt == Ckpt::Full);
  CHECK(s.mbs == 4);
  CHECK(s.gas == 8);
  CHECK(s.precision == Precision::BF16);
  CHECK(given.size() == 9);
  CHECK(Strategy::parse(s.to_string()) == s);
  // Unnamed keys take the defaults.
  Strategy d = Strategy::parse("tp=2");
  CHECK(d.tp == 2);
  CHECK(d.dp == 1);
  CHECK(d.schedule == Schedule::OneFOneB);
  CHECK(d.offload == Offload::None);
  // JSON round trip, object and text forms.
  nlohmann::json j = s;
  CHECK(j.get<Strategy>() == s);
  CHECK(nlohmann::json(s.to_string()).get<Strategy>() == s);
  CHECK(s.global_batch() == 64);
}

TEST_CASE("strategy text form rejects malformed input", "[strategy]") {
  for (const char* bad : {"", "dp", "dp=", "dp=0", "dp=-1", "dp=abc", "dp=2,dp=2", "dq=2", "zero=x",
                          "offload=gpu", "ckpt=some", "precision=fp4", "sp=2", "mbs=99999999999999999999",
                          "dp=2,,tp=1", "tp=2097152"}) {
    INFO(bad);
    CHECK_THROWS_AS(Strategy::parse(bad), InputError);
  }
  try {
    Strategy::parse("dq=2");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("did you mean 'dp'") != std::string::npos);
  }
}

TEST_CASE("strategy validate names the broken rule", "[strategy]") {
  auto msg = [](const char* text) {
    try {
      Strategy::parse(text).validate();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(msg("dp=2,zero=1") == "");
  CHECK(msg("dp=2,zero=4").find("zero=4") != std::string::npos);
  CHECK(msg("dp=2,zero=0,offload=optimizer").find("needs zero>=1") != std::string::npos);
  CHECK(msg("dp=2,zero=2,offload=all").find("needs zero=3") != std::string::npos);
  CHECK(msg("pp=2,vpp=2").find("needs schedule=interleaved") != std::string::npos);
  CHECK(msg("pp=2,gas=3,schedule=interleaved,vpp=2").find("multiple of pp") != std::string::npos);
  CHECK(msg("pp=1,schedule=interleaved,vpp=2").find("needs pp>=2") != std::string::npos);
  CHECK(msg("dp=2,pp=2,zero=2").find("zero=2 with pp=2") != std::string::npos);
}

TEST_CASE("parse helpers: integers and sizes", "[strategy]") {
  CHECK(parse_int("42", "x") == 42);
  CHECK_THROWS_AS(parse_int("0", "x"), InputError);
  CHECK(parse_int("0", "x", true) == 0);
  CHECK_THROWS_AS(parse_int("9223372036854775808", "x"), InputError);
  CHECK_THROWS_AS(parse_int("1.5", "x"), InputError);
  CHECK(parse_bytes("64GB", "m") == 64'000'000'000LL);
  CHECK(parse_bytes("2GiB", "m") == 2LL << 30);
  CHECK(parse_bytes("1.5 TiB", "m") == (3LL << 40) / 2);
  CHECK_THROWS_AS(parse_bytes("-5GB", "m"), InputError);
  CHECK_THROWS_AS(parse_bytes("0", "m"), InputError);
  CHECK_THROWS_AS(parse_bytes("12 parsecs", "m"), InputError);
  CHECK_THROWS_AS(parse_bytes("1e30GB", "m"), InputError);
  CHECK(nearest("gtp2", {"gpt2", "opt-125m", "bert-base"}) == "gpt2");
}

TEST_CASE("rank grid: the worked example in rank_grid.hpp", "[strategy]") {
  RankGrid g(2, 2, 2);
  CHECK(g.world() == 8);
  CHECK(g.coord(5) == RankCoord{1, 0, 1});
  CHECK(g.rank({1, 1, 0}) == 6);
  CHECK(g.tp_group(3) == std::vector<int>{2, 3});
  CHECK(g.pp_group(1) == std::vector<int>{1, 3});
  CHECK(g.dp_group(2) == std::vector<int>{2, 6});
  CHECK(g.all_tp_groups().size() == 4);
  CHECK(g.all_dp_groups() == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // Every rank round-trips and each group kind partitions the ranks.
  for (auto [dp, pp, tp] : {std::tuple{4, 2, 8}, std::tuple{1, 8, 1}, std::tuple{3, 1, 2}}) {
    RankGrid grid(dp, pp, tp);
    for (int r = 0; r < grid.world(); ++r) CHECK(grid.rank(grid.coord(r)) == r);
    for (auto groups : {grid.all_tp_groups(), grid.all_pp_groups(), grid.all_dp_groups()}) {
      std::set<int> seen;
      for (auto& grp : groups)
        for (int r : grp) CHECK(seen.insert(r).second);
      CHECK(int(seen.size()) == grid.world());
    }
  }
  CHECK_THROWS_AS(RankGrid(0, 1, 1), InputError);
  CHECK_THROWS_AS(g.coord(8), InputError);
}

TEST_CASE("shard tiles the buffer in the equal chunks of the collectives", "[strategy]") {
  CHECK(shard(10, 0, 4) == Shard{0, 3});
  CHECK(shard(10, 1, 4) == Shard{3, 3});
  CHECK(shard(10, 2, 4) == Shard{6, 3});
  CHECK(shard(10, 3, 4) == Shard{9, 1});
  CHECK(shard(2, 3, 4) == Shard{2, 0});  // more ranks than elements: the last own nothing
  CHECK(padded_shard_size(10, 4) == 3);
  for (int64_t n : {0, 1, 7, 1000, 1000003}) {
    for (int w : {1, 2, 3, 8, 64}) {
      int64_t next = 0;
      for (int r = 0; r < w; ++r) {
        Shard s = shard(n, r, w);
        CHECK(s.offset == next);
        CHECK(s.size <= padded_shard_size(n, w));
        CHECK(s.size <= shard(n, 0, w).size);  // rank 0 holds the largest shard
        if (s.size > 0) CHECK(s.offset == r * padded_shard_size(n, w));
        next += s.size;
      }
      CHECK(next == n);
    }
  }
  CHECK_THROWS_AS(shard(10, 4, 4), InputError);
}

// LoRA and QLoRA under data parallelism (dist_np2, dist_np4), fp32 on the CPU:
// every rank trains on its rows of the global batch, the adapters' gradients
// summed over the ranks, and must end with the adapters (and the losses) of
// one process training on all the rows.
#include <chrono>

#include "lora/lora_check.hpp"
#include "runtime/comm/communicator.hpp"
#include "strategies/rank_grid.hpp"
#include "tiny_models.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

using namespace planner;
using namespace planner::test;

TEST_CASE("dist: LoRA and QLoRA data-parallel equal one process", "[dist][lora]") {
  const rt::WorldInfo w = rt::init_world();
  if (w.size < 2) return;
  auto dp = rt::make_communicator(RankGrid(w.size, 1, 1).all_dp_groups(), "dp", at::Device(at::kCPU),
                                  std::chrono::seconds(120));
  for (FinetuneMode mode : {FinetuneMode::Lora, FinetuneMode::Qlora}) {
    Finetune f;
    f.mode = mode, f.r = 4, f.alpha = 8;
    const ModelSpec m = llama_like();
    INFO(to_string(mode) << " dp=" << w.size);
    const int64_t rows = 2 * w.size;
    const LoraRun one = run_lora(m, f, 16, 3, 0, rows, rows);
    const LoraRun par = run_lora(m, f, 16, 3, 2 * dp->rank(), 2, rows, w.size,
                                 [&](at::Tensor& t) { dp->all_reduce(t)->wait(); });
    REQUIRE(one.losses.size() == par.losses.size());
    for (size_t k = 0; k < one.losses.size(); ++k) CHECK(std::abs(one.losses[k] - par.losses[k]) <= 1e-5);
    CHECK((one.adapters - par.adapters).abs().max().item<double>() <= 1e-5);
  }
}

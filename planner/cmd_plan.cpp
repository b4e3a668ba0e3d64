// `planner plan`: search every strategy and rank what fits. (Wired to the search.)
#include "planner/cli.hpp"

namespace planner {

CLI::App* add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("plan", "Search every strategy, rank what fits by throughput");
  cmd->callback([&exit_code] { exit_code = 1; throw std::runtime_error("plan: the search is not built yet"); });
  return cmd;
}

CLI::App* add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Benchmark the strategy search");
  cmd->callback([&exit_code] { exit_code = 1; throw std::runtime_error("bench: not built yet"); });
  return cmd;
}

}  // namespace planner

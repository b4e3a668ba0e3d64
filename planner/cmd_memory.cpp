// `planner memory`: the per-GPU and per-host memory of one plan.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/memory_model.hpp"
#include "planner/cli.hpp"
#include "planner/render.hpp"

namespace planner {

CLI::App* add_memory_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("memory", "Per-GPU and per-host memory of a plan, by category and pipeline stage");
  cmd->footer(
      "Examples:\n"
      "  planner memory --model gpt2-xl --gpus 2xRTX3090 --strategy zero=1,mbs=4\n"
      "  planner memory --model llama-2-7b --gpus 8xA100-80GB --strategy tp=2,pp=2,ckpt=full --seq 4096 --json\n"
      "  planner memory --plan plan.json\n"
      "Exit codes: 0 answered (fits or not: see the verdict or \"fits\"), 2 bad input, 1 other failure.");
  auto* o = new PlanOptions;  // lives as long as the program
  auto* json = new bool(false);
  add_plan_options(cmd, *o, true);
  cmd->add_flag("--json", *json, "machine-readable output (schema in docs/ARCHITECTURE.md)");
  cmd->callback([o, json, &exit_code] {
    std::vector<std::string> notes;
    Plan plan = resolve_plan(*o, true, &notes);
    MemoryReport r = estimate_memory(plan);
    r.notes.insert(r.notes.begin(), notes.begin(), notes.end());
    if (*json) {
      nlohmann::json j = memory_report_json(r);
      j["plan"] = plan_to_json(plan);
      emit("", j.dump(2) + "\n");
    } else {
      emit("", plan_header(plan) + "\n" + memory_table(plan, r));
    }
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

// `planner predict`: step time, throughput, MFU and memory of one plan.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/predict.hpp"
#include "costmodel/predict_detail.hpp"
#include "planner/cli.hpp"
#include "planner/render.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

std::string prediction_table(const Plan& plan, const StepPrediction& p) {
  std::string out = plan_header(plan) + "\n";
  out += fmt::format("step time        {:>12.4f} s\n", p.step_seconds);
  out += fmt::format("samples/s        {:>12.2f}\n", p.samples_per_second);
  out += fmt::format("tokens/s         {:>12.0f}\n", p.tokens_per_second);
  out += fmt::format("model TFLOP/s    {:>12.1f} per GPU\n", p.tflops_per_gpu);
  out += fmt::format("hardware TFLOP/s {:>12.1f} per GPU (with recomputation)\n", p.hw_tflops_per_gpu);
  out += fmt::format("MFU              {:>11.1f}%\n\n", 100 * p.mfu);
  out += "where the step goes (critical rank):\n";
  auto row = [&](const char* name, double s) {
    out += fmt::format("  {:<22}{:>10.4f} s {:>6.1f}%\n", name, s, p.step_seconds > 0 ? 100 * s / p.step_seconds : 0.0);
  };
  row("compute", p.compute_seconds);
  row("exposed communication", p.exposed_comm_seconds);
  row("pipeline bubble", p.bubble_seconds);
  row("optimizer", p.optimizer_seconds);
  row("offload", p.offload_seconds);
  out += "\n" + memory_table(plan, p.memory);
  return out;
}

}  // namespace

CLI::App* add_predict_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("predict", "Predict step time, throughput, MFU and memory of a plan");
  cmd->footer(
      "Examples:\n"
      "  planner predict --model gpt2-xl --gpus 2xRTX3090 --strategy zero=1,mbs=4 --global-batch 32\n"
      "  planner predict --model llama-2-70b --gpus 128x8xH100 --strategy tp=8,pp=4,mbs=1 --seq 4096 "
      "--global-batch 1024 --trace step.json\n"
      "  planner predict --plan plan.json --json");
  struct Opts {
    PlanOptions plan;
    std::string profile, trace;
    bool json = false;
  };
  auto* o = new Opts;
  add_plan_options(cmd, o->plan, true);
  cmd->add_option("--profile", o->profile, "hardware profile JSON (default: the GPU catalog's)");
  cmd->add_option("--trace", o->trace, "write a Chrome-trace JSON of the predicted step (open in Perfetto)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    std::vector<std::string> notes;
    Plan plan = resolve_plan(o->plan, true, &notes);
    StepPrediction p = predict_with_trace(plan, o->profile, o->trace);
    p.memory.notes.insert(p.memory.notes.begin(), notes.begin(), notes.end());
    if (o->json) {
      nlohmann::json j = prediction_json(p);
      j["plan"] = plan_to_json(plan);
      emit("", j.dump(2) + "\n");
    } else {
      emit("", prediction_table(plan, p));
    }
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

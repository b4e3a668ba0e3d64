// `planner predict`: step time, throughput, MFU and memory of one plan.
#include <memory>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/engines.hpp"
#include "costmodel/engines_host.hpp"
#include "costmodel/engines_time.hpp"
#include "costmodel/predict.hpp"
#include "costmodel/predict_detail.hpp"
#include "planner/cli.hpp"
#include "planner/render.hpp"
#include "planner/train_cost.hpp"
#include "specs/runtime_gap.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

std::string prediction_table(const Plan& plan, const StepPrediction& p, const std::vector<std::string>& assumed) {
  std::string out = plan_header(plan) + assumed_line(assumed) + "\n";
  const StepTimeBand band = step_time_band(plan.cluster.gpu, band_kind(plan));
  const bool wide = !band.calibrated;
  out += fmt::format("step time        {:>12.4f} s{}\n", p.step_seconds,
                     wide ? fmt::format("   (band {:.4f} - {:.4f} s: not calibrated)", p.step_seconds * band.low,
                                        p.step_seconds * band.high)
                          : std::string());
  out += fmt::format("samples/s        {:>12.2f}\n", p.samples_per_second);
  out += fmt::format("tokens/s         {:>12.0f}{}\n", p.tokens_per_second,
                     wide ? fmt::format("   (band {:.0f} - {:.0f})", p.tokens_per_second / band.high,
                                        p.tokens_per_second / band.low)
                          : std::string());
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

// host_model: what the host terms count on this plan's model (the eager
// model's parameter tensors and submodules with parameters) and the
// compiled-in host constants, which a probe's profile section replaces
// (scripts/engines/probe_to_profile.py reads both from here).
nlohmann::json engine_step_json(const EngineStep& e, const ModelSpec& m) {
  nlohmann::json terms = nlohmann::json::array();
  for (const auto& t : e.terms) terms.push_back({{"name", t.name}, {"seconds", t.seconds}, {"source", t.source}});
  const nlohmann::json host_model = {{"param_tensors", torch_model_param_tensors(m)},
                                     {"param_modules", torch_model_param_modules(m)},
                                     {"compiled_in", engine_host_to_json(EngineHostConstants{})}};
  return {{"engine", to_string(e.engine)}, {"version", engine_version(e.engine)}, {"step_seconds", e.step_seconds},
          {"simulated_seconds", e.simulated_seconds}, {"host_seconds", e.host_seconds}, {"terms", terms},
          {"notes", e.notes}, {"host_model", host_model}};
}

std::string engine_step_text(const EngineStep& e) {
  std::string out = fmt::format("\n{} step time {:>10.4f} s   (this plan simulated with its kernels and overlap: "
                                "{:.4f} s)\n", engine_version(e.engine), e.step_seconds, e.simulated_seconds);
  for (const auto& t : e.terms) out += fmt::format("  + {:<24}{:>10.4f} s   {}\n", t.name, t.seconds, t.source);
  for (const auto& n : e.notes) out += "note: " + n + "\n";
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
      "  planner predict --plan plan.json --json\n"
      "  planner predict --model llama-2-7b --gpus 8xH100 --strategy tp=2,cp=4,zero=1,ckpt=full --seq 32768 "
      "--global-batch 8\n"
      "  planner predict --model llama-2-7b --gpus 8xH100 --strategy tp=2,mbs=2 --global-batch 512 --tokens 1T "
      "--price 2.5\n"
      "  planner predict --model llama-2-7b --gpus 8xA100-80GB --strategy zero=1,mbs=2 --global-batch 512 "
      "--tokens 300B --prices prices.json --engine megatron\n"
      "  planner predict --model gpt2-large --gpus 2xRTX3090 --strategy tp=2,mbs=4 --global-batch 32 -o plan.json\n"
      "--tokens adds the days and GPU-hours to train that many tokens at the predicted throughput; --price (per\n"
      "GPU-hour) or --prices (JSON: {\"H100\": 2.5, ...}) the cost. --engine predicts the memory of that engine\n"
      "and its step time (\"engine_step\" in --json; the other fields stay this runtime's). -o writes the plan\n"
      "given (for exec and export).");
  struct Opts {
    PlanOptions plan;
    TrainCostCli cost;
    ProfileCli profile;
    std::string trace, engine, output;
    bool json = false, with_te = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  add_plan_options(cmd, o->plan, true);
  add_profile_options(cmd, o->profile);
  cmd->add_option("--trace", o->trace, "write a Chrome-trace JSON of the predicted step (open in Perfetto)");
  add_engine_option(cmd, o->engine, &o->with_te);
  add_train_cost_options(cmd, o->cost);
  cmd->add_option("-o,--output", o->output, "write the plan to this plan.json");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    std::vector<std::string> notes;
    PlanUse use;
    use.engine = resolve_engine(o->engine);
    use.engine_env.transformer_engine = o->with_te;
    use.simulate = true;
    use.trace = !o->trace.empty();
    Plan plan = resolve_plan(o->plan, true, &notes, use);
    const Engine engine = use.engine;
    const TrainCostOptions cost_opts = parse_train_cost_options(o->cost.tokens, o->cost.price, o->cost.prices);
    if (!o->output.empty()) check_writable(o->output);
    const HardwareProfile profile = resolve_profile(o->profile, plan.cluster.gpu);
    StepPrediction p = predict_with_trace(plan, profile, o->trace);
    std::optional<EngineStep> engine_step;
    if (engine != Engine::Ours) {
      p.memory = estimate_memory(plan, engine, &profile, use.engine_env);
      if (std::string n = engine_memory_note(engine, use.engine_env); !n.empty()) p.memory.notes.push_back(std::move(n));
      engine_step = engine_step_time(plan, profile, engine);
    }
    if (std::string n = check_profile_gpu(profile, plan.cluster.gpu, true); !n.empty()) notes.push_back(std::move(n));
    if (engine == Engine::Ours)  // the runtime's own limits (specs/runtime_gap.hpp)
      if (const std::string gap = runtime_gap(plan.model, plan.strategy, plan.seq); !gap.empty())
        notes.push_back("planner exec does not run this plan (" + gap + "): it is predicted as the cost model prices it");
    p.memory.notes.insert(p.memory.notes.begin(), notes.begin(), notes.end());
    const std::optional<TrainCost> cost = train_cost(cost_opts, plan.cluster, p.tokens_per_second);
    const std::vector<std::string> assumed = assumed_defaults(plan, given_inputs(o->plan));
    if (!o->output.empty()) save_plan(plan, o->output);
    if (o->json) {
      nlohmann::json j = prediction_json(p);
      if (cost) j["train"] = train_cost_json(*cost);
      if (engine_step) j["engine_step"] = engine_step_json(*engine_step, plan.model);
      j["gpu_calibrated"] = !plan.cluster.gpu.calibrated.empty();
      if (const std::string note = calibration_note(plan.cluster.gpu); !note.empty()) j["calibration_note"] = note;
      j["assumed"] = assumed;
      const StepTimeBand band = step_time_band(plan.cluster.gpu, band_kind(plan));
      j["step_seconds_band"] = {p.step_seconds * band.low, p.step_seconds * band.high};
      j["tokens_per_second_band"] = {p.tokens_per_second / band.high, p.tokens_per_second / band.low};
      j["band_note"] = band.text;
      j["plan"] = plan_to_json(plan);
      emit_report(o->output, j.dump(2) + "\n");
    } else {
      std::string text = prediction_table(plan, p, assumed);
      if (engine_step) text += engine_step_text(*engine_step);
      if (cost) text += "\nTo train " + train_cost_line(*cost) + "\n";
      text += "note: " + step_time_band(plan.cluster.gpu, band_kind(plan)).text + "\n";
      if (!o->output.empty() && o->output != "-") text += fmt::format("Wrote the plan to {}\n", o->output);
      emit_report(o->output, text);
    }
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

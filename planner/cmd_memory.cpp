// `planner memory`: the per-GPU and per-host memory of one plan.
#include <memory>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/engines.hpp"
#include "costmodel/memory_model.hpp"
#include "costmodel/predict.hpp"
#include "planner/finetune_render.hpp"
#include "planner/cli.hpp"
#include "costmodel/predict_detail.hpp"
#include "planner/render.hpp"
#include "planner/suggest.hpp"
#include "strategies/errors.hpp"

namespace planner {

CLI::App* add_memory_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("memory", "Per-GPU and per-host memory of a plan, by category and pipeline stage");
  cmd->footer(
      "Examples:\n"
      "  planner memory --model gpt2-xl --gpus 2xRTX3090 --strategy zero=1,mbs=4\n"
      "  planner memory --model llama-2-7b --gpus 8xA100-80GB --strategy tp=2,pp=2,ckpt=full --seq 4096 --json\n"
      "  planner memory --plan plan.json\n"
      "  planner memory --model gpt-neo-2.7b --gpus 2xA100-80GB --strategy zero=2,mbs=2 --engine deepspeed\n"
      "  planner memory --model gpt2-xl --gpus 2xRTX3090 --strategy zero=2,ckpt=full -o plan.json\n"
      "  planner memory --plan plan.json --profile h100.json --headroom 1GiB\n"
      "--engine deepspeed|megatron|fsdp predicts what that engine allocates for the same strategy (exit 2 when\n"
      "it cannot run it); -o writes the plan given, for predict --plan, export and exec.\n"
      "A plan fits when its peak is at most the GPU's capacity (what a process can allocate: --profile from\n"
      "planner calibrate, else the catalog) less the headroom (--headroom, default 2% of the capacity).\n"
      "Exit codes: 0 answered (fits or not: see the verdict or \"fits\"), 2 bad input, 1 other failure.");
  struct Opts {
    PlanOptions plan;
    ProfileCli profile;
    std::string engine, output;
    bool json = false, with_te = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  add_plan_options(cmd, o->plan, true);
  add_engine_option(cmd, o->engine, &o->with_te);
  add_profile_options(cmd, o->profile);
  cmd->add_option("-o,--output", o->output, "write the plan to this plan.json");
  cmd->add_flag("--json", o->json, "machine-readable output (schema in docs/FORMATS.md)");
  cmd->callback([o, &exit_code] {
    std::vector<std::string> notes;
    PlanUse use;
    use.engine = resolve_engine(o->engine);
    use.engine_env.transformer_engine = o->with_te;
    Plan plan = resolve_plan(o->plan, true, &notes, use);
    const Engine engine = use.engine;
    const HardwareProfile profile = resolve_profile(o->profile, plan.cluster.gpu);
    MemoryReport r = estimate_memory(plan, engine, &profile, use.engine_env);
    if (std::string n = check_profile_gpu(profile, plan.cluster.gpu, true); !n.empty()) notes.push_back(std::move(n));
    if (std::string n = collective_extrapolation_note(profile, plan.strategy); !n.empty()) notes.push_back(std::move(n));
    if (std::string n = engine_memory_note(engine, EngineEnv{o->with_te}); !n.empty()) notes.push_back(std::move(n));
    r.notes.insert(r.notes.begin(), notes.begin(), notes.end());
    const std::vector<std::string> assumed = assumed_defaults(plan, given_inputs(o->plan));
    // A way out: the cheapest single changes that fit, with their step time.
    std::vector<FitChange> fixes;
    double step_seconds = 0;
    if (!r.fits()) {
      fixes = cheapest_fixes(plan, profile, engine);
      try {
        step_seconds = predict(plan, profile).step_seconds;
      } catch (const InputError&) {  // not simulable: the changes' times stand alone
      }
    }
    if (!o->output.empty()) save_plan(plan, o->output);
    if (o->json) {
      nlohmann::json j = memory_report_json(r);
      j["assumed"] = assumed;
      if (plan.strategy.finetune.frozen_base()) j["finetune"] = finetune_arithmetic_json(plan, r);
      if (!r.fits()) {
        j["fixes"] = nlohmann::json::array();
        for (const auto& f : fixes)
          j["fixes"].push_back({{"change", f.change}, {"strategy", f.plan.strategy.to_string()},
                                {"cluster", f.plan.cluster.name}, {"per_gpu_peak_bytes", f.peak_bytes},
                                {"step_seconds", f.step_seconds}});
      }
      j["gpu_calibrated"] = !plan.cluster.gpu.calibrated.empty();
      if (const std::string note = calibration_note(plan.cluster.gpu); !note.empty()) j["calibration_note"] = note;
      j["plan"] = plan_to_json(plan);
      emit_report(o->output, j.dump(2) + "\n");
    } else {
      std::string text = plan_header(plan) + assumed_line(assumed) + "\n" + memory_table(plan, r) +
                         finetune_arithmetic_text(plan, r);
      if (!r.fits()) text += fixes_text(plan, fixes, step_seconds);
      if (const std::string note = calibration_note(plan.cluster.gpu); !note.empty()) text += "note: " + note + "\n";
      if (!o->output.empty() && o->output != "-") text += fmt::format("Wrote the plan to {}\n", o->output);
      emit_report(o->output, text);
    }
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

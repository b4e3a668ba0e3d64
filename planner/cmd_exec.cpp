// `planner exec`: run a plan on this machine's GPU (or CPU) and put measured
// beside predicted. Needs the LibTorch runtime (built when LibTorch is found).
#include <fcntl.h>

#include <cerrno>

#include <memory>
#include <fmt/format.h>

#include "costmodel/compat.hpp"
#include "planner/cli.hpp"
#include "planner/validate.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#if defined(PLANNER_HAS_RUNTIME)
#include <iostream>

#include "specs/plan.hpp"
#include "costmodel/predict.hpp"
#include "costmodel/predict_detail.hpp"
#include "planner/exec_report.hpp"
#include "planner/render.hpp"
#include "runtime/exec.hpp"
#include "runtime/exec_launch.hpp"

#include <cstdlib>
#endif

namespace planner {

#if defined(PLANNER_HAS_RUNTIME)
// The runtime runs and measures (all ranks); rank 0 puts the prediction beside
// the measurement, prints, and writes the result file (atomically, only after
// a successful run).
// True in the process that should speak for the job: a process outside MPI
// (planner exec starts the ranks from it) or rank 0 of a launch.
bool speaks_for_job() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* x = std::getenv(v)) return std::string(x) == "0";
  return true;
}

// A plan the memory model says does not fit still runs (the measurement is
// the point), after one warning on stderr before anything starts. The
// process that starts the ranks warns and marks the environment, which the
// ranks it starts on this node inherit, so the warning is printed once.
void warn_if_not_fitting(const Plan& plan, const HardwareProfile& profile) {
  if (std::getenv("PLANNER_EXEC_FIT_CHECKED") || !speaks_for_job()) return;
  const MemoryReport m = estimate_memory(plan, Engine::Ours, &profile);
  if (!m.fits())
    std::cerr << "exec: warning: the plan is predicted not to fit (" << why_not_fits(m)
              << "); running it anyway\n" << std::flush;
  setenv("PLANNER_EXEC_FIT_CHECKED", "1", 1);
}

// Whether the run's times can be held against the prediction: a CPU run is
// predicted with a CPU profile (from `planner calibrate --device cpu`), a GPU run
// with a GPU's. Says which case it is in the measurement's notes.
bool note_devices(nlohmann::json& run, const HardwareProfile& profile, const GpuSpec& gpu, const std::string& path) {
  nlohmann::json& m = run["measurement"];
  const bool on_cpu = m.value("device", "").rfind("cpu", 0) == 0;
  const bool cpu_profile = to_lower(profile.gpu) == "cpu";
  std::string note;
  if (on_cpu && cpu_profile)
    note = fmt::format("ran on the CPU and predicted with the CPU profile '{}': times are compared", clip(path));
  else if (on_cpu)
    note = fmt::format("ran on the CPU but predicted for the {}: times, the CUDA context and the peaks are shown, not compared (predict the CPU run "
                       "with --profile from `planner calibrate --device cpu`)", gpu.name);
  else if (cpu_profile)
    note = fmt::format("ran on the GPU but predicted with a CPU profile ('{}'): times are shown, not compared",
                       clip(path));
  if (!note.empty()) m["notes"].push_back(note);
  return on_cpu == cpu_profile;
}

// The plan and the profile are loaded once (by the caller) and read by the fit
// warning, the run and the report.
int run_exec_and_report(const rt::ExecOptions& e, const Plan& plan, const HardwareProfile& profile) {
  warn_if_not_fitting(plan, profile);
  const rt::ExecRun r = rt::run_plan(e, plan);
  if (!r.report) return r.exit_code;
  const Plan& p = r.config.plan;
  SimResult sim;
  const StepPrediction pred = predict(p, profile, &sim, !e.trace_path.empty());
  nlohmann::json run = r.run;
  const bool comparable = note_devices(run, profile, p.cluster.gpu, e.profile_path);
  ExecReport rep = make_exec_report(p, pred, run, comparable);
  if (!e.trace_path.empty()) write_file_atomically(e.trace_path, exec_trace_json(p, sim, run).dump() + "\n");
  const std::string text = rep.result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (!e.output_path.empty()) write_file_atomically(e.output_path, text);
  // Under a launch by planner exec, rank 0's report goes through the launching
  // process, whose stdout is checked (mpirun would drop a failed write).
  if (!rt::relay_stdout(e.json ? text : rep.table)) std::cout << (e.json ? text : rep.table) << std::flush;
  return 0;
}
#endif

namespace {

// `planner exec`'s command line as given.
struct ExecCli {
  std::string plan, steps = "10", warmup = "3", output, tokens, tokens_dtype = "uint16", device = "auto", seed = "1234",
              lr = "3e-4", profile;
  std::string comm_timeout = "300", trace, headroom, moe_routing = "learned";
  bool json = false, quiet = false, oversubscribe = false, kernels = false;
};

#if defined(PLANNER_HAS_RUNTIME)
// The run's options from the command line, each checked (InputError naming the option).
rt::ExecOptions exec_options(const ExecCli& o) {
  rt::ExecOptions e;
  e.plan_path = o.plan;
  e.steps = int(parse_capped(o.steps, "--steps", kMaxSteps, false));
  e.warmup = int(parse_capped(o.warmup, "--warmup", kMaxSteps, true));
  e.output_path = o.output;
  e.tokens_path = o.tokens;
  e.json = o.json;
  e.device = o.device;
  e.tokens_dtype = o.tokens_dtype;
  e.seed = uint64_t(parse_int(o.seed, "--seed", true));
  e.profile_path = o.profile;
  e.progress = !o.quiet;
  e.oversubscribe = o.oversubscribe;
  e.trace_path = o.trace;
  e.kernels = o.kernels;
  e.moe_routing = rt::parse_moe_routing(o.moe_routing);
  e.comm_timeout_seconds = int(parse_capped(o.comm_timeout, "--comm-timeout", 86400, false));
  try {
    size_t used = 0;
    e.optim.lr = std::stod(o.lr, &used);
    if (used != o.lr.size() || !(e.optim.lr > 0) || e.optim.lr > 1e3) throw std::invalid_argument("lr");
  } catch (const std::exception&) {
    throw InputError(fmt::format("--lr: expected a number above 0 and at most 1000 such as 3e-4, got '{}'", clip(o.lr)));
  }
  return e;
}
#endif

}  // namespace

CLI::App* add_exec_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("exec", "Run a plan on this machine, measure, and compare with the prediction");
  cmd->footer(
      "Examples:\n"
      "  planner exec plan.json\n"
      "  planner exec examples/plans/tiny-cpu.json --steps 20 --warmup 2 -o result.json\n"
      "  planner exec examples/plans/tiny-cpu-dp2-zero3.json --device cpu --oversubscribe --trace step.json\n"
      "  planner exec examples/plans/gpt2-xl-h100-bf16.json --kernels   # GPU: where forward+backward time goes\n"
      "  planner exec moe-plan.json --moe-routing balanced   # MoE benchmark: every expert gets the same rows\n"
      "  mpirun -np 16 --hostfile hosts planner exec plan.json   # several nodes: one rank per GPU\n"
      "Runs on the GPU when there is one, else on the CPU. A plan with dp > 1 starts one process per rank\n"
      "with mpirun (or runs inside an existing mpirun/srun launch). Result schema: docs/RESULT.md.\n"
      "A plan predicted not to fit (memory model, --profile, --headroom) runs anyway after a warning on\n"
      "stderr; result.json records \"predicted_fit\": false.");
  auto o = std::make_shared<ExecCli>();  // owned by the callback, which the app owns
  cmd->add_option("plan", o->plan, "plan.json to run")->required();
  cmd->add_option("--steps", o->steps, "timed steps (default 10)");
  cmd->add_option("--warmup", o->warmup, "warm-up steps before timing (default 3)");
  cmd->add_option("-o,--output", o->output, "write result.json here");
  cmd->add_option("--tokens", o->tokens, "token file (raw little-endian ids) instead of synthetic tokens");
  cmd->add_option("--tokens-dtype", o->tokens_dtype, "element type of the token file: uint16 or int32 (default uint16)");
  cmd->add_option("--seed", o->seed, "seed of the weights and synthetic tokens (default 1234)");
  cmd->add_option("--lr", o->lr, "AdamW learning rate (default 3e-4)");
  cmd->add_option("--profile", o->profile, "hardware profile JSON for the prediction (default: the GPU catalog's)");
  cmd->add_option("--headroom", o->headroom,
                  "GPU memory a plan must leave free to be predicted to fit: 2% (default), 0.05, 1.5GiB or 0");
  cmd->add_flag("--quiet,-q", o->quiet, "no per-step progress on stderr");
  cmd->add_option("--device", o->device, "auto, cuda or cpu (default auto)");
  cmd->add_flag("--json", o->json, "print the result JSON instead of the table");
  cmd->add_flag("--oversubscribe", o->oversubscribe, "CPU: start more ranks than cores (passed to mpirun)");
  cmd->add_option("--trace", o->trace,
                  "write one Chrome trace (Perfetto) with the predicted and the measured timeline of the step");
  cmd->add_flag("--kernels", o->kernels,
                "GPU: after the timed steps, record one more step's forward/backward kernels and compare them by "
                "op class (GEMM, attention, memory-bound) with the prediction");
  cmd->add_option("--moe-routing", o->moe_routing,
                  "mixture of experts: learned (default: the router's top-k) or balanced (a benchmark mode: token t's "
                  "k experts are (t*k + j) mod E, so every expert gets the same rows; the router and its loss still "
                  "run; a dense model refuses it)");
  cmd->add_option("--comm-timeout", o->comm_timeout,
                  "seconds a collective may take before every rank is ended (default 300)");
  cmd->callback([o, &exit_code] {
    // Checked as every command checks a plan (check_compat), before any rank
    // starts; exec predicts the step too (and traces it with --trace).
    PlanUse use;
    use.simulate = true;
    use.trace = !o->trace.empty();
    const Plan checked = load_plan(o->plan);
    check_compat(checked, use);
    // The cost model prices some model features the runtime's layers lack: a
    // run would time a different model than the one predicted.
    // (finetune=lora|qlora runs: the Engine trains the adapters on a frozen
    // base, runtime/engine.hpp; what it cannot run, legality refuses.)
    if (const std::string gap = runtime_model_gap(checked.model); !gap.empty())
      throw InputError(fmt::format("exec: {} (model '{}'): the run would time another model than the prediction's",
                                   gap, clip(checked.model.name)));
    // Every output is checked before any work: a run of an hour must not end
    // in a failed write, and -o must not replace an input.
    for (const auto* out : {&o->output, &o->trace}) {
      if (out->empty()) continue;
      check_writable(*out);
      check_not_input(*out, o->plan, "plan");
      check_not_input(*out, o->tokens, "token file");
      check_not_input(*out, o->profile, "profile");
    }
    if (!o->output.empty() && o->output == o->trace) throw InputError("-o and --trace name the same file");
    // The report (table or --json) goes to stdout: a closed stdout would lose it.
    if (fcntl(1, F_GETFD) < 0 && errno == EBADF)
      throw InputError("stdout is closed, so the report would be lost; redirect it (> report.txt) or to /dev/null");
#if defined(PLANNER_HAS_RUNTIME)
    rt::ExecOptions e = exec_options(*o);
    check_headroom(o->headroom);
    HardwareProfile profile = load_profile(o->profile, checked.cluster.gpu);
    if (!o->headroom.empty()) apply_headroom(o->headroom, profile);
    // The run executes the program the prediction simulates (its overlap options).
    e.overlap_grad_reduce = profile.overlap_grad_reduce;
    e.overlap_param_gather = profile.overlap_param_gather;
    exit_code = run_exec_and_report(e, checked, profile);
#else
    (void)o;
    exit_code = 1;
    throw std::runtime_error("exec: this planner was built without LibTorch; rebuild with LibTorch (scripts/setup.sh)");
#endif
  });
  return cmd;
}

}  // namespace planner

// `planner calibrate`: measure this machine's GPU (or CPU) and write a hardware
// profile that --profile feeds to every command. Measuring needs the LibTorch
// runtime (calibration/measure.hpp; `planner` forwards to `planner-exec`);
// fitting is the cost model's (costmodel/calibration.hpp), so `--from` re-fits
// saved measurements without a GPU or LibTorch.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "specs/plan.hpp"
#include "planner/cli.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#if defined(PLANNER_HAS_RUNTIME)
#include "calibration/measure.hpp"
#endif

namespace planner {

namespace {

// The catalog GPU the efficiencies divide by: --gpu, else the device's name.
std::optional<GpuSpec> catalog_gpu(const nlohmann::json& measured, const std::string& gpu_option) {
  if (measured.value("device", "") != "cuda") {
    if (!gpu_option.empty()) throw InputError("calibrate: --gpu names the GPU measured; this calibration ran on the CPU");
    return std::nullopt;
  }
  if (!gpu_option.empty()) return gpu_by_name(gpu_option);
  const std::string name = measured.value("machine", nlohmann::json::object()).value("gpu_name", "");
  if (auto g = match_gpu(name)) return g;
  throw InputError(fmt::format("calibrate: '{}' is not in the GPU catalog; say which entry has its datasheet "
                               "peaks with --gpu NAME (planner list gpus)",
                               name));
}

// The scalar profile fields this calibration fitted (its "fits" keys that
// profile_to_json writes), in the order it wrote them.
std::vector<std::string> merged_fields(const HardwareProfile& p) {
  std::vector<std::string> out;
  if (!p.calibration) return out;
  const nlohmann::json all = profile_to_json(p);
  const nlohmann::json fits = p.calibration->value("fits", nlohmann::json::object());
  for (const auto& [k, v] : fits.items())
    if (all.contains(k)) out.push_back(k);
  return out;
}

// --onto: the profile file `onto` with the fitted fields of `p` replaced and
// their provenance appended to its source; checked by loading it over the
// GPU's datasheet profile (InputError as any profile file's).
nlohmann::json merge_onto(const HardwareProfile& p, const std::string& onto, const GpuSpec* gpu,
                          const std::vector<std::string>& only) {
  if (!gpu) throw InputError("calibrate --onto: this calibration ran on the CPU; merge a GPU's measurements");
  nlohmann::json base = read_json_file(onto, "calibrate --onto");
  if (!base.is_object()) throw InputError("calibrate --onto: " + onto + " is not a profile (a JSON object)");
  if (base.contains("gpu") && base["gpu"].is_string() && base["gpu"].get<std::string>() != gpu->name)
    throw InputError(fmt::format("calibrate --onto: {} is a profile of {}; these measurements are of {}", onto,
                                 base["gpu"].get<std::string>(), gpu->name));
  std::vector<std::string> fields = merged_fields(p);
  if (fields.empty()) throw InputError("calibrate --onto: this calibration fitted no profile field to merge");
  if (!only.empty()) {
    for (const auto& f : only)
      if (std::find(fields.begin(), fields.end(), f) == fields.end())
        throw InputError("calibrate --fields: '" + f + "' is not a field this calibration fitted");
    fields = only;
  }
  const nlohmann::json fitted = profile_to_json(p);
  std::string names;
  for (const auto& k : fields) {
    base[k] = fitted[k];
    names += (names.empty() ? "" : ", ") + k;
  }
  const nlohmann::json mach = p.calibration->value("machine", nlohmann::json::object());
  base["source"] = base.value("source", std::string()) + (base.value("source", std::string()).empty() ? "" : "; ") +
                   fmt::format("{} merged from planner calibrate, {}, on {} ({})", names,
                               p.calibration->value("created", ""), mach.value("gpu_name", gpu->name),
                               mach.value("hostname", ""));
  (void)profile_from_json(base, datasheet_profile(*gpu));  // refuses what a profile file may not hold
  return base;
}

}  // namespace

CLI::App* add_calibrate_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("calibrate", "Measure this machine's GPU (or CPU) and write a hardware profile");
  cmd->footer(
      "Examples:\n"
      "  planner calibrate -o h100.json                 # one GPU: a few minutes\n"
      "  mpirun -np 2 planner calibrate -o h200x2.json  # also NCCL collectives and send/recv over 2 GPUs\n"
      "  mpirun -np 4 planner calibrate -o h100x4.json  # every group size a 4-GPU plan uses (2 and 4)\n"
      "  planner calibrate --device cpu --quick -o cpu.json\n"
      "  planner calibrate --from h100.json --gpu H100-SXM -o refit.json   # re-fit saved measurements\n"
      "  planner calibrate --only gemm,attention_window -o part.json   # just these parts\n"
      "  planner calibrate --from part.json --onto h100.json -o h100.json   # put part.json's fitted fields into h100.json\n"
      "  planner predict --plan plan.json --profile h100.json\n"
      "Measures GEMMs over transformer shapes per precision, fused attention forward/backward, the memory-bound\n"
      "kernel classes, kernel launch cost, host<->device copies, host memcpy, the CPU AdamW of the offload path,\n"
      "the CUDA context, workspaces and what a process can allocate, and (under mpirun) the collectives per group\n"
      "size, send/recv inside a node and across nodes (the node from PLANNER_NODE or SLURM_NODEID), and compute\n"
      "beside collectives both ways per group size. Each fitted field is a measured rate over the GPU's datasheet\n"
      "figure; the points and the model's time for each are kept in the profile's \"calibration\". Progress on\n"
      "stderr.");
  struct Opts {
    std::string output, device = "auto", gpu, from, budget, onto;
    std::vector<std::string> fields;
    bool quick = false, json = false, quiet = false;
    std::vector<std::string> only;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("-o,--output", o->output, "write the profile here (JSON; --profile of every command reads it)");
  cmd->add_flag("--quick", o->quick, "tiny sizes: seconds instead of minutes (CI, a rough check)");
  cmd->add_option("--device", o->device, "auto, cuda or cpu (default auto)");
  cmd->add_option("--gpu", o->gpu, "catalog GPU whose datasheet the efficiencies divide by (default: from the device name)");
  cmd->add_option("--from", o->from, "fit saved measurements (a profile from calibrate, or its \"calibration\") instead of measuring");
  cmd->add_option("--budget", o->budget,
                  "seconds the measurements may take: parts not started by then are skipped, with a note "
                  "(checked between parts; 1 to 86400)");
  cmd->add_option("--only", o->only,
                  "measure only these parts, comma-separated (gemm, attention, attention_window, memory_kernels, "
                  "kernel_overhead_seconds, host_copies, host_memcpy, cpu_adam, memory, in_step, moe_host, collectives); "
                  "the others keep the datasheet defaults")
      ->delimiter(',');
  cmd->add_option("--onto", o->onto,
                  "merge: write PROFILE (a profile file, e.g. costmodel/profiles/H100-SXM.json) with only the fields "
                  "this calibration fitted replaced, and their provenance appended to its source; -o may name PROFILE "
                  "itself");
  cmd->add_option("--fields", o->fields,
                  "with --onto: merge only these fitted fields, comma-separated (an unknown or unfitted one is refused)")
      ->delimiter(',');
  cmd->add_flag("--json", o->json, "print the profile JSON instead of the table");
  cmd->add_flag("--quiet,-q", o->quiet, "no progress on stderr");
  cmd->callback([o, &exit_code] {
    if (!o->output.empty()) {
      check_writable(o->output);
      check_not_input(o->output, o->from, "--from file");  // -o may be the --onto file: it is read first
    }
    const int64_t budget = o->budget.empty() ? 0 : parse_capped(o->budget, "--budget", 86400);
    if (budget > 0 && !o->from.empty()) throw InputError("--budget limits measuring; --from measures nothing");
    if (!o->only.empty() && !o->from.empty()) throw InputError("--only chooses what to measure; --from measures nothing");
    if (!o->fields.empty() && o->onto.empty()) throw InputError("--fields chooses what --onto merges; give --onto PROFILE");
    nlohmann::json measured;
    bool report = true;
    if (!o->from.empty()) {
      measured = read_json_file(o->from, "calibrate --from");
      if (measured.contains("calibration")) measured = measured["calibration"];
    } else {
#if defined(PLANNER_HAS_RUNTIME)
      rt::CalibrateOptions co;
      co.device = o->device;
      co.quick = o->quick;
      co.progress = !o->quiet;
      co.budget_seconds = double(budget);
      co.only = o->only;
      rt::CalibrateRun run = rt::run_calibration(co);
      report = run.report;
      measured = std::move(run.measured);
#else
      throw std::runtime_error(
          "calibrate: this planner was built without LibTorch, so it cannot measure; rebuild with LibTorch "
          "(scripts/setup.sh), or fit saved measurements with --from");
#endif
    }
    if (!report) {  // ranks other than 0 measured the collectives; rank 0 writes
      exit_code = 0;
      return;
    }
    const std::optional<GpuSpec> gpu = catalog_gpu(measured, o->gpu);
    const HardwareProfile p = fit_profile(measured, gpu ? &*gpu : nullptr);
    if (!o->onto.empty()) {
      const nlohmann::json merged = merge_onto(p, o->onto, gpu ? &*gpu : nullptr, o->fields);
      emit(o->output, merged.dump(1) + "\n");
      std::cerr << "calibrate: " << (o->fields.empty() ? merged_fields(p).size() : o->fields.size())
                << " field(s) merged onto " << o->onto
                << (o->output.empty() || o->output == "-" ? "" : ", written to " + o->output) << "\n";
      exit_code = 0;
      return;
    }
    if (!o->output.empty()) save_profile(p, o->output);
    const std::string text = o->json ? profile_to_json(p).dump(2) + "\n"
                                     : calibration_table(p) + (o->output.empty() || o->output == "-"
                                                                   ? "(not saved: give -o FILE)\n"
                                                                   : fmt::format("Wrote the profile to {}\n", o->output));
    emit_report(o->output, text);
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

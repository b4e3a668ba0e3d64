#pragma once
// Pieces shared by the subcommands of the `planner` program. Each subcommand
// lives in its own planner/cmd_*.cpp and registers itself on the CLI11 app.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "costmodel/compat.hpp"
#include "costmodel/engines.hpp"
#include "costmodel/hardware_profile.hpp"
#include "specs/plan.hpp"

namespace planner {

// --plan FILE, or the separate --model/--gpus/--strategy/--seq/--global-batch/--host-memory.
struct PlanOptions {
  std::string plan_path, model, gpus, strategy, seq, global_batch, host_memory;
};
void add_plan_options(CLI::App* cmd, PlanOptions& o, bool with_strategy);
// --ignore-unmodelled (add_plan_options adds it): the model loader's
// ModelLoadOptions::ignore_unmodelled for every model this process reads.
void add_ignore_unmodelled_flag(CLI::App* cmd);
// Loads or builds the plan and checks it for `use` (check_compat, the one
// place); fills `notes` with remarks on legal but odd choices.
Plan resolve_plan(const PlanOptions& o, bool with_strategy, std::vector<std::string>* notes, const PlanUse& use = {});

// --gpus of plan and compare: one cluster (NxTYPE, NODESxNxTYPE or a cluster
// JSON file) or several spec strings separated by commas; --host-memory, when
// given, applies to each.
std::vector<ClusterSpec> resolve_clusters(const std::string& gpus, const std::string& host_memory);

// --seq and --global-batch: positive whole numbers with sane upper bounds
// (2^24 tokens, 2^32 sequences); InputError otherwise.
int64_t parse_seq(const std::string& text);
// --finetune: lora, qlora or full, optionally with the strategy's lora_* keys
// ("qlora,lora_r=64,lora_targets=q+v").
Finetune parse_finetune_option(const std::string& text);
int64_t parse_global_batch(const std::string& text);

// InputError when `path` could not be written: its directory does not exist,
// it is a directory, or the directory does not take a new file (checked by
// creating and removing a temporary there). Lets a command refuse before any
// work, so a long run never ends in a failed write.
void check_writable(const std::string& path);
// InputError when the output `output` is the same file as the input `input`
// (`what` names it: "plan"): writing the result would replace what was read.
void check_not_input(const std::string& output, const std::string& input, const std::string& what);

// Writes `text` to `path`, or to stdout when path is empty or "-".
void emit(const std::string& path, const std::string& text);
// A command's report (table or --json): on stdout, or on stderr when `-o -`
// already puts the written file on stdout, so that stdout is exactly that file.
void emit_report(const std::string& output, const std::string& text);

// --engine ours|deepspeed|megatron|fsdp (default ours). A plan the engine
// cannot run is refused by check_compat (PlanUse::engine).
// With `with_te`: also --with-te (Transformer Engine or apex is installed
// where Megatron runs: sequence parallelism allowed; EngineEnv).
void add_engine_option(CLI::App* cmd, std::string& engine, bool* with_te = nullptr);
Engine resolve_engine(const std::string& text);

// --profile FILE (a hardware profile, e.g. from planner calibrate) and
// --headroom (GPU memory a plan must leave free), shared by every command that
// predicts memory or time.
struct ProfileCli {
  std::string profile, headroom;
  bool any = false;  // --profile-any: apply a profile measured on another GPU (check_profile_gpu)
};
void add_profile_options(CLI::App* cmd, ProfileCli& o);
// The profile of `gpu`: the catalog default overlaid with --profile, --headroom
// applied; InputError for a profile of another GPU unless --profile-any. With
// device "cpu" (validate --device cpu) a CPU profile is the run's own, not foreign.
HardwareProfile resolve_profile(const ProfileCli& o, const GpuSpec& gpu, const std::string& device = "");
// InputError now for a malformed --headroom (before any work).
void check_headroom(const std::string& text);

// --tokens, --price, --prices (planner/train_cost.hpp).
struct TrainCostCli {
  std::string tokens, price, prices;
};
void add_train_cost_options(CLI::App* cmd, TrainCostCli& o);

// Each returns the subcommand; its callback sets `exit_code`.
CLI::App* add_memory_command(CLI::App& app, int& exit_code);
CLI::App* add_max_model_command(CLI::App& app, int& exit_code);
CLI::App* add_predict_command(CLI::App& app, int& exit_code);
CLI::App* add_plan_command(CLI::App& app, int& exit_code);
CLI::App* add_bench_command(CLI::App& app, int& exit_code);
CLI::App* add_exec_command(CLI::App& app, int& exit_code);
CLI::App* add_list_command(CLI::App& app, int& exit_code);
CLI::App* add_export_command(CLI::App& app, int& exit_code);
CLI::App* add_compare_command(CLI::App& app, int& exit_code);
CLI::App* add_calibrate_command(CLI::App& app, int& exit_code);
CLI::App* add_validate_command(CLI::App& app, int& exit_code);

}  // namespace planner

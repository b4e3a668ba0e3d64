#include "planner/cli.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <utility>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <iostream>

#include "costmodel/compat.hpp"
#include "costmodel/predict.hpp"
#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {
std::string& moe_imbalance_text() {
  static std::string text;
  return text;
}
// --moe-imbalance: the model's assumed token imbalance (refused for a dense
// model; ModelSpec::validate bounds it to 1..experts/top_k).
void apply_moe_imbalance(const std::string& text, ModelSpec& m) {
  if (text.empty()) return;
  if (!m.moe.enabled()) throw InputError(fmt::format("--moe-imbalance: {} is not a mixture of experts", m.name));
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v))
    throw InputError(fmt::format("--moe-imbalance: '{}' is not a number", clip(text)));
  m.moe.imbalance = v;
  m.validate();
}
}  // namespace

void add_plan_options(CLI::App* cmd, PlanOptions& o, bool with_strategy) {
  cmd->add_option("--plan", o.plan_path, "plan.json (replaces --model, --gpus, --strategy, --seq, --global-batch)");
  cmd->add_option("--model,-m", o.model, "model preset (gpt2-xl, llama-2-7b, ...) or a Hugging Face config.json");
  cmd->add_option("--gpus,-g", o.gpus, "GPUs: NxTYPE or NODESxNxTYPE (2xRTX3090, 128x8xH100) or a cluster JSON");
  if (with_strategy)
    cmd->add_option("--strategy,-s", o.strategy,
                    "dp=2,tp=1,pp=1,zero=1,offload=none,ckpt=none,mbs=4,gas=8,precision=bf16 (unnamed keys take defaults; "
                    "dp defaults to GPUs/(tp*pp*cp)); cp=2 for context parallelism (ring attention over 2 ranks)");
  cmd->add_option("--seq", o.seq, "sequence length (default: the model's training length)");
  cmd->add_option("--global-batch", o.global_batch, "sequences per step (default: dp*mbs*gas; sets gas when gas is not given)");
  cmd->add_option("--host-memory", o.host_memory, "host memory per node, e.g. 128GiB (default per GPU type)");
  // Process-wide, as --ignore-unmodelled (one command runs per process).
  cmd->add_option("--moe-imbalance", moe_imbalance_text(),
                  "mixture of experts: the busiest expert's tokens over the balanced load (default 1: balanced)");
  add_ignore_unmodelled_flag(cmd);
}

void add_ignore_unmodelled_flag(CLI::App* cmd) {
  // Process-wide, set while parsing and before any model is read (one command runs per process).
  cmd->add_flag_callback("--ignore-unmodelled", [] { set_default_model_load_options({.ignore_unmodelled = true}); },
                         "plan a config.json whose unmodelled features (mixture of experts, latent attention) move "
                         "time or memory by more than 2%, as the model without them (a note says so)");
}

Plan resolve_plan(const PlanOptions& o, bool with_strategy, std::vector<std::string>* notes, const PlanUse& use) {
  if (const std::string imbalance = std::exchange(moe_imbalance_text(), ""); !imbalance.empty()) {
    Plan p = resolve_plan(o, with_strategy, notes, use);
    apply_moe_imbalance(imbalance, p.model);
    auto n = check_compat(p, use);
    if (notes) *notes = n;
    return p;
  }
  if (!o.plan_path.empty()) {
    if (!o.model.empty() || !o.gpus.empty() || !o.strategy.empty() || !o.seq.empty() || !o.global_batch.empty())
      throw InputError("--plan replaces --model, --gpus, --strategy, --seq and --global-batch; give one or the other");
    Plan p = load_plan(o.plan_path);
    if (!o.host_memory.empty()) p.cluster.host_memory_bytes = parse_bytes(o.host_memory, "--host-memory");
    auto n = check_compat(p, use);
    if (notes) *notes = n;
    return p;
  }
  if (o.model.empty()) throw InputError("missing --model (or --plan)");
  if (o.gpus.empty()) throw InputError("missing --gpus (or --plan)");
  PlanRequest req;
  req.model = o.model;
  req.gpus = o.gpus;
  req.strategy = with_strategy ? o.strategy : "";
  if (!o.seq.empty()) req.seq = parse_seq(o.seq);
  if (!o.global_batch.empty()) req.global_batch = parse_global_batch(o.global_batch);
  if (!o.host_memory.empty()) req.host_memory_bytes = parse_bytes(o.host_memory, "--host-memory");
  return build_plan(req, notes, use);
}

Finetune parse_finetune_option(const std::string& text) {
  if (text.empty()) return Finetune{};
  try {
    return Strategy::parse("finetune=" + text).finetune;
  } catch (const InputError& e) {
    throw InputError(fmt::format("--finetune '{}': {}", text, e.what()));
  }
}

int64_t parse_seq(const std::string& text) {
  const int64_t v = parse_int(text, "--seq");
  if (v > kMaxSeq) throw InputError(fmt::format("--seq {} is too large (at most {} = 2^24)", v, kMaxSeq));
  return v;
}

int64_t parse_global_batch(const std::string& text) {
  const int64_t v = parse_int(text, "--global-batch");
  if (v > kMaxGlobalBatch) throw InputError(fmt::format("--global-batch {} is too large (at most {} = 2^32)", v, kMaxGlobalBatch));
  return v;
}

void add_engine_option(CLI::App* cmd, std::string& engine, bool* with_te) {
  cmd->add_option("--engine", engine,
                  "whose memory to predict: ours (this runtime, default), deepspeed, megatron or fsdp "
                  "(what that engine allocates for the same strategy)");
  if (with_te)
    cmd->add_flag("--with-te", *with_te,
                  "Transformer Engine (or apex) is installed where Megatron runs: its sequence parallelism is "
                  "allowed (without, megatron-core's local layers refuse sp)");
}

Engine resolve_engine(const std::string& text) { return text.empty() ? Engine::Ours : parse_engine(text); }

void add_profile_options(CLI::App* cmd, ProfileCli& o) {
  cmd->add_option("--profile", o.profile,
                  "hardware profile JSON, e.g. from planner calibrate (default: the GPU catalog's)");
  cmd->add_flag("--profile-any", o.any, "apply a --profile measured on another GPU or the CPU (refused otherwise)");
  cmd->add_option("--headroom", o.headroom,
                  "GPU memory a plan must leave free to fit: 2% (default), 0.05, 1.5GiB or 0");
}

HardwareProfile resolve_profile(const ProfileCli& o, const GpuSpec& gpu, const std::string& device) {
  HardwareProfile p = load_profile(o.profile, gpu);
  // A run on the CPU (--device cpu) is predicted with the CPU's own profile.
  const bool cpu_for_cpu = device == "cpu" && to_lower(p.gpu) == "cpu";
  if (!cpu_for_cpu) check_profile_gpu(p, gpu, o.any);
  if (!o.headroom.empty()) apply_headroom(o.headroom, p);
  return p;
}

void check_headroom(const std::string& text) {
  if (text.empty()) return;
  HardwareProfile p;
  apply_headroom(text, p);
}

void add_train_cost_options(CLI::App* cmd, TrainCostCli& o) {
  cmd->add_option("--tokens", o.tokens, "tokens to train (300B, 1.5T, 2e9): adds the days and GPU-hours");
  cmd->add_option("--price", o.price, "price of one GPU-hour (with --tokens): adds the cost");
  cmd->add_option("--prices", o.prices, "prices.json, price per GPU-hour by GPU type, e.g. {\"H100\": 2.5}");
}

std::vector<ClusterSpec> resolve_clusters(const std::string& gpus, const std::string& host_memory) {
  std::vector<std::string> specs;
  if (std::filesystem::exists(gpus) || gpus.find(',') == std::string::npos) {
    specs.push_back(gpus);
  } else {
    specs = split(gpus, ',');
  }
  std::vector<ClusterSpec> out;
  for (const auto& spec : specs) {
    if (trim(spec).empty()) throw InputError(fmt::format("--gpus: empty cluster in '{}'", gpus));
    out.push_back(resolve_cluster(trim(spec)));
    if (!host_memory.empty()) out.back().host_memory_bytes = parse_bytes(host_memory, "--host-memory");
  }
  return out;
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  if (path == "-") return;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir)) throw InputError(fmt::format("output: directory '{}' does not exist", dir.string()));
  if (fs::is_directory(target)) throw InputError(fmt::format("output: '{}' is a directory", path));
  std::error_code ec;
  const auto st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st) && !fs::is_fifo(st) && !fs::is_character_file(st))
    throw InputError(fmt::format("output: '{}' exists and is not a regular file, a FIFO or /dev/null", clip(path)));
  if (fs::is_fifo(st) || fs::is_character_file(st)) return;  // written in place, not through a temporary
  // The file is written through a temporary beside it and a rename, so the
  // directory must take a new file: try that now, before any work (a run of
  // an hour must not end in "cannot create a file").
  std::string probe = (dir / ".planner-probe-XXXXXX").string();
  const int fd = mkstemp(probe.data());
  if (fd < 0)
    throw InputError(fmt::format("output: cannot create a file in '{}' ({}) for '{}'", clip(dir.string()),
                                 std::strerror(errno), clip(path)));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_not_input(const std::string& output, const std::string& input, const std::string& what) {
  namespace fs = std::filesystem;
  if (output.empty() || output == "-" || input.empty()) return;
  std::error_code ec;
  if (fs::equivalent(output, input, ec) && !ec)
    throw InputError(fmt::format("-o '{}' is the {} being read; write the output elsewhere", clip(output), what));
}

void emit(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    write_stdout_checked(text.empty() || text.back() == '\n' ? text : text + "\n");
  } else {
    write_file_atomically(path, text);
  }
}

void emit_report(const std::string& output, const std::string& text) {
  if (output != "-") return emit("", text);
  std::cerr << text << (text.empty() || text.back() == '\n' ? "" : "\n") << std::flush;
}

}  // namespace planner

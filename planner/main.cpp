// The `planner` program: predict, search and execute parallel training plans.
// Exit codes: 0 success, 2 bad input (one line on stderr), 1 any other failure.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "planner/cli.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"
#if defined(PLANNER_HAS_RUNTIME)
#include "runtime/device.hpp"
#include "runtime/exec_launch.hpp"
#endif

namespace {

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  // A backstop: messages quote at most ~200 bytes of an input (planner::clip),
  // so a longer line is a message that forgot to; it never floods the terminal.
  if (s.size() > 1000) s = s.substr(0, 1000) + "...";
  return s;
}

// The one line of a failure: on stderr, or, in a rank started by planner exec,
// kept for the launching planner, which prints one line for the whole job.
int fail(int code, const std::string& line) {
#if defined(PLANNER_HAS_RUNTIME)
  if (planner::rt::relay_failure(code, line)) return code;
#endif
  std::cerr << "planner: " << line << "\n";
  return code;
}

}  // namespace

#if defined(PLANNER_EXEC_FORWARD)
// `planner exec ...` (and `planner calibrate ...`) runs as `planner-exec exec
// ...`, the program with the runtime, from this program's folder: the planning
// commands never load LibTorch and CUDA.
[[noreturn]] void forward_to_exec(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string target = ((ec ? std::filesystem::path(argv[0]) : self).parent_path() / "planner-exec").string();
  execv(target.c_str(), argv);  // argv[0] stays what the user typed (help and messages say `planner`)
  std::cerr << "planner: exec: cannot start " << target << " (" << std::strerror(errno)
            << "); build the runtime (scripts/setup.sh) or run it directly\n";
  std::exit(1);
}
#endif

int main(int argc, char** argv) {
#if defined(PLANNER_HAS_RUNTIME)
  planner::rt::use_expandable_segments();  // before LibTorch's allocator reads its settings
#endif
#if defined(PLANNER_EXEC_FORWARD)
  if (argc >= 2 && std::string(argv[1]) == "exec") forward_to_exec(argv);
  // calibrate measures with the runtime; fitting saved measurements (--from) needs none.
  if (argc >= 2 && std::string(argv[1]) == "calibrate") {
    bool from = false;
    for (int i = 2; i < argc; ++i) from = from || std::string(argv[i]).rfind("--from", 0) == 0;
    if (!from) forward_to_exec(argv);
  }
#endif
  CLI::App app{"planner: parallelism-strategy simulator and executor for transformer training"};
  app.footer(
      "Examples:\n"
      "  planner max-model --gpus 2xRTX3090\n"
      "  planner memory --model gpt2-xl --gpus 2xRTX3090 --strategy zero=1,mbs=4\n"
      "  planner predict --model llama-2-7b --gpus 8xA100-80GB --strategy tp=2,mbs=2 --global-batch 64\n"
      "  planner plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 -o plan.json\n"
      "  planner predict --model gpt2-large --gpus 2xRTX3090 --strategy tp=2,mbs=4 --global-batch 32 -o plan.json\n"
      "  planner export plan.json --to deepspeed -o ds_config.json\n"
      "  planner plan --model llama-2-7b --gpus 8xA100-80GB,8xH100 --global-batch 512 --tokens 1T --price 2.5 "
      "--objective cost\n"
      "  planner compare --model llama-2-7b --gpus 8xA100-80GB,8xH100,32xV100-32GB --tokens 1T "
      "--prices examples/prices/v100-a100-h100.json\n"
      "  planner exec plan.json\n"
      "  planner calibrate -o profile.json && planner predict --plan plan.json --profile profile.json\n"
      "  planner validate validation/sets/sweep_1gpu.json -o report --profile profile.json\n"
      "Run 'planner COMMAND --help' for a command's options.");
  app.require_subcommand(1);
  // A closed pipe is a failed write (EPIPE, exit 1 with one line), not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  int exit_code = 0;
  planner::add_memory_command(app, exit_code);
  planner::add_max_model_command(app, exit_code);
  planner::add_predict_command(app, exit_code);
  planner::add_plan_command(app, exit_code);
  planner::add_compare_command(app, exit_code);
  planner::add_bench_command(app, exit_code);
  planner::add_exec_command(app, exit_code);
  planner::add_list_command(app, exit_code);
  planner::add_export_command(app, exit_code);
  planner::add_calibrate_command(app, exit_code);
  planner::add_validate_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return fail(2, planner::clip(one_line(e.what()), 400) + " (see --help)");  // CLI11 quotes the arguments
  } catch (const planner::InputError& e) {
    return fail(2, one_line(e.what()));
  } catch (const nlohmann::json::exception& e) {
    return fail(2, "bad JSON input: " + one_line(e.what()));
  } catch (const std::bad_alloc&) {
    return fail(1, "out of host memory");
  } catch (const std::exception& e) {
    return fail(1, "error: " + one_line(e.what()));
  }
  // Every write to stdout is checked: /dev/full or a closed pipe is a failure.
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::cerr << "planner: error: writing to stdout failed\n";
    return 1;
  }
  return exit_code;
}

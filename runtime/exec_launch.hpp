#pragma once
// How `planner exec` starts the ranks of a multi-rank plan on this node and
// speaks for them (runtime/exec_launch.cpp). No LibTorch here.
//
// - mpirun runs in its own process group; SIGINT, SIGTERM and SIGHUP sent to
//   the planner are forwarded to that group, the planner waits for it, ends
//   what is left with SIGKILL, and then dies of the same signal. mpirun also
//   gets SIGTERM when the planner dies without a chance to forward
//   (PR_SET_PDEATHSIG), so no rank outlives the command.
// - The ranks find a relay folder in PLANNER_EXEC_RELAY_DIR: a failing rank
//   writes its one-line message there instead of printing it, and rank 0
//   writes the report for stdout there; the planner prints rank 0's message
//   (or the first failing rank's), named, as its own one line, and the report
//   through its own checked stdout. mpirun's banners ("Primary job terminated
//   normally, but...") are kept out of stderr; when no rank left a message
//   they are folded into the one line.
#include <string>
#include <vector>

namespace planner::rt {

// Runs `cmd` (mpirun and its arguments) as above and returns 0 when every
// rank succeeded. A failure throws: InputError with the rank's message when
// that rank refused bad input, std::runtime_error otherwise. `banner` (may be
// empty) is printed on stderr once the ranks have started to speak.
int run_ranks(const std::vector<std::string>& cmd, int world, const std::string& banner);

// Inside a rank started by run_ranks: the relay folder, else empty.
std::string relay_dir();
// In a rank: keeps `message` (one line; `exit_code` 2 for bad input) for the
// launching planner, and returns true; false outside such a launch.
bool relay_failure(int exit_code, const std::string& message);
// In rank 0: keeps the report for the launching planner's stdout; true when kept.
bool relay_stdout(const std::string& text);

// Removes a flat folder (files only, no subfolders) and the files in it with
// POSIX calls; what cannot be removed stays, silently. Not
// std::filesystem::remove_all: linked beside the CUDA build of LibTorch that
// symbol resolves to libtorch.so's own copy, which calls a null pointer
// (SIGSEGV; validation/h100x4/two_nodes/attempt1, validation/h200/segv61).
void remove_flat_dir(const std::string& dir);

}  // namespace planner::rt

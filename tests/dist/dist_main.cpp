// main() of dist_tests: starts MPI before Catch2 runs and finalizes after.
// Every rank runs the same test cases in declaration order (the collectives of
// one rank must meet those of the others). Rank 0 reports as usual; the other
// ranks' reports go to a temporary file that is printed (prefixed with the
// rank) only when that rank failed. The exit code is the same on every rank:
// non-zero when any rank failed.
#if defined(PLANNER_CATCH3)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "runtime/comm/communicator.hpp"

int main(int argc, char** argv) {
  const planner::rt::WorldInfo w = planner::rt::init_world();
  // PLANNER_DIST_OPAQUE_SENDS=1: every MPI send reports done() only once
  // waited for, as most NCCL sends look to a GPU host running ahead (the ctest
  // dist_pp_opaque_np*: the pipeline must neither deadlock nor hold its sends).
  if (const char* o = std::getenv("PLANNER_DIST_OPAQUE_SENDS"); o != nullptr && std::string(o) == "1")
    planner::rt::mpi_sends_seen_done_only_when_waited(true);

  // Non-zero ranks: stdout (Catch's reporter) into a file until the end.
  std::string log_path;
  int saved_stdout = -1;
  if (w.rank != 0) {
    log_path = "/tmp/planner_dist_tests_rank" + std::to_string(w.rank) + "_" + std::to_string(::getpid()) + ".log";
    const int fd = ::open(log_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd >= 0) {
      std::cout.flush();
      saved_stdout = ::dup(STDOUT_FILENO);
      ::dup2(fd, STDOUT_FILENO);
      ::close(fd);
    }
  }

  Catch::Session session;
  // Catch2 v3 shuffles by default; mpirun hands the ranks a terminal even when
  // its own output goes to a log, so no colour codes with several ranks.
#if defined(PLANNER_CATCH3)
  session.configData().runOrder = Catch::TestRunOrder::Declared;
  if (w.size > 1) session.configData().defaultColourMode = Catch::ColourMode::None;
#else
  session.configData().runOrder = Catch::RunTests::InDeclarationOrder;
  if (w.size > 1) session.configData().useColour = Catch::UseColour::No;
#endif
  session.configData().rngSeed = 1;  // same on every rank
  int rc = session.applyCommandLine(argc, argv);
  if (rc == 0) rc = session.run();

  if (saved_stdout >= 0) {
    std::cout.flush();
    std::fflush(stdout);
    ::dup2(saved_stdout, STDOUT_FILENO);
    ::close(saved_stdout);
    if (rc != 0) {
      std::ifstream in(log_path);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string line;
      while (std::getline(ss, line)) std::cerr << "[rank " << w.rank << "] " << line << "\n";
    }
    std::remove(log_path.c_str());
  }

  // Every rank learns whether any failed, so rank 0's summary tells.
  int failed = rc != 0 ? 1 : 0, any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (w.rank == 0 && any_failed > 0)
    std::cerr << "dist_tests: " << any_failed << " of " << w.size << " ranks failed (their reports are above)\n";
  planner::rt::finalize_world();
  return any_failed > 0 ? (rc != 0 ? rc : 1) : 0;
}

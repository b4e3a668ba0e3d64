// A diagnosis aid for runtime_tests on a GPU, which passed every test and
// then died of SIGSEGV at exit after test_exec's cases
// (validation/h200/gemma3_54): with PLANNER_TEST_BACKTRACE=1 in the
// environment a SIGSEGV prints the stack's frames (glibc's backtrace) to
// stderr before the process dies of the signal as it would have.
#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace {

extern "C" void print_backtrace_and_die(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char msg[] = "runtime_tests: SIGSEGV; frames:\n";
  (void)!write(2, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct InstallOnRequest {
  InstallOnRequest() {
    const char* e = std::getenv("PLANNER_TEST_BACKTRACE");
    if (e && e[0] == '1') std::signal(SIGSEGV, print_backtrace_and_die);
  }
} install_on_request;

}  // namespace

// A diagnosis aid for runtime_tests on a GPU, which passed every test and
// then died of SIGSEGV at exit after test_exec's cases
// (validation/h200/gemma3_54). With PLANNER_TEST_BACKTRACE=1 in the
// environment a SIGSEGV prints the faulting address, the instruction pointer,
// the thread, the stack's frames (glibc's backtrace) and the mappings that
// hold those addresses to stderr, then the process dies of the signal as it
// would have. (validation/h200/compile58: the frames stopped at the signal's
// own, so the faulting code had no unwind information; window59: the
// instruction pointer was 0, a call through a null function pointer, so the
// handler also prints the return address on top of the stack, the caller.)
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// The /proc/self/maps lines whose range holds a.
void print_mapping(uintptr_t a) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) std::fprintf(stderr, "  in %s", line);
  }
  std::fclose(f);
}

extern "C" void print_fault_and_die(int sig, siginfo_t* info, void* ctx) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  uintptr_t ip = 0;
#if defined(__x86_64__)
  ip = static_cast<uintptr_t>(static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_RIP]);
#else
  (void)ctx;
#endif
  std::fprintf(stderr, "runtime_tests: SIGSEGV at address 0x%lx, instruction 0x%lx, thread %ld of process %d\n",
               static_cast<unsigned long>(addr), static_cast<unsigned long>(ip), static_cast<long>(syscall(SYS_gettid)),
               static_cast<int>(getpid()));
  std::fprintf(stderr, "instruction:\n");
  print_mapping(ip);
  std::fprintf(stderr, "address:\n");
  print_mapping(addr);
#if defined(__x86_64__)
  // After a call to a bad address the caller's return address is on top of the stack.
  const auto sp = static_cast<uintptr_t>(static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_RSP]);
  const uintptr_t ret = sp ? *reinterpret_cast<const uintptr_t*>(sp) : 0;
  Dl_info di;
  std::memset(&di, 0, sizeof di);
  const bool named = ret && dladdr(reinterpret_cast<void*>(ret), &di) != 0;
  std::fprintf(stderr, "return address on the stack: 0x%lx (%s, %s + 0x%lx)\n", static_cast<unsigned long>(ret),
               named && di.dli_fname ? di.dli_fname : "?", named && di.dli_sname ? di.dli_sname : "?",
               static_cast<unsigned long>(named && di.dli_saddr ? ret - reinterpret_cast<uintptr_t>(di.dli_saddr) : 0));
  print_mapping(ret);
#endif
  void* frames[64];
  const int n = backtrace(frames, 64);
  std::fprintf(stderr, "frames:\n");
  std::fflush(stderr);
  backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct InstallOnRequest {
  InstallOnRequest() {
    const char* e = std::getenv("PLANNER_TEST_BACKTRACE");
    if (!e || e[0] != '1') return;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = print_fault_and_die;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
  }
} install_on_request;

}  // namespace

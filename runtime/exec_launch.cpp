#include "runtime/exec_launch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner::rt {

namespace {

namespace fs = std::filesystem;
constexpr const char* kRelayEnv = "PLANNER_EXEC_RELAY_DIR";

volatile sig_atomic_t g_signal = 0;   // the first SIGINT/SIGTERM/SIGHUP received
volatile sig_atomic_t g_group = 0;    // mpirun's process group, once started

void forward_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
  if (g_group > 0) kill(-pid_t(g_group), sig);
}

// The rank number of this process inside an MPI launch, or -1.
int launch_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* x = std::getenv(v)) return std::atoi(x);
  return -1;
}

bool write_whole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".part";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    if (!f.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::string read_whole(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// mpirun's own messages come as blocks between lines of dashes; they are kept
// aside (and folded into one line when no rank explains the failure). Other
// lines (the ranks' progress) pass through to stderr, after `banner`.
struct StderrFilter {
  std::string banner, pending, kept;
  bool in_block = false, banner_shown = false;
  void line(const std::string& l) {
    const bool dashes = l.size() >= 10 && l.find_first_not_of('-') == std::string::npos;
    if (dashes) {
      in_block = !in_block;
      return;
    }
    if (in_block || l.rfind("mpirun", 0) == 0 || l.rfind("prterun", 0) == 0) {
      if (kept.size() < 4000) kept += trim(l) + " ";
      return;
    }
    if (!banner_shown && !banner.empty()) std::fprintf(stderr, "%s\n", banner.c_str());
    banner_shown = true;
    std::fprintf(stderr, "%s\n", l.c_str());
    std::fflush(stderr);
  }
  void feed(const char* data, size_t n) {
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
};

// The message of the rank that speaks for a failed job: rank 0's, else the one
// written first. Empty when no rank left one.
std::string failing_rank_message(const fs::path& dir, int world, int* code) {
  std::string best;
  int best_rank = -1;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || name.find(".part") != std::string::npos) continue;
    const int rank = std::atoi(name.c_str() + 5);
    const auto t = fs::last_write_time(e.path(), ec);
    const bool better = best_rank < 0 || rank == 0 ||
                        (best_rank != 0 && (t < best_time || (t == best_time && rank < best_rank)));
    if (!better) continue;
    best_rank = rank, best_time = t;
    best = read_whole(e.path());
  }
  if (best_rank < 0) return "";
  const size_t nl = best.find('\n');
  *code = std::atoi(best.substr(0, nl).c_str());
  std::string msg = nl == std::string::npos ? "" : best.substr(nl + 1);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
  return "rank " + std::to_string(best_rank) + " of " + std::to_string(world) + ": " + msg;
}

// Starts cmd in its own process group with stderr into a pipe; returns its pid.
// An exec failure comes back through a close-on-exec pipe as errno.
pid_t start_group(const std::vector<std::string>& cmd, int err_w, int err_r) {
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) throw std::runtime_error("exec: pipe failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("exec: fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the planner died without forwarding: end mpirun too
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGHUP, SIG_DFL), signal(SIGPIPE, SIG_DFL);
    close(status_pipe[0]);
    close(err_r);
    dup2(err_w, 2);
    close(err_w);
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    const int e = errno;
    (void)!write(status_pipe[1], &e, sizeof e);
    _exit(127);
  }
  setpgid(pid, pid);
  g_group = pid;
  close(status_pipe[1]);
  int e = 0;
  const ssize_t n = read(status_pipe[0], &e, sizeof e);  // 0 bytes: exec succeeded
  close(status_pipe[0]);
  if (n == sizeof e) {
    waitpid(pid, nullptr, 0);
    g_group = 0;
    throw std::runtime_error(std::string("exec: cannot start ") + cmd[0] + " (" + std::strerror(e) +
                             "); install OpenMPI, or start the ranks yourself with mpirun -np N planner exec ...");
  }
  return pid;
}

}  // namespace

std::string relay_dir() {
  const char* d = std::getenv(kRelayEnv);
  return d && launch_rank() >= 0 ? std::string(d) : std::string();
}

bool relay_failure(int exit_code, const std::string& message) {
  const std::string dir = relay_dir();
  if (dir.empty()) return false;
  return write_whole(dir + "/rank-" + std::to_string(launch_rank()),
                     std::to_string(exit_code) + "\n" + message + "\n");
}

bool relay_stdout(const std::string& text) {
  const std::string dir = relay_dir();
  if (dir.empty() || launch_rank() != 0) return false;
  return write_whole(dir + "/stdout", text);
}

int run_ranks(const std::vector<std::string>& cmd, int world, const std::string& banner) {
  std::string tmpl = (fs::temp_directory_path() / "planner-exec-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("exec: cannot create a temporary folder");
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path d;
    ~Cleanup() { remove_flat_dir(d); }
  } cleanup{dir};
  setenv(kRelayEnv, dir.c_str(), 1);
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("exec: pipe failed");
  struct sigaction sa {}, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int), sigaction(SIGTERM, &sa, &old_term), sigaction(SIGHUP, &sa, &old_hup);
  const pid_t pid = start_group(cmd, err[1], err[0]);
  close(err[1]);
  if (g_signal) kill(-pid, g_signal);  // it came before there was a group to forward it to
  StderrFilter filter;
  filter.banner = banner;
  char buf[4096];
  int status = 0;
  bool reaped = false, open_pipe = true;
  while (!reaped) {
    pollfd p{err[0], POLLIN, 0};
    if (open_pipe && poll(&p, 1, 200) > 0) {
      const ssize_t n = read(err[0], buf, sizeof buf);
      if (n > 0) filter.feed(buf, size_t(n));
      else if (n == 0) open_pipe = false;
    } else if (!open_pipe) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) reaped = true;
  }
  // What mpirun wrote last is still in the pipe. (A straggler holding the pipe
  // open must not keep us here: stop once it stays quiet for 100 ms.)
  for (pollfd p{err[0], POLLIN, 0}; open_pipe && poll(&p, 1, 100) > 0;) {
    const ssize_t n = read(err[0], buf, sizeof buf);
    if (n <= 0) break;
    filter.feed(buf, size_t(n));
  }
  // Whatever mpirun left in its group (a rank that ignored the signal) ends now.
  kill(-pid, SIGKILL);
  g_group = 0;
  close(err[0]);
  unsetenv(kRelayEnv);
  if (const int sig = g_signal) {
    // Die of the signal that ended the job (the shell reports 130/143), after
    // the temporary folder is gone.
    remove_flat_dir(dir);
    signal(sig, SIG_DFL);
    raise(sig);
  }
  sigaction(SIGINT, &old_int, nullptr), sigaction(SIGTERM, &old_term, nullptr), sigaction(SIGHUP, &old_hup, nullptr);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  int code = 1;
  const std::string msg = failing_rank_message(dir, world, &code);
  if (rc != 0 || !msg.empty()) {
    if (msg.empty()) {
      // No rank explained: mpirun's own words, from the sentence that names a
      // rank ("mpirun noticed that process rank 1 ... exited on signal 9").
      std::string said = trim(filter.kept);
      if (const size_t at = said.find("mpirun noticed"); at != std::string::npos) said = said.substr(at);
      throw std::runtime_error("exec: mpirun failed (exit " + std::to_string(rc) + ")" +
                               (said.empty() ? std::string() : ": " + clip(said, 400)));
    }
    if (code == 2) throw InputError(msg);
    throw std::runtime_error(msg);
  }
  // Rank 0's report for stdout, through this process's checked stdout.
  std::error_code ec;
  if (fs::exists(dir / "stdout", ec)) {
    const std::string text = read_whole(dir / "stdout");
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

// The relay folder is flat (one file per rank and stdout): removed with POSIX
// calls (exec_launch.hpp says why not std::filesystem::remove_all).
void remove_flat_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace planner::rt

// Output files (-o, --trace, saved plans and profiles): written so that a
// reader never sees half a file and no one can redirect the write (issue 11).
//  - "-" is stdout.
//  - An existing FIFO or character device (/dev/null, a terminal) is written in
//    place: replacing it with a regular file would break the pipe or the device.
//  - Any other existing non-regular file (a directory, a socket) is refused.
//  - Otherwise the text goes to a temporary that mkstemp creates with O_EXCL and
//    an unpredictable name in the target's directory (never following a link
//    planted there), then is renamed over the target once complete.
// Every write is checked: a full disk or a closed pipe is a failure (exit 1).
#include <ctime>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "specs/plan.hpp"
#include "strategies/errors.hpp"

namespace planner {

namespace {

// Writes all of `text` to `fd`; false (errno set) on any failure.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

[[noreturn]] void write_failed(const std::string& path, int err) {
  throw std::runtime_error(fmt::format("output: writing '{}' failed: {}", path, std::strerror(err)));
}

}  // namespace

std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

void write_stdout_checked(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    write_failed("stdout", errno);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  if (path == "-") return write_stdout_checked(text);
  if (path.empty()) throw InputError("output: empty file name (use - for stdout)");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
      throw InputError(fmt::format("output: '{}' exists and is not a regular file, a FIFO or /dev/null", path));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(fmt::format("output: cannot open '{}': {}", path, std::strerror(errno)));
    const bool ok = write_all(fd, text);
    const int err = errno;
    if (::close(fd) != 0 || !ok) write_failed(path, ok ? errno : err);
    return;
  }
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(fmt::format("output: directory '{}' does not exist", dir.string()));
  std::string tmpl = (dir / fmt::format(".{}.XXXXXX", target.filename().string())).string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());  // O_CREAT | O_EXCL, mode 0600, random suffix
  if (fd < 0) throw InputError(fmt::format("output: cannot create a file in '{}': {}", dir.string(), std::strerror(errno)));
  const std::string tmp(name.data());
  // mkstemp makes 0600; give the file the mode an ordinary create would (0666 & ~umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  const bool ok = write_all(fd, text);
  const int err = errno;
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed) {
    ::unlink(tmp.c_str());
    write_failed(path, ok ? errno : err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw InputError(fmt::format("output: cannot write '{}': {}", path, std::strerror(e)));
  }
}

}  // namespace planner

#pragma once
// Shared by the libFuzzer targets in this folder (scripts/fuzz.sh builds and
// runs them). Each target feeds its input to one real parser, the way the
// command line does, and catches only InputError: any other exception
// (std::terminate, reported by libFuzzer as a deadly signal), a crash, a hang
// or an ASan/UBSan report is a finding. A finding becomes a regression test
// in tests/unit/test_fuzz_findings.cpp.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "strategies/errors.hpp"

namespace planner::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// The file loaders (resolve_model, resolve_cluster, load_plan, load_profile)
// take a path, so each input is written to one file per process (in /dev/shm
// when there is one, to spare the disk), overwritten for every input and
// removed at exit. The name ends in .json, as the loaders expect.
inline const std::string& input_path() {
  static const std::string path = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    return (dir / ("planner-fuzz-" + std::to_string(getpid()) + ".json")).string();
  }();
  static const bool registered = [] { return std::atexit([] { std::remove(input_path().c_str()); }) == 0; }();
  (void)registered;
  return path;
}

inline const std::string& write_input(const uint8_t* data, size_t size) {
  const std::string& path = input_path();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();  // the fuzzer's own environment is broken, not the parser
  return path;
}

// Runs f; an InputError (the CLI's exit 2 with one line) is a correct answer,
// so it must carry a message.
template <class F>
void expect_value_or_input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    if (e.what()[0] == '\0') std::abort();
  }
}

// A property of an accepted input failed (a negative size, a round trip that
// changed the value): report it as a finding with the reason.
inline void finding(const char* what) {
  std::fprintf(stderr, "FINDING: %s\n", what);
  std::abort();
}

}  // namespace planner::fuzz

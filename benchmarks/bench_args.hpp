#pragma once
// Command-line helpers the benchmark programs share: one line on stderr
// naming the program and what is wrong, exit code 2.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace bench {

[[noreturn]] inline void usage_error(const char* program, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program, what.c_str());
  std::exit(2);
}

// A positive integer, or usage_error naming the flag.
inline int64_t parse_positive_int(const char* program, const char* s, const char* flag) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (!end || *end || v <= 0) usage_error(program, std::string(flag) + " needs a positive integer, got '" + s + "'");
  return v;
}

}  // namespace bench

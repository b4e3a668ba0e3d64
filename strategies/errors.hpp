#pragma once
// Error types shared by every library. The CLI maps InputError to exit code 2
// (the user gave something wrong) and any other exception to exit code 1.
#include <stdexcept>
#include <string>

namespace planner {

// Bad input: a malformed spec string, an unknown name, an impossible strategy,
// a missing file. The message is one line saying what was wrong and what would
// be right.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace planner

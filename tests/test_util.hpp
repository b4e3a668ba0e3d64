#pragma once
// Helpers shared by the unit tests.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "strategies/errors.hpp"

namespace test_util {

// The repository's root, from CMake (tests/CMakeLists.txt): not __FILE__, which a
// compiler cache with a base directory makes relative to the build folder.
inline std::filesystem::path source_dir() { return PLANNER_SOURCE_DIR; }

// The repository's examples/ folder.
inline std::filesystem::path examples_dir() { return source_dir() / "examples"; }

// The message of the InputError that f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const planner::InputError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Consecutive groups of `size` ranks covering [0, world): {0..size-1}, {size..}, ...
inline std::vector<std::vector<int>> blocks(int world, int size) {
  std::vector<std::vector<int>> g;
  for (int first = 0; first < world; first += size) {
    g.emplace_back();
    for (int i = 0; i < size; ++i) g.back().push_back(first + i);
  }
  return g;
}

}  // namespace test_util

#pragma once
// One include for Catch2 v2 (Debian 12) and v3 (newer distributions).
#if defined(PLANNER_CATCH3)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
// A message containing a text, in both versions (v3 renamed Contains).
#define PLANNER_CONTAINS(text) Catch::Matchers::ContainsSubstring(text)
#else
#include <catch2/catch.hpp>
#define PLANNER_CONTAINS(text) Catch::Contains(text)
#endif

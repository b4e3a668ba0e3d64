#if defined(PLANNER_CATCH2_MAIN)
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif

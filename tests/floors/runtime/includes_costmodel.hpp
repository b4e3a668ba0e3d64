#pragma once
// Not compiled: the `floors_refuses` test runs scripts/check_floors.cmake on
// tests/floors/ as a source root and expects this include to be named as one
// against the floors (the runtime sits below the cost model).
#include "costmodel/cost_model.hpp"
#include "specs/plan.hpp"

#pragma once
// Internals of planner calibrate's in-step part, shared by
// calibration/measure_in_step.cpp (the models run through the Engine, the
// rows) and calibration/measure_in_step_capture.cpp (the operand observer and
// the timing of what it captured, as calibrate times its points).
#include <cstdint>

#include <nlohmann/json.hpp>

#include "calibration/measure_detail.hpp"

namespace planner::rt::calib {

// Each distinct captured GEMM timed once as calibrate times its shapes,
// counted: the shapes, their summed time (alone_gemm) and the calls.
nlohmann::json time_gemms(const Ctx& c, const Captured& cap, const Filler* filler, double& alone_gemm,
                          int64_t& calls);
// The captured attention timed as measure_attention does (forward + backward).
nlohmann::json time_attention(const Ctx& c, const Captured& cap, double& alone_attention);

}  // namespace planner::rt::calib

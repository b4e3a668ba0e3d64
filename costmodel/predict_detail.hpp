#pragma once
// predict() with an explicit profile, the simulation result and the trace:
// what `planner predict --profile P --trace F` and the tests call.
#include <string>

#include "costmodel/hardware_profile.hpp"
#include "costmodel/predict.hpp"
#include "costmodel/simulator.hpp"

namespace planner {

// Simulates the plan's step with `profile`. `sim` (optional) receives the
// simulation (with trace events when record_trace).
StepPrediction predict(const Plan& plan, const HardwareProfile& profile, SimResult* sim = nullptr,
                       bool record_trace = false);

// predict(plan, profile_path), and when trace_path is not empty, writes the
// Chrome trace of the predicted step there.
StepPrediction predict_with_trace(const Plan& plan, const std::string& profile_path, const std::string& trace_path);
StepPrediction predict_with_trace(const Plan& plan, const HardwareProfile& profile, const std::string& trace_path);

// Fills the time fields of `p` from a simulation (step, throughput, FLOP/s, MFU, breakdown).
void fill_prediction(const Plan& plan, const HardwareProfile& profile, const SimResult& sim, StepPrediction& p);
// InputError when the prediction is not physical: a step time that is not
// finite and positive, or an MFU above 100% of the profile's peak (issue 11).
void check_physical(const Plan& plan, const HardwareProfile& profile, const StepPrediction& p);

}  // namespace planner

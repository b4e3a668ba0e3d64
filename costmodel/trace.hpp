#pragma once
// Chrome-trace JSON (chrome://tracing, https://ui.perfetto.dev) of a simulated
// step: one process per pipeline stage (its representative rank), one thread
// per stream. Format: the Trace Event Format, "X" complete events in
// microseconds, "M" metadata events naming processes and threads. Events of no
// duration (releases, receives, a sync that did not wait) are left out. Each
// event's args carry its action's op ("op": to_string(StepOp)), index in the
// stage's list ("action"), micro-batch, chunk and unit; its name is for the eye.
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "costmodel/simulator.hpp"

namespace planner {

nlohmann::json chrome_trace_json(const SimResult& r, const std::string& title);
void write_chrome_trace(const SimResult& r, const std::string& title, const std::string& path);

}  // namespace planner

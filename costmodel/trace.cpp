#include "costmodel/trace.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "specs/plan.hpp"

namespace planner {

nlohmann::json chrome_trace_json(const SimResult& r, const std::string& title) {
  using nlohmann::json;
  json events = json::array();
  const int streams = int(Stream::Cpu) + 1;
  for (int s = 0; s < int(r.stages.size()); ++s) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", s}, {"tid", 0},
                      {"args", {{"name", fmt::format("stage {} (representative rank)", s)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", s}, {"tid", 0}, {"args", {{"sort_index", s}}}});
    for (int k = 0; k < streams; ++k)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", s}, {"tid", k},
                        {"args", {{"name", to_string(Stream(k))}}}});
  }
  for (const TraceEvent& e : r.events) {
    if (!(e.end_seconds > e.start_seconds)) continue;  // releases, receives, syncs that did not wait
    std::string name = e.name;
    if (e.microbatch >= 0) name += fmt::format(" {}", e.microbatch);
    if (e.chunk > 0) name += fmt::format(".{}", e.chunk);
    if (e.unit >= 0) name += fmt::format(" u{}", e.unit);
    // Readers go by "op" (to_string(StepOp)) and "action" (its index in the
    // stage's list, -1 for a part of it shown apart), never by the name.
    json args = {{"op", to_string(e.op)}, {"microbatch", e.microbatch}, {"chunk", e.chunk}, {"unit", e.unit},
                 {"action", e.action}};
    events.push_back({{"name", name},
                      {"cat", to_string(e.stream)},
                      {"ph", "X"},
                      {"pid", e.stage},
                      {"tid", int(e.stream)},
                      {"ts", e.start_seconds * 1e6},
                      {"dur", (e.end_seconds - e.start_seconds) * 1e6},
                      {"args", args}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"title", title}, {"makespan_seconds", r.makespan_seconds}}}};
}

void write_chrome_trace(const SimResult& r, const std::string& title, const std::string& path) {
  write_file_atomically(path, chrome_trace_json(r, title).dump() + "\n");
}

}  // namespace planner

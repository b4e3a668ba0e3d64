// The pictures of `planner validate`: a gnuplot script (Debian's gnuplot-nox,
// pngcairo) and the data files it reads, written beside report.json so that a
// reader can re-draw or restyle them (`gnuplot plots.gp` in the report folder).
//  step_time.png        predicted against measured step time, log-log, y = x
//                       with shaded +-5% and +-10% bands, half A and half B
//                       (held out) apart, points outside +-10% named
//  peak_memory.png      the same for the peak memory per GPU
//  memory_breakdown.png per plan that ran, the predicted categories stacked
//                       beside the measured ones
//  timeline_NAME.png    per pipeline plan that ran with a trace: for each stage
//                       the simulator's compute stream above each of its
//                       measured ranks' (exec --trace, CUDA events of the last
//                       timed step), forward, backward, waits for the
//                       neighbour stages and the optimizer in their own
//                       colours, micro-batch numbers in the wider boxes
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "costmodel/memory_model.hpp"
#include "planner/validate.hpp"
#include "strategies/step_program.hpp"

namespace planner {

namespace {

using nlohmann::json;

constexpr double kGiB = double(int64_t(1) << 30);
const char* kColors[] = {"#4575b4", "#91bfdb", "#fee090", "#fc8d59", "#d73027", "#1a9850", "#999999"};

std::string esc(const std::string& s) {  // a gnuplot double-quoted string
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    // '_' would subscript in enhanced text; a backquote would run a shell
    // command (gnuplot substitutes `...` inside double-quoted strings).
    o += c == '_' ? '-' : c == '`' ? '\'' : c;
  }
  return o;
}

struct Scatter {
  std::string file_a, file_b, labels;
  double lo = 0, hi = 0;
  int n = 0, labelled = 0;
  bool log = true;
};

// Points (measured, predicted) of the plans that ran, per half, in `unit`.
Scatter scatter(const json& plans, const char* key, double unit, const std::string& stem, PlotFiles& out) {
  Scatter s;
  std::string a = "# measured predicted name\n", b = a, labels = "# measured predicted label\n";
  double lo = 1e300, hi = 0;
  for (const auto& p : plans) {
    if (p["predicted"].is_null() || p["measured"].is_null()) continue;
    const double pr = p["predicted"][key].get<double>() / unit, me = p["measured"][key].get<double>() / unit;
    if (!(pr > 0) || !(me > 0)) continue;
    const std::string line = fmt::format("{:.9g} {:.9g} \"{}\"\n", me, pr, esc(p["name"].get<std::string>()));
    (p["half"] == "A" ? a : b) += line;
    if (std::abs(pr / me - 1) > 0.10) labels += line, ++s.labelled;
    lo = std::min({lo, pr, me});
    hi = std::max({hi, pr, me});
    ++s.n;
  }
  if (s.n == 0) return s;
  s.file_a = stem + "_A.dat", s.file_b = stem + "_B.dat", s.labels = stem + "_labels.dat";
  out.data.push_back({s.file_a, a});
  out.data.push_back({s.file_b, b});
  out.data.push_back({s.labels, labels});
  // Log axes when the points span decades, else linear (a log axis inside one
  // decade shows no tick labels).
  s.log = hi / lo > 20;
  s.lo = s.log ? lo / 1.3 : lo * 0.85, s.hi = s.log ? hi * 1.3 : hi * 1.15;
  return s;
}

std::string scatter_plot(const Scatter& s, const std::string& png, const std::string& title, const std::string& unit,
                         const std::string& held_out, bool has_a, bool has_b) {
  std::string g = fmt::format(
      "set output \"{png}\"\n"
      "set title \"{title}\"\n"
      "set xlabel \"measured ({unit})\"\nset ylabel \"predicted ({unit})\"\n"
      "{scale}\nset xrange [{lo:.6g}:{hi:.6g}]\nset yrange [{lo:.6g}:{hi:.6g}]\n"
      "set key top left box opaque\nset grid\nset size ratio -1\nset samples 200\n"
      "plot '+' using 1:(0.9*$1):(1.1*$1) with filledcurves lc rgb \"#fde0dd\" title \"within 10%\", \\\n"
      "     '+' using 1:(0.95*$1):(1.05*$1) with filledcurves lc rgb \"#c7e9c0\" title \"within 5%\", \\\n"
      "     x with lines lc rgb \"black\" lw 1.5 title \"y = x\"",
      fmt::arg("png", png), fmt::arg("title", esc(title)), fmt::arg("unit", unit), fmt::arg("lo", s.lo),
      fmt::arg("hi", s.hi), fmt::arg("scale", s.log ? "set logscale xy" : "unset logscale"));
  if (has_a)
    g += fmt::format(", \\\n     \"{}\" using 1:2 with points pt 7 ps 1.3 lc rgb \"#2166ac\" title \"half A{}\"", s.file_a,
                     held_out == "A" ? " (held out)" : "");
  if (has_b)
    g += fmt::format(", \\\n     \"{}\" using 1:2 with points pt 5 ps 1.3 lc rgb \"#b2182b\" title \"half B{}\"", s.file_b,
                     held_out == "B" ? " (held out)" : "");
  if (s.labelled > 0)
    g += fmt::format(", \\\n     \"{}\" using 1:2:3 with labels offset 1,0.6 left font \",8\" notitle", s.labels);
  return g + "\n";
}

// What one box of a timeline is: its fill and legend entry.
struct Kind {
  const char* title;
  const char* color;
};
const Kind kKinds[] = {{"forward", "#4575b4"},     {"backward", "#fc8d59"},  {"recompute", "#9e6ebd"},
                       {"waits for a neighbour stage", "#c8c8c8"}, {"optimizer", "#1a9850"},
                       {"other (sync, norm, collectives)", "#7f7f7f"}};

}  // namespace

// validate.hpp says what it returns.
std::pair<int, int> trace_event_kind(const json& e) {
  // The op and micro-batch of the event's action, from its args (the
  // simulator's trace and exec's measured spans both carry them); an event
  // without them is "other".
  const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
  StepOp op;
  if (!args.contains("op") || !args["op"].is_string() || !parse_step_op(args["op"].get<std::string>(), op))
    return {5, -1};
  const int mb = args.contains("microbatch") && args["microbatch"].is_number_integer() ? args["microbatch"].get<int>() : -1;
  switch (op) {
    case StepOp::Forward: return {0, mb};
    case StepOp::Backward: return {1, mb};
    case StepOp::SendF:
    case StepOp::RecvF:
    case StepOp::SendB:
    case StepOp::RecvB: return {3, mb};
    case StepOp::Opt: return {4, -1};
    default: return {5, -1};
  }
}

std::map<int, int> trace_process_stages(const json& trace) {
  std::map<int, int> stage_of;
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return stage_of;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "M" || e.value("name", "") != "process_name" || !e.contains("pid") ||
        !e["pid"].is_number_integer() || !e.contains("args") || !e["args"].is_object())
      continue;
    const int pid = e["pid"].get<int>();
    if (pid < 1000) {
      stage_of[pid] = pid;
    } else if (e["args"].contains("stage") && e["args"]["stage"].is_number_integer()) {
      // exec's trace gives each measured rank's stage as a number (traces
      // written before it did have no measured lanes in the picture).
      stage_of[pid] = e["args"]["stage"].get<int>();
    }
  }
  return stage_of;
}

namespace {

// One pipeline plan's timeline picture: data and script. A trace that is not
// exec's (events without a numeric pid, ts or dur) draws nothing of theirs.
void timeline_plot(const std::string& plan, const json& trace, PlotFiles& out, std::string& g) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return;
  auto event = [](const json& e, const char* ph) {
    return e.is_object() && e.value("ph", "") == ph && e.contains("pid") && e["pid"].is_number_integer();
  };
  // Lanes: per stage, the prediction (thread 0 = compute) then the measured
  // ranks of that stage.
  std::set<std::pair<int, int>> lanes;  // (stage, 0 predicted / 1 + rank measured), in drawing order
  for (const auto& [pid, stage] : trace_process_stages(trace)) lanes.insert({stage, pid >= 1000 ? 1 + (pid - 1000) : 0});
  if (lanes.empty()) return;
  std::map<int, int> lane;  // pid -> y
  std::string tics;
  int y = 0;
  for (const auto& key : lanes) {
    const int pid = key.second == 0 ? key.first : 1000 + key.second - 1;
    lane[pid] = y;
    tics += fmt::format("{}\"{}\" {}", tics.empty() ? "" : ", ",
                        key.second == 0 ? fmt::format("stage {} predicted", key.first)
                                        : fmt::format("rank {} measured", key.second - 1),
                        y);
    ++y;
  }
  // Boxes: consecutive events of one lane with the same kind and micro-batch
  // (the simulator's and the runtime's per-layer actions) merged.
  struct Box {
    double t0, t1;
    int kind, mb;
  };
  std::map<int, std::vector<Box>> boxes;
  double end = 0;
  std::vector<const json*> ev;
  for (const auto& e : trace["traceEvents"])
    if (event(e, "X") && lane.count(e["pid"].get<int>()) && e.value("tid", 0) == 0 && e.contains("ts") &&
        e["ts"].is_number() && e.contains("dur") && e["dur"].is_number())
      ev.push_back(&e);
  std::stable_sort(ev.begin(), ev.end(), [](const json* a, const json* b) { return (*a)["ts"].get<double>() < (*b)["ts"].get<double>(); });
  for (const json* e : ev) {
    // An asynchronous collective's issue (measured: no duration to speak of)
    // neither shows nor splits the pass it was issued in.
    if ((*e)["dur"].get<double>() < 1.0) continue;
    const int pid = (*e)["pid"].get<int>();
    const auto [k, mb] = trace_event_kind(*e);
    const double t0 = (*e)["ts"].get<double>() / 1e3, t1 = t0 + (*e)["dur"].get<double>() / 1e3;  // ms
    auto& v = boxes[pid];
    if (!v.empty() && v.back().kind == k && v.back().mb == mb) v.back().t1 = std::max(v.back().t1, t1);
    else v.push_back({t0, t1, k, mb});
    end = std::max(end, t1);
  }
  if (end <= 0) return;
  std::string safe;
  for (char c : plan) safe += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  const std::string dat = "timeline_" + safe + ".dat", png = "timeline_" + safe + ".png";
  std::string d = "# lane start_ms end_ms color label\n";
  for (const auto& [pid, v] : boxes)
    for (const Box& b : v) {
      const bool wide = (b.t1 - b.t0) > 0.012 * end && b.mb >= 0 && b.kind <= 2;
      d += fmt::format("{} {:.6f} {:.6f} {} \"{}\"\n", lane[pid], b.t0, b.t1,
                       std::stoi(std::string(kKinds[b.kind].color + 1), nullptr, 16), wide ? std::to_string(b.mb) : "");
    }
  out.data.push_back({dat, d});
  const json other = trace.value("otherData", json::object());
  std::string title = esc(other.value("title", plan));
  if (other.contains("makespan_seconds") && other.contains("measured_step_seconds"))
    title += fmt::format("\\npredicted step {:.4f} s, measured {:.4f} s (the last timed step)",
                         other["makespan_seconds"].get<double>(), other["measured_step_seconds"].get<double>());
  g += fmt::format(
      "\nunset logscale\nunset xtics\nset xtics\nset size noratio 1,1\nset key outside bottom center horizontal box\n"
      "set terminal pngcairo size 1400,{h} font \"sans,10\"\nset output \"{png}\"\n"
      "set bmargin 7\nset title \"{title}\" font \",10\"\nset xlabel \"ms from the step's start\" offset 0,0.4\nset ylabel \"\"\n"
      "set xrange [0:{xmax:.6g}]\nset yrange [{ylo}:-0.6]\nset ytics ({tics})\nset grid xtics\n"
      "set style fill solid 0.9 border rgb \"#333333\"\n"
      "plot \"{dat}\" using (($2+$3)/2):1:2:3:($1-0.38):($1+0.38):4 with boxxyerror lc rgb variable notitle, \\\n"
      "     \"{dat}\" using (($2+$3)/2):1:5 with labels font \",7\" notitle",
      fmt::arg("h", 220 + 70 * y), fmt::arg("png", png), fmt::arg("title", title), fmt::arg("xmax", end * 1.01),
      fmt::arg("ylo", y - 0.4), fmt::arg("tics", tics), fmt::arg("dat", dat));
  for (const Kind& k : kKinds)
    g += fmt::format(", \\\n     NaN with boxes lc rgb \"{}\" title \"{}\"", k.color, k.title);
  g += "\n";
  out.pngs.push_back(png);
}

// The ranking check (validate --rank-question): each plan's predicted and
// measured step time against its predicted rank; a measured line that is not
// rising left to right is an order the prediction got wrong.
void ranking_plot(const json& ranking, const std::string& name, PlotFiles& out, std::string& g) {
  std::string data = "# predicted_rank predicted_step_s measured_step_s (NaN: did not run)\n";
  int n = 0;
  for (const auto& r : ranking["rows"]) {
    if (!r["predicted_step_seconds"].is_number()) continue;
    data += fmt::format("{} {:.9g} {}\n", r["predicted_rank"].get<int>(), r["predicted_step_seconds"].get<double>(),
                        r["measured_step_seconds"].is_number() ? fmt::format("{:.9g}", r["measured_step_seconds"].get<double>())
                                                               : std::string("NaN"));
    ++n;
  }
  if (n == 0) return;
  out.data.push_back({"ranking.dat", data});
  g += fmt::format(
      "\nunset logscale\nset size noratio 1,1\nset key top left box\nset grid\nset terminal pngcairo size 900,600 "
      "font \"sans,10\"\nset output \"ranking.png\"\nset title \"Ranking check: step time by predicted rank\\n{}\"\n"
      "set xlabel \"predicted rank (1 = plan's pick)\"\nset ylabel \"s\"\nset xrange [0.5:{}.5]\nset xtics 1\n"
      "set autoscale y\nplot \"ranking.dat\" using 1:2 with linespoints pt 7 title \"predicted\", \\\n"
      "     \"ranking.dat\" using 1:3 with linespoints pt 5 title \"measured\"\n",
      esc(name), n);
  out.pngs.push_back("ranking.png");
}

}  // namespace

PlotFiles plot_files(const json& report, const std::map<std::string, json>& traces) {
  PlotFiles out;
  const json& plans = report["plans"];
  const std::string held = report.value("held_out", "B");
  const std::string name = report.value("sweep_name", "sweep");
  std::string g = "# Drawn by planner validate; run `gnuplot plots.gp` in this folder to draw again.\n"
                  "set terminal pngcairo size 900,860 font \"sans,10\"\nset encoding utf8\n";
  auto has_half = [&](const char* h) {
    for (const auto& p : plans)
      if (p["half"] == h && !p["predicted"].is_null() && !p["measured"].is_null()) return true;
    return false;
  };
  const bool a = has_half("A"), b = has_half("B");
  const Scatter st = scatter(plans, "step_seconds", 1.0, "step_time", out);
  if (st.n > 0) {
    g += scatter_plot(st, "step_time.png", "Step time, predicted against measured: " + name, "s", held, a, b);
    out.pngs.push_back("step_time.png");
  }
  // Memory in the largest unit that keeps the points at 1 or more.
  double most = 0;
  for (const auto& p : plans)
    if (!p["measured"].is_null()) most = std::max(most, p["measured"]["per_gpu_peak_bytes"].get<double>());
  const double unit = most >= kGiB ? kGiB : most >= double(1 << 20) ? double(1 << 20) : 1024.0;
  const std::string uname = unit == kGiB ? "GiB" : unit == double(1 << 20) ? "MiB" : "KiB";
  const Scatter mem = scatter(plans, "per_gpu_peak_bytes", unit, "peak_memory", out);
  if (mem.n > 0) {
    g += "\nunset size\n" +
         scatter_plot(mem, "peak_memory.png", "Peak memory per GPU, predicted against measured: " + name, uname, held, a, b);
    out.pngs.push_back("peak_memory.png");
  }

  // Memory breakdown: per plan a predicted bar (left) and a measured bar
  // (right), categories stacked; drawn as boxes of the cumulative sums, the
  // tallest first, so each visible segment is one category.
  std::string data = "# x cumulative " + uname + ": parameters gradients optimizer_states activations logits_loss comm_buffers overhead\n";
  std::string tics;
  int k = 0;
  double top = 0;
  for (const auto& p : plans) {
    if (p["predicted"].is_null() || p["measured"].is_null()) continue;
    const json& pc = p["predicted"]["categories"];
    const json& mc = p["measured"]["categories"];
    for (int side = 0; side < 2; ++side) {
      const json& c = side == 0 ? pc : mc;
      double cum = 0;
      data += fmt::format("{}", 3 * k + side);
      for (int i = 0; i < kMemCategories; ++i) {
        const char* cat = to_string(MemCategory(i));
        cum += c.contains(cat) && c[cat].is_number() ? c[cat].get<double>() / unit : 0.0;
        data += fmt::format(" {:.6g}", cum);
      }
      top = std::max(top, cum);
      data += "\n";
    }
    tics += fmt::format("{}\"{}\" {}", tics.empty() ? "" : ", ", esc(p["name"].get<std::string>()), 3 * k + 0.5);
    ++k;
  }
  if (k > 0) {
    out.data.push_back({"memory_breakdown.dat", data});
    g += fmt::format(
        "\nunset logscale\nset size noratio 1,1\nunset key\nset key outside right top box\nset grid ytics\n"
        "set terminal pngcairo size {w},720 font \"sans,10\"\nset output \"memory_breakdown.png\"\n"
        "set title \"Memory per GPU by category: left bar predicted, right bar measured\\n{name}\"\n"
        "set xlabel \"\"\nset ylabel \"{unit}\"\nset xrange [-1:{xmax}]\nset yrange [0:{ymax:.6g}]\n"
        "set xtics ({tics}) rotate by -40 font \",8\"\nset style fill solid 0.9 border rgb \"#333333\"\nset boxwidth 0.9\n"
        "plot ",
        fmt::arg("w", std::max(900, 70 * k + 250)), fmt::arg("name", esc(name)), fmt::arg("xmax", 3 * k - 1),
        fmt::arg("ymax", top * 1.08 + 1e-9), fmt::arg("tics", tics), fmt::arg("unit", uname));
    for (int i = kMemCategories - 1; i >= 0; --i)
      g += fmt::format("{}\"memory_breakdown.dat\" using 1:{} with boxes lc rgb \"{}\" title \"{}\"",
                       i == kMemCategories - 1 ? "" : ", \\\n     ", i + 2, kColors[i],
                       esc(to_string(MemCategory(i))));
    g += "\n";
    out.pngs.push_back("memory_breakdown.png");
  }
  for (const auto& p : plans) {
    if (p["measured"].is_null()) continue;
    const auto it = traces.find(p["name"].get<std::string>());
    if (it != traces.end()) timeline_plot(it->first, it->second, out, g);
  }
  if (report.contains("ranking") && report["ranking"].is_object()) ranking_plot(report["ranking"], name, out, g);
  out.script = g;
  return out;
}

}  // namespace planner

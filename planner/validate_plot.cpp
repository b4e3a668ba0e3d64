// The pictures of `planner validate`: a gnuplot script (Debian's gnuplot-nox,
// pngcairo) and the data files it reads, written beside report.json so that a
// reader can re-draw or restyle them (`gnuplot plots.gp` in the report folder).
//  step_time.png        predicted against measured step time, log-log, y = x
//                       with shaded +-5% and +-10% bands, half A and half B
//                       (held out) apart, points outside +-10% named
//  peak_memory.png      the same for the peak memory per GPU
//  memory_breakdown.png per plan that ran, the predicted categories stacked
//                       beside the measured ones
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "costmodel/memory_model.hpp"
#include "planner/validate.hpp"

namespace planner {

namespace {

using nlohmann::json;

constexpr double kGiB = double(int64_t(1) << 30);
const char* kColors[] = {"#4575b4", "#91bfdb", "#fee090", "#fc8d59", "#d73027", "#1a9850", "#999999"};

std::string esc(const std::string& s) {  // a gnuplot double-quoted string
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c == '_' ? '-' : c;  // enhanced text would subscript after '_'
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

}  // namespace

PlotFiles plot_files(const json& report) {
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
  if (st.n > 0)
    g += scatter_plot(st, "step_time.png", "Step time, predicted against measured: " + name, "s", held, a, b);
  // Memory in the largest unit that keeps the points at 1 or more.
  double most = 0;
  for (const auto& p : plans)
    if (!p["measured"].is_null()) most = std::max(most, p["measured"]["per_gpu_peak_bytes"].get<double>());
  const double unit = most >= kGiB ? kGiB : most >= double(1 << 20) ? double(1 << 20) : 1024.0;
  const std::string uname = unit == kGiB ? "GiB" : unit == double(1 << 20) ? "MiB" : "KiB";
  const Scatter mem = scatter(plans, "per_gpu_peak_bytes", unit, "peak_memory", out);
  if (mem.n > 0)
    g += "\nunset size\n" +
         scatter_plot(mem, "peak_memory.png", "Peak memory per GPU, predicted against measured: " + name, uname, held, a, b);

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
  }
  out.script = g;
  return out;
}

}  // namespace planner

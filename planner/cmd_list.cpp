// `planner list`: the model presets, families and GPU catalog this planner knows.
#include <memory>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "specs/cluster_spec.hpp"
#include "specs/model_spec.hpp"
#include "planner/cli.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

CLI::App* add_list_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("list", "List model presets, model families or the GPU catalog");
  cmd->footer(
      "Examples:\n"
      "  planner list models\n"
      "  planner list gpus --json\n"
      "  planner list families");
  struct Opts {
    std::string what;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();  // owned by the callback, which the app owns
  cmd->add_option("what", o->what, "models, families or gpus")->required();
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, &exit_code] {
    nlohmann::json j = nlohmann::json::array();
    std::string out;
    const std::string what = to_lower(o->what);
    if (what == "models") {
      out += fmt::format("{:<16}{:>8}{:>8}{:>7}{:>7}{:>8}{:>9}{:>14}{:>14}\n", "model", "layers", "hidden", "heads", "kv",
                         "ffn", "vocab", "params", "published");
      for (const auto& name : model_preset_names()) {
        ModelSpec m = resolve_model(name);
        out += fmt::format("{:<16}{:>8}{:>8}{:>7}{:>7}{:>8}{:>9}{:>14}{:>14}\n", name, m.layers, m.hidden, m.heads,
                           m.kv_heads, m.ffn, m.vocab, m.total_params(), m.published_params);
        j.push_back({{"name", name}, {"params", m.total_params()}, {"published_params", m.published_params},
                     {"spec", m}});
      }
    } else if (what == "families") {
      for (const auto& f : model_family_names()) {
        auto fam = model_family(f);
        out += fmt::format("{:<10} {} sizes, {} .. {}\n", f, fam.size(), fam.front().name, fam.back().name);
        j.push_back({{"family", f}, {"sizes", fam.size()}, {"smallest", fam.front().name}, {"largest", fam.back().name}});
      }
    } else if (what == "gpus") {
      out += fmt::format("{:<18}{:>10}{:>11}{:>10}{:>10}{:>10}{:>9}  {:<23}  {}\n", "gpu", "memory", "GB/s", "fp32 TF",
                         "fp16 TF", "bf16 TF", "nvlink", "calibrated", "aliases");
      for (const auto& name : gpu_names()) {
        const GpuSpec& g = gpu_by_name(name);
        std::string aliases;
        for (const auto& a : g.aliases) aliases += (aliases.empty() ? "" : ", ") + a;
        const std::string cal = !g.calibrated.empty() ? g.calibrated
                                : g.prediction_only                 ? "datasheet, predict only"
                                                                    : "datasheet only";
        out += fmt::format("{:<18}{:>10}{:>11.0f}{:>10.1f}{:>10.1f}{:>10.1f}{:>9}  {:<23}  {}\n", name,
                           format_bytes(double(g.memory_bytes)), g.memory_bandwidth_Bps / 1e9, g.peak_fp32 / 1e12,
                           g.peak_fp16 / 1e12, g.peak_bf16 / 1e12, g.has_nvlink ? "yes" : "no", cal, aliases);
        j.push_back(g);
      }
    } else {
      throw InputError(fmt::format("list: '{}' is not one of models, families, gpus", o->what));
    }
    emit("", o->json ? j.dump(2) + "\n" : out);
    exit_code = 0;
  });
  return cmd;
}

}  // namespace planner

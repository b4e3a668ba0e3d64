#include "specs/plan.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

// Refuses a strategy object whose "text" contradicts its fields (defined below).
void check_strategy_text(const nlohmann::json& j, const Strategy& fields);

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json j;
  j["format"] = "planner-plan";
  j["version"] = kPlanFormatVersion;
  j["model"] = p.model;
  j["cluster"] = p.cluster;
  j["strategy"] = p.strategy;
  j["seq"] = p.seq;
  j["global_batch"] = p.global_batch;
  return j;
}

namespace {
int64_t positive_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) throw InputError(fmt::format("plan: missing field '{}'", key));
  const auto& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    throw InputError(fmt::format("plan: '{}' must be a positive integer, got {}", key, json_excerpt(v)));
  return v.get<int64_t>();
}
}  // namespace

BandKind band_kind(const ModelSpec& m, const Finetune& f) {
  if (m.moe.enabled()) return BandKind::Moe;
  return f.frozen_base() ? BandKind::Finetune : BandKind::Dense;
}

Plan plan_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw InputError("plan: expected a JSON object");
  if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != "planner-plan")
    throw InputError("plan: not a plan file (\"format\": \"planner-plan\" missing)");
  if (!j.contains("version") || !j["version"].is_number_integer())
    throw InputError("plan: missing integer field 'version'");
  // Read as a 64-bit integer: get<int>() would wrap 4294967297 to 1.
  const int64_t version = j["version"].is_number_unsigned() && j["version"].get<uint64_t>() > uint64_t(INT64_MAX)
                              ? int64_t(-1)
                              : j["version"].get<int64_t>();
  if (version != kPlanFormatVersion)
    throw InputError(fmt::format("plan: format version {} is not supported (this planner reads version {})",
                                 json_excerpt(j["version"]), kPlanFormatVersion));
  for (const char* key : {"model", "cluster", "strategy"})
    if (!j.contains(key)) throw InputError(fmt::format("plan: missing field '{}'", key));
  Plan p;
  try {
    p.model = j.at("model").get<ModelSpec>();
    p.cluster = cluster_from_json(j.at("cluster"));
    p.strategy = j.at("strategy").get<Strategy>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("plan: malformed field: {}", e.what()));
  }
  check_strategy_text(j.at("strategy"), p.strategy);
  p.seq = positive_field(j, "seq");
  p.global_batch = positive_field(j, "global_batch");
  return p;
}

namespace {

// "k=v,..." as a map.
std::map<std::string, std::string> key_values(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const auto& part : split(text, ',')) {
    const size_t eq = part.find('=');
    if (eq != std::string::npos) out[trim(part.substr(0, eq))] = trim(part.substr(eq + 1));
  }
  return out;
}

}  // namespace

void check_strategy_text(const nlohmann::json& j, const Strategy& fields) {
  // One truth per input (issue 28): a strategy object's "text" that says
  // other than its fields is refused, naming both, rather than ignored.
  if (!j.is_object() || !j.contains("text") || !j.at("text").is_string()) return;
  const std::string text = j.at("text").get<std::string>();
  std::vector<std::string> given;
  const Strategy said = Strategy::parse(text, &given);
  const auto a = key_values(said.to_string()), b = key_values(fields.to_string());
  for (const auto& k : given) {
    const auto ia = a.find(k), ib = b.find(k);
    if (ia != a.end() && ib != b.end() && ia->second != ib->second)
      throw InputError(fmt::format("plan: strategy text '{}' says {}={}, its fields say {}={} ({}); make them agree",
                                   text, k, ia->second, k, ib->second, fields.to_string()));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("{}: '{}' is a directory, not a JSON file", what, clip(path)));
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open '{}'", what, clip(path)));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), what, fmt::format("'{}'", clip(path)));
}

Plan load_plan(const std::string& path) {
  try {
    return plan_from_json(read_json_file(path, "plan"));
  } catch (const InputError& e) {
    std::string msg = e.what();
    if (msg.find(path) == std::string::npos) msg = fmt::format("{} (in '{}')", msg, path);
    throw InputError(msg);
  }
}

void save_plan(const Plan& p, const std::string& path) { write_file_atomically(path, plan_to_json(p).dump(2) + "\n"); }

}  // namespace planner

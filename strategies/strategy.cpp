#include "strategies/strategy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "strategies/checked.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

const char* to_string(Offload o) {
  switch (o) {
    case Offload::None: return "none";
    case Offload::Optimizer: return "optimizer";
    case Offload::All: return "all";
  }
  return "?";
}
const char* to_string(Ckpt c) {
  switch (c) {
    case Ckpt::None: return "none";
    case Ckpt::Selective: return "selective";
    case Ckpt::Full: return "full";
  }
  return "?";
}
const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
    case Schedule::Interleaved: return "interleaved";
  }
  return "?";
}
const char* to_string(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::FP8: return "fp8";
  }
  return "?";
}

int bytes_per_element(Precision p) { return p == Precision::FP32 ? 4 : 2; }
Precision working_precision(Precision p) { return p == Precision::FP8 ? Precision::BF16 : p; }

namespace {

template <class E>
E parse_enum(const std::string& key, const std::string& value, std::initializer_list<std::pair<const char*, E>> table) {
  std::string v = to_lower(value);
  std::vector<std::string> names;
  for (auto& [name, e] : table) {
    if (v == name) return e;
    names.emplace_back(name);
  }
  std::string all;
  for (auto& n : names) all += (all.empty() ? "" : "|") + n;
  throw InputError(fmt::format("strategy: {}='{}' is not one of {}", key, value, all));
}

Offload parse_offload(const std::string& v) {
  return parse_enum<Offload>("offload", v, {{"none", Offload::None}, {"optimizer", Offload::Optimizer},
                                            {"opt", Offload::Optimizer}, {"all", Offload::All}});
}
Ckpt parse_ckpt(const std::string& v) {
  return parse_enum<Ckpt>("ckpt", v, {{"none", Ckpt::None}, {"selective", Ckpt::Selective}, {"full", Ckpt::Full}});
}
Schedule parse_schedule(const std::string& v) {
  return parse_enum<Schedule>("schedule", v, {{"1f1b", Schedule::OneFOneB}, {"gpipe", Schedule::GPipe},
                                              {"interleaved", Schedule::Interleaved}});
}
Precision parse_precision(const std::string& v) {
  return parse_enum<Precision>("precision", v, {{"bf16", Precision::BF16}, {"fp16", Precision::FP16},
                                                {"fp32", Precision::FP32}, {"fp8", Precision::FP8}});
}
bool parse_bool(const std::string& key, const std::string& v) {
  std::string l = to_lower(v);
  if (l == "1" || l == "true" || l == "on" || l == "yes") return true;
  if (l == "0" || l == "false" || l == "off" || l == "no") return false;
  throw InputError(fmt::format("strategy: {}='{}' must be 0 or 1", key, v));
}

int parse_degree(const std::string& key, const std::string& v, bool allow_zero = false) {
  int64_t n = parse_int(v, "strategy: " + key, allow_zero);
  const int64_t max = key == "mbs" ? kMaxMbs : kMaxDegree;
  if (n > max) throw InputError(fmt::format("strategy: {}={} is too large (at most {})", key, n, max));
  return static_cast<int>(n);
}

const std::vector<std::string> kKeys = {"dp", "tp", "pp", "zero", "offload", "ckpt", "mbs", "gas",
                                        "schedule", "vpp", "precision", "sp", "cp", "ep", "finetune", "lora_r", "lora_alpha",
                                        "lora_targets"};

// lora_* keys without finetune=lora|qlora say nothing: refused, not ignored.
void check_lora_keys(const Strategy& s, const std::vector<std::string>& keys) {
  bool lora = false;
  for (const auto& k : keys) lora = lora || (is_finetune_key(k) && k != "finetune");
  validate_finetune(s.finetune, lora);
}

void set_key(Strategy& s, const std::string& key, const std::string& value) {
  if (key == "dp") s.dp = parse_degree(key, value);
  else if (key == "tp") s.tp = parse_degree(key, value);
  else if (key == "pp") s.pp = parse_degree(key, value);
  else if (key == "zero") s.zero = parse_degree(key, value, true);
  else if (key == "offload") s.offload = parse_offload(value);
  else if (key == "ckpt") s.ckpt = parse_ckpt(value);
  else if (key == "mbs") s.mbs = parse_degree(key, value);
  else if (key == "gas") s.gas = parse_degree(key, value);
  else if (key == "schedule") s.schedule = parse_schedule(value);
  else if (key == "vpp") s.vpp = parse_degree(key, value);
  else if (key == "precision") s.precision = parse_precision(value);
  else if (key == "sp") s.sp = parse_bool(key, value);
  else if (key == "cp") s.cp = parse_degree(key, value);
  else if (key == "ep") s.ep = parse_degree(key, value);
  else if (is_finetune_key(key)) set_finetune_key(s.finetune, key, value);
  else
    throw InputError(fmt::format("strategy: unknown key '{}'; did you mean '{}'? (keys: dp tp pp cp zero offload ckpt mbs gas schedule vpp precision sp ep finetune lora_r lora_alpha lora_targets)",
                                 key, nearest(key, kKeys)));
}

}  // namespace

void Strategy::validate() const {
  auto in_range = [](const char* key, int v, int lo) {
    if (v < lo || v > kMaxDegree) throw InputError(fmt::format("strategy: {}={} must be between {} and {}", key, v, lo, kMaxDegree));
  };
  in_range("dp", dp, 1);
  in_range("tp", tp, 1);
  in_range("pp", pp, 1);
  in_range("cp", cp, 1);
  in_range("vpp", vpp, 1);
  in_range("gas", gas, 1);
  in_range("ep", ep, 1);
  // Expert parallelism splits the experts over ranks of one data-parallel
  // group (Megatron-core's expert-model-parallel group, with the expert
  // tensor-parallel size equal to tp): ep must divide dp.
  if (dp % ep != 0)
    throw InputError(fmt::format("strategy: ep={} must divide dp={} (the experts are split over ranks of a data-parallel group)", ep, dp));
  if (ep > 1 && finetune.frozen_base())
    throw InputError(fmt::format("strategy: finetune={} with ep={} is not modelled (adapters on experts split over "
                                 "ranks); use ep=1", planner::to_string(finetune.mode), ep));
  if (mbs < 1 || mbs > kMaxMbs) throw InputError(fmt::format("strategy: mbs={} must be between 1 and {}", mbs, kMaxMbs));
  const int64_t w = checked_product({dp, tp, pp, cp}, "strategy: dp*tp*pp*cp");
  if (w > kMaxDegree)
    throw InputError(cp == 1 ? fmt::format("strategy: dp*tp*pp = {}*{}*{} = {} is more than {} GPUs", dp, tp, pp, w, kMaxDegree)
                             : fmt::format("strategy: dp*tp*pp*cp = {}*{}*{}*{} = {} is more than {} GPUs", dp, tp, pp,
                                           cp, w, kMaxDegree));
  const int64_t stages = checked_mul(pp, vpp, "strategy: pp*vpp");
  if (stages > kMaxDegree)
    throw InputError(fmt::format("strategy: pp*vpp = {}*{} = {} is more than {} pipeline stages", pp, vpp, stages, kMaxDegree));
  if (zero < 0 || zero > 3) throw InputError(fmt::format("strategy: zero={} must be 0, 1, 2 or 3", zero));
  if (offload == Offload::Optimizer && zero < 1)
    throw InputError("strategy: offload=optimizer needs zero>=1 (DeepSpeed offloads the partitioned optimizer state)");
  if (offload == Offload::All && zero != 3)
    throw InputError("strategy: offload=all (parameters too) needs zero=3 (DeepSpeed ZeRO-Infinity rule)");
  if (schedule != Schedule::Interleaved && vpp != 1)
    throw InputError(fmt::format("strategy: vpp={} needs schedule=interleaved", vpp));
  if (schedule == Schedule::Interleaved) {
    if (pp < 2) throw InputError("strategy: schedule=interleaved needs pp>=2");
    if (vpp < 2) throw InputError("strategy: schedule=interleaved needs vpp>=2 virtual stages per rank");
    if (gas % pp != 0)
      throw InputError(fmt::format("strategy: schedule=interleaved needs gas ({}) to be a multiple of pp ({}) (Megatron-LM rule)", gas, pp));
  }
  if (zero >= 2 && pp > 1)
    throw InputError(fmt::format("strategy: zero={} with pp={} is not supported: gradient partitioning conflicts with pipeline accumulation (DeepSpeed allows only ZeRO-1 with PP)", zero, pp));
  if (finetune.frozen_base()) {
    validate_finetune(finetune, false);
    // Only the adapters train: ZeRO shards their states, gradients (zero=2)
    // and values (zero=3); the frozen base stays replicated over dp, as PEFT
    // under DDP keeps it (sharding the base, FSDP-style, is not modelled).
    // Offloading the adapters' tiny states is not modelled either. Under tp
    // the adapters split with their matrices (costmodel/finetune.hpp,
    // runtime/model/lora.hpp); under sequence parallelism the runtime does
    // not run them: refused, so that a recommended plan always runs.
    if (tp > 1 && sp)
      throw InputError(fmt::format("strategy: finetune={} with sp=1 is not executed (adapters on sequence shards); "
                                   "use sp=0", planner::to_string(finetune.mode)));
    if (offload != Offload::None)
      throw InputError(fmt::format("strategy: offload={} with finetune={} is not modelled (only the adapters have optimizer "
                                   "states); use offload=none", planner::to_string(offload), planner::to_string(finetune.mode)));
  }
}

std::string Strategy::to_string() const {
  std::string text = fmt::format("dp={},tp={},pp={},{}zero={},offload={},ckpt={},mbs={},gas={},schedule={},vpp={},precision={},sp={}",
                     dp, tp, pp, cp > 1 ? fmt::format("cp={},", cp) : std::string(), zero, planner::to_string(offload), planner::to_string(ckpt), mbs, gas,
                     planner::to_string(schedule), vpp, planner::to_string(precision), sp ? 1 : 0);
  if (ep != 1) text += fmt::format(",ep={}", ep);
  return text + finetune.text_suffix();
}

Strategy Strategy::parse(std::string_view text, std::vector<std::string>* given) {
  Strategy s;
  std::string t = trim(text);
  if (t.empty()) throw InputError("strategy: empty; expected e.g. dp=2,tp=1,pp=1,zero=1,mbs=4,gas=8");
  std::vector<std::string> seen;
  for (const auto& part_raw : split(t, ',')) {
    std::string part = trim(part_raw);
    if (part.empty()) throw InputError(fmt::format("strategy: empty item in '{}'", t));
    auto eq = part.find('=');
    if (eq == std::string::npos)
      throw InputError(fmt::format("strategy: '{}' is not key=value (e.g. dp=2)", part));
    std::string key = to_lower(trim(part.substr(0, eq))), value = trim(part.substr(eq + 1));
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      throw InputError(fmt::format("strategy: key '{}' given twice", key));
    set_key(s, key, value);
    seen.push_back(key);
  }
  check_lora_keys(s, seen);
  if (given) *given = seen;
  return s;
}

void to_json(nlohmann::json& j, const Strategy& s) {
  j = nlohmann::json{{"dp", s.dp},         {"tp", s.tp},
                     {"pp", s.pp},         {"zero", s.zero},
                     {"offload", to_string(s.offload)},
                     {"ckpt", to_string(s.ckpt)},
                     {"mbs", s.mbs},       {"gas", s.gas},
                     {"schedule", to_string(s.schedule)},
                     {"vpp", s.vpp},       {"precision", to_string(s.precision)},
                     {"sp", s.sp},         {"text", s.to_string()}};
  if (s.cp > 1) j["cp"] = s.cp;  // absent at 1: the JSON of plans without context parallelism is unchanged
  if (s.ep != 1) j["ep"] = s.ep;  // only when used, so dense plans' JSON is unchanged
  // Only when not full training, so full-training JSON is unchanged.
  if (s.finetune.frozen_base()) {
    j["finetune"] = to_string(s.finetune.mode);
    j["lora_r"] = s.finetune.r;
    j["lora_alpha"] = s.finetune.alpha;
    j["lora_targets"] = targets_to_string(s.finetune.targets);
  }
}

void from_json(const nlohmann::json& j, Strategy& s) {
  if (j.is_string()) {
    s = Strategy::parse(j.get<std::string>());
    return;
  }
  if (!j.is_object()) throw InputError("strategy: expected a JSON object or a text form string");
  s = Strategy{};
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "text") continue;
    const auto& v = it.value();
    std::string value;
    if (v.is_string()) value = v.get<std::string>();
    else if (v.is_boolean()) value = v.get<bool>() ? "1" : "0";
    else if (v.is_number_integer()) value = std::to_string(v.get<int64_t>());
    else throw InputError(fmt::format("strategy: '{}' has a value of the wrong type ({})", it.key(), json_excerpt(v)));
    set_key(s, to_lower(it.key()), value);
    keys.push_back(to_lower(it.key()));
  }
  check_lora_keys(s, keys);
}

}  // namespace planner

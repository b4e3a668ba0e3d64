#include "strategies/finetune.hpp"

#include <fmt/format.h>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

const char* to_string(FinetuneMode f) {
  switch (f) {
    case FinetuneMode::Full: return "full";
    case FinetuneMode::Lora: return "lora";
    case FinetuneMode::Qlora: return "qlora";
  }
  return "?";
}

std::string targets_to_string(unsigned t) {
  std::string out;
  auto add = [&](const char* s) { out += (out.empty() ? "" : "+") + std::string(s); };
  if ((t & (kLoraQ | kLoraK | kLoraV)) == (kLoraQ | kLoraK | kLoraV)) {
    add("qkv");
  } else {
    if (t & kLoraQ) add("q");
    if (t & kLoraK) add("k");
    if (t & kLoraV) add("v");
  }
  if (t & kLoraO) add("o");
  if (t & kLoraMlp) add("mlp");
  return out;
}

unsigned parse_lora_targets(const std::string& text) {
  unsigned t = 0;
  for (const std::string& raw : split(text, '+')) {
    const std::string p = to_lower(trim(raw));
    if (p == "q") t |= kLoraQ;
    else if (p == "k") t |= kLoraK;
    else if (p == "v") t |= kLoraV;
    else if (p == "qkv") t |= kLoraQ | kLoraK | kLoraV;
    else if (p == "o") t |= kLoraO;
    else if (p == "mlp") t |= kLoraMlp;
    else if (p == "all") t |= kLoraAll;
    else
      throw InputError(fmt::format("strategy: lora_targets='{}': '{}' is not one of q|k|v|qkv|o|mlp|all (join with '+', "
                                   "e.g. qkv+o+mlp)", text, p));
  }
  return t;
}

bool is_finetune_key(std::string_view key) {
  return key == "finetune" || key == "lora_r" || key == "lora_alpha" || key == "lora_targets";
}

void set_finetune_key(Finetune& f, const std::string& key, const std::string& value) {
  if (key == "finetune") {
    const std::string v = to_lower(value);
    if (v == "full" || v == "none") f.mode = FinetuneMode::Full;
    else if (v == "lora") f.mode = FinetuneMode::Lora;
    else if (v == "qlora") f.mode = FinetuneMode::Qlora;
    else throw InputError(fmt::format("strategy: finetune='{}' is not one of full|lora|qlora", value));
  } else if (key == "lora_r") {
    f.r = int(parse_capped(value, "strategy: lora_r", 4096));
  } else if (key == "lora_alpha") {
    f.alpha = int(parse_capped(value, "strategy: lora_alpha", 1 << 20));
  } else if (key == "lora_targets") {
    f.targets = parse_lora_targets(value);
  }
}

void validate_finetune(const Finetune& f, bool given_lora_keys) {
  if (!f.frozen_base()) {
    if (given_lora_keys)
      throw InputError("strategy: lora_r, lora_alpha and lora_targets need finetune=lora or finetune=qlora");
    return;
  }
  if (f.r < 1 || f.r > 4096) throw InputError(fmt::format("strategy: lora_r={} must be between 1 and 4096", f.r));
  if (f.alpha < 1) throw InputError(fmt::format("strategy: lora_alpha={} must be at least 1", f.alpha));
  if ((f.targets & kLoraAll) == 0 || (f.targets & ~unsigned(kLoraAll)) != 0)
    throw InputError("strategy: lora_targets must name at least one of q|k|v|o|mlp");
}

std::string Finetune::text_suffix() const {
  if (!frozen_base()) return "";
  return fmt::format(",finetune={},lora_r={},lora_alpha={},lora_targets={}", to_string(mode), r, alpha,
                     targets_to_string(targets));
}

}  // namespace planner

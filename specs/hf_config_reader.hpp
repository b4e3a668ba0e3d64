#pragma once
// Internal to the Hugging Face config loader (hf_config.cpp, hf_decoder.cpp):
// typed reads of one config.json with errors naming the source and the field,
// and the record of which fields were read, so that every field left over is
// named in a note rather than dropped.
#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "specs/model_spec.hpp"
#include "strategies/errors.hpp"

namespace planner::hf {

constexpr int64_t kMaxWidth = 1 << 20;
constexpr int64_t kMaxLayers = 100'000;
constexpr int64_t kMaxVocab = 10'000'000;
constexpr int64_t kMaxPositions = 100'000'000;

struct ConfigReader {
  const nlohmann::json& j;
  std::string source;  // "model config 'path/config.json'" or "Hugging Face config of 'name'"
  std::string model_type;
  mutable std::set<std::string> used;  // fields read (modelled or deliberately set aside)

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", source, what)); }

  // Marks `key` as read; true when present and not null.
  bool has(const char* key) const {
    used.insert(key);
    return j.contains(key) && !j.at(key).is_null();
  }
  int64_t number(const char* key, int64_t max) const;
  int64_t required(const char* key, int64_t max) const;
  int64_t optional(const char* key, int64_t fallback, int64_t max) const { return has(key) ? number(key, max) : fallback; }
  bool flag(const char* key, bool fallback) const;
  // A positive real in (0, max], or `fallback` when absent.
  double real(const char* key, double fallback, double max) const;
  std::string text(const char* key, const std::string& fallback) const;
  // The first of `keys` present (marking all of them read), or "" when none.
  std::string first_of(std::initializer_list<const char*> keys) const;
};

// A decoder read by its fields (Llama, Mistral, Qwen2/3, Gemma/Gemma-2/3,
// Phi-3 and any config with the same field names); refuses what changes time
// or memory by more than ~2% and is not modelled, unless opts.ignore_unmodelled.
ModelSpec parse_decoder(const ConfigReader& r, std::string name, const ModelLoadOptions& opts,
                        std::vector<std::string>& notes);

// GPT-Neo's attention_types ([[["global", "local"], 12]]): whether each layer is
// local (empty when the field is absent).
std::vector<bool> gpt_neo_local_layers(const ConfigReader& r, int64_t layers);
// Which WindowPattern a per-layer list of windowed layers has (Other when none
// fits); for Period, *period gets its period.
WindowPattern window_pattern_of(const std::vector<bool>& windowed, int64_t* period = nullptr);

// The note naming every field of the config not read (call after parsing).
void note_unread_fields(const ConfigReader& r, std::vector<std::string>& notes);

}  // namespace planner::hf

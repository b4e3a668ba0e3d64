#pragma once
// Time and money to train a number of tokens at a predicted throughput:
// `--tokens 300B` adds the days and GPU-hours, `--price 2.5` (per GPU-hour) or
// `--prices prices.json` (per GPU type) the cost.
//
//   days      = tokens / (tokens/s) / 86400
//   GPU-hours = days * 24 * GPUs
//   cost      = GPU-hours * price per GPU-hour
//
// prices.json: {"H100": 2.5, "A100-80GB": 1.8, "V100-32GB": 0.9}; names as
// --gpus takes them (catalog names or aliases), values per GPU-hour.
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "specs/cluster_spec.hpp"

namespace planner {

// "300B", "1.5T", "500M", "20k", "2e9", "1000000" -> tokens. K, M, B (or G)
// and T are 1e3, 1e6, 1e9, 1e12. InputError for zero, negative, malformed or
// above 1e18.
double parse_tokens(std::string_view text);

// A price per GPU-hour: positive, finite, at most 1e6. InputError otherwise.
double parse_price(std::string_view text, std::string_view what);

// Reads prices.json into canonical GPU name -> price per GPU-hour. InputError
// for a missing file, bad JSON, an unknown GPU name or a bad price.
std::map<std::string, double> load_prices(const std::string& path);

struct TrainCostOptions {
  std::optional<double> tokens;                 // --tokens
  std::optional<double> price;                  // --price: one price for every GPU type
  std::map<std::string, double> prices;         // --prices: per canonical GPU name
  bool has_price() const { return price.has_value() || !prices.empty(); }
  // The price of one GPU-hour on `c`, if any was given; InputError when a
  // prices file was given without this GPU.
  std::optional<double> price_for(const ClusterSpec& c) const;
};

// From the three option strings (each may be empty). InputError for a bad
// value, --price with --prices, or a price without --tokens.
TrainCostOptions parse_train_cost_options(const std::string& tokens, const std::string& price,
                                          const std::string& prices_path);

struct TrainCost {
  double tokens = 0;
  double seconds = 0, days = 0, gpu_hours = 0;
  std::optional<double> price_per_gpu_hour, cost;
};

// Empty when no --tokens was given.
std::optional<TrainCost> train_cost(const TrainCostOptions& o, const ClusterSpec& c, double tokens_per_second);

// {"tokens", "seconds", "days", "gpu_hours", "price_per_gpu_hour"?, "cost"?}
nlohmann::json train_cost_json(const TrainCost& t);
// "300B tokens: 12.3 days, 2362 GPU-hours, cost 5905 (2.50 per GPU-hour)"
std::string train_cost_line(const TrainCost& t);
// "300B", "1.5T" for tokens.
std::string format_tokens(double tokens);

}  // namespace planner

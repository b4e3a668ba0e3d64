#include "planner/train_cost.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "specs/plan.hpp"
#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

// The whole of `text` as a finite double, or nullopt.
std::optional<double> parse_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

double parse_tokens(std::string_view text) {
  std::string t = trim(text);
  double scale = 1;
  if (!t.empty()) {
    switch (std::tolower(static_cast<unsigned char>(t.back()))) {
      case 'k': scale = 1e3; break;
      case 'm': scale = 1e6; break;
      case 'b': case 'g': scale = 1e9; break;
      case 't': scale = 1e12; break;
      default: break;
    }
    if (scale != 1) t.pop_back();
  }
  const auto v = parse_number(t);
  // At least one token: "0.5" is a fraction of a token, not a count to train.
  if (!v || !(*v * scale >= 1) || *v * scale > 1e18)
    throw InputError(fmt::format(
        "--tokens: expected a token count from 1 to 1e18 such as 300B, 1.5T or 2e9, got '{}'", clip(text)));
  return *v * scale;
}

double parse_price(std::string_view text, std::string_view what) {
  const auto v = parse_number(trim(text));
  if (!v || *v <= 0 || *v > 1e6)
    throw InputError(fmt::format("{}: expected a positive price per GPU-hour such as 2.5, got '{}'", what, clip(text)));
  return *v;
}

std::map<std::string, double> load_prices(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "--prices");
  if (!j.is_object() || j.empty())
    throw InputError(fmt::format("--prices: '{}' must be an object of GPU name to price per GPU-hour, "
                                 "e.g. {{\"H100\": 2.5}}", path));
  std::map<std::string, double> out;
  for (const auto& [name, value] : j.items()) {
    if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 1e6)
      throw InputError(fmt::format("--prices: the price of '{}' in '{}' must be a positive number, got {}", name, path,
                                   json_excerpt(value)));
    std::string canonical;
    try {
      canonical = gpu_by_name(name).name;
    } catch (const InputError& e) {
      throw InputError(fmt::format("--prices: in '{}': {}", path, e.what()));
    }
    out[canonical] = value.get<double>();
  }
  return out;
}

std::optional<double> TrainCostOptions::price_for(const ClusterSpec& c) const {
  if (price) return price;
  if (prices.empty()) return std::nullopt;
  if (auto it = prices.find(c.gpu.name); it != prices.end()) return it->second;
  std::string known;
  for (const auto& [name, p] : prices) known += (known.empty() ? "" : ", ") + name;
  throw InputError(fmt::format("--prices has no price for {} (it lists {})", c.gpu.name, known));
}

TrainCostOptions parse_train_cost_options(const std::string& tokens, const std::string& price,
                                          const std::string& prices_path) {
  TrainCostOptions o;
  if (!price.empty() && !prices_path.empty()) throw InputError("give --price or --prices, not both");
  if (!tokens.empty()) o.tokens = parse_tokens(tokens);
  if (!price.empty()) o.price = parse_price(price, "--price");
  if (!prices_path.empty()) o.prices = load_prices(prices_path);
  if (o.has_price() && !o.tokens)
    throw InputError("--price/--prices need --tokens (the cost is that of training that many tokens)");
  return o;
}

std::optional<TrainCost> train_cost(const TrainCostOptions& o, const ClusterSpec& c, double tokens_per_second) {
  if (!o.tokens) return std::nullopt;
  TrainCost t;
  t.tokens = *o.tokens;
  t.seconds = tokens_per_second > 0 ? t.tokens / tokens_per_second : INFINITY;
  t.days = t.seconds / 86400.0;
  t.gpu_hours = t.seconds / 3600.0 * c.world();
  t.price_per_gpu_hour = o.price_for(c);
  if (t.price_per_gpu_hour) t.cost = t.gpu_hours * *t.price_per_gpu_hour;
  return t;
}

nlohmann::json train_cost_json(const TrainCost& t) {
  nlohmann::json j{{"tokens", t.tokens}, {"seconds", t.seconds}, {"days", t.days}, {"gpu_hours", t.gpu_hours}};
  if (t.price_per_gpu_hour) j["price_per_gpu_hour"] = *t.price_per_gpu_hour;
  if (t.cost) j["cost"] = *t.cost;
  return j;
}

std::string format_tokens(double n) {
  if (n >= 1e12) return fmt::format("{:.3g}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.3g}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.3g}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.3g}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string train_cost_line(const TrainCost& t) {
  std::string out = fmt::format("{} tokens: {:.2f} days, {:.0f} GPU-hours", format_tokens(t.tokens), t.days,
                                t.gpu_hours);
  if (t.cost) out += fmt::format(", cost {:.0f} ({:.2f} per GPU-hour)", *t.cost, *t.price_per_gpu_hour);
  return out;
}

}  // namespace planner

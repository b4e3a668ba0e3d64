#include "strategies/parse_util.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <nlohmann/json.hpp>

#include "strategies/errors.hpp"

namespace planner {

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

int64_t parse_int(std::string_view text, std::string_view what, bool allow_zero) {
  std::string t = trim(text);
  if (t.empty()) throw InputError(fmt::format("{}: expected a whole number, got nothing", what));
  bool neg = false;
  size_t i = 0;
  if (t[0] == '-' || t[0] == '+') { neg = t[0] == '-'; i = 1; }
  if (i == t.size()) throw InputError(fmt::format("{}: expected a whole number, got '{}'", what, clip(t)));
  int64_t v = 0;
  for (; i < t.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(t[i])))
      throw InputError(fmt::format("{}: expected a whole number, got '{}'", what, clip(t)));
    int d = t[i] - '0';
    if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
      throw InputError(fmt::format("{}: '{}' is too large", what, clip(t)));
    v = v * 10 + d;
  }
  if (neg && v != 0) throw InputError(fmt::format("{}: must be positive, got '{}'", what, clip(t)));
  if (v == 0 && !allow_zero) throw InputError(fmt::format("{}: must be at least 1, got '{}'", what, clip(t)));
  return v;
}

int64_t parse_capped(std::string_view text, std::string_view what, int64_t max, bool allow_zero) {
  const int64_t v = parse_int(text, what, allow_zero);
  if (v > max)
    throw InputError(fmt::format("{} {} is above the limit of {} (docs/INPUT_LIMITS.md)", what, v, max));
  return v;
}

int64_t parse_bytes(std::string_view text, std::string_view what) {
  std::string t = trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.' || t[i] == 'e' ||
                          t[i] == 'E' || t[i] == '-' || t[i] == '+')) {
    // stop at 'E' only when it begins a unit ("1EB" is not supported anyway)
    ++i;
  }
  std::string num = t.substr(0, i), unit = to_lower(trim(t.substr(i)));
  if (num.empty()) throw InputError(fmt::format("{}: expected a size such as 64GB or 512GiB, got '{}'", what, clip(t)));
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(num, &used);
    if (used != num.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw InputError(fmt::format("{}: expected a size such as 64GB or 512GiB, got '{}'", what, clip(t)));
  }
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "kb" || unit == "k") mult = 1e3;
  else if (unit == "mb" || unit == "m") mult = 1e6;
  else if (unit == "gb" || unit == "g") mult = 1e9;
  else if (unit == "tb" || unit == "t") mult = 1e12;
  else if (unit == "kib") mult = 1024.0;
  else if (unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else throw InputError(fmt::format("{}: unknown size unit '{}' in '{}' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", what, clip(unit), clip(t)));
  double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes <= 0)
    throw InputError(fmt::format("{}: size must be positive, got '{}'", what, clip(t)));
  if (bytes < 1) throw InputError(fmt::format("{}: size must be at least 1 byte, got '{}'", what, clip(t)));  // "0.5", "1e-9GB"
  if (bytes > 9.0e18) throw InputError(fmt::format("{}: '{}' is too large", what, clip(t)));
  return static_cast<int64_t>(bytes);
}

namespace {

// The path ("strategy.dp[0][0]...") of the first value nested deeper than
// `max_depth`, or empty. Walks with its own stack: nlohmann's copy, compare
// and dump recurse once per level, which is why such a value is refused here.
std::string too_deep(const nlohmann::json& root, size_t max_depth) {
  struct Frame {
    const nlohmann::json* v;
    nlohmann::json::const_iterator it;
    size_t index;
  };
  if (!root.is_structured()) return "";
  std::vector<Frame> stack{{&root, root.cbegin(), 0}};
  std::vector<std::string> path;
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.it == f.v->cend()) {
      stack.pop_back();
      if (!path.empty()) path.pop_back();
      continue;
    }
    std::string part = f.v->is_object() ? (path.empty() ? "" : ".") + f.it.key() : fmt::format("[{}]", f.index);
    const nlohmann::json* child = &*f.it;
    ++f.it, ++f.index;
    if (!child->is_structured()) continue;
    path.push_back(std::move(part));
    if (stack.size() >= max_depth) {
      // "strategy.dp[0][0][0]...": a run of indices is cut after three.
      std::string p;
      int indices = 0;
      for (const auto& x : path) {
        indices = x[0] == '[' ? indices + 1 : 0;
        if (indices > 3 || p.size() > kMaxQuoted) return p + "...";
        p += x;
      }
      return p;
    }
    stack.push_back({child, child->cbegin(), 0});  // `f` is not used after this
  }
  return "";
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, std::string_view what, std::string_view where) {
  std::string error;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    const std::string deep = too_deep(j, kMaxJsonDepth);
    if (!deep.empty())
      throw InputError(fmt::format("{}: {}: field '{}' is nested more than {} levels deep (at most {}; "
                                   "docs/INPUT_LIMITS.md)",
                                   what, where, clip(deep), kMaxJsonDepth, kMaxJsonDepth));
    return j;
  } catch (const nlohmann::json::parse_error& e) {
    error = e.what();
  } catch (const nlohmann::json::out_of_range& e) {  // 406: a number that overflows a double (fuzzing found it)
    error = e.what();
  }
  for (auto& c : error)
    if (c == '\n' || c == '\r') c = ' ';
  throw InputError(fmt::format("{}: {} is not valid JSON ({})", what, where, error));
}

std::string clip(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

std::string valid_utf8(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    const auto c = static_cast<unsigned char>(t[i]);
    // Length of the sequence this lead byte starts, and the lowest value it may
    // encode (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    bool ok = n > 0 && i + n <= t.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(t[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t lowest[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= lowest[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(t.substr(i, n));
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

namespace {

// Appends `v` to `out` until `out` holds `limit` bytes. Each level of
// recursion appends at least one byte first, so the depth is at most `limit`.
void excerpt_into(const nlohmann::json& v, std::string& out, size_t limit) {
  if (out.size() >= limit) return;
  if (v.is_array() || v.is_object()) {
    const bool obj = v.is_object();
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (obj) {
        out += nlohmann::json(it.key()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += ':';
      }
      excerpt_into(*it, out, limit);
    }
    out += obj ? '}' : ']';
    return;
  }
  // A scalar: dump() does not recurse; a string may be long (clipped below).
  out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string json_excerpt(const nlohmann::json& value, size_t max_bytes) {
  std::string out;
  excerpt_into(value, out, max_bytes);
  return clip(out, max_bytes);
}

int edit_distance(std::string_view a_in, std::string_view b_in) {
  std::string a = to_lower(a_in), b = to_lower(b_in);
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const auto& c : candidates) {
    int d = edit_distance(name, c);
    if (d < best_d) { best_d = d; best = c; }
  }
  return best;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) { v /= 1024.0; ++u; }
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string format_count(double n) {
  if (n >= 1e12) return fmt::format("{:.2f}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

}  // namespace planner

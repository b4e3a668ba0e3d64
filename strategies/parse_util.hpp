#pragma once
// Small parsing helpers used by every spec parser: strict integers, sizes with
// units, and "did you mean" suggestions for misspelt names.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace planner {

std::string to_lower(std::string_view s);
std::string trim(std::string_view s);
std::vector<std::string> split(std::string_view s, char sep);

// Parses a positive (or non-negative when allow_zero) integer that fits in
// int64; throws InputError naming `what` otherwise ("mbs=abc", "-1", overflow).
int64_t parse_int(std::string_view text, std::string_view what, bool allow_zero = false);

// "64GB", "512GiB", "1.5TB", "1e9" -> bytes. Decimal units (KB, MB, GB, TB)
// are powers of 1000, binary units (KiB, MiB, GiB, TiB) powers of 1024; a
// bare number is bytes. Throws InputError for zero, negative or malformed.
int64_t parse_bytes(std::string_view text, std::string_view what);

// `text` as JSON. A syntax error or a number out of range (1e999) is an
// InputError "<what>: <where> is not valid JSON (...)" on one line, where
// `where` names the source (a quoted path). Every JSON file goes through it.
nlohmann::json parse_json_text(const std::string& text, std::string_view what, std::string_view where);

// Levenshtein distance, case-insensitive.
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `name` (for "unknown GPU 'A10O'; did you mean
// 'A100-80GB'?"). Empty when `candidates` is empty.
std::string nearest(std::string_view name, const std::vector<std::string>& candidates);

// "1.23 GiB", "512 MiB" for human output.
std::string format_bytes(double bytes);
// "1.3B", "125M" for parameter counts.
std::string format_count(double n);

}  // namespace planner

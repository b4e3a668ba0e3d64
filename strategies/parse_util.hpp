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

// parse_int with an upper bound: a value above `max` is refused with one line
// naming the limit (docs/INPUT_LIMITS.md), never silently lowered to it.
int64_t parse_capped(std::string_view text, std::string_view what, int64_t max, bool allow_zero = false);

// "64GB", "512GiB", "1.5TB", "1e9" -> bytes. Decimal units (KB, MB, GB, TB)
// are powers of 1000, binary units (KiB, MiB, GiB, TiB) powers of 1024; a
// bare number is bytes. Throws InputError for zero, negative or malformed.
int64_t parse_bytes(std::string_view text, std::string_view what);

// Deepest nesting of arrays and objects a JSON input may have (the files'
// formats need at most 4; Hugging Face configs a few more).
constexpr size_t kMaxJsonDepth = 64;

// `text` as JSON. A syntax error or a number out of range (1e999) is an
// InputError "<what>: <where> is not valid JSON (...)" on one line, where
// `where` names the source (a quoted path); so is a value nested deeper than
// kMaxJsonDepth, naming its field. Every JSON file goes through it.
nlohmann::json parse_json_text(const std::string& text, std::string_view what, std::string_view where);

// At most `max_bytes` of an input for an error message: longer text is cut at
// a UTF-8 character boundary and marked "... (N bytes)", so a 130 KB argument
// is never echoed in full.
constexpr size_t kMaxQuoted = 200;
std::string clip(std::string_view text, size_t max_bytes = kMaxQuoted);
// `text` with every byte that is not part of valid UTF-8 replaced by '?': a
// name taken from a file name goes into JSON output, which must be UTF-8.
std::string valid_utf8(std::string_view text);
// A JSON value for an error message: its compact text, at most `max_bytes`
// of it, written without recursing past that many characters (nlohmann's
// dump() recurses once per nesting level and overflows the stack on a value
// nested 150,000 deep; a nesting is cut to "[[[[..." here).
std::string json_excerpt(const nlohmann::json& value, size_t max_bytes = kMaxQuoted);

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

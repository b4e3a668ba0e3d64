#pragma once
// Checked 64-bit arithmetic for counts and byte sizes that come from input
// (dp*tp*pp*vpp, micro-batches, tokens, bytes). An overflow is an InputError
// that names the inputs, never a wrapped number (issue 11).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string_view>

#include "strategies/errors.hpp"

namespace planner {

// a * b, or InputError "<what>: <a> * <b> overflows 64 bits".
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw InputError(fmt::format("{}: {} * {} is too large (overflows 64 bits)", what, a, b));
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw InputError(fmt::format("{}: {} + {} is too large (overflows 64 bits)", what, a, b));
  return r;
}

// Product of every factor, checked; `what` names the inputs ("dp*tp*pp").
inline int64_t checked_product(std::initializer_list<int64_t> factors, std::string_view what) {
  int64_t r = 1;
  for (int64_t f : factors) r = checked_mul(r, f, what);
  return r;
}

// Memory sizes are computed in double (the formulas multiply large counts);
// this is the one conversion to whole bytes. Anything above kMaxBytes (1 EiB,
// far beyond any machine) or not finite saturates at kMaxBytes, so a sum of a
// few categories cannot overflow and such a need reads as "does not fit"
// rather than as a wrapped, negative number. Negative sizes are a bug.
constexpr int64_t kMaxBytes = int64_t(1) << 60;
inline int64_t saturate_bytes(double bytes) {
  if (!(bytes < double(kMaxBytes))) return kMaxBytes;  // also NaN and +inf
  if (bytes <= 0) return 0;
  return static_cast<int64_t>(bytes);
}
inline int64_t saturating_add_bytes(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > kMaxBytes) return kMaxBytes;
  return r;
}

}  // namespace planner

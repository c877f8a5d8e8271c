// flashladder — steps/knob.hpp: a launcher's tuning knob, read from the environment.
//
// Three launchers let the benchmark force a choice they otherwise make themselves, so that both
// choices can be timed in one run (an A/B on the same GPU): FLASHLADDER_PERSISTENT_GRID (08k: at most
// that many blocks), FLASHLADDER_09F_GROUP_BYTES (09f: the column blocks' group budget) and
// FLASHLADDER_SPLITS (10: the number of key splits). One reader serves all three, so a malformed value
// is refused the same way everywhere, naming the variable, the value, what it means and its range.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "common/problem.hpp"  // fl::Error

namespace fl {

/// The whole number in environment variable `name`, or std::nullopt when the variable is unset or
/// empty. Anything else throws fl::Error: text that is not one whole number (trailing characters
/// included), or a number outside [lo, hi] (int64_t's range included), e.g.
///   FLASHLADDER_SPLITS = '4x' is not a whole number >= 1 (the number of key splits)
inline std::optional<int64_t> env_knob(const char* name, int64_t lo, int64_t hi, const char* meaning) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
    const std::string range = hi == std::numeric_limits<int64_t>::max()
                                  ? ">= " + std::to_string(lo)
                                  : "from " + std::to_string(lo) + " to " + std::to_string(hi);
    throw Error(std::string(name) + " = '" + v + "' is not a whole number " + range + " (" + meaning + ")");
  }
  return int64_t(x);
}

}  // namespace fl

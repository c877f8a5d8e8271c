// flashladder — app/timing.cpp
#include "app/timing.hpp"

#include <algorithm>
#include <cmath>

namespace fl {

Stats summarize(std::vector<double> ms) {
  Stats s;
  s.reps = int(ms.size());
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  s.min_ms = ms.front();
  s.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  size_t rank = size_t(std::ceil(0.9 * double(n)));  // nearest-rank percentile, 1-based
  s.p90_ms = ms[std::max<size_t>(rank, 1) - 1];
  return s;
}

}  // namespace fl

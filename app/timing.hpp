// flashladder — app/timing.hpp: summary statistics of repeated timings.
#pragma once

#include <chrono>
#include <vector>

namespace fl {

struct Stats {
  double median_ms = 0, min_ms = 0, p90_ms = 0;
  int reps = 0;
};

/// Median, minimum and 90th percentile (nearest rank) of the samples, in milliseconds.
Stats summarize(std::vector<double> ms);

/// Steady-clock stopwatch for CPU steps (GPU steps are timed with CUDA events in app/gpu.cu).
class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fl

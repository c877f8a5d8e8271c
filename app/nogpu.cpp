// flashladder — app/nogpu.cpp: the GPU entry points in a build without CUDA.
#include "app/runner.hpp"

namespace fl {

static const char* kNoCuda =
    "this build has no CUDA: nvcc was not found when it was configured, so GPU steps need a rebuild "
    "on a machine with the CUDA toolkit and a CUDA device";

Outputs run_step_gpu(const Step&, const Inputs&, bool) { throw Error(kNoCuda); }
Stats time_step_gpu(const Step&, const Problem&, bool, const TimeOptions&) { throw Error(kNoCuda); }
std::optional<DeviceInfo> gpu_device(std::string* why) {
  if (why) *why = kNoCuda;
  return std::nullopt;
}

}  // namespace fl

// flashladder — app/runner.hpp: run a registered step once (checked) or many times (timed).
//
// Every run: inputs uploaded, outputs and workspace poisoned with NaN (so an unwritten element can
// never pass), the step launched, every CUDA call and the launch checked, results copied back.
// Errors come back as fl::Error naming the step and the call that failed.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/tensor.hpp"
#include "app/timing.hpp"
#include "steps/ladder.hpp"

namespace fl {

/// Runs the forward (and, if backward is set, the step's backward on its own O and L) once.
Outputs run_step(const Step& s, const Inputs& in, bool backward = false);

/// The most repetitions (timed or warm-up) a command takes: warmup + reps stays far inside int.
constexpr int kMaxReps = 1000000;

struct TimeOptions {
  int warmup = 3;
  int reps = 30;             // timed launches; the median of these is the figure
  double max_seconds = 20;   // CPU steps stop early past this (the record keeps the real count)
  uint64_t seed = 1;
};

/// Times the forward (or the backward alone) on seeded inputs. GPU: CUDA events around each launch,
/// inputs rotated among enough copies to exceed twice the L2, so the cache is not what is timed.
Stats time_step(const Step& s, const Problem& p, bool backward, const TimeOptions& opt);

/// The host inputs of `sets` seeded sets (seeds seed, seed + 1, …) of p, as make_inputs gives them, shared
/// with the previous call when it asked for the same problem, seeds and count. The benchmark's sweep times
/// up to 15 steps forward and backward at each point, and a set there (B·N = 16 384 tokens, hidden 2048)
/// is 2^27 normal samples drawn one after another on the CPU: seconds per step and point, which made the
/// sweep CPU-bound (run 35: not past N = 1024 in 200 s for four steps). Only the last request is kept,
/// and only when its sets fit in kTimingInputsCacheBytes of host memory.
std::shared_ptr<const std::vector<Inputs>> timing_inputs(const Problem& p, uint64_t seed, int sets);
inline constexpr size_t kTimingInputsCacheBytes = size_t(4) << 30;

/// Extra bytes the step needs beyond inputs and outputs (its workspace).
size_t extra_bytes(const Step& s, const Problem& p, bool backward);

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  std::string cuda;     // runtime version, "13.0"
  std::string driver;   // driver API version, "13.0"
  size_t total_mem = 0, free_mem = 0, l2_bytes = 0;
};

/// The current CUDA device, or nullopt with *why saying why there is none (no CUDA in this build,
/// no device, driver error).
std::optional<DeviceInfo> gpu_device(std::string* why);

/// Implemented in app/gpu.cu (or app/nogpu.cpp in builds without CUDA).
Outputs run_step_gpu(const Step& s, const Inputs& in, bool backward);
Stats time_step_gpu(const Step& s, const Problem& p, bool backward, const TimeOptions& opt);
/// Queued before every timed launch's start event (app/gpu.cu): a GPU spin of about 1 ms, so that the
/// events time the GPU's work and not the host's preparation of the call. CUDA builds only.
void gpu_lead_in();

}  // namespace fl

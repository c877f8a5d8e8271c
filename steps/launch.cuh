// flashladder — steps/launch.cuh: the launch plumbing every GPU step shares, so that a step's file
// holds its idea and its own launcher (grid, block, shared memory, the limits of its indexing).
//
// Before a step's forward() or backward() runs, Step::refusal (steps/ladder.cpp) has checked the
// storage type and head dim against the step's ladder entry and, for an Arch::sm90a entry, the GPU's
// compute capability; the runner and the C API put the step's folder name on every error. So a step
// only turns the runtime (dtype, d) into template arguments, over the same HeadDims list its ladder
// entry names:
//
//   void forward(const Problem& p, const ForwardArgs& a) {
//     dispatch<Fa2D>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
//   }
#pragma once

#include <string>
#include <type_traits>

#include "common/cuda.cuh"
#include "steps/knob.hpp"  // env_knob: a launcher's tuning knob from the environment
#include "steps/ladder.hpp"

namespace fl {

namespace detail {
template <class F, int d, int... Ds>
void dispatch_d(int64_t want, F& f) {
  if (want == d) return f(std::integral_constant<int, d>{});
  if constexpr (sizeof...(Ds) > 0) {
    dispatch_d<F, Ds...>(want, f);
  } else {
    throw Error("head dim d = " + std::to_string(want) + " is not compiled into this step");
  }
}
template <class F, int... Ds>
void dispatch_dims(int64_t want, F& f, HeadDims<Ds...>) {
  static_assert(sizeof...(Ds) > 0, "a GPU step compiles a list of head dims");
  dispatch_d<F, Ds...>(want, f);
}
}  // namespace detail

/// Calls f(T{}, std::integral_constant<int, d>{}) with T the storage type of p (__half or
/// __nv_bfloat16: the ladder's kGpuTypes) and d = p.d, one of Dims (a HeadDims list of
/// steps/ladder.hpp, the one the step's ladder entry names). Anything else throws; Step::refusal has
/// refused it before, so that is a step whose entry and launcher disagree.
template <class Dims, class F>
void dispatch(const Problem& p, F&& f) {
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      throw Error("fp32 storage is not compiled into this step (the GPU steps store fp16 or bf16)");
    } else {
      auto g = [&](auto d_) { f(T{}, d_); };
      detail::dispatch_dims(p.d, g, Dims{});
    }
  });
}

/// Dynamic shared memory above 48 KiB must be asked for (cudaFuncSetAttribute), and the device must
/// have it: a request past the device's opt-in limit is refused naming both numbers.
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int dev = 0, optin = 0;
  FL_CUDA(cudaGetDevice(&dev));
  FL_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > size_t(optin))
    throw Error("needs " + std::to_string(bytes) + " bytes of shared memory per block; this device allows " +
                std::to_string(optin));
  FL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace fl

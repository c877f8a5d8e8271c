// flashladder — common/cuda.cuh: checked CUDA calls, self-freeing device buffers, the storage-type
// dispatch. Host code only; what kernels call on the device is in steps/device/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "common/problem.hpp"

namespace fl {

/// Throws fl::Error naming the call, the place and CUDA's message.
inline void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error in ") + call + " at " + file + ":" + std::to_string(line) +
                ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace fl

/// Every CUDA call goes through this. After a launch: FL_CUDA(cudaGetLastError()).
#define FL_CUDA(call) ::fl::cuda_check((call), #call, __FILE__, __LINE__)

namespace fl {

/// Device memory that frees itself. Allocation failure names the bytes asked for and the bytes free.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { allocate(bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { release(); ptr_ = o.ptr_; bytes_ = o.bytes_; o.ptr_ = nullptr; o.bytes_ = 0; }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void allocate(size_t bytes) {
    release();
    if (bytes == 0) return;
    cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      ptr_ = nullptr;
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                  std::to_string(free_b) + " free of " + std::to_string(total_b) + "): " +
                  cudaGetErrorString(e));
    }
    bytes_ = bytes;
  }
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  /// Fill with 0xFF bytes: NaN in fp32, fp16 and bf16 alike.
  void poison(cudaStream_t s = nullptr) {
    if (ptr_) FL_CUDA(cudaMemsetAsync(ptr_, 0xFF, bytes_, s));
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Calls f(T{}) with T the device type of t (float, __half or __nv_bfloat16), so a launcher reads
///   dispatch_dtype(p.dtype, [&](auto tag) { using T = decltype(tag); kernel<T><<<...>>>(...); });
template <class F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::f16: f(__half{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
  }
}

/// Why there is no usable device, from cudaGetDeviceCount's error e (cudaSuccess with 0 devices
/// too), in one wording for every place that asks. Without any driver the runtime says "CUDA driver
/// version is insufficient for CUDA runtime version", which sends a user without a GPU after a
/// driver upgrade; cudaDriverGetVersion gives 0 when no driver is installed: that is said plainly.
inline std::string no_device_reason(cudaError_t e) {
  int drv = 0;
  const bool have_driver = cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0;
  cudaGetLastError();
  const std::string drv_text =
      have_driver ? "driver for CUDA " + std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10) : "";
  if (!have_driver) return "no CUDA device (no driver found)";
  if (e == cudaSuccess || e == cudaErrorNoDevice) return "no CUDA device (a " + drv_text + " is installed, but it sees no device)";
  return std::string("no usable CUDA device (") + drv_text + "): " + cudaGetErrorString(e);
}

/// Integer ceiling division for grid sizes.
template <class T>
__host__ __device__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

}  // namespace fl

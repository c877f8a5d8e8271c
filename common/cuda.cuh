// flashladder — common/cuda.cuh: checked CUDA calls, self-freeing device buffers, storage types.
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

/// Storage types on the device, and conversions to and from fp32 accumulators.
template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

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

/// L = ln Σ_j e^{τ s_j} of one row, from what an exp2-domain step keeps (steps 04–07, 08d–08g, 09):
/// the row's max m of the raw scores s_j = q·k_j, and ℓ = Σ_j 2^{s_j·τlog₂e − m_sub} summed against
/// m_sub = m·τlog₂e rounded once (__fmul_rn). That rounding is r = m·τlog₂e − m_sub, exact as one
/// fmaf, and ℓ carries it as a factor 2^r, so
///   L = m·τ + ln ℓ − r·ln 2.
/// The shorter ln 2 · m_sub + ln ℓ would carry r itself (half an ulp of m_sub: 3.4e-4 at m·τ = 5888)
/// and τlog₂e's own rounding (2^-24 of m_sub: 3.5e-4 more) into L, and came out one fp32 ulp of L low
/// at scores of 1e4 (H200 run 9, the scores_1e4_by_inputs test). Here m·τ + (ln ℓ − r·ln 2) rounds
/// once, in the outer fmaf. A row that saw no key has ℓ = 0 and L = +∞.
__device__ __forceinline__ float log_sum_exp(float m, float l, float scale, float scale_log2) {
  if (!(l > 0.f)) return __int_as_float(0x7f800000);  // +∞
  const float r = fmaf(m, scale_log2, -__fmul_rn(m, scale_log2));
  return fmaf(m, scale, fmaf(-r, 0.6931471805599453f, logf(l)));
}

/// Integer ceiling division for grid sizes.
template <class T>
__host__ __device__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

}  // namespace fl

// flashladder — steps/device/math.cuh: what every kernel calls on the device: storage types to and
// from the fp32 accumulators, and a row's L from an exp2-domain softmax.
#pragma once

#include "common/cuda.cuh"

namespace fl {

/// Storage types on the device, and conversions to and from fp32 accumulators.
template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// L = ln Σ_j e^{τ s_j} of one row, from what an exp2-domain step keeps (every forward from step 04,
/// where the base-2 softmax is taught, on): the row's max m of the raw scores s_j = q·k_j, and
/// ℓ = Σ_j 2^{s_j·τlog₂e − m_sub} summed against m_sub = m·τlog₂e rounded once (__fmul_rn). That
/// rounding is r = m·τlog₂e − m_sub, exact as one fmaf, and ℓ carries it as a factor 2^r, so
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

/// tanh(x) as 1 − 2/(2^{2x·log₂e} + 1): one MUFU.EX2 and one fast division, |x| clamped to 15 (tanh is
/// ±1 in fp32 beyond 9.01). Its absolute error is about 1e-7; tanh.approx.f32's is relative, 2^-11,
/// which on a soft-capped logit c·tanh(·) of c = 30 is 0.015 — e^0.015, a 1.5% error in that P̃_ij.
/// Used from step 08j (soft-capping) on.
__device__ __forceinline__ float tanh_fast(float x) {
  x = fminf(fmaxf(x, -15.f), 15.f);
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(x * 2.8853900817779268f));  // 2·log₂e
  return 1.f - __fdividef(2.f, e + 1.f);
}

}  // namespace fl

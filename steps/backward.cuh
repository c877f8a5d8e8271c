// flashladder — steps/backward.cuh: what the backward steps (09, 09b) share, so that each step's file
// holds its own main loop (kernel 2) and nothing else.
//
// A backward step runs three kernels (FlashAttention-2's Algorithm 2; steps/09_backward/README.md):
//   1. D_i = rowsum(dO_i ∘ O_i)                [B][H][Nq] fp32, and dQ's fp32 accumulator = 0   (here)
//   2. the main loop, one thread block per K_j/V_j column block: dK_j, dV_j on chip, dQ_i summed
//      into the fp32 accumulator with atomics                                          (the step)
//   3. dQ = τ · (fp32 accumulator), rounded to the storage type                            (here)
// run<HeadDims>(p, a, main) checks the pointers, lays out the workspace, dispatches on the storage type
// and head dim (steps/launch.cuh) and launches 1, the step's main(T, d, D, dQ_acc, stream), and 3.
// limits() and workspace_bytes() are the backward's own; a step adds its forward's (its base's).
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/launch.cuh"

namespace fl::bwd {

using namespace fl::mma;

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x · log2 e): ex2 is one instruction

/// The sizes a kernel needs, taken from the Problem once. int: limits() keeps every row count at most
/// 2^29 and every grid below 2^31 blocks; offsets into tensors are computed in int64.
struct Dims {
  int B, H, H_kv, group, Nq, Nk;  // group = H / H_kv query heads per K/V head
  bool causal;
  float scale;         // softmax_scale
  bool deterministic;  // Problem::deterministic: read by the steps that have the mode (09c)
};

inline Dims dims_of(const Problem& p) {
  return {int(p.B), int(p.H), int(p.H_kv), int(p.group()), int(p.Nq), int(p.Nk), p.causal,
          float(p.softmax_scale()), p.deterministic};
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
}

/// Two neighbouring storage-type elements (one 32-bit word) → two floats.
template <class T> __device__ __forceinline__ float2 unpack2(uint32_t u);
template <> __device__ __forceinline__ float2 unpack2<__half>(uint32_t u) {
  return __half22float2(*reinterpret_cast<const __half2*>(&u));
}
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}

__device__ __forceinline__ void store2(void* p, uint32_t v) { *reinterpret_cast<uint32_t*>(p) = v; }

/// 2^x as one MUFU.EX2 (ex2.approx.ftz). exp2f() is ex2.approx without .ftz, which wraps the MUFU.EX2
/// in a denormal fix-up; a P below 2^−126 contributes nothing to a gradient, so flushing it is free.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

inline void check_aligned(const void* p, const char* name) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw Error(name + std::string(" is not 16-byte aligned (cp.async and the vector stores need it)"));
}

// ==== Backward 1 of 3: D = rowsum(dO ∘ O), and the fp32 dQ accumulator set to zero ================
// D_i = Σ_j P_ij dP_ij is the row term of the softmax's backward (steps/09_backward/README.md); since
// O_i = Σ_j P_ij V_j, it equals rowsum(dO_i ∘ O_i): d numbers per row instead of Nk, computed once
// before the main loop (FlashAttention-1 recomputed it inside). One warp per row; lanes take the row
// two elements at a time, so one step of a warp reads 128 contiguous bytes of O and of dO.
constexpr int kRowWarps = 8;

template <class T>
__global__ void __launch_bounds__(32 * kRowWarps)
dot_do_o_kernel(const T* __restrict__ o, const T* __restrict__ dO, float* __restrict__ D,
                float* __restrict__ dQ_acc, int64_t rows, int d) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kRowWarps) {  // the same trip count for the 32 lanes of a warp
    const T* o_r = o + row * d;     // O row   [d]
    const T* do_r = dO + row * d;   // dO row  [d]
    float sum = 0.f;
    for (int c = 2 * lane; c < d; c += 64) {
      const float2 x = unpack2<T>(*reinterpret_cast<const uint32_t*>(o_r + c));
      const float2 y = unpack2<T>(*reinterpret_cast<const uint32_t*>(do_r + c));
      sum += x.x * y.x + x.y * y.y;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) D[row] = sum;
    float4* acc = reinterpret_cast<float4*>(dQ_acc + row * d);  // dQ row [d] fp32 (d % 4 == 0)
    for (int c = lane; c < d / 4; c += 32) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <class T>
void launch_dot_do_o(const Problem& p, const T* o, const T* dO, float* D, float* dQ_acc, cudaStream_t s) {
  const int64_t rows = p.B * p.H * p.Nq;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div<int64_t>(rows, kRowWarps), 1 << 20));
  dot_do_o_kernel<T><<<blocks, 32 * kRowWarps, 0, s>>>(o, dO, D, dQ_acc, rows, int(p.d));
  FL_CUDA(cudaGetLastError());
}

// ==== Backward 3 of 3: dQ = scale · (fp32 accumulator), rounded to the storage type ===============
template <class T>
__global__ void convert_dq_kernel(const float* __restrict__ dQ_acc, T* __restrict__ dq, int64_t elems, float scale) {
  for (int64_t x = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4; x < elems;
       x += int64_t(gridDim.x) * blockDim.x * 4) {
    const float4 f = *reinterpret_cast<const float4*>(dQ_acc + x);  // 4 of dQ's fp32 [B][H][Nq][d]
    *reinterpret_cast<uint2*>(dq + x) = make_uint2(pack2<T>(scale * f.x, scale * f.y), pack2<T>(scale * f.z, scale * f.w));
  }
}

template <class T>
void launch_convert_dq(const Problem& p, const float* dQ_acc, T* dq, cudaStream_t s) {
  const int64_t elems = p.q_elems();  // a multiple of 4: d is
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div<int64_t>(elems / 4, 256), 1 << 20));
  convert_dq_kernel<T><<<blocks, 256, 0, s>>>(dQ_acc, dq, elems, float(p.softmax_scale()));
  FL_CUDA(cudaGetLastError());
}

// ==== The backward's interface, less kernel 2 =======================================================
inline std::string limits(const Problem& p) {
  // Row and key indices are int, and the causal test r + Nk − Nq must not overflow: 2^29 leaves room.
  const int64_t kMaxRows = int64_t(1) << 29;
  if (p.Nq > kMaxRows || p.Nk > kMaxRows)
    return "supports Nq, Nk up to 2^29 (its row indices are int); Nq = " + std::to_string(p.Nq) +
           ", Nk = " + std::to_string(p.Nk);
  if (p.B * p.H > INT_MAX)
    return "supports B·H up to 2^31 − 1; B·H = " + std::to_string(p.B * p.H);
  const int64_t bwd_blocks = ceil_div<int64_t>(p.Nk, 128) * p.B * p.H_kv;  // B_c = 128 at every d
  if (bwd_blocks > INT_MAX)
    return "launches one block per K/V block in a 1-D grid of at most 2^31 − 1 blocks; this "
           "problem needs " + std::to_string(bwd_blocks);
  if (p.group() * ceil_div<int64_t>(p.Nq, 64) > kMaxRows)
    return "walks (query head, Q block) pairs with an int counter; H/H_kv · Nq/64 = " +
           std::to_string(p.group() * ceil_div<int64_t>(p.Nq, 64)) + " is over 2^29";
  return "";
}

inline size_t workspace_bytes(const Problem& p) {
  // dQ's fp32 accumulator [B][H][Nq][d] first (16-byte aligned rows for float4), then D [B][H][Nq].
  return sizeof(float) * size_t(p.q_elems() + p.lse_elems());
}

/// Kernels 1, 2 and 3 on the stream: main(T{}, std::integral_constant<int, d>{}, D, dQ_acc, stream)
/// launches the step's kernel 2 for storage type T and head dim d, one of HeadDimList.
template <class HeadDimList, class Main>
void run(const Problem& p, const BackwardArgs& a, Main&& main) {
  const std::pair<const void*, const char*> ptrs[] = {{a.q, "Q"},   {a.k, "K"},   {a.v, "V"},
                                                      {a.o, "O"},   {a.dO, "dO"}, {a.dq, "dQ"},
                                                      {a.dk, "dK"}, {a.dv, "dV"}, {a.workspace, "the workspace"}};
  for (const auto& [ptr, name] : ptrs) check_aligned(ptr, name);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  float* dQ_acc = static_cast<float*>(a.workspace);  // [B][H][Nq][d] fp32
  float* D = dQ_acc + p.q_elems();                   // [B][H][Nq] fp32
  dispatch<HeadDimList>(p, [&](auto T_, auto d_) {
    using T = decltype(T_);
    launch_dot_do_o<T>(p, static_cast<const T*>(a.o), static_cast<const T*>(a.dO), D, dQ_acc, stream);
    main(T_, d_, static_cast<const float*>(D), dQ_acc, stream);
    launch_convert_dq<T>(p, dQ_acc, static_cast<T*>(a.dq), stream);
  });
}

}  // namespace fl::bwd

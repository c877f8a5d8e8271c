// flashladder — steps/device/wgmma.cuh: thin wrappers over Hopper's warpgroup matrix instructions (sm_90a),
// used from step 08e on. Each is one PTX instruction; the layouts are those of the PTX ISA,
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma):
//
//   wgmma.mma_async m64nNk16, fp32 accumulate:   D[64][N] += A[64][16] · B[16][N]
//     issued by a warpgroup: 4 consecutive warps (128 threads), warp w of the group owning rows
//     16w..16w+15 of A and D. A comes from shared memory (a descriptor) or from registers; B always
//     from shared memory (a descriptor). The tensor cores read shared memory themselves: no ldmatrix.
//   D (N/2 floats per thread): exactly N/8 accumulator tiles of mma.m16n8 side by side —
//     d[4n + 0, 1] = D[16w + g][8n + 2t, 2t + 1],  d[4n + 2, 3] = D[16w + g + 8][8n + 2t, 2t + 1]
//     (lane = 4g + t), so the softmax code of steps 08a–08d reads it unchanged.
//   A from registers (4 regs of 2 x 16-bit per thread): the A layout of mma.m16n8k16 for the warp's
//     16 rows. The accumulator of S_ij, converted pairwise, is therefore already P̃_ij's A operand.
//   The instruction is asynchronous: it is issued, committed into a group (commit_group), and its
//   results may be read only after wait_group says the group is done. wgmma.fence orders earlier
//   register writes (the rescale of O, the conversion of P̃) before the next wgmma reads them.
//
// Shared-memory operands are described by a 64-bit matrix descriptor (PTX ISA, "Matrix Descriptor"):
//   bits  0–13  start address >> 4        bits 16–29  leading-dimension byte offset (LBO) >> 4
//   bits 32–45  stride-dimension byte offset (SBO) >> 4   bits 62–63  swizzle: 1 = 128 B, 2 = 64 B
// The operands live in "swizzled panels": a [rows][P] block of 16-bit elements, P = 64 (rows of 128
// bytes, 128-byte swizzle) or P = 32 (rows of 64 bytes, 64-byte swizzle), the 16-byte chunk c of
// row r stored at chunk c ^ (r % 8) (P = 64) or c ^ (r / 2 % 4) (P = 32). The hardware applies the
// same XOR to address bits, so a panel must start on a 1024-byte boundary.
//   K-major operand (K contiguous: Q_i and K_j, stored [rows][d]): one panel holds P of the K
//     columns; 8-row groups are SBO = 8·2P bytes apart; a k-step of 16 columns starts 32 bytes further
//     into the row (the swizzle is applied after the offset). LBO is unused (set to 1).
//   MN-major operand (N contiguous: V_j, stored [keys][d], read as B = V_j[K = keys][N = d]): a panel
//     holds P of the N columns for all keys, 8-key groups SBO = 8·2P bytes apart, neighbouring
//     panels (the next P columns of N) LBO bytes apart; a k-step of 16 keys starts 16·2P bytes on.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fl::wgmma {

/// Descriptor of a swizzled panel operand (see above). P = 64 → 128-byte swizzle, P = 32 → 64-byte.
template <int P>
__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t lbo_bytes) {
  static_assert(P == 64 || P == 32, "panels are 64 (128-byte swizzle) or 32 (64-byte swizzle) wide");
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  constexpr uint64_t sbo = 8 * 2 * P;              // bytes between 8-row groups
  constexpr uint64_t swizzle = P == 64 ? 1 : 2;    // 128 B : 64 B
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo_bytes & 0x3FFFF) >> 4) << 16) |
         ((sbo >> 4) << 32) | (swizzle << 62);
}

/// Orders this thread's earlier register writes before the next wgmma (all 128 threads execute it).
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the wgmma instructions issued so far into one group.
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

/// Shared memory written through ordinary (generic-proxy) stores, cp.async included, must be fenced
/// before the tensor cores (the async proxy) read it: each writing thread, after its writes land and
/// before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/// Keeps the compiler from moving or copying accumulator registers while a wgmma may still write them.
template <int R>
__device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void pin(uint32_t (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

template <class T> struct Type;
template <> struct Type<__half> { static constexpr const char* name = "f16"; };
template <> struct Type<__nv_bfloat16> { static constexpr const char* name = "bf16"; };

// The operand lists are long and regular: 8 accumulators per macro.
#define FL_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                   "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define FL_ACC16(i) FL_ACC8(i), FL_ACC8(i + 8)
#define FL_ACC32(i) FL_ACC16(i), FL_ACC16(i + 16)
#define FL_ACC64(i) FL_ACC32(i), FL_ACC32(i + 32)
#define FL_ACC88(i) FL_ACC64(i), FL_ACC16(i + 64), FL_ACC8(i + 80)
#define FL_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FL_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FL_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
                  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FL_REGS88 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
                  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
                  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                  "%80, %81, %82, %83, %84, %85, %86, %87}"

/// D[64][N] (+)= A[64][16] · B[16][N], A and B from shared memory, both K-major (S_ij = Q_i K_jᵀ).
/// accumulate = false ignores D's old contents (the first k-step of a product).
template <class T, int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate);

/// D[64][N] += A[64][16] · B[16][N], A from registers (the mma.m16n8k16 A layout per warp), B from
/// shared memory MN-major (O_i += P̃_ij V_j, V_j stored [keys][d]). accumulate = false ignores D's old
/// contents (08k: the first product of a tile, instead of zeroing O_i with ordinary instructions).
template <class T, int N>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                       bool accumulate = true);

#define FL_WGMMA_SS(N, REGS, ACC, NA, NB, NS)                                                        \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_ss<__half, N>(float(&d)[N / 2], uint64_t a, uint64_t b,       \
                                                    bool accumulate) {                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #NS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " REGS                    \
                 ", %" #NA ", %" #NB ", p, 1, 1, 0, 0;\n}\n"                                          \
                 : ACC : "l"(a), "l"(b), "r"(int(accumulate)));                                     \
  }                                                                                                 \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_ss<__nv_bfloat16, N>(float(&d)[N / 2], uint64_t a, uint64_t b, \
                                                           bool accumulate) {                       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #NS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS                  \
                 ", %" #NA ", %" #NB ", p, 1, 1, 0, 0;\n}\n"                                          \
                 : ACC : "l"(a), "l"(b), "r"(int(accumulate)));                                     \
  }

#define FL_WGMMA_RS(N, REGS, ACC, A0, A1, A2, A3, NB, NS)                                               \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_rs<__half, N>(float(&d)[N / 2], const uint32_t(&a)[4],        \
                                                    uint64_t b, bool accumulate) {                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #NS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " REGS                    \
                 ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #NB ", p, 1, 1, 1;\n}\n"             \
                 : ACC : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate))); \
  }                                                                                                 \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_rs<__nv_bfloat16, N>(float(&d)[N / 2], const uint32_t(&a)[4], \
                                                           uint64_t b, bool accumulate) {           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #NS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS                  \
                 ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #NB ", p, 1, 1, 1;\n}\n"             \
                 : ACC : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate))); \
  }

/// D[64][N] (+)= A[64][16] · B[16][N], A and B from shared memory, both MN-major (transposed: M, N
/// contiguous). Step 09b: dQ_i = dS_ij K_j with dS_ij stored as dS_ijᵀ [keys][rows] and K_j as [keys][d].
template <class T, int N>
__device__ __forceinline__ void mma_ss_tt(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate);

#define FL_WGMMA_SS_TT(N, REGS, ACC, NA, NB, NS)                                                     \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_ss_tt<__half, N>(float(&d)[N / 2], uint64_t a, uint64_t b,    \
                                                       bool accumulate) {                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #NS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " REGS                    \
                 ", %" #NA ", %" #NB ", p, 1, 1, 1, 1;\n}\n"                                          \
                 : ACC : "l"(a), "l"(b), "r"(int(accumulate)));                                     \
  }                                                                                                 \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_ss_tt<__nv_bfloat16, N>(float(&d)[N / 2], uint64_t a,         \
                                                              uint64_t b, bool accumulate) {        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #NS ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " REGS                  \
                 ", %" #NA ", %" #NB ", p, 1, 1, 1, 1;\n}\n"                                          \
                 : ACC : "l"(a), "l"(b), "r"(int(accumulate)));                                     \
  }

// S_ij = Q_i K_jᵀ with N = B_c keys (64, 128, or 176: 08i's tile at d = 128 without a causal mask);
// O_i += P̃_ij V_j one panel of P = 32 or 64 columns at a time.
FL_WGMMA_SS(64, FL_REGS32, FL_ACC32(0), 32, 33, 34)
FL_WGMMA_SS(128, FL_REGS64, FL_ACC64(0), 64, 65, 66)
FL_WGMMA_SS(176, FL_REGS88, FL_ACC88(0), 88, 89, 90)
FL_WGMMA_RS(32, FL_REGS16, FL_ACC16(0), 16, 17, 18, 19, 20, 21)
FL_WGMMA_RS(64, FL_REGS32, FL_ACC32(0), 32, 33, 34, 35, 36, 37)
// dQ_i = dS_ij K_j in step 09b: one panel of 64 columns of dQ_i per instruction.
FL_WGMMA_SS_TT(64, FL_REGS32, FL_ACC32(0), 32, 33, 34)

}  // namespace fl::wgmma

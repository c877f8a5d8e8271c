// flashladder — steps/device/mma.cuh: thin wrappers over the tensor-core and async-copy instructions that
// steps 08 and 09 use. Each is one PTX instruction; the fragment layouts are those of the PTX ISA,
// "Matrix fragments for mma.m16n8k16" and "ldmatrix" (warp-level matrix load):
//
//   mma.sync m16n8k16, row.col, fp32 accumulate:   D[16][8] += A[16][16] · B[16][8]
//     lane = 4·g + t (g = lane / 4 "group", t = lane % 4 "thread in group")
//     A (4 regs of 2 x 16-bit): a0 = A[g][2t..2t+1]     a1 = A[g+8][2t..2t+1]
//                               a2 = A[g][2t+8..2t+9]   a3 = A[g+8][2t+8..2t+9]
//     B (2 regs, B stored column-major, i.e. as Bᵀ rows): b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]
//     C/D (4 floats):            c0,c1 = D[g][2t..2t+1]  c2,c3 = D[g+8][2t..2t+1]
//   The accumulator layout of a 16×8 tile matches the A-operand layout of a 16×16 tile once two
//   neighbouring n-tiles are converted to 16-bit pairs: that is what lets P̃_ij stay in registers
//   between S_ij = Q_i K_jᵀ and P̃_ij V_j (FlashAttention-2's trick).
//
//   ldmatrix.x4: each lane l gives the shared address of one 16-byte row: lanes 0–7 rows of matrix 0,
//   8–15 of matrix 1, 16–23 of matrix 2, 24–31 of matrix 3; register r_k of lane 4·g + t then holds
//   elements (g, 2t..2t+1) of matrix k. .trans delivers the transpose (used for V_j, stored [B_c][d]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fl::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row_ptr)));
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row_ptr)));
}

/// The transpose of an 8×8 matrix of 16-bit elements held one pair per lane (lane 4·g + t: elements
/// (g, 2t..2t+1)), returned in the same layout: (g, 2t..2t+1) of the transpose. One instruction, no
/// shared memory (movmatrix, PTX ISA 7.8, sm_75 and later). Step 10b turns an accumulator of Sᵀ into
/// the B operand of the next mma with it.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

/// d += a · b on the tensor cores; T is __half or __nv_bfloat16 (the operands' type).
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// Two floats rounded to T and packed into one 32-bit register (lo in the low half): an A or B operand pair.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

/// 2^x in one MUFU.EX2 instruction (ex2.approx.ftz: ~2 ulp, results below 2^−126 flushed to 0).
/// exp2f() compiles to ex2.approx without .ftz, which adds a denormal fix-up around the MUFU.EX2
/// unless the whole file is built with -use_fast_math. Not volatile: the compiler may schedule it.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// 16 bytes global → shared without passing through registers; when valid is false the 16 shared
/// bytes are zero-filled and nothing is read (how partial tiles stay in bounds).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace fl::mma

// flashladder — step 09b: step 09's backward with its main kernel on Hopper's wgmma.
//
// Everything but kernel 2 is step 09's, unchanged: D_i = rowsum(dO_i ∘ O_i) first, dQ summed in fp32
// with atomics and converted at the end, the same forward for O and L. Kernel 2 keeps FA2's Algorithm 2
// (one thread block per K_j/V_j column block, walking the Q blocks, dK_j and dV_j on chip) and moves
// its five products from mma.sync to wgmma, as step 08e did for the forward. The section "Backward 2
// of 3" below says how the products are turned so that P_ijᵀ and dS_ijᵀ are wgmma operands as they
// come out of the accumulators.
//
// Why: step 09 reached 0.82–0.96 of PyTorch's FlashAttention-2 backward at N ≥ 4096 on the H200
// (docs/results/2026-11-22-h200-run8-torch.*): with mma.sync every operand passes through ldmatrix
// and the register file, and P_ij and dS_ij make a round trip through shared memory each.
//
// The forward is here too, because the backward needs this step's own O and L: a plain tensor-core
// FA2 forward (step 09's). It is not the timed part.
//
// Fragment names, as in steps/device/mma.cuh: lane = 4·g + t; a thread holds rows g and g + 8 of each 16-row
// m-tile, and columns 2t, 2t + 1 of each 8-column n-tile. acc[mt][nt][e]: e = 0, 1 row g, e = 2, 3
// row g + 8; e & 1 the column 2t + (e & 1). A wgmma m64nN accumulator is, per warp of the warpgroup,
// N/8 such tiles side by side (steps/device/wgmma.cuh).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/device/wgmma.cuh"
#include "steps/ladder.hpp"

namespace fl::s09b {

using namespace fl::mma;

constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x · log2 e): ex2 is one instruction

/// The sizes a kernel needs, taken from the Problem once. int: limits() keeps every row count at most
/// 2^29 and every grid below 2^31 blocks; offsets into tensors are computed in int64.
struct Dims {
  int B, H, H_kv, group, Nq, Nk;  // group = H / H_kv query heads per K/V head
  bool causal;
  float scale;  // softmax_scale
};

Dims dims_of(const Problem& p) {
  return {int(p.B), int(p.H), int(p.H_kv), int(p.group()), int(p.Nq), int(p.Nk), p.causal,
          float(p.softmax_scale())};
}

// ==== Shared-memory tiles and tensor-core fragments ================================================
// Every shared tile is row-major with a row stride of (columns + 8) elements. The 16 padding bytes
// per row make the stride an odd number of 16-byte units (d = 32, 64, 96, 128 → 5, 9, 13, 17; the
// [B_r][B_c] tiles 17), so the 8 rows that one ldmatrix phase reads fall in 8 different 16-byte bank
// groups: no bank conflicts, at the cost of 6% more shared memory at d = 128. (Step 08b's XOR swizzle
// does the same without the padding; padding keeps every index here readable as row·ld + col.)

/// Rows [0, ROWS) of a [rows][kD] block in device memory (row stride kD) → a [ROWS][kD + 8] tile in
/// shared memory, 16 bytes per cp.async (the copy bypasses registers and overlaps with the math until
/// the cp_async_wait that needs it). Rows ≥ valid are zero-filled and not read: partial tiles stay in
/// bounds and contribute zeros.
template <int ROWS, int kD, int kThreads, class T>
__device__ __forceinline__ void load_rows(T* tile, const T* block, int valid, int tid) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  constexpr int kTotal = ROWS * kChunks;
#pragma unroll
  for (int step = 0; step < (kTotal + kThreads - 1) / kThreads; ++step) {
    const int idx = step * kThreads + tid;  // consecutive threads, consecutive chunks of a row
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int row = idx / kChunks, col = idx % kChunks * 8;
      const bool ok = row < valid;
      cp_async_16(tile + row * (kD + 8) + col, block + (ok ? int64_t(row) * kD + col : 0), ok);
    }
  }
}

// Operand fragments of one m16n8k16 from shared memory (layouts: steps/device/mma.cuh). In every loader a
// lane supplies the address of row r = lane % 8 of the 8×8 matrix `mat` = lane / 8; ldmatrix hands
// register `mat` of lane (g, t) the elements (g, 2t..2t+1) of that matrix, or with .trans the
// elements (2t..2t+1, g), i.e. the matrix transposed.

/// A (16×16 at m0, k0) of an A stored as rows: A(m, k) = s[m·ld + k].              (Q_i, dO_i, dS_ij)
/// Matrices: 0 = rows m0.., cols k0.. (a0); 1 = rows m0+8.. (a1); 2 = cols k0+8.. (a2); 3 = both (a3).
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* s, int ld, int m0, int k0, int lane) {
  ldmatrix_x4(a, s + (m0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8);
}

/// A (16×16 at m0, k0) of A = Xᵀ, X stored as rows: A(m, k) = s[k·ld + m].               (P_ijᵀ, dS_ijᵀ)
/// a0 = A(g, 2t..) = X(2t.., g): the 8×8 block of X at rows k0.., cols m0.., read with .trans;
/// a1 = A(g+8, ..): X cols m0+8..; a2 = A(.., 2t+8..): X rows k0+8..; a3: both.
template <class T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* s, int ld, int m0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldmatrix_x4_trans(a, s + (k0 + (mat >> 1) * 8 + r) * ld + m0 + (mat & 1) * 8);
}

/// B of the two n-tiles n0, n0 + 8 (k16 at k0), B stored as the rows of Bᵀ: B(k, n) = s[n·ld + k]
/// (K_j in Q_i K_jᵀ, V_j in dO_i V_jᵀ). b0 = B(2t.., g) = s-row n0+g, cols k0+2t..: matrix 0 = rows
/// n0.., cols k0.. (b0 of n0); 1 = cols k0+8.. (b1 of n0); 2 = rows n0+8.. (b0 of n0+8); 3 (b1 of n0+8).
template <class T>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const T* s, int ld, int n0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldmatrix_x4(b, s + (n0 + (mat >> 1) * 8 + r) * ld + k0 + (mat & 1) * 8);
}
/// The same for one n-tile (an odd tile count): matrices 0, 1 from lanes 0–15; lanes 16–31 repeat them.
template <class T>
__device__ __forceinline__ void load_b_one(uint32_t (&b)[2], const T* s, int ld, int n0, int k0, int lane) {
  ldmatrix_x2(b, s + (n0 + (lane & 7)) * ld + k0 + ((lane >> 3) & 1) * 8);
}

/// B of the two n-tiles n0, n0 + 8 (k16 at k0), B stored as rows: B(k, n) = s[k·ld + n]
/// (V_j in P̃_ij V_j; dO_i, Q_i, K_j in the backward). b0 = B(2t.., g): the 8×8 block at rows k0..,
/// cols n0.. with .trans (matrix 0); b1 of n0 = rows k0+8.. (1); b0 of n0+8 = cols n0+8.. (2); b1 (3).
template <class T>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const T* s, int ld, int n0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldmatrix_x4_trans(b, s + (k0 + (mat & 1) * 8 + r) * ld + n0 + (mat >> 1) * 8);
}
template <class T>
__device__ __forceinline__ void load_b_trans_one(uint32_t (&b)[2], const T* s, int ld, int n0, int k0, int lane) {
  ldmatrix_x2_trans(b, s + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ld + n0);
}

/// One warp: acc[mt][nt] += A(m_w + 16·mt + [0, 16), k) · B(k, n_w + 8·nt + [0, 8)), k ∈ [0, K).
/// A is read as rows (load_a) or transposed (A_TRANS: load_a_trans); B as the rows of Bᵀ (load_b) or
/// as rows (B_TRANS: load_b_trans). Per k-step: MT A fragments, then the n-tiles two at a time.
/// UNROLL k-steps at a time are unrolled (K / 16: all); the backward's main loop says why it varies.
/// (The forward, not the timed part here, keeps 2.)
template <int MT, int NT, int K, bool A_TRANS, bool B_TRANS, int UNROLL = K / 16, class T>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const T* sA, int lda, int m_w,
                                          const T* sB, int ldb, int n_w, int lane) {
  static_assert(K % 16 == 0, "k is consumed 16 at a time");
  static_assert(UNROLL >= 1 && (K / 16) % UNROLL == 0, "the unroll factor divides the k-steps");
#pragma unroll UNROLL
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t a[MT][4];  // the warp's A rows for this k-step: MT fragments of [16][16]
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (A_TRANS) load_a_trans(a[mt], sA, lda, m_w + 16 * mt, k0, lane);
      else load_a(a[mt], sA, lda, m_w + 16 * mt, k0, lane);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];  // B [16][16]: n-tiles 2·np (b[0], b[1]) and 2·np + 1 (b[2], b[3])
      if constexpr (B_TRANS) load_b_trans(b, sB, ldb, n_w + 16 * np, k0, lane);
      else load_b(b, sB, ldb, n_w + 16 * np, k0, lane);
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16<T>(acc[mt][2 * np], a[mt], b_lo);
        mma_m16n8k16<T>(acc[mt][2 * np + 1], a[mt], b_hi);
      }
    }
    if constexpr (NT % 2 == 1) {  // d = 96's dQ warp tile is 3 n-tiles wide
      uint32_t b[2];              // B [16][8]: n-tile NT − 1
      if constexpr (B_TRANS) load_b_trans_one(b, sB, ldb, n_w + 8 * (NT - 1), k0, lane);
      else load_b_one(b, sB, ldb, n_w + 8 * (NT - 1), k0, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_m16n8k16<T>(acc[mt][NT - 1], a[mt], b);
    }
  }
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

// ==== Forward: FA2 Algorithm 1 on tensor cores (the O and L the backward reads) =====================
// One thread block per (Q_i, batch·head); 4 warps that each own 16 whole rows of Q_i, S_ij and O_i;
// S_ij and P̃_ij V_j on tensor cores with P̃_ij kept in registers; causal blocks above the diagonal
// skipped, the mask applied only where a block crosses it or the end of K.
struct FwdTile {
  static constexpr int B_r = 64;  // rows of Q_i per thread block: 4 warps × 16 rows
  static constexpr int B_c = 64;  // rows of K_j, V_j per inner iteration
  static constexpr int kWarps = B_r / 16, kThreads = 32 * kWarps;
  template <int kD>
  static constexpr int smem_bytes() { return (B_r + 2 * B_c) * (kD + 8) * 2; }
};

template <class T, int kD>
__global__ void __launch_bounds__(FwdTile::kThreads)
attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
               T* __restrict__ o, float* __restrict__ lse, Dims n) {
  constexpr int B_r = FwdTile::B_r, B_c = FwdTile::B_c, kThreads = FwdTile::kThreads, ld = kD + 8;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_s = reinterpret_cast<T*>(smem);  // Q_i: [B_r][d] in shared memory (row stride d + 8)
  T* K_s = Q_s + B_r * ld;              // K_j: [B_c][d] in shared memory
  T* V_s = K_s + B_c * ld;              // V_j: [B_c][d] in shared memory

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // blockIdx.x = i + T_r·(b·H + h): one flat x dimension (gridDim.y/z would cap B·H at 65535).
  const int T_r = ceil_div(n.Nq, B_r);
  const int i = blockIdx.x % T_r, bh = blockIdx.x / T_r;
  const int b = bh / n.H, h = bh % n.H, hk = h / n.group;  // GQA/MQA: query head h reads K/V head hk
  const int r0 = i * B_r;                                   // first row of Q_i
  const T* Q_i = q + (int64_t(bh) * n.Nq + r0) * kD;                  // [min(B_r, Nq − r0)][d]
  const T* K = k + (int64_t(b) * n.H_kv + hk) * n.Nk * kD;           // [Nk][d]
  const T* V = v + (int64_t(b) * n.H_kv + hk) * n.Nk * kD;           // [Nk][d]

  // Causal, bottom-right aligned: row r sees key c iff c ≤ r + Nk − Nq. The last real row of Q_i sees
  // keys [0, c_end); K/V blocks from c_end on are skipped whole (c_end ≤ 0: no row sees any key).
  const int last_row = min(r0 + B_r, n.Nq) - 1;
  const int c_end = n.causal ? min(n.Nk, last_row + 1 + n.Nk - n.Nq) : n.Nk;
  const int T_c = c_end > 0 ? ceil_div(c_end, B_c) : 0;

  // ---- Prologue: Q_i → shared memory (its cp.async group is waited for with K_0, V_0's).
  load_rows<B_r, kD, kThreads>(Q_s, Q_i, n.Nq - r0, tid);
  cp_async_commit();

  const int row_w = 16 * warp;                 // this warp's first row within Q_i
  const float scale_log2 = n.scale * kLog2e;   // exp(scale·s) = exp2(s·scale_log2)
  float O_i[1][kD / 8][4];  // the warp's O_i [16][d] as d/8 n-tiles, fp32, un-normalised
  zero(O_i);
  float m_i[2] = {-INFINITY, -INFINITY};  // running max of rows g, g + 8 (raw scores q·k)
  float l_i[2] = {0.f, 0.f};  // this thread's share of the running sums ℓ of rows g, g + 8 (its
                              // columns only: the 4 threads of a row add theirs once, at the end)

  // ---- Main loop over K_j, V_j (Algorithm 1, lines 6–10).
  for (int j = 0; j < T_c; ++j) {
    const int c0 = j * B_c;  // first key of K_j
    __syncthreads();         // every warp is done reading K_{j−1}, V_{j−1}
    load_rows<B_c, kD, kThreads>(K_s, K + int64_t(c0) * kD, n.Nk - c0, tid);
    load_rows<B_c, kD, kThreads>(V_s, V + int64_t(c0) * kD, n.Nk - c0, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // K_j, V_j (and Q_i) visible to every warp

    // S_ij = Q_i K_jᵀ: the warp's [16][B_c], fp32 accumulators.
    float S[1][B_c / 8][4];
    zero(S);
    warp_gemm<1, B_c / 8, kD, false, false, 2>(S, Q_s, ld, row_w, K_s, ld, 0, lane);

    // Mask only blocks that hold an invisible or missing key; the scale joins in the exponent's fmaf.
    const bool need_mask = c0 + B_c > n.Nk || (n.causal && c0 + B_c - 1 > r0 + n.Nk - n.Nq);
#pragma unroll
    for (int nt = 0; nt < B_c / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = S[0][nt][e];
        if (need_mask) {
          const int r = r0 + row_w + g + 8 * (e >> 1), c = c0 + 8 * nt + 2 * t + (e & 1);
          if (c >= n.Nk || (n.causal && c > r + n.Nk - n.Nq)) x = -INFINITY;
        }
        S[0][nt][e] = x;
      }

    // Online softmax: new row max over the quad (the 4 threads of a row), rescale, P̃_ij = exp2(x − m).
    float m_sub[2], alpha[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = m_i[hh];
#pragma unroll
      for (int nt = 0; nt < B_c / 8; ++nt) mx = fmaxf(mx, fmaxf(S[0][nt][2 * hh], S[0][nt][2 * hh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row that has seen no key yet keeps m = −∞; subtracting 0 instead gives exp2(−∞) = 0, not NaN.
      // m_sub = m·scale_log2 rounded once; both products rounded alike (__fmul_rn is never fused).
      m_sub[hh] = mx == -INFINITY ? 0.f : __fmul_rn(mx, scale_log2);
      alpha[hh] = exp2f(__fmul_rn(m_i[hh], scale_log2) - m_sub[hh]);  // rescales ℓ and O_i; 0 while m_i was −∞
      m_i[hh] = mx;
    }
#pragma unroll
    for (int nt = 0; nt < B_c / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[0][nt][e] = exp2f(fmaf(S[0][nt][e], scale_log2, -m_sub[e >> 1]));  // P̃_ij
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < B_c / 8; ++nt) sum += S[0][nt][2 * hh] + S[0][nt][2 * hh + 1];
      l_i[hh] = l_i[hh] * alpha[hh] + sum;
    }
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) O_i[0][nt][e] *= alpha[e >> 1];

    // O_i += P̃_ij V_j: the accumulators of n-tiles 2kk, 2kk + 1 of S_ij are, rounded to 16 bits in
    // pairs, exactly the A fragment of the k-tile kk (a0 = tile 2kk row g, a1 = row g + 8, a2, a3 =
    // tile 2kk + 1): P̃_ij never leaves the registers.
#pragma unroll
    for (int kk = 0; kk < B_c / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(S[0][2 * kk][0], S[0][2 * kk][1]),
                             pack2<T>(S[0][2 * kk][2], S[0][2 * kk][3]),
                             pack2<T>(S[0][2 * kk + 1][0], S[0][2 * kk + 1][1]),
                             pack2<T>(S[0][2 * kk + 1][2], S[0][2 * kk + 1][3])};  // P̃ [16][16]
#pragma unroll
      for (int np = 0; np < kD / 16; ++np) {
        uint32_t bv[4];  // V_j [16 keys][16 columns]: n-tiles 2np, 2np + 1
        load_b_trans(bv, V_s, ld, 16 * np, 16 * kk, lane);
        const uint32_t b_lo[2] = {bv[0], bv[1]}, b_hi[2] = {bv[2], bv[3]};
        mma_m16n8k16<T>(O_i[0][2 * np], a, b_lo);
        mma_m16n8k16<T>(O_i[0][2 * np + 1], a, b_hi);
      }
    }
  }
  cp_async_wait<0>();  // T_c = 0: Q_i's copy is still in flight; nothing may be left at exit

  // ---- Epilogue: O_i = diag(ℓ)⁻¹ O_i, L_i = m_i + log ℓ_i (natural log); a row that saw no key gets
  // O = 0 and L = +∞, so the backward's exp(S − L) is 0 there.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = l_i[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = r0 + row_w + g + 8 * hh;
    if (r < n.Nq) {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      T* o_row = o + (int64_t(bh) * n.Nq + r) * kD;
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt)
        store2(o_row + 8 * nt + 2 * t, pack2<T>(O_i[0][nt][2 * hh] * inv, O_i[0][nt][2 * hh + 1] * inv));
      if (t == 0) lse[int64_t(bh) * n.Nq + r] = log_sum_exp(m_i[hh], l, n.scale, scale_log2);
    }
  }
}

/// Calls f(std::integral_constant<int, d>{}) for the head dims this step compiles.
template <class F>
void dispatch_d(int64_t d, F&& f) {
  switch (d) {
    case 32: f(std::integral_constant<int, 32>{}); return;
    case 64: f(std::integral_constant<int, 64>{}); return;
    case 96: f(std::integral_constant<int, 96>{}); return;
    case 128: f(std::integral_constant<int, 128>{}); return;
    default: throw Error("step 09b_wgmma: head dim d = " + std::to_string(d) + " is not compiled");
  }
}

/// Dynamic shared memory above 48 KiB must be asked for, and the device must have it.
template <class K>
void allow_smem(K kernel, int bytes) {
  int dev = 0, optin = 0;
  FL_CUDA(cudaGetDevice(&dev));
  FL_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > optin)
    throw Error("step 09b_wgmma needs " + std::to_string(bytes) + " bytes of shared memory per block; this device allows " +
                std::to_string(optin));
  FL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

void check_aligned(const void* p, const char* name) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
    throw Error(std::string("step 09b_wgmma: ") + name + " is not 16-byte aligned (cp.async and the vector stores need it)");
}

size_t workspace_bytes(const Problem&) { return 0; }

void forward(const Problem& p, const ForwardArgs& a) {
  const std::pair<const void*, const char*> ptrs[] = {{a.q, "Q"}, {a.k, "K"}, {a.v, "V"}, {a.o, "O"}};
  for (const auto& [ptr, name] : ptrs) check_aligned(ptr, name);
  const Dims n = dims_of(p);
  const unsigned blocks = unsigned(ceil_div<int64_t>(p.Nq, FwdTile::B_r) * p.B * p.H);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      throw Error("step 09b_wgmma does not support fp32 storage");
    } else {
      dispatch_d(p.d, [&](auto dc) {
        constexpr int kD = decltype(dc)::value;
        constexpr int smem = FwdTile::smem_bytes<kD>();
        allow_smem(attention_kernel<T, kD>, smem);
        attention_kernel<T, kD><<<blocks, FwdTile::kThreads, smem, stream>>>(
            static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
            static_cast<T*>(a.o), a.lse, n);
        FL_CUDA(cudaGetLastError());
      });
    }
  });
}

// ==== Backward 1 of 3: D = rowsum(dO ∘ O), and the fp32 dQ accumulator set to zero ================
// D_i = Σ_j P_ij dP_ij is the row term of the softmax's backward (README.md); since O_i = Σ_j P_ij V_j,
// it equals rowsum(dO_i ∘ O_i): d numbers per row instead of Nk, computed once before the main loop
// (FlashAttention-1 recomputed it inside). One warp per row; lanes take the row two elements at a time,
// so one step of a warp reads 128 contiguous bytes of O and of dO.
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

// ==== Backward 2 of 3: the main loop on wgmma, one thread block per (K_j/V_j, batch, K/V head) =====
// Step 09 gives each of the five products its own warp grid and feeds mma.sync through ldmatrix; P_ij
// and dS_ij cross warps through shared memory, and their transposes come from ldmatrix.trans. Here two
// warpgroups (8 warps) share the block, and warpgroup w owns keys 64w … 64w + 63 of K_j. The products
// are turned so that each one's A operand is already where wgmma wants it:
//
//   S_ijᵀ  = K_j Q_iᵀ       [64 keys][B_r]  A = K_j, B = Q_i: both shared memory, K-major (as 08e's S)
//   dP_ijᵀ = V_j dO_iᵀ      [64 keys][B_r]  A = V_j, B = dO_i: the same
//   P_ijᵀ  = exp(scale·S_ijᵀ − L_i), dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i)        in registers, per column
//   dV_j  += P_ijᵀ dO_i     [64 keys][d]    A = P_ijᵀ from registers (the accumulator, rounded in
//                                           pairs: 08e's P̃ trick), B = dO_i MN-major
//   dK_j  += dS_ijᵀ Q_i     [64 keys][d]    A = dS_ijᵀ from registers, B = Q_i MN-major
//   dQ_i   = dS_ij K_j      [B_r][d]        A = dS_ijᵀ stored to shared memory and read transposed
//                                           (MN-major), B = K_j MN-major; summed into device memory
//                                           with vector atomics, as in step 09
//
// Because a warpgroup computes S_ijᵀ rather than S_ij, the rows of the accumulator are keys and its
// columns are query rows: P_ijᵀ is the A operand of dV_j as it stands, and so is dS_ijᵀ for dK_j. Only
// dQ_i needs dS_ij the other way round, which wgmma reads from shared memory transposed: one store of
// dS_ijᵀ per iteration, where step 09 stores both P_ij and dS_ij and reads each back with ldmatrix.
// Every operand in shared memory is in 08e's swizzled panels of 64 columns (128-byte rows), and the
// same panel of Q_i serves as K-major B (for S_ijᵀ, K = d contiguous) and as MN-major B (for dK_j,
// N = d contiguous): no second copy.
//
// Tiles: B_c = 128 keys (2 warpgroups × 64). B_r = 128 query rows at d = 64 and 64 at d = 128, as in
// step 09 (FlashAttention-2's own choice): registers per thread for the accumulators S_ijᵀ, dP_ijᵀ
// (B_r/2 each), dK_j and dV_j (d/2 each) are 192 at either d, under the 255 a thread can have.
//
// A note on accuracy: dS_ij = P_ij ∘ (dP_ij − D_i) subtracts two nearly equal numbers wherever P_ij is
// large (with one key, dP_ij = D_i exactly). The tensor cores' fp32 accumulation is not IEEE: each
// k-step's sum is cut toward zero, not rounded, so an accumulator that grows from 0 to dP_ij ≈ D_i
// (≈ 32 with the tests' Normal(0.5, 1) inputs) errs by a few ulps of 32, always in the same direction;
// dK_j = τ Σ_i dS_ij Q_i then adds that bias over every row. The test that caught it (Ragged backward,
// Nq = 17, Nk = 1, d = 128, fp16, Q × 20: dK is exactly 0, so the tolerance is the fp16 floor 4.9e-4)
// used 270% of its tolerance with the accumulator started at 0. Started at −D_i it used 151%; started
// at −D_i/2, so that it runs from −D_i/2 to about +D_i/2 and the cuts toward zero fall on both sides,
// 57%, and the last subtraction, dP − D_i/2 with both near D_i/2, is exact (H200, docs/results/
// explorations/2026-11-22-h200-run13-15-09b-dP-accuracy.txt). Step 09 subtracts D_i after its mma.sync
// sums, as FlashAttention-2 does.
template <int kD>
struct Bwd {
  static constexpr int B_c = 128, B_r = kD <= 64 ? 128 : 64;
  static constexpr int kWarpgroups = 2, kThreads = 128 * kWarpgroups;
  static constexpr int P = 64;  // panel width (columns of 128 bytes)
  // The dQ_i product, [B_r][d], one wgmma m64n64 per warpgroup: at d = 64 warpgroup w takes rows
  // 64w.. (all 64 columns), at d = 128 the 64 rows and columns 64w.. .
  static_assert(B_r * kD == 2 * 64 * 64, "dQ_i is two m64n64 tiles, one per warpgroup");
  // K_j, V_j [B_c][d]; Q_i, dO_i [2][B_r][d] (double buffer); dS_ijᵀ [B_c][B_r]: 16-bit, swizzled
  // panels; L_i·log2 e and D_i [2][B_r] fp32; +1024 bytes to align the panels.
  static constexpr int smem_bytes = (2 * B_c * kD + 4 * B_r * kD + B_c * B_r) * 2 + 4 * B_r * 4 + 1024;
};

// Offset of element (row, col) of a [ROWS][COLS] 16-bit tile stored as COLS/64 panels [ROWS][64],
// the 16-byte chunk c of a panel row at chunk c ^ (row % 8): 08e's layout (128-byte swizzle).
template <int ROWS>
__device__ __forceinline__ int at(int row, int col) {
  return col / 64 * ROWS * 64 + row * 64 + ((col % 64 / 8) ^ (row % 8)) * 8 + col % 8;
}

// Rows [0, ROWS) of a [rows][kD] block in device memory → a [ROWS][kD] panel tile (cp.async, 16 bytes
// a copy, not waited for). Rows at or past `valid` are zero-filled; their source is the block's first
// row, which exists.
template <int ROWS, int kD, int kThreads, class T>
__device__ __forceinline__ void load_panels(T* tile, const T* block, int valid, int tid) {
  constexpr int kChunks = kD / 8;
  static_assert(ROWS * kChunks % kThreads == 0, "every thread moves the same number of chunks");
#pragma unroll 4
  for (int step = 0; step < ROWS * kChunks / kThreads; ++step) {
    const int idx = step * kThreads + tid;
    const int row = idx / kChunks, col = idx % kChunks * 8;
    const bool ok = row < valid;
    cp_async_16(tile + at<ROWS>(row, col), block + (ok ? int64_t(row) * kD + col : 0), ok);
  }
}

template <class T, int kD>
__global__ void __launch_bounds__(Bwd<kD>::kThreads, 1)
backward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                const T* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ D,
                float* __restrict__ dQ_acc, T* __restrict__ dk, T* __restrict__ dv, Dims n) {
  using C = Bwd<kD>;
  constexpr int B_r = C::B_r, B_c = C::B_c, kThreads = C::kThreads, P = C::P;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // wgmma's swizzle is applied to address bits: every panel starts on a 1024-byte boundary.
  unsigned char* smem = smem_raw + (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* K_s = reinterpret_cast<T*>(smem);  // K_j:    d/64 panels [B_c][64]
  T* V_s = K_s + B_c * kD;              // V_j:    d/64 panels [B_c][64]
  T* Q_s = V_s + B_c * kD;              // Q_i:    [2] × d/64 panels [B_r][64] (double buffer)
  T* dO_s = Q_s + 2 * B_r * kD;         // dO_i:   [2] × d/64 panels [B_r][64]
  T* dS_s = dO_s + 2 * B_r * kD;        // dS_ijᵀ: B_r/64 panels [B_c][64]: row = key, column = query row
  float* L2_s = reinterpret_cast<float*>(dS_s + B_c * B_r);  // L_i·log2 e: [2][B_r]
  float* D_s = L2_s + 2 * B_r;                                // D_i:        [2][B_r]

  const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma exists only in sm_90a code; limits() refuses other GPUs before any launch
#else
  // blockIdx.x = j + T_c·(b·H_kv + hk), as in step 09.
  const int T_c = ceil_div(n.Nk, B_c), T_r = ceil_div(n.Nq, B_r);
  const int j = blockIdx.x % T_c, bk = blockIdx.x / T_c;
  const int b = bk / n.H_kv, hk = bk % n.H_kv;
  const int c0 = j * B_c;
  const int i_first = n.causal ? max(0, c0 + n.Nq - n.Nk) / B_r : 0;
  const int n_i = T_r - i_first;
  const int n_iter = n.group * n_i;
  const float scale_log2 = n.scale * kLog2e;
  // This thread's keys in the accumulators of S_ijᵀ, dP_ijᵀ, dK_j, dV_j: key_r = 64·wg + 16·warp + g + 8r.
  const int key0 = 64 * wg + 16 * warp + g;

  // Q_i, dO_i of iteration `it` → buffer `buf` (cp.async), and the first row of its Q block.
  auto q_block = [&](int it, int& h, int& r0) {
    h = hk * n.group + it / n_i;
    r0 = (i_first + it % n_i) * B_r;
  };
  auto load_q_do = [&](int it, int buf) {
    int h, r0;
    q_block(it, h, r0);
    const int64_t off = ((int64_t(b) * n.H + h) * n.Nq + r0) * kD;
    load_panels<B_r, kD, kThreads>(Q_s + buf * B_r * kD, q + off, n.Nq - r0, tid);
    load_panels<B_r, kD, kThreads>(dO_s + buf * B_r * kD, dO + off, n.Nq - r0, tid);
  };
  // L_i·log2 e and D_i of iteration `it`, one row per thread (tid < B_r): loaded into registers here,
  // stored to shared memory later, so that the loads' latency hides behind the products.
  auto load_l_d = [&](int it, float& l2, float& dd) {
    int h, r0;
    q_block(it, h, r0);
    const int r = r0 + tid;
    const bool ok = tid < B_r && r < n.Nq;
    const int64_t row = (int64_t(b) * n.H + h) * n.Nq + r;
    l2 = ok ? lse[row] * kLog2e : INFINITY;  // rows past Nq: P = 0
    dd = ok ? D[row] : 0.f;
  };

  // ---- Prologue: K_j, V_j once (zero-filled past Nk) and the first Q_i, dO_i, L_i, D_i.
  const int64_t kv_off = (int64_t(bk) * n.Nk + c0) * kD;
  load_panels<B_c, kD, kThreads>(K_s, k + kv_off, n.Nk - c0, tid);
  load_panels<B_c, kD, kThreads>(V_s, v + kv_off, n.Nk - c0, tid);
  if (n_iter > 0) {
    load_q_do(0, 0);
    float l2, dd;
    load_l_d(0, l2, dd);
    if (tid < B_r) L2_s[tid] = l2, D_s[tid] = dd;
  }
  cp_async_commit();

  float dK_j[kD / 2], dV_j[kD / 2];  // the warpgroup's [64 keys][d]: [n][2r + e] = (key_r, 8n + 2t + e)
#pragma unroll
  for (int x = 0; x < kD / 2; ++x) dK_j[x] = dV_j[x] = 0.f;

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    int h, r0;
    q_block(it, h, r0);
    const int64_t bh = int64_t(b) * n.H + h;
    const T* Q_i = Q_s + buf * B_r * kD;
    const T* dO_i = dO_s + buf * B_r * kD;
    const float* L2_i = L2_s + buf * B_r;
    const float* D_i = D_s + buf * B_r;

    // Barrier A: this iteration's tiles have landed and are visible to the tensor cores; every warp is
    // done with iteration it − 1 (its buffers and dS_s may be overwritten).
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();
    float l2_next = INFINITY, d_next = 0.f;
    if (it + 1 < n_iter) {
      load_q_do(it + 1, buf ^ 1);
      load_l_d(it + 1, l2_next, d_next);
    }
    cp_async_commit();

    // S_ijᵀ = K_j Q_iᵀ and dP_ijᵀ − D_i/2 = V_j dO_iᵀ − D_i/2: d/16 k-steps each, two commit groups.
    // The dP accumulator starts at −D_i/2 instead of 0 (see the note on accuracy above).
    float S[B_r / 2], dP[B_r / 2];  // [n][2r + e] = (key_r, query row 8n + 2t + e of Q_i)
#pragma unroll
    for (int nt = 0; nt < B_r / 8; ++nt) {
      const float2 dd = *reinterpret_cast<const float2*>(D_i + 8 * nt + 2 * t);
      dP[4 * nt + 0] = dP[4 * nt + 2] = -0.5f * dd.x;
      dP[4 * nt + 1] = dP[4 * nt + 3] = -0.5f * dd.y;
    }
    wgmma::pin(dP);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      wgmma::mma_ss<T, B_r>(S, wgmma::desc<P>(K_s + 16 * kk / P * B_c * P + 64 * wg * P + 16 * kk % P, 16),
                            wgmma::desc<P>(Q_i + 16 * kk / P * B_r * P + 16 * kk % P, 16), kk > 0);
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      wgmma::mma_ss<T, B_r>(dP, wgmma::desc<P>(V_s + 16 * kk / P * B_c * P + 64 * wg * P + 16 * kk % P, 16),
                            wgmma::desc<P>(dO_i + 16 * kk / P * B_r * P + 16 * kk % P, 16), true);
    wgmma::commit();

    // P_ijᵀ = exp2(S_ijᵀ·scale·log2 e − L_i·log2 e), while dP_ijᵀ is still being multiplied. The mask
    // only where a key is missing (past Nk) or invisible (causal, the block crosses the diagonal).
    wgmma::wait<1>();
    wgmma::pin(S);
    const bool need_mask = c0 + B_c > n.Nk || (n.causal && c0 + B_c - 1 > r0 + n.Nk - n.Nq);
#pragma unroll
    for (int nt = 0; nt < B_r / 8; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(L2_i + 8 * nt + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2_ftz(fmaf(S[4 * nt + e], scale_log2, -(e & 1 ? l2.y : l2.x)));
        if (need_mask) {
          const int c = c0 + key0 + 8 * (e >> 1), r = r0 + 8 * nt + 2 * t + (e & 1);
          if (c >= n.Nk || (n.causal && c > r + n.Nk - n.Nq)) p = 0.f;
        }
        S[4 * nt + e] = p;  // now P_ijᵀ
      }
    }
    // P_ijᵀ as dV_j's A operand: k-step kk (query rows 16kk..) from n-tiles 2kk, 2kk + 1, as in 08e.
    uint32_t P_a[B_r / 16][4];
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk) {
      P_a[kk][0] = pack2<T>(S[8 * kk + 0], S[8 * kk + 1]);
      P_a[kk][1] = pack2<T>(S[8 * kk + 2], S[8 * kk + 3]);
      P_a[kk][2] = pack2<T>(S[8 * kk + 4], S[8 * kk + 5]);
      P_a[kk][3] = pack2<T>(S[8 * kk + 6], S[8 * kk + 7]);
    }
    // dV_j += P_ijᵀ dO_i: B_r/16 k-steps, one wgmma per 64-column panel of dO_i (and of dV_j).
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < kD / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dV_j[p * P / 2]), P_a[kk],
                            wgmma::desc<P>(dO_i + p * B_r * P + 16 * kk * P, B_r * P * sizeof(T)));
    wgmma::commit();

    // dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i), from the rounded P (as step 09 and the tolerance's baseline), once
    // dP_ijᵀ is complete and dV_j no longer reads P_a (an in-flight wgmma's A registers may be neither
    // read nor written). dS_ijᵀ replaces P_ijᵀ in P_a: dK_j's A operand, laid out the same way.
    wgmma::wait<0>();
    wgmma::pin(dP);
    wgmma::pin(dV_j);
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int nt = 2 * kk + x / 2, r = x % 2;  // the n-tile and the key row (g or g + 8) of word x
        const float2 pp = unpack2<T>(P_a[kk][x]);
        const float2 dd = *reinterpret_cast<const float2*>(D_i + 8 * nt + 2 * t);
        P_a[kk][x] = pack2<T>(pp.x * (dP[4 * nt + 2 * r] - 0.5f * dd.x), pp.y * (dP[4 * nt + 2 * r + 1] - 0.5f * dd.y));
      }
    uint32_t (&dS_a)[B_r / 16][4] = P_a;
    // dS_ijᵀ → shared memory for dQ_i: word x of dS_a[kk] is (key key0 + 8(x % 2), query rows
    // 16kk + 8(x / 2) + 2t, + 1), one 32-bit store; the swizzle spreads a warp's 8 keys over 8 bank
    // groups. Stored before dK_j's wgmma is issued, which then reads these registers.
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x)
        store2(dS_s + at<B_c>(key0 + 8 * (x % 2), 16 * kk + 8 * (x / 2) + 2 * t), dS_a[kk][x]);
    wgmma::fence_proxy_async();  // the stores, visible to the tensor cores after barrier B
    // dK_j += dS_ijᵀ Q_i (the scale is applied once, in the epilogue).
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < kD / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dK_j[p * P / 2]), dS_a[kk],
                            wgmma::desc<P>(Q_i + p * B_r * P + 16 * kk * P, B_r * P * sizeof(T)));
    wgmma::commit();
    // Barrier B: both warpgroups' dS_ijᵀ rows are in shared memory.
    __syncthreads();
    if (it + 1 < n_iter && tid < B_r) L2_s[(buf ^ 1) * B_r + tid] = l2_next, D_s[(buf ^ 1) * B_r + tid] = d_next;

    // dQ_i = dS_ij K_j: B_c/16 k-steps (keys), A = dS_ij read transposed from dS_ijᵀ (MN-major), B = K_j
    // MN-major. Warpgroup wg: rows qm.., columns qn.. of dQ_i (see Bwd).
    const int qm = kD == 64 ? 64 * wg : 0, qn = kD == 64 ? 0 : 64 * wg;
    float dQ[P / 2];  // [n][2r + e] = (query row qm + 16·warp + g + 8r, column qn + 8n + 2t + e)
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_c / 16; ++kk)
      wgmma::mma_ss_tt<T, P>(dQ, wgmma::desc<P>(dS_s + qm / P * B_c * P + 16 * kk * P, B_c * P * sizeof(T)),
                             wgmma::desc<P>(K_s + qn / P * B_c * P + 16 * kk * P, B_c * P * sizeof(T)), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();  // dK_j and dQ_i are complete
    wgmma::pin(dQ);
    wgmma::pin(dK_j);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + qm + 16 * warp + g + 8 * r;
      if (row < n.Nq) {  // rows past Nq are never stored
        float* acc = dQ_acc + (bh * n.Nq + row) * kD + qn + 2 * t;  // dQ row, [d] fp32
#pragma unroll
        for (int nt = 0; nt < P / 8; ++nt)
          atomicAdd(reinterpret_cast<float2*>(acc + 8 * nt), make_float2(dQ[4 * nt + 2 * r], dQ[4 * nt + 2 * r + 1]));
      }
    }
  }
  cp_async_wait<0>();

  // ---- Epilogue: dK_j = scale · Σ dS_ijᵀ Q_i and dV_j → device memory, keys past Nk never stored.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int c = c0 + key0 + 8 * r;
    if (c < n.Nk) {
      const int64_t row = (int64_t(bk) * n.Nk + c) * kD + 2 * t;
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        store2(dk + row + 8 * nt, pack2<T>(n.scale * dK_j[4 * nt + 2 * r], n.scale * dK_j[4 * nt + 2 * r + 1]));
        store2(dv + row + 8 * nt, pack2<T>(dV_j[4 * nt + 2 * r], dV_j[4 * nt + 2 * r + 1]));
      }
    }
  }
#endif
}

template <class T, int kD>
void launch_backward_main(const Problem& p, const BackwardArgs& a, const float* D, float* dQ_acc, cudaStream_t s) {
  using C = Bwd<kD>;
  const unsigned blocks = unsigned(ceil_div<int64_t>(p.Nk, C::B_c) * p.B * p.H_kv);
  allow_smem(backward_kernel<T, kD>, C::smem_bytes);
  backward_kernel<T, kD><<<blocks, C::kThreads, C::smem_bytes, s>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<const T*>(a.dO), a.lse, D, dQ_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), dims_of(p));
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

// ==== The step's interface ========================================================================
std::string limits(const Problem& p) {
  if (p.d != 64 && p.d != 128)
    return "step 09b_wgmma supports d in {64, 128}; d = " + std::to_string(p.d) + " (step 09 has 32 and 96)";
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return std::string("step 09b_wgmma supports fp16 and bf16; got ") + dtype_name(p.dtype);
  // Row and key indices are int, and the causal test r + Nk − Nq must not overflow: 2^29 leaves room.
  const int64_t kMaxRows = int64_t(1) << 29;
  if (p.Nq > kMaxRows || p.Nk > kMaxRows)
    return "step 09b_wgmma supports Nq, Nk up to 2^29 (its row indices are int); Nq = " + std::to_string(p.Nq) +
           ", Nk = " + std::to_string(p.Nk);
  if (p.B * p.H > INT_MAX)
    return "step 09b_wgmma supports B·H up to 2^31 − 1; B·H = " + std::to_string(p.B * p.H);
  const int64_t fwd_blocks = ceil_div<int64_t>(p.Nq, FwdTile::B_r) * p.B * p.H;
  const int64_t bwd_blocks = ceil_div<int64_t>(p.Nk, 128) * p.B * p.H_kv;  // B_c = 128 at every d
  if (fwd_blocks > INT_MAX || bwd_blocks > INT_MAX)
    return "step 09b_wgmma launches one block per tile in a 1-D grid of at most 2^31 − 1 blocks; this "
           "problem needs " + std::to_string(std::max(fwd_blocks, bwd_blocks));
  if (p.group() * ceil_div<int64_t>(p.Nq, 64) > kMaxRows)
    return "step 09b_wgmma walks (query head, Q block) pairs with an int counter; H/H_kv · Nq/64 = " +
           std::to_string(p.group() * ceil_div<int64_t>(p.Nq, 64)) + " is over 2^29";
  // wgmma is an sm_90a instruction: only a Hopper GPU (compute capability 9.0) runs this step.
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
      (major != 9 || minor != 0))
    return "step 09b_wgmma uses wgmma, which only Hopper GPUs (compute capability 9.0, built for sm_90a) "
           "have; this GPU is " + std::to_string(major) + "." + std::to_string(minor);
  cudaGetLastError();  // a failed query (no device) is the runner's to report, not this step's
  return "";
}

size_t backward_workspace_bytes(const Problem& p) {
  // dQ's fp32 accumulator [B][H][Nq][d] first (16-byte aligned rows for float4), then D [B][H][Nq].
  return sizeof(float) * size_t(p.q_elems() + p.lse_elems());
}

void backward(const Problem& p, const BackwardArgs& a) {
  const std::pair<const void*, const char*> ptrs[] = {{a.q, "Q"},   {a.k, "K"},   {a.v, "V"},
                                                      {a.o, "O"},   {a.dO, "dO"}, {a.dq, "dQ"},
                                                      {a.dk, "dK"}, {a.dv, "dV"}, {a.workspace, "the workspace"}};
  for (const auto& [ptr, name] : ptrs) check_aligned(ptr, name);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  float* dQ_acc = static_cast<float*>(a.workspace);  // [B][H][Nq][d] fp32
  float* D = dQ_acc + p.q_elems();                   // [B][H][Nq] fp32
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      throw Error("step 09b_wgmma does not support fp32 storage");
    } else {
      launch_dot_do_o<T>(p, static_cast<const T*>(a.o), static_cast<const T*>(a.dO), D, dQ_acc, stream);
      if (p.d == 64) launch_backward_main<T, 64>(p, a, D, dQ_acc, stream);
      else if (p.d == 128) launch_backward_main<T, 128>(p, a, D, dQ_acc, stream);
      else throw Error("step 09b_wgmma: head dim d = " + std::to_string(p.d) + " is not compiled for the backward");
      launch_convert_dq<T>(p, dQ_acc, static_cast<T*>(a.dq), stream);
    }
  });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, backward_workspace_bytes, backward};

}  // namespace fl::s09b

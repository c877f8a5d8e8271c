// flashladder — step 04: FlashAttention-1 (the seeds' FA1 Algorithm 1) on CUDA cores.
//
// Step 03 writes S and P to device memory: 2·Nq·Nk floats per head, 8 GiB at the headline problem.
// FA1 never holds more than one B_r × B_c tile of them. One thread block per (batch, head) walks the
// algorithm as the paper writes it, K/V blocks outside, Q blocks inside:
//
//   for j = 1 … T_c:   K_j, V_j → shared memory                                          (line 6)
//     for i = 1 … T_r: Q_i, O_i, ℓ_i, m_i → shared memory from device memory              (line 8)
//       S_ij = Q_i K_jᵀ                                                                  (line 9)
//       m̃_ij = rowmax(S_ij),  P̃_ij = exp(S_ij − m̃_ij),  ℓ̃_ij = rowsum(P̃_ij)             (line 10)
//       m_i^new = max(m_i, m̃_ij),  ℓ_i^new = e^{m_i − m_i^new} ℓ_i + e^{m̃_ij − m_i^new} ℓ̃_ij   (line 11)
//       O_i ← diag(ℓ_i^new)⁻¹ (diag(ℓ_i) e^{m_i − m_i^new} O_i + e^{m̃_ij − m_i^new} P̃_ij V_j) (line 12)
//       O_i, ℓ_i ← ℓ_i^new, m_i ← m_i^new → device memory                                (lines 12, 13)
//
// Inside the block the kWarps = 4 warps split K_j, V_j ("split-K", as FA1's kernel does): warp w owns
// keys [16w, 16w + 16) of the block, computes its slice of S_ij and of P̃_ij V_j, and the warps
// combine their partial row max, row sum and P̃_ij V_j through shared memory. Each warp's partial
// P̃_ij V_j sits in registers, B_s·d/32 floats per thread, so lines 9–12 run on B_s = 16 rows of Q_i
// at a time (a slice; FA1's kernel also steps through Q 16 rows at a time). Each thread computes a
// register tile (4 rows × 2 keys of S_ij, 4 rows × d/8 columns of P̃_ij V_j) from shared memory with
// 16-byte loads: the register tiling that steps 05–07 keep.
//
// Extra memory: O (fp32), m and ℓ in device memory, (d + 2)·B·H·Nq floats: O(N), not O(N²).
// The price: every inner iteration reads Q_i and reads and writes O_i (fp32), m_i, ℓ_i in device
// memory; step 05 swaps the loops so that O_i, m_i, ℓ_i stay on chip.
//
// e^x is computed as 2^{x·log₂e}, one MUFU.EX2: P̃_ij = exp2f(fmaf(S_ij, τlog₂e, −m_sub)), with
// m_sub = m·τlog₂e rounded once. S_ij and m (in the workspace too) stay raw scores q·k, so that the
// fmaf's exponent, near 0 for the keys that matter, is exact to fp32, and L = m·τ + ln ℓ is taken
// back to natural units without ln 2 · m_sub's rounding (log_sum_exp in common/cuda.cuh says why).
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/launch.cuh"

namespace fl::s04 {

constexpr float inf = std::numeric_limits<float>::infinity();

// ---- Tiles ---------------------------------------------------------------------------------------
constexpr int B_r = 64;         // rows of Q_i (line 8 stages Q_i and O_i, 32 KiB of fp32 at d = 128, on chip)
constexpr int B_s = 16;         // rows of Q_i per split-K pass (a slice): each warp holds a partial
                                // [B_s][d] P̃_ij V_j in registers, B_s·d/32 = 64 floats per thread at d = 128.
constexpr int B_c = 64;         // rows of K_j, V_j
constexpr int kWarps = 4;       // warps per thread block
constexpr int kThreads = 32 * kWarps;  // threads per thread block
constexpr int K_w = B_c / kWarps;  // split-K: keys of K_j per warp (16)
constexpr int RG = 4, CG = 8;   // a warp's lanes as RG row groups × CG column groups: lane = rg·CG + cg
constexpr int TM = B_s / RG;    // rows of S_ij per thread: rg, rg + RG, rg + 2·RG, rg + 3·RG (of the slice)
constexpr int TN = K_w / CG;    // keys of S_ij per thread: cg, cg + CG (within the warp's keys)
static_assert(kThreads / CG == B_s, "line 12 gives each row of the slice to CG threads");

// Shared memory, in floats. Rows of Q_i, K_j, V_j are padded by 4 floats: the RG rows (or CG keys)
// that a warp reads at one k then start in different banks, so the 16-byte loads do not conflict.
template <int d>
struct Smem {
  static constexpr int LD = d + 4;                    // row stride of Q_i, K_j, V_j
  static constexpr int LDP = B_c + 8;                 // row stride of P̃_ij: lanes write without conflict
  static constexpr int Q = 0;                         // Q_i    [B_r][LD]
  static constexpr int K = Q + B_r * LD;              // K_j    [B_c][LD]
  static constexpr int V = K + B_c * LD;              // V_j    [B_c][LD]
  static constexpr int P = V + B_c * LD;              // P̃_ij   [B_s][LDP]  (one slice)
  static constexpr int O_red = P + B_s * LDP;         // each warp's P̃_ij V_j over its keys [kWarps][B_s][d]
  static constexpr int m_red = O_red + kWarps * B_s * d;  // each warp's row max over its keys  [kWarps][B_s]
  static constexpr int l_red = m_red + kWarps * B_s;  // each warp's row sum over its keys  [kWarps][B_s]
  static constexpr int O = l_red + kWarps * B_s;      // O_i    [B_r][d]  from device memory (line 8)
  static constexpr int m = O + B_r * d;               // m_i    [B_r]
  static constexpr int l = m + B_r;                   // ℓ_i    [B_r]
  static constexpr int a = l + B_r;                   // line 12's factor on O_i of the slice        [B_s]
  static constexpr int b = a + B_s;                   // line 12's factor on P̃_ij V_j of the slice   [B_s]
  static constexpr size_t bytes = size_t(b + B_s) * sizeof(float);
};

// ---- Helpers (the same in steps 04–07) ------------------------------------------------------------

// Copies a [rows][d] tile of a storage-type matrix from device memory into shared memory as fp32,
// row stride LD; rows at or past `valid` are zeros (partial tiles: nothing is read past the end).
// 16-byte loads, consecutive threads on consecutive 16 bytes of a row: whole 32-byte sectors.
template <class T, int d, int rows, int LD>
__device__ __forceinline__ void load_tile(float* dst, const T* __restrict__ src, int valid) {
  constexpr int E = 16 / int(sizeof(T));  // elements per 16-byte load
  constexpr int per_row = d / E;
  static_assert(rows * per_row % kThreads == 0, "every thread loads the same number of 16-byte pieces");
#pragma unroll
  for (int n = 0; n < rows * per_row / kThreads; ++n) {
    const int c = int(threadIdx.x) + n * kThreads;
    const int r = c / per_row, k = c % per_row * E;
    uint4 raw = make_uint4(0, 0, 0, 0);  // zero bits are 0 in fp32, fp16 and bf16 alike
    if (r < valid) raw = *reinterpret_cast<const uint4*>(src + int64_t(r) * d + k);
    const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < E; e += 4)
      *reinterpret_cast<float4*>(dst + r * LD + k + e) =
          make_float4(to_float(x[e]), to_float(x[e + 1]), to_float(x[e + 2]), to_float(x[e + 3]));
  }
}

// S[ii][jj] = Σ_k Q[ii][k] · K[jj][k]: a TM × TN register tile of Q Kᵀ. Q points at the thread's first
// row (its rows are RG apart), K at its first key (keys CG apart), both fp32 with row stride LD.
// Each step of 4 along d loads TM + TN float4s and does 4·TM·TN FMAs.
template <int TM_, int TN_, int d, int LD>
__device__ __forceinline__ void tile_QK(float (&S)[TM_][TN_], const float* Q, const float* K) {
#pragma unroll
  for (int ii = 0; ii < TM_; ++ii)
#pragma unroll
    for (int jj = 0; jj < TN_; ++jj) S[ii][jj] = 0.f;
#pragma unroll 4
  for (int k = 0; k < d; k += 4) {
    float4 q[TM_], kk[TN_];
#pragma unroll
    for (int ii = 0; ii < TM_; ++ii) q[ii] = *reinterpret_cast<const float4*>(Q + ii * RG * LD + k);
#pragma unroll
    for (int jj = 0; jj < TN_; ++jj) kk[jj] = *reinterpret_cast<const float4*>(K + jj * CG * LD + k);
#pragma unroll
    for (int ii = 0; ii < TM_; ++ii)
#pragma unroll
      for (int jj = 0; jj < TN_; ++jj) {
        S[ii][jj] = fmaf(q[ii].x, kk[jj].x, S[ii][jj]);
        S[ii][jj] = fmaf(q[ii].y, kk[jj].y, S[ii][jj]);
        S[ii][jj] = fmaf(q[ii].z, kk[jj].z, S[ii][jj]);
        S[ii][jj] = fmaf(q[ii].w, kk[jj].w, S[ii][jj]);
      }
  }
}

// O[ii][4q + e] += Σ_{c < n} P[ii][c] · V[c][4·CG·q + e]: a TM × TD register tile of P V. P points at
// the thread's first row (rows RG apart, stride LDP), V at its first column (stride LD); the thread's
// columns are 4 cg + 32 q, so the CG lanes of a row group read 32 consecutive floats of V.
template <int TM_, int TD, int n, int LD, int LDP>
__device__ __forceinline__ void tile_PV(float (&O)[TM_][TD], const float* P, const float* V) {
#pragma unroll 2
  for (int c = 0; c < n; c += 4) {
    float4 p[TM_];
#pragma unroll
    for (int ii = 0; ii < TM_; ++ii) p[ii] = *reinterpret_cast<const float4*>(P + ii * RG * LDP + c);
#pragma unroll
    for (int cc = 0; cc < 4; ++cc)
#pragma unroll
      for (int q = 0; q < TD / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(V + (c + cc) * LD + q * 4 * CG);
#pragma unroll
        for (int ii = 0; ii < TM_; ++ii) {
          const float pc = cc == 0 ? p[ii].x : cc == 1 ? p[ii].y : cc == 2 ? p[ii].z : p[ii].w;
          O[ii][4 * q + 0] = fmaf(pc, v.x, O[ii][4 * q + 0]);
          O[ii][4 * q + 1] = fmaf(pc, v.y, O[ii][4 * q + 1]);
          O[ii][4 * q + 2] = fmaf(pc, v.z, O[ii][4 * q + 2]);
          O[ii][4 * q + 3] = fmaf(pc, v.w, O[ii][4 * q + 3]);
        }
      }
  }
}

// Max and sum over the CG lanes that hold one row (lanes rg·CG … rg·CG + CG − 1): butterfly shuffles.
__device__ __forceinline__ float row_max(float x) {
#pragma unroll
  for (int o = CG / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int o = CG / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Writes 4 fp32 values as 4 elements of T (one 8-byte store for fp16 and bf16).
template <class T>
__device__ __forceinline__ void store4(T* dst, float4 v) {
  struct alignas(4 * sizeof(T)) Four { T x[4]; } f;
  f.x[0] = from_float<T>(v.x);
  f.x[1] = from_float<T>(v.y);
  f.x[2] = from_float<T>(v.z);
  f.x[3] = from_float<T>(v.w);
  *reinterpret_cast<Four*>(dst) = f;
}

// ---- The kernel ---------------------------------------------------------------------------------

template <class T, int d>
__global__ void __launch_bounds__(kThreads) attention_kernel(
    const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
    float* __restrict__ L, float* __restrict__ O_acc, float* __restrict__ m, float* __restrict__ l,
    int H, int H_kv, int Nq, int Nk, float scale, bool causal) {
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log₂e: e^{τ x} = 2^{x·τ·log₂e}
  using Sm = Smem<d>;
  constexpr int LD = Sm::LD, LDP = Sm::LDP;
  constexpr int TD = d / CG;  // columns of O_i per thread: 4 cg + 32 q, q < d/32
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Q_s = smem + Sm::Q;          // Q_i: [B_r][LD]    in shared memory, fp32
  float* K_s = smem + Sm::K;          // K_j: [B_c][LD]    in shared memory, fp32
  float* V_s = smem + Sm::V;          // V_j: [B_c][LD]    in shared memory, fp32
  float* P_ij = smem + Sm::P;         // [B_s][LDP]   P̃_ij of one slice, each warp its own 16 key columns
  float* O_red = smem + Sm::O_red;    // [kWarps][B_s][d]  each warp's P̃_ij V_j over its keys
  float* m_red = smem + Sm::m_red;    // [kWarps][B_s]     each warp's rowmax(S_ij) over its keys
  float* l_red = smem + Sm::l_red;    // [kWarps][B_s]     each warp's rowsum(P̃_ij) over its keys
  float* O_i = smem + Sm::O;          // [B_r][d]     O_i, from and back to device memory
  float* m_i = smem + Sm::m;          // [B_r]        m_i, from and back to device memory
  float* l_i = smem + Sm::l;          // [B_r]        ℓ_i, from and back to device memory
  float* a_i = smem + Sm::a;          // [B_s]        diag(ℓ_i^new)⁻¹ diag(ℓ_i) e^{m_i − m_i^new}
  float* b_i = smem + Sm::b;          // [B_s]        diag(ℓ_i^new)⁻¹ e^{m̃_ij − m_i^new}

  // One thread block per (b, h); query head h reads K/V head h / (H / H_kv) (MQA/GQA).
  const int64_t bh = blockIdx.x;
  const int64_t bh_kv = bh / H * H_kv + bh % H / (H / H_kv);
  const T* Q_bh = Q + bh * Nq * d;            // [Nq][d]
  const T* K_bh = K + bh_kv * Nk * d;         // [Nk][d]
  const T* V_bh = V + bh_kv * Nk * d;         // [Nk][d]
  T* O_bh = O + bh * Nq * d;                  // [Nq][d]
  float* L_bh = L + bh * Nq;                  // [Nq]
  float* O_acc_bh = O_acc + bh * Nq * d;      // [Nq][d]  O in fp32 while the loops run (workspace)
  float* m_bh = m + bh * Nq;                  // [Nq]     m (workspace)
  float* l_bh = l + bh * Nq;                  // [Nq]     ℓ (workspace)

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int rg = lane / CG, cg = lane % CG;   // S_ij: rows rg + RG·ii of the slice, keys key0 + cg + CG·jj
  const int key0 = warp * K_w;                // split-K: this warp's keys of K_j
  const int o_r = tid / CG, o_c = tid % CG;   // line 12: this thread owns row o_r of each slice of O_i, columns 4 o_c + 32 q
  const int T_r = ceil_div(Nq, B_r), T_c = ceil_div(Nk, B_c);

  // Line 2: O = 0, ℓ = 0, m = −∞ in device memory (the workspace arrives as NaN). Each thread sets
  // exactly the elements it reads and writes in lines 8 and 12–13, so no barrier is needed.
  for (int r = o_r; r < Nq; r += B_s)
#pragma unroll
    for (int q = 0; q < d / 32; ++q) *reinterpret_cast<float4*>(O_acc_bh + int64_t(r) * d + 4 * o_c + 32 * q) = make_float4(0, 0, 0, 0);
  if (tid < B_r)
    for (int r = tid; r < Nq; r += B_r) {
      m_bh[r] = -inf;
      l_bh[r] = 0.f;
    }

  for (int j = 0; j < T_c; ++j) {
    const int j0 = j * B_c;
    // Line 6: K_j, V_j → shared memory. No barrier before overwriting them: a thread gets here only
    // after the last slice's final barrier, and nobody reads K_j or V_j after that one.
    load_tile<T, d, B_c, LD>(K_s, K_bh + int64_t(j0) * d, Nk - j0);
    load_tile<T, d, B_c, LD>(V_s, V_bh + int64_t(j0) * d, Nk - j0);

    for (int i = 0; i < T_r; ++i) {
      const int i0 = i * B_r;
      // Line 8: Q_i, O_i, ℓ_i, m_i → shared memory; each thread loads the elements of O_i it owns in
      // line 12 (rows past Nq are zeros and are never written back).
      load_tile<T, d, B_r, LD>(Q_s, Q_bh + int64_t(i0) * d, Nq - i0);
      for (int r = o_r; r < B_r; r += B_s)
#pragma unroll
        for (int q = 0; q < d / 32; ++q)
          *reinterpret_cast<float4*>(O_i + r * d + 4 * o_c + 32 * q) =
              i0 + r < Nq ? *reinterpret_cast<const float4*>(O_acc_bh + int64_t(i0 + r) * d + 4 * o_c + 32 * q)
                          : make_float4(0, 0, 0, 0);
      if (tid < B_r) {
        m_i[tid] = i0 + tid < Nq ? m_bh[i0 + tid] : -inf;
        l_i[tid] = i0 + tid < Nq ? l_bh[i0 + tid] : 0.f;
      }
      __syncthreads();

      for (int s0 = 0; s0 < B_r; s0 += B_s) {
        // Line 9: S_ij = Q_i K_jᵀ for the slice's rows, this warp's 16 keys: a TM × TN tile per
        // thread, raw: τ joins in the exponent's fmaf. Masked: keys past Nk and, when causal, keys
        // past row + Nk − Nq.
        float S_ij[TM][TN];
        tile_QK<TM, TN, d, LD>(S_ij, Q_s + (s0 + rg) * LD, K_s + (key0 + cg) * LD);
#pragma unroll
        for (int ii = 0; ii < TM; ++ii)
#pragma unroll
          for (int jj = 0; jj < TN; ++jj) {
            const int row = i0 + s0 + rg + RG * ii, key = j0 + key0 + cg + CG * jj;
            const bool seen = key < Nk && (!causal || key <= row + Nk - Nq);
            S_ij[ii][jj] = seen ? S_ij[ii][jj] : -inf;
          }

        // Line 10: m̃_ij = rowmax(S_ij): over this warp's keys by shuffles, then over the kWarps warps
        // through shared memory (the split-K cost that step 07 removes).
#pragma unroll
        for (int ii = 0; ii < TM; ++ii) {
          float mx = S_ij[ii][0];
#pragma unroll
          for (int jj = 1; jj < TN; ++jj) mx = fmaxf(mx, S_ij[ii][jj]);
          mx = row_max(mx);
          if (cg == 0) m_red[warp * B_s + rg + RG * ii] = mx;
        }
        __syncthreads();
        // P̃_ij = exp(S_ij − m̃_ij) and this warp's part of ℓ̃_ij = rowsum(P̃_ij). A row that sees no key
        // of K_j has m̃_ij = −∞: subtract 0 instead, so that P̃_ij = e^{−∞} = 0 and never −∞ − (−∞).
#pragma unroll
        for (int ii = 0; ii < TM; ++ii) {
          float m_tilde = -inf;
#pragma unroll
          for (int v = 0; v < kWarps; ++v) m_tilde = fmaxf(m_tilde, m_red[v * B_s + rg + RG * ii]);
          const float m_sub = m_tilde == -inf ? 0.f : __fmul_rn(m_tilde, scale_log2);
          float sum = 0.f;
#pragma unroll
          for (int jj = 0; jj < TN; ++jj) {
            const float p = exp2f(fmaf(S_ij[ii][jj], scale_log2, -m_sub));
            P_ij[(rg + RG * ii) * LDP + key0 + cg + CG * jj] = p;
            sum += p;
          }
          sum = row_sum(sum);
          if (cg == 0) l_red[warp * B_s + rg + RG * ii] = sum;
        }
        __syncwarp();  // this warp's columns of P̃_ij are written and read by its own lanes only
        // P̃_ij V_j over this warp's 16 keys: a partial [B_s][d] product, summed over the warps below.
        float PV[TM][TD] = {};
        tile_PV<TM, TD, K_w, LD, LDP>(PV, P_ij + rg * LDP + key0, V_s + key0 * LD + 4 * cg);
#pragma unroll
        for (int ii = 0; ii < TM; ++ii)
#pragma unroll
          for (int q = 0; q < TD / 4; ++q)
            *reinterpret_cast<float4*>(O_red + (warp * B_s + rg + RG * ii) * d + 4 * cg + 32 * q) =
                make_float4(PV[ii][4 * q], PV[ii][4 * q + 1], PV[ii][4 * q + 2], PV[ii][4 * q + 3]);
        __syncthreads();

        // Line 11, one thread per row: m̃_ij and ℓ̃_ij from the warps' parts, then m_i^new, ℓ_i^new
        // and the two factors of line 12.
        if (tid < B_s) {
          const int r = s0 + tid;
          float m_tilde = -inf, l_tilde = 0.f;
#pragma unroll
          for (int v = 0; v < kWarps; ++v) {
            m_tilde = fmaxf(m_tilde, m_red[v * B_s + tid]);
            l_tilde += l_red[v * B_s + tid];
          }
          const float m_new = fmaxf(m_i[r], m_tilde);
          const float m_sub = m_new == -inf ? 0.f : __fmul_rn(m_new, scale_log2);  // no key seen yet: all factors are 0
          // Both products rounded as when P̃ and ℓ were summed against them (__fmul_rn is never fused).
          const float e_old = exp2f(__fmul_rn(m_i[r], scale_log2) - m_sub);
          const float e_tilde = exp2f(__fmul_rn(m_tilde, scale_log2) - m_sub);
          const float l_new = e_old * l_i[r] + e_tilde * l_tilde;
          const float inv = l_new > 0.f ? 1.f / l_new : 0.f;
          a_i[tid] = inv * l_i[r] * e_old;
          b_i[tid] = inv * e_tilde;
          l_i[r] = l_new;
          m_i[r] = m_new;
        }
        __syncthreads();
        // Line 12: O_i ← a·O_i + b·Σ_w (P̃_ij V_j)_w: renormalised by diag(ℓ_i^new)⁻¹ every time.
        {
          const float a = a_i[o_r], b = b_i[o_r];
          float* O_row = O_i + (s0 + o_r) * d + 4 * o_c;
#pragma unroll
          for (int q = 0; q < d / 32; ++q) {
            float4 s = make_float4(0, 0, 0, 0);
#pragma unroll
            for (int v = 0; v < kWarps; ++v) {
              const float4 x = *reinterpret_cast<const float4*>(O_red + (v * B_s + o_r) * d + 4 * o_c + 32 * q);
              s.x += x.x, s.y += x.y, s.z += x.z, s.w += x.w;
            }
            const float4 o = *reinterpret_cast<const float4*>(O_row + 32 * q);
            *reinterpret_cast<float4*>(O_row + 32 * q) =
                make_float4(a * o.x + b * s.x, a * o.y + b * s.y, a * o.z + b * s.z, a * o.w + b * s.w);
          }
        }
      }

      // Lines 12–13: O_i, ℓ_i, m_i → device memory. Each thread writes what it owns in line 12 (O_i)
      // or loaded in line 8 (ℓ_i, m_i; the last slice's barrier made their new values visible).
      for (int r = o_r; r < B_r; r += B_s)
        if (i0 + r < Nq)
#pragma unroll
          for (int q = 0; q < d / 32; ++q)
            *reinterpret_cast<float4*>(O_acc_bh + int64_t(i0 + r) * d + 4 * o_c + 32 * q) =
                *reinterpret_cast<const float4*>(O_i + r * d + 4 * o_c + 32 * q);
      if (tid < B_r && i0 + tid < Nq) {
        m_bh[i0 + tid] = m_i[tid];
        l_bh[i0 + tid] = l_i[tid];
      }
    }
  }

  // Line 16: O, in the storage type, and L = m + log ℓ for the backward. A row that saw no key has
  // ℓ = 0: O = 0 (it was never changed) and L = +∞. Each thread reads only what it wrote itself.
  for (int r = o_r; r < Nq; r += B_s)
#pragma unroll
    for (int q = 0; q < d / 32; ++q)
      store4(O_bh + int64_t(r) * d + 4 * o_c + 32 * q,
             *reinterpret_cast<const float4*>(O_acc_bh + int64_t(r) * d + 4 * o_c + 32 * q));
  if (tid < B_r)
    for (int r = tid; r < Nq; r += B_r) L_bh[r] = log_sum_exp(m_bh[r], l_bh[r], scale, scale_log2);
}

// ---- The launcher ---------------------------------------------------------------------------------

constexpr int64_t kMaxN = int64_t(1) << 30;  // rows are indexed with int inside the kernel

size_t workspace_bytes(const Problem& p) {
  // O in fp32 [B][H][Nq][d], then m and ℓ [B][H][Nq]: O(N) memory.
  return (size_t(p.q_elems()) + 2 * size_t(p.lse_elems())) * sizeof(float);
}

std::string limits(const Problem& p) {
  if (p.Nq > kMaxN || p.Nk > kMaxN)
    return "indexes rows with 32-bit integers: it needs Nq, Nk <= 2^30 (got Nq = " +
           std::to_string(p.Nq) + ", Nk = " + std::to_string(p.Nk) + ")";
  if (p.B * p.H > std::numeric_limits<int32_t>::max())
    return "launches one thread block per (batch, head): it needs B·H <= 2^31 − 1 (got " +
           std::to_string(p.B * p.H) + ")";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  constexpr size_t smem = Smem<d>::bytes;  // 169 KiB at d = 128 (one block per SM), 89 KiB at d = 64 (two)
  FL_CUDA(cudaFuncSetAttribute(attention_kernel<T, d>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  float* O_acc = static_cast<float*>(a.workspace);  // [B][H][Nq][d]
  float* m = O_acc + p.q_elems();                   // [B][H][Nq]
  float* l = m + p.lse_elems();                     // [B][H][Nq]
  const dim3 grid(unsigned(p.B * p.H)), block(kThreads);  // one thread block per (b, h)
  attention_kernel<T, d><<<grid, block, smem, static_cast<cudaStream_t>(a.stream)>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, O_acc, m, l, int(p.H), int(p.H_kv), int(p.Nq), int(p.Nk), float(p.softmax_scale()),
      p.causal);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<CudaCoreD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s04

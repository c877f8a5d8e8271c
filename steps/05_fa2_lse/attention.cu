// flashladder — step 05: FlashAttention-2's arithmetic (the seeds' FA2 Algorithm 1) on CUDA cores.
//
// Step 04 re-read Q_i and read and wrote O_i, ℓ_i, m_i in device memory for every (K_j, Q_i) pair,
// and renormalised O_i by diag(ℓ_i^new)⁻¹ every time. FA2 swaps the loops: Q_i outside, K_j inside,
// so O_i, ℓ_i, m_i live on chip from the first K_j to the last, O_i is accumulated un-scaled and
// divided by ℓ_i once at the end, and only L = m + log ℓ goes back to device memory:
//
//   for i = 1 … T_r:   Q_i → shared memory; O_i = 0, ℓ_i = 0, m_i = −∞ on chip       (lines 4, 5)
//     for j = 1 … T_c: K_j, V_j → shared memory                                         (line 7)
//       S_ij = Q_i K_jᵀ                                                                  (line 8)
//       m_i^(j) = max(m_i^(j−1), rowmax(S_ij)),  P̃_ij = exp(S_ij − m_i^(j)),
//       ℓ_i^(j) = e^{m_i^(j−1) − m_i^(j)} ℓ_i^(j−1) + rowsum(P̃_ij)                         (line 9)
//       O_i^(j) = diag(e^{m_i^(j−1) − m_i^(j)}) O_i^(j−1) + P̃_ij V_j                       (line 10)
//     O_i = diag(ℓ_i)⁻¹ O_i,  L_i = m_i + log ℓ_i → device memory                       (lines 12–15)
//
// Causal: a K_j that no row of Q_i may see (above the diagonal) is skipped, and the mask is applied
// only to the blocks that cross the diagonal or the end of the keys.
//
// Still one thread block per (batch, head), and the 4 warps still split K_j, V_j ("split-K") as in
// step 04. With the loops swapped it is K_j, V_j that are re-read, once per Q_i, so Q_i grows to
// B_r = 64 rows (4× less K/V traffic than 16 rows); the split-K machinery of step 04 still works on
// 16 rows at a time (a slice, B_s), because each warp's partial P̃_ij V_j lives in registers.
//
// Extra memory: none beyond O and L. e^x is exp2f(fmaf(S_ij, τlog₂e, −m_sub)) as in step 04.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/launch.cuh"

namespace fl::s05 {

constexpr float inf = std::numeric_limits<float>::infinity();

// ---- Tiles ---------------------------------------------------------------------------------------
constexpr int B_r = 64;         // rows of Q_i. K_j, V_j are now re-read once per Q_i: T_r·Nk·d·4 bytes
                                // per head, 537 MB at N = 4096 with 16 rows, 134 MB with 64.
constexpr int B_s = 16;         // rows of Q_i per split-K pass (a slice): each warp holds a partial
                                // [B_s][d] P̃_ij V_j in registers, B_s·d/32 = 64 floats per thread at d = 128.
constexpr int B_c = 64;         // rows of K_j, V_j
constexpr int kWarps = 4;       // warps per thread block
constexpr int kThreads = 32 * kWarps;  // threads per thread block
constexpr int K_w = B_c / kWarps;  // split-K: keys of K_j per warp (16)
constexpr int RG = 4, CG = 8;   // a warp's lanes as RG row groups × CG column groups: lane = rg·CG + cg
constexpr int TM = B_s / RG;    // rows of S_ij per thread: rg, rg + RG, rg + 2·RG, rg + 3·RG (of the slice)
constexpr int TN = K_w / CG;    // keys of S_ij per thread: cg, cg + CG (within the warp's keys)
static_assert(kThreads / CG == B_s, "line 10 gives each row of the slice to CG threads");

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
  static constexpr int O = l_red + kWarps * B_s;      // O_i    [B_r][d]  on chip from the first K_j to the last
  static constexpr int m = O + B_r * d;               // m_i    [B_r]
  static constexpr int l = m + B_r;                   // ℓ_i    [B_r]
  static constexpr int a = l + B_r;                   // e^{m_i^(j−1) − m_i^(j)} of the slice [B_s]
  static constexpr size_t bytes = size_t(a + B_s) * sizeof(float);
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
    float* __restrict__ L, int H, int H_kv, int Nq, int Nk, float scale, bool causal) {
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
  float* O_i = smem + Sm::O;          // [B_r][d]     O_i, un-scaled, on chip
  float* m_i = smem + Sm::m;          // [B_r]        m_i, on chip
  float* l_i = smem + Sm::l;          // [B_r]        ℓ_i, on chip
  float* a_i = smem + Sm::a;          // [B_s]        e^{m_i^(j−1) − m_i^(j)}

  // One thread block per (b, h); query head h reads K/V head h / (H / H_kv) (MQA/GQA).
  const int64_t bh = blockIdx.x;
  const int64_t bh_kv = bh / H * H_kv + bh % H / (H / H_kv);
  const T* Q_bh = Q + bh * Nq * d;            // [Nq][d]
  const T* K_bh = K + bh_kv * Nk * d;         // [Nk][d]
  const T* V_bh = V + bh_kv * Nk * d;         // [Nk][d]
  T* O_bh = O + bh * Nq * d;                  // [Nq][d]
  float* L_bh = L + bh * Nq;                  // [Nq]

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int rg = lane / CG, cg = lane % CG;   // S_ij: rows rg + RG·ii of the slice, keys key0 + cg + CG·jj
  const int key0 = warp * K_w;                // split-K: this warp's keys of K_j
  const int o_r = tid / CG, o_c = tid % CG;   // line 10: this thread owns row o_r of each slice of O_i, columns 4 o_c + 32 q
  const int T_r = ceil_div(Nq, B_r);

  for (int i = 0; i < T_r; ++i) {
    const int i0 = i * B_r;
    // Line 4: Q_i → shared memory. Line 5: O_i = 0, ℓ_i = 0, m_i = −∞ on chip; each thread zeroes
    // the elements of O_i it owns in line 10.
    load_tile<T, d, B_r, LD>(Q_s, Q_bh + int64_t(i0) * d, Nq - i0);
    for (int r = o_r; r < B_r; r += B_s)
#pragma unroll
      for (int q = 0; q < d / 32; ++q) *reinterpret_cast<float4*>(O_i + r * d + 4 * o_c + 32 * q) = make_float4(0, 0, 0, 0);
    if (tid < B_r) {
      m_i[tid] = -inf;
      l_i[tid] = 0.f;
    }
    // Causal: the last row of Q_i sees keys up to i_last + Nk − Nq; the K_j past that are entirely
    // above the diagonal and are skipped (about half of them at Nq = Nk).
    // LAB:BEGIN T_c, the number of K_j blocks this Q_i needs: all ceil(Nk / B_c) of them, or when causal only those up to the last key its last row may see (key j is visible to row i iff j <= i + Nk − Nq); the K_j above the diagonal are skipped
    // LAB:STUB const int T_c = 0;  // (to write: no K_j is visited yet)
    const int i_last = min(i0 + B_r, Nq) - 1;
    const int n_keys = causal ? max(0, min(Nk, i_last + Nk - Nq + 1)) : Nk;
    const int T_c = ceil_div(n_keys, B_c);
    // LAB:END

    for (int j = 0; j < T_c; ++j) {
      const int j0 = j * B_c;
      // Line 7: K_j, V_j → shared memory. No barrier before overwriting them: a thread gets here
      // only after the last slice's final barrier, and nobody reads K_j or V_j after that one.
      load_tile<T, d, B_c, LD>(K_s, K_bh + int64_t(j0) * d, Nk - j0);
      load_tile<T, d, B_c, LD>(V_s, V_bh + int64_t(j0) * d, Nk - j0);
      __syncthreads();
      // The mask is needed only where K_j runs past Nk, or crosses the diagonal: the first row of
      // Q_i (the one that sees fewest keys) does not see the last key of K_j.
      const bool masked = j0 + B_c > Nk || (causal && j0 + B_c - 1 > i0 + Nk - Nq);

      for (int s0 = 0; s0 < B_r; s0 += B_s) {
        // Line 8: S_ij = Q_i K_jᵀ for the slice's rows, this warp's 16 keys: a TM × TN tile per
        // thread, raw: τ joins in the exponent's fmaf.
        float S_ij[TM][TN];
        tile_QK<TM, TN, d, LD>(S_ij, Q_s + (s0 + rg) * LD, K_s + (key0 + cg) * LD);
#pragma unroll
        for (int ii = 0; ii < TM; ++ii)
#pragma unroll
          for (int jj = 0; jj < TN; ++jj) {
            const int row = i0 + s0 + rg + RG * ii, key = j0 + key0 + cg + CG * jj;
            const bool seen = !masked || (key < Nk && (!causal || key <= row + Nk - Nq));
            S_ij[ii][jj] = seen ? S_ij[ii][jj] : -inf;
          }

        // Line 9: m_i^(j) = max(m_i^(j−1), rowmax(S_ij)): over this warp's keys by shuffles,
        // then over the kWarps warps through shared memory (the split-K cost that step 07 removes).
#pragma unroll
        for (int ii = 0; ii < TM; ++ii) {
          float mx = S_ij[ii][0];
#pragma unroll
          for (int jj = 1; jj < TN; ++jj) mx = fmaxf(mx, S_ij[ii][jj]);
          mx = row_max(mx);
          if (cg == 0) m_red[warp * B_s + rg + RG * ii] = mx;
        }
        __syncthreads();
        // P̃_ij = exp(S_ij − m_i^(j)) and this warp's part of rowsum(P̃_ij). A row that has seen no key
        // yet has m_i^(j) = −∞: subtract 0 instead, so that P̃_ij = e^{−∞} = 0 and never −∞ − (−∞).
#pragma unroll
        for (int ii = 0; ii < TM; ++ii) {
          float m_new = m_i[s0 + rg + RG * ii];
#pragma unroll
          for (int v = 0; v < kWarps; ++v) m_new = fmaxf(m_new, m_red[v * B_s + rg + RG * ii]);
          const float m_sub = m_new == -inf ? 0.f : __fmul_rn(m_new, scale_log2);
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

        // Line 9, one thread per row: ℓ_i^(j) = e^{m_i^(j−1) − m_i^(j)} ℓ_i^(j−1) + rowsum(P̃_ij),
        // m_i ← m_i^(j), and the factor e^{m_i^(j−1) − m_i^(j)} for line 10. No division.
        // LAB:BEGIN FA2 Algorithm 1, line 9, one thread per row r = s0 + tid (tid < B_s): m_i^(j) = max(m_i^(j−1), the kWarps maxima in m_red), rowsum(P̃_ij) = the sum of the kWarps sums in l_red, a_i[tid] = e^{m_i^(j−1) − m_i^(j)} (in base 2 with scale_log2, and 0 when no key was seen yet: m_sub), ℓ_i^(j) = a·ℓ_i^(j−1) + rowsum, m_i ← m_i^(j)
        if (tid < B_s) {
          const int r = s0 + tid;
          float m_new = m_i[r], l_tilde = 0.f;
#pragma unroll
          for (int v = 0; v < kWarps; ++v) {
            m_new = fmaxf(m_new, m_red[v * B_s + tid]);
            l_tilde += l_red[v * B_s + tid];
          }
          const float m_sub = m_new == -inf ? 0.f : __fmul_rn(m_new, scale_log2);  // no key seen yet: the factor is 0
          const float alpha = exp2f(__fmul_rn(m_i[r], scale_log2) - m_sub);
          a_i[tid] = alpha;
          l_i[r] = alpha * l_i[r] + l_tilde;
          m_i[r] = m_new;
        }
        // LAB:END
        __syncthreads();
        // Line 10: O_i ← diag(e^{m_i^(j−1) − m_i^(j)}) O_i + Σ_w (P̃_ij V_j)_w, on chip and un-scaled.
        // LAB:BEGIN FA2 Algorithm 1, line 10: O_i ← diag(a_i) O_i + Σ over the kWarps warps of their P̃_ij V_j (in O_red), for the row o_r of the slice and the columns 4·o_c + 32·q this thread owns; un-scaled: no division by ℓ here
        {
          const float a = a_i[o_r];
          float* O_row = O_i + (s0 + o_r) * d + 4 * o_c;
#pragma unroll
          for (int q = 0; q < d / 32; ++q) {
            float4 s = *reinterpret_cast<const float4*>(O_row + 32 * q);
            s.x *= a, s.y *= a, s.z *= a, s.w *= a;
#pragma unroll
            for (int v = 0; v < kWarps; ++v) {
              const float4 x = *reinterpret_cast<const float4*>(O_red + (v * B_s + o_r) * d + 4 * o_c + 32 * q);
              s.x += x.x, s.y += x.y, s.z += x.z, s.w += x.w;
            }
            *reinterpret_cast<float4*>(O_row + 32 * q) = s;
          }
        }
        // LAB:END
      }
    }

    __syncthreads();  // ℓ_i, m_i are final (also when causal skipped every K_j of this Q_i)
    // Lines 12–15: O_i = diag(ℓ_i)⁻¹ O_i in the storage type, L_i = m_i + log ℓ_i → device memory.
    // A row that saw no key has ℓ_i = 0: O = 0 (O_i stayed 0) and L = +∞.
    // LAB:BEGIN FA2 Algorithm 1, lines 12–15: O_i = diag(ℓ_i)⁻¹ O_i stored in the storage type (store4), for the rows and columns this thread owns, rows past Nq not written; L_i = m_i + log ℓ_i (log_sum_exp in steps/device/math.cuh), +∞ where ℓ_i = 0
    for (int r = o_r; r < B_r; r += B_s)
      if (i0 + r < Nq) {
        const float inv = l_i[r] > 0.f ? 1.f / l_i[r] : 0.f;
#pragma unroll
        for (int q = 0; q < d / 32; ++q) {
          const float4 o = *reinterpret_cast<const float4*>(O_i + r * d + 4 * o_c + 32 * q);
          store4(O_bh + int64_t(i0 + r) * d + 4 * o_c + 32 * q, make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv));
        }
      }
    if (tid < B_r && i0 + tid < Nq)
      L_bh[i0 + tid] = log_sum_exp(m_i[tid], l_i[tid], scale, scale_log2);
    // LAB:END
    __syncthreads();  // before the next Q_i overwrites Q_i, O_i, m_i, ℓ_i
  }
}

// ---- The launcher ---------------------------------------------------------------------------------

constexpr int64_t kMaxN = int64_t(1) << 30;  // rows are indexed with int inside the kernel

size_t workspace_bytes(const Problem&) { return 0; }  // O_i, ℓ_i, m_i never leave the chip

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
  const dim3 grid(unsigned(p.B * p.H)), block(kThreads);  // one thread block per (b, h)
  attention_kernel<T, d><<<grid, block, smem, static_cast<cudaStream_t>(a.stream)>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, int(p.H), int(p.H_kv), int(p.Nq), int(p.Nk), float(p.softmax_scale()), p.causal);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<CudaCoreD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s05

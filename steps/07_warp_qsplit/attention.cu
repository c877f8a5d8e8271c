// flashladder — step 07: warps split Q_i, not K_j: no reduction across warps.
//
// In steps 04–06 the warps of a block split K_j, V_j ("split-K"): every row of S_ij was spread over
// all the warps, so each row max, each row sum and each row of P̃_ij V_j had to be combined through
// shared memory, with three barriers per 16 rows. FA2 (the seeds' section 3.3) splits Q_i instead:
// warp w owns rows [16w, 16w + 16) of Q_i whole, all warps read the same K_j, V_j from shared memory,
// and each warp computes its own rows of S_ij, P̃_ij and O_i from start to end:
//
//   warp w, rows R_w of Q_i:  S = Q_{R_w} K_jᵀ;  m_i, P̃, ℓ_i by shuffles among the 8 lanes of a row;
//                            O_{R_w} = diag(e^{m_i^(j−1) − m_i^(j)}) O_{R_w} + P̃ V_j, in registers
//
// What goes away: the partial products in shared memory (O_red, m_red, l_red), the one-thread-per-row
// statistics pass, O_i in shared memory (each thread keeps its 4 rows × d/8 columns of O_i in
// registers, with m_i and ℓ_i), and all but two barriers per K_j (K_j, V_j loaded; K_j, V_j used).
// With no partial [16][d] product per warp to hold, a block can take more rows: B_r = 128, 8 warps
// of 16 rows, and each thread's S_ij tile grows from 4 × 2 to 4 × 8 (12 float4 loads per 128 FMAs).
//
// The rest is step 06: one thread block per (Q_i, b, h), FA2's arithmetic, causal blocks skipped.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/launch.cuh"

namespace fl::s07 {

constexpr float inf = std::numeric_limits<float>::infinity();

// ---- Tiles ---------------------------------------------------------------------------------------
constexpr int B_r = 128;        // rows of Q_i: K_j, V_j are re-read once per Q_i, half as often as with 64
constexpr int B_c = 64;         // rows of K_j, V_j
constexpr int kWarps = 8;       // warps per thread block
constexpr int kThreads = 32 * kWarps;  // threads per thread block
constexpr int B_w = B_r / kWarps;  // split-Q: rows of Q_i per warp (16)
constexpr int RG = 4, CG = 8;   // a warp's lanes as RG row groups × CG column groups: lane = rg·CG + cg
constexpr int TM = B_w / RG;    // rows of S_ij and O_i per thread: rg, rg + RG, rg + 2·RG, rg + 3·RG (of the warp's)
constexpr int TN = B_c / CG;    // keys of S_ij per thread: cg, cg + CG, …, cg + 7·CG

// Shared memory, in floats. Rows of Q_i, K_j, V_j are padded by 4 floats: the RG rows (or CG keys)
// that a warp reads at one k then start in different banks, so the 16-byte loads do not conflict.
template <int d>
struct Smem {
  static constexpr int LD = d + 4;                    // row stride of Q_i, K_j, V_j
  static constexpr int LDP = B_c + 8;                 // row stride of P̃_ij: lanes write without conflict
  static constexpr int Q = 0;                         // Q_i    [B_r][LD]
  static constexpr int K = Q + B_r * LD;              // K_j    [B_c][LD]
  static constexpr int V = K + B_c * LD;              // V_j    [B_c][LD]
  static constexpr int P = V + B_c * LD;              // P̃_ij   [B_r][LDP]  (each warp its own B_w rows)
  static constexpr size_t bytes = size_t(P + B_r * LDP) * sizeof(float);
};

// ---- Helpers (steps 04–06's; tile_QK and tile_PV are no longer unrolled) -----------------------

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
// Each step of 4 along d loads TM + TN float4s and does 4·TM·TN FMAs: with the 4 × 8 tile of this
// step, 12 loads and 128 FMAs, enough work per step that the loop is not unrolled (unrolled, the
// next step's loads take 48 more registers, and d = 64 must fit in 128 for two blocks per SM).
template <int TM_, int TN_, int d, int LD>
__device__ __forceinline__ void tile_QK(float (&S)[TM_][TN_], const float* Q, const float* K) {
#pragma unroll
  for (int ii = 0; ii < TM_; ++ii)
#pragma unroll
    for (int jj = 0; jj < TN_; ++jj) S[ii][jj] = 0.f;
#pragma unroll 1
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
// columns are 4 cg + 32 q, so the CG lanes of a row group read 32 consecutive floats of V. Not
// unrolled, as tile_QK: one step of 4 keys is already 4·TM·TD = 256 FMAs at d = 128.
template <int TM_, int TD, int n, int LD, int LDP>
__device__ __forceinline__ void tile_PV(float (&O)[TM_][TD], const float* P, const float* V) {
#pragma unroll 1
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
__global__ void __launch_bounds__(kThreads, d == 64 ? 2 : 1) attention_kernel(
    const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
    float* __restrict__ L, int64_t BH, int H, int H_kv, int Nq, int Nk, float scale, bool causal) {
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log₂e: e^{τ x} = 2^{x·τ·log₂e}
  using Sm = Smem<d>;
  constexpr int LD = Sm::LD, LDP = Sm::LDP;
  constexpr int TD = d / CG;  // columns of O_i per thread: 4 cg + 32 q, q < d/32
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Q_s = smem + Sm::Q;          // Q_i: [B_r][LD]    in shared memory, fp32
  float* K_s = smem + Sm::K;          // K_j: [B_c][LD]    in shared memory, fp32, read by every warp
  float* V_s = smem + Sm::V;          // V_j: [B_c][LD]    in shared memory, fp32, read by every warp
  float* P_ij = smem + Sm::P;         // [B_r][LDP]   P̃_ij, each warp its own B_w rows

  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int rg = lane / CG, cg = lane % CG;   // S_ij: rows row0 + RG·ii, keys cg + CG·jj; O_i: columns 4 cg + 32 q
  // LAB:BEGIN split-Q: row0, the first row of Q_i (within the block) that this thread's row group works on: each warp owns B_w whole rows of its own, and a thread's rows are row0 + RG·ii
  // LAB:STUB const int row0 = rg;  // (to write: every warp takes the same rows)
  const int row0 = warp * B_w + rg;           // split-Q: this warp's rows of Q_i are warp·B_w … warp·B_w + B_w − 1
  // LAB:END
  const int T_r = ceil_div(Nq, B_r);

  // One thread block per (Q_i, b, h), as in step 06.
  for (int64_t t = blockIdx.x; t < T_r * BH; t += gridDim.x) {
    const int i = int(t % T_r), i0 = i * B_r;
    // Query head h reads K/V head h / (H / H_kv) (MQA/GQA).
    const int64_t bh = t / T_r;
    const int64_t bh_kv = bh / H * H_kv + bh % H / (H / H_kv);
    const T* Q_bh = Q + bh * Nq * d;            // [Nq][d]
    const T* K_bh = K + bh_kv * Nk * d;         // [Nk][d]
    const T* V_bh = V + bh_kv * Nk * d;         // [Nk][d]
    T* O_bh = O + bh * Nq * d;                  // [Nq][d]
    float* L_bh = L + bh * Nq;                  // [Nq]
    // Line 4: Q_i → shared memory. Line 5: O_i = 0, ℓ_i = 0, m_i = −∞ in the registers of the
    // threads that own the rows (the CG lanes of a row hold the same m_i, ℓ_i).
    load_tile<T, d, B_r, LD>(Q_s, Q_bh + int64_t(i0) * d, Nq - i0);
    float O_i[TM][TD] = {};  // [TM][TD] in registers: rows row0 + RG·ii, columns 4 cg + 32 q
    float m_i[TM], l_i[TM];  // [TM] in registers
#pragma unroll
    for (int ii = 0; ii < TM; ++ii) {
      m_i[ii] = -inf;
      l_i[ii] = 0.f;
    }
    // Causal: the last row of Q_i sees keys up to i_last + Nk − Nq; the K_j past that are entirely
    // above the diagonal and are skipped (about half of them at Nq = Nk).
    const int i_last = min(i0 + B_r, Nq) - 1;
    const int n_keys = causal ? max(0, min(Nk, i_last + Nk - Nq + 1)) : Nk;
    const int T_c = ceil_div(n_keys, B_c);

    for (int j = 0; j < T_c; ++j) {
      const int j0 = j * B_c;
      // Line 7: K_j, V_j → shared memory, one copy for all warps. The barrier at the end of the
      // previous iteration made sure that no warp still reads the old ones.
      load_tile<T, d, B_c, LD>(K_s, K_bh + int64_t(j0) * d, Nk - j0);
      load_tile<T, d, B_c, LD>(V_s, V_bh + int64_t(j0) * d, Nk - j0);
      __syncthreads();
      // The mask is needed only where K_j runs past Nk, or crosses the diagonal: the first row of
      // Q_i (the one that sees fewest keys) does not see the last key of K_j.
      const bool masked = j0 + B_c > Nk || (causal && j0 + B_c - 1 > i0 + Nk - Nq);

      // Line 8: S_ij = Q_i K_jᵀ for this warp's rows, all B_c keys: a TM × TN tile per thread,
      // raw: τ joins in the exponent's fmaf.
      float S_ij[TM][TN];
      tile_QK<TM, TN, d, LD>(S_ij, Q_s + row0 * LD, K_s + cg * LD);
#pragma unroll
      for (int ii = 0; ii < TM; ++ii)
#pragma unroll
        for (int jj = 0; jj < TN; ++jj) {
          const int row = i0 + row0 + RG * ii, key = j0 + cg + CG * jj;
          const bool seen = !masked || (key < Nk && (!causal || key <= row + Nk - Nq));
          S_ij[ii][jj] = seen ? S_ij[ii][jj] : -inf;
        }

      // Line 9: m_i^(j) = max(m_i^(j−1), rowmax(S_ij)), P̃_ij = exp(S_ij − m_i^(j)),
      // ℓ_i^(j) = e^{m_i^(j−1) − m_i^(j)} ℓ_i^(j−1) + rowsum(P̃_ij). A row lives in the CG lanes of one
      // row group: its max and sum are shuffles within the warp, no shared memory, no barrier. A row
      // that has seen no key yet has m_i^(j) = −∞: subtract 0 instead, never −∞ − (−∞).
      // Line 10, first half: O_i ← diag(e^{m_i^(j−1) − m_i^(j)}) O_i, in registers.
      // LAB:BEGIN lines 9 and 10 for this thread's TM rows, with no shared memory and no barrier across warps: the row max over the thread's TN scores and then over the row's CG lanes (row_max), m_sub (0 while the row has seen no key), alpha = e^{m_i^(j−1) − m_i^(j)}, P̃ into this warp's rows of P_ij, ℓ_i with row_sum, O_i *= alpha in registers; then __syncwarp and O_i += P̃_ij V_j with tile_PV
#pragma unroll
      for (int ii = 0; ii < TM; ++ii) {
        float mx = m_i[ii];
#pragma unroll
        for (int jj = 0; jj < TN; ++jj) mx = fmaxf(mx, S_ij[ii][jj]);
        const float m_new = row_max(mx);
        const float m_sub = m_new == -inf ? 0.f : __fmul_rn(m_new, scale_log2);
        const float alpha = exp2f(__fmul_rn(m_i[ii], scale_log2) - m_sub);
        float sum = 0.f;
#pragma unroll
        for (int jj = 0; jj < TN; ++jj) {
          const float p = exp2f(fmaf(S_ij[ii][jj], scale_log2, -m_sub));
          P_ij[(row0 + RG * ii) * LDP + cg + CG * jj] = p;
          sum += p;
        }
        l_i[ii] = alpha * l_i[ii] + row_sum(sum);
        m_i[ii] = m_new;
#pragma unroll
        for (int c = 0; c < TD; ++c) O_i[ii][c] *= alpha;
      }
      __syncwarp();  // this warp's rows of P̃_ij are written and read by its own lanes only
      // Line 10, second half: O_i ← O_i + P̃_ij V_j for this warp's rows, over all B_c keys,
      // straight into the registers of O_i.
      tile_PV<TM, TD, B_c, LD, LDP>(O_i, P_ij + row0 * LDP, V_s + 4 * cg);
      // LAB:END
      __syncthreads();  // every warp is done with K_j, V_j (and Q_i) before they are overwritten
    }

    // Lines 12–15: O_i = diag(ℓ_i)⁻¹ O_i in the storage type, L_i = m_i + log ℓ_i → device memory,
    // each thread its own rows, from registers. A row that saw no key has ℓ_i = 0: O = 0, L = +∞.
#pragma unroll
    for (int ii = 0; ii < TM; ++ii) {
      const int row = i0 + row0 + RG * ii;
      if (row < Nq) {
        const float inv = l_i[ii] > 0.f ? 1.f / l_i[ii] : 0.f;
#pragma unroll
        for (int q = 0; q < TD / 4; ++q)
          store4(O_bh + int64_t(row) * d + 4 * cg + 32 * q, make_float4(O_i[ii][4 * q] * inv, O_i[ii][4 * q + 1] * inv,
                                                                        O_i[ii][4 * q + 2] * inv, O_i[ii][4 * q + 3] * inv));
        if (cg == 0) L_bh[row] = log_sum_exp(m_i[ii], l_i[ii], scale, scale_log2);
      }
    }
  }
}

// ---- The launcher ---------------------------------------------------------------------------------

constexpr int64_t kMaxN = int64_t(1) << 30;  // rows are indexed with int inside the kernel

size_t workspace_bytes(const Problem&) { return 0; }  // O_i, ℓ_i, m_i never leave the chip

std::string limits(const Problem& p) {
  if (p.Nq > kMaxN || p.Nk > kMaxN)
    return "indexes rows with 32-bit integers: it needs Nq, Nk <= 2^30 (got Nq = " +
           std::to_string(p.Nq) + ", Nk = " + std::to_string(p.Nk) + ")";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  constexpr size_t smem = Smem<d>::bytes;  // 168 KiB at d = 128 (one block per SM), 104 KiB at d = 64 (two)
  FL_CUDA(cudaFuncSetAttribute(attention_kernel<T, d>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t blocks = ceil_div(p.Nq, int64_t(B_r)) * p.B * p.H;  // one thread block per (Q_i, b, h)
  const dim3 grid(unsigned(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max()))), block(kThreads);
  attention_kernel<T, d><<<grid, block, smem, static_cast<cudaStream_t>(a.stream)>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
      a.lse, p.B * p.H, int(p.H), int(p.H_kv), int(p.Nq), int(p.Nk), float(p.softmax_scale()), p.causal);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<CudaCoreD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s07

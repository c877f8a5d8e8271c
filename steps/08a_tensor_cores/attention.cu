// flashladder — step 08a: FlashAttention-2's forward on the tensor cores.
//
// Step 07's scheme: one thread block per (Q_i, batch·head), warps that each own whole rows of Q_i,
// S_ij and O_i, and K_j, V_j shared by the warps in shared memory. What changes is who does the two
// matrix products of the inner loop: the tensor cores, through `mma.sync` m16n8k16 (fp16/bf16
// operands, fp32 accumulators; wrappers and the PTX fragment layouts in steps/device/mma.cuh).
//
//   S_ij  = Q_i K_jᵀ     A = Q_i (ldmatrix from shared memory), B = K_jᵀ (ldmatrix of K_j's rows),
//                        accumulated in fp32 registers: S_ij never exists in shared memory
//   P̃_ij  = exp(τ(S_ij − m_i))  in the same registers (step 07's exp2 form: one FFMA and one EX2 per
//                        element, L_i from log_sum_exp), then rounded to 16 bits in registers and used
//                        directly as the A operand of the next product (FlashAttention-2's trick: the
//                        accumulator layout of two 16×8 tiles is the A layout of one 16×16 tile)
//   O_i  += P̃_ij V_j     B = V_j (ldmatrix.trans: V_j is stored [B_c][d]; the product needs columns)
//
// Tile shapes: B_r = 64 (4 warps × 16 rows: one m-tile, the m of m16n8k16, per warp), B_c = 64, for
// every d. Shared memory holds Q_i, K_j, V_j: (64 + 2·64)·d·2 bytes = 24 KiB at d = 64, 96 KiB at
// d = 256. Loads are synchronous (device memory → registers → shared memory, 16 bytes per thread per
// step) and the shared-memory tiles are plain row-major: at d = 64 a row is 128 bytes, so the 8 rows
// that one ldmatrix matrix reads all start in the same bank — an 8-way bank conflict. Step 08b removes
// it (swizzle), 08c overlaps the loads with the math (cp.async), 08d tunes the EX2 and the tiles.
//
// Phases of the kernel, with the lines of FA2 Algorithm 1 (the FlashAttention-2 paper's numbering):
// the grid is line 3 (one block per Q_i); prologue, lines 4–5 (Q_i → shared memory, O_i = 0, ℓ_i = 0,
// m_i = −∞); main loop, lines 6–11 (load K_j, V_j; S_ij on tensor cores; mask; online softmax; O_i on
// tensor cores); epilogue, lines 12–15 (diag(ℓ_i)⁻¹ O_i, L_i = τ m_i + log ℓ_i, write both).
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/launch.cuh"

namespace fl::s08a {

constexpr int B_r = 64;                 // rows of Q_i per thread block
constexpr int B_c = 64;                 // rows of K_j, V_j per iteration of the inner loop
constexpr int kWarps = 4;               // warps per block, each owning B_r / kWarps = 16 rows of Q_i:
constexpr int M_t = B_r / 16 / kWarps;  // M_t = 1 m-tile of 16 rows (the m of m16n8k16); 08d uses 2
constexpr int kThreads = 32 * kWarps;

// Offset of element (row, col) of a [rows][d] tile in shared memory: plain row-major here.
// (Step 08b changes only this function: it swizzles the 16-byte chunks of each row.)
template <int d>
__device__ __forceinline__ int at(int row, int col) {
  return row * d + col;
}

// Rows [0, ROWS) of a [rows_left…][d] block in device memory → a [ROWS][d] tile in shared memory.
// Each thread moves 16 bytes (8 elements) per step: device memory → register → shared memory.
// Rows at or past rows_left (the partial last block of Q or K/V) are zero-filled and never read.
template <class T, int d, int ROWS>
__device__ __forceinline__ void load_tile(T* tile, const T* block, int rows_left) {
  constexpr int kChunks = d / 8;  // 16-byte chunks per row
  static_assert(ROWS * kChunks % kThreads == 0, "every thread moves the same number of chunks");
  // At most 8 loads in flight per thread (all of them for d <= 128): fully unrolled, d = 256 holds 16
  // (64 registers) next to the 128 registers of O_i and spilled 216 bytes; by 8 it spills nothing.
#pragma unroll 8
  for (int step = 0; step < ROWS * kChunks / kThreads; ++step) {
    const int idx = step * kThreads + threadIdx.x;  // consecutive threads, consecutive 16-byte chunks
    const int row = idx / kChunks, col = idx % kChunks * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (row < rows_left) x = *reinterpret_cast<const uint4*>(block + int64_t(row) * d + col);
    *reinterpret_cast<uint4*>(tile + at<d>(row, col)) = x;
  }
}

// One thread block computes O_i and L_i for one Q_i (B_r rows) of one (batch, head).
// Fragment names: lane = 4·g + t; in each of its warp's M_t m-tiles of 16 rows this thread holds rows
// g and g + 8, and in each 8-column n-tile the columns 2t and 2t + 1 (PTX ISA, "Matrix fragments for
// mma.m16n8k16"). Row and key indices are 32-bit (limits() keeps Nq, Nk below 2^30); offsets into the
// tensors are 64-bit.
template <class T, int d>
__global__ void __launch_bounds__(kThreads)
attention_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                 T* __restrict__ O, float* __restrict__ L, int64_t H, int64_t H_kv, int Nq, int Nk,
                 int64_t T_r, float scale, bool causal) {
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_s = reinterpret_cast<T*>(smem);  // Q_i: [B_r][d] in shared memory
  T* K_s = Q_s + B_r * d;               // K_j: [B_c][d] in shared memory
  T* V_s = K_s + B_c * d;               // V_j: [B_c][d] in shared memory

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair (see above)

  // blockIdx.x = i + T_r · (b·H + h): the Q blocks of one head are neighbours, so they run together
  // and share that head's K and V in L2. One flat x dimension: gridDim.y/z would cap B·H at 65535.
  const int64_t i = blockIdx.x % T_r, bh = blockIdx.x / T_r;
  const int64_t b = bh / H, h = bh % H, h_kv = h / (H / H_kv);  // GQA/MQA: head h reads K/V head h_kv
  const int i0 = int(i) * B_r;                                   // first row of Q_i
  const T* Q_g = Q + (bh * Nq + i0) * d;                         // Q_i: [min(B_r, Nq − i0)][d] in HBM
  const T* K_g = K + (b * H_kv + h_kv) * Nk * d;                 // K:   [Nk][d] in HBM
  const T* V_g = V + (b * H_kv + h_kv) * Nk * d;                 // V:   [Nk][d] in HBM
  T* O_g = O + (bh * Nq + i0) * d;                               // O_i: [min(B_r, Nq − i0)][d] in HBM
  float* L_g = L + bh * Nq + i0;                                 // L_i: [min(B_r, Nq − i0)] in HBM

  // ---- Prologue (lines 4–5): Q_i → shared memory. Rows past Nq are zero-filled, computed, not stored.
  load_tile<T, d, B_r>(Q_s, Q_g, Nq - i0);

  // The accumulators of this thread's rows: in m-tile mt, r = 0 (row g) and r = 1 (row g + 8).
  float O_i[M_t][d / 8][4];  // O_i: the warp's [16·M_t][d]; O_i[mt][n][2r+e] = O[16mt+g+8r][8n+2t+e]
  float m_i[M_t][2], l_i[M_t][2];  // running max m_i (of the unscaled S) and running sum ℓ_i
#pragma unroll
  for (int mt = 0; mt < M_t; ++mt) {
#pragma unroll
    for (int n = 0; n < d / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) O_i[mt][n][e] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_i[mt][r] = -INFINITY;
      l_i[mt][r] = 0.f;  // over this thread's columns only; the row's 4 threads add theirs at the end
    }
  }

  // Causal, bottom-right aligned: query row q sees key k iff k <= q + diag. The last row of Q_i,
  // min(i0 + B_r, Nq) − 1, sees keys [0, n_end); the blocks K_j past n_end are skipped entirely.
  const int diag = Nk - Nq;
  const int last_row = (i0 + B_r < Nq ? i0 + B_r : Nq) - 1;
  const int n_end = causal && last_row + diag + 1 < Nk ? last_row + diag + 1 : Nk;
  const int T_c = n_end > 0 ? ceil_div(n_end, B_c) : 0;  // K/V blocks this Q_i visits
  const int row0 = i0 + warp * 16 * M_t + g;  // this thread's row g of m-tile 0, as a row of Q

  // ---- Main loop (lines 6–11), once per K_j, V_j. Line 7: K_j, V_j → shared memory.
  for (int j = 0; j < T_c; ++j) {
    const int j0 = j * B_c;  // first key of K_j
    __syncthreads();         // every warp is done reading K_{j−1}, V_{j−1}
    load_tile<T, d, B_c>(K_s, K_g + int64_t(j0) * d, Nk - j0);
    load_tile<T, d, B_c>(V_s, V_g + int64_t(j0) * d, Nk - j0);
    __syncthreads();  // K_j, V_j (and, at j = 0, Q_i) are in shared memory for every warp

    // Line 8: S_ij = Q_i K_jᵀ, unscaled, the warp's [16·M_t][B_c] in registers: M_t × B_c/8 tiles.
    float S_ij[M_t][B_c / 8][4];  // S_ij[mt][n][2r + e] = S[16mt + g + 8r][8n + 2t + e]
#pragma unroll
    for (int mt = 0; mt < M_t; ++mt)
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) S_ij[mt][n][e] = 0.f;
    // LAB:BEGIN line 8 on tensor cores: for each k-step of 16 dims, Q_i's A fragments (one ldmatrix_x4 per m-tile) and K_j's B fragments (one ldmatrix_x4 gives two n-tiles: K_j's rows are the columns of B = K_jᵀ), then mma_m16n8k16 into S_ij[mt][n]; the accumulator layout is in the comment of S_ij above
#pragma unroll
    for (int k = 0; k < d / 16; ++k) {
      // A = Q_i[16 rows][16 cols at 16k], one ldmatrix.x4: lanes 0–15 give rows 0–15 at col 16k
      // (matrices 0, 1 = a0, a1: cols 0–7 of rows 0–7, 8–15), lanes 16–31 rows 0–15 at col 16k + 8
      // (matrices 2, 3 = a2, a3). Then lane 4g + t holds a0 = A[g][2t..2t+1], a1 = A[g+8][2t..],
      // a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]: the A layout of m16n8k16.
      uint32_t a[M_t][4];  // Q_i fragments: M_t × [16][16]
#pragma unroll
      for (int mt = 0; mt < M_t; ++mt)
        mma::ldmatrix_x4(a[mt], Q_s + at<d>((warp * M_t + mt) * 16 + lane % 16, 16 * k + lane / 16 * 8));
#pragma unroll
      for (int n = 0; n < B_c / 16; ++n) {
        // B = K_jᵀ[16 dims][8 keys]; B column c is K_j row c, so K_j's rows are exactly the "Bᵀ rows"
        // that the non-transposing ldmatrix delivers: matrix (key block kb, dim half dh) gives
        // lane 4g + t the pair K_j[8kb + g][8dh + 2t..] = B[8dh + 2t..][g]. One x4 covers two n-tiles:
        // lanes 0–7 keys 16n+0..7 dims +0 (b0 of tile 2n), 8–15 keys 16n+0..7 dims +8 (b1 of 2n),
        // 16–23 keys 16n+8..15 dims +0 (b0 of 2n+1), 24–31 keys 16n+8..15 dims +8 (b1 of 2n+1).
        uint32_t kb[4];  // K_j fragment: [16 keys][16 dims]
        mma::ldmatrix_x4(kb, K_s + at<d>(16 * n + lane % 8 + lane / 16 * 8, 16 * k + lane / 8 % 2 * 8));
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
        for (int mt = 0; mt < M_t; ++mt) {  // each K_j fragment serves the warp's M_t m-tiles
          mma::mma_m16n8k16<T>(S_ij[mt][2 * n], a[mt], b0);
          mma::mma_m16n8k16<T>(S_ij[mt][2 * n + 1], a[mt], b1);
        }
      }
    }
    // LAB:END

    // No pass scaling S_ij by τ: the scale is folded into the exponent below.

    // Mask only blocks that need it: the partial last block (keys past Nk) and, when causal, the
    // blocks the diagonal crosses (some key past the first row's last visible key, i0 + diag).
    if (j0 + B_c > Nk || (causal && j0 + B_c - 1 > i0 + diag)) {
#pragma unroll
      for (int mt = 0; mt < M_t; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // Row row0 + 16mt + 8r sees keys [0, last): in this block, the columns [0, seen) of S_ij.
          const int row = row0 + 16 * mt + 8 * r;
          const int last = causal && row + diag + 1 < Nk ? row + diag + 1 : Nk;
          const int seen = last - j0 < 0 ? 0 : last - j0 > B_c ? B_c : last - j0;
#pragma unroll
          for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (8 * n + 2 * t + e >= seen) S_ij[mt][n][2 * r + e] = -INFINITY;
        }
    }

    // Online softmax (line 9) in base 2, m_i the max of the unscaled S (τ > 0: also the max of τ S):
    // m_i^(j) = max(m_i^(j−1), rowmax(S_ij)), P̃_ij = 2^(S_ij·τ log2 e − m_i^(j)·τ log2 e),
    // ℓ_i^(j) = 2^((m_i^(j−1) − m_i^(j))·τ log2 e) ℓ_i^(j−1) + rowsum(P̃_ij).
    // A row lives in the 4 threads of a quad (lanes 4g..4g+3): two xor-shuffles give its max.
#pragma unroll
    for (int mt = 0; mt < M_t; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m_new = m_i[mt][r];
#pragma unroll
        for (int n = 0; n < B_c / 8; ++n)
          m_new = fmaxf(m_new, fmaxf(S_ij[mt][n][2 * r], S_ij[mt][n][2 * r + 1]));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
        // A row that has seen no key yet has m_new = −∞; subtracting it would give 2^(−∞ + ∞) = NaN.
        // Subtract 0 instead: every P̃ and the rescale factor are then 2^(−∞) = 0, ℓ stays 0.
        const float m_sub = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, scale_log2);
        // Both products rounded alike (__fmul_rn is never fused into an FMA): written as a·b − m_sub, the
        // compiler makes it fma(a, b, −m_sub), whose result for an unchanged max is not 0 but the rounding
        // error of m_sub; 2^that then scales ℓ_i once per K_j, compounding: L was off by 1.8e-4 after
        // 1024 blocks (N = 131072, test Gpu/LongSequence) and by 4 ulp at scores of 1e4.
        const float alpha = exp2f(__fmul_rn(m_i[mt][r], scale_log2) - m_sub);  // 0 at first
        m_i[mt][r] = m_new;
        float rowsum = 0.f;
#pragma unroll
        for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {  // one FFMA, one EX2 (exp2f); S_ij becomes P̃_ij in place
            float& s = S_ij[mt][n][2 * r + e];
            s = exp2f(fmaf(s, scale_log2, -m_sub));
            rowsum += s;
          }
        l_i[mt][r] = alpha * l_i[mt][r] + rowsum;
        // Line 10, first half: O_i^(j) = diag(e^{τ(m_i^(j−1) − m_i^(j))}) O_i^(j−1) (un-scaled O).
#pragma unroll
        for (int n = 0; n < d / 8; ++n) {
          O_i[mt][n][2 * r] *= alpha;
          O_i[mt][n][2 * r + 1] *= alpha;
        }
      }

    // Line 10, second half: O_i += P̃_ij V_j, k = B_c/16 steps of 16 keys, d/8 n-tiles.
#pragma unroll
    for (int k = 0; k < B_c / 16; ++k) {
      // A = P̃_ij[16 rows][16 keys at 16k] from the accumulators of n-tiles 2k and 2k + 1, rounded to T:
      // a0 = P̃[g][16k + 2t..]     = S_ij[2k][0, 1]      a1 = P̃[g+8][16k + 2t..]     = S_ij[2k][2, 3]
      // a2 = P̃[g][16k + 8 + 2t..] = S_ij[2k+1][0, 1]    a3 = P̃[g+8][16k + 8 + 2t..] = S_ij[2k+1][2, 3]
      uint32_t a[M_t][4];  // P̃_ij fragments: M_t × [16][16]
      // LAB:BEGIN P̃_ij stays in registers: the accumulators of S_ij's n-tiles 2k and 2k + 1 are, rounded to T and packed in pairs (mma::pack2), exactly the A fragment a0…a3 of m16n8k16 for keys 16k … 16k + 15 (the comment above gives the mapping)
      // LAB:STUB for (int mt = 0; mt < M_t; ++mt) a[mt][0] = a[mt][1] = a[mt][2] = a[mt][3] = 0u;  // (to write)
#pragma unroll
      for (int mt = 0; mt < M_t; ++mt) {
        a[mt][0] = mma::pack2<T>(S_ij[mt][2 * k][0], S_ij[mt][2 * k][1]);
        a[mt][1] = mma::pack2<T>(S_ij[mt][2 * k][2], S_ij[mt][2 * k][3]);
        a[mt][2] = mma::pack2<T>(S_ij[mt][2 * k + 1][0], S_ij[mt][2 * k + 1][1]);
        a[mt][3] = mma::pack2<T>(S_ij[mt][2 * k + 1][2], S_ij[mt][2 * k + 1][3]);
      }
      // LAB:END
#pragma unroll
      for (int n = 0; n < d / 16; ++n) {
        // B = V_j[16 keys at 16k][8 dims]: b0 = V_j[16k + 2t..2t+1][8n' + g] is a column pair, so the
        // 8×8 matrices are read with .trans: matrix (keys 8kh.., dims 8dh..) stored row-major gives
        // lane 4g + t the elements (2t, g), (2t+1, g). One x4 covers two n-tiles: lanes 0–7 keys
        // 16k+0..7 dims 16n+0 (b0 of tile 2n), 8–15 keys 16k+8..15 dims 16n+0 (b1 of 2n),
        // 16–23 keys 16k+0..7 dims 16n+8 (b0 of 2n+1), 24–31 keys 16k+8..15 dims 16n+8 (b1 of 2n+1).
        uint32_t vb[4];  // V_j fragment: [16 keys][16 dims]
        mma::ldmatrix_x4_trans(vb, V_s + at<d>(16 * k + lane % 16, 16 * n + lane / 16 * 8));
        const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
        for (int mt = 0; mt < M_t; ++mt) {  // each V_j fragment serves the warp's M_t m-tiles
          mma::mma_m16n8k16<T>(O_i[mt][2 * n], a[mt], b0);
          mma::mma_m16n8k16<T>(O_i[mt][2 * n + 1], a[mt], b1);
        }
      }
    }
  }

  // ---- Epilogue (lines 12–15): O_i = diag(ℓ_i)⁻¹ O_i, L_i = τ m_i + log ℓ_i, rows past Nq not stored.
#pragma unroll
  for (int mt = 0; mt < M_t; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_i[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);  // the quad's 4 partial sums: the row's ℓ_i
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      // ℓ_i = 0 only for a row that sees no key (any visible key contributes 2^0 = 1 at the max):
      // then O = 0 and L = +∞, so the backward's exp(S − L) is 0.
      const float inv_l = l > 0.f ? 1.f / l : 0.f;
      const int row = (warp * M_t + mt) * 16 + g + 8 * r;  // within Q_i
      if (i0 + row < Nq) {
#pragma unroll
        for (int n = 0; n < d / 8; ++n)  // 2 elements (4 bytes) per store
          *reinterpret_cast<uint32_t*>(O_g + int64_t(row) * d + 8 * n + 2 * t) =
              mma::pack2<T>(O_i[mt][n][2 * r] * inv_l, O_i[mt][n][2 * r + 1] * inv_l);
        if (t == 0) L_g[row] = log_sum_exp(m_i[mt][r], l, scale, scale_log2);
      }
    }
}

size_t workspace_bytes(const Problem&) { return 0; }

std::string limits(const Problem& p) {
  if (p.Nq >= (int64_t(1) << 30) || p.Nk >= (int64_t(1) << 30))
    return "keeps row and key indices in 32 bits: Nq = " + std::to_string(p.Nq) +
           " and Nk = " + std::to_string(p.Nk) + " must both be below 2^30";
  const int64_t blocks = ceil_div<int64_t>(p.Nq, B_r) * p.B * p.H;
  if (blocks > INT_MAX)
    return "launches one thread block per (Q block of " + std::to_string(B_r) +
           " rows, batch, head): " + std::to_string(blocks) + " blocks exceed the grid limit 2^31 − 1";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  const int64_t T_r = ceil_div<int64_t>(p.Nq, B_r);
  const size_t smem = size_t(B_r + 2 * B_c) * d * sizeof(T);  // Q_i, K_j, V_j
  auto kernel = attention_kernel<T, d>;
  if (smem > 48 * 1024)
    FL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<dim3(unsigned(T_r * p.B * p.H)), dim3(kThreads), smem, static_cast<cudaStream_t>(a.stream)>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<T*>(a.o), a.lse, p.H, p.H_kv, int(p.Nq), int(p.Nk), T_r, float(p.softmax_scale()),
      p.causal);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<Fa2D>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s08a

// flashladder — step 08f: step 08e with the softmax of one m-tile overlapping the other's wgmma.
//
// wgmma is asynchronous: an issued product runs on the tensor cores while the warps go on with other
// instructions, until they wait for its group. 08e waits at once after each product, so within a
// warpgroup the tensor cores idle through the whole softmax (at d = 128, 64·M_t exponentials, max,
// sums and the rescale of O_i per thread per K_j), and the warps idle through both products.
// FlashAttention-3 overlaps them; this step takes the simplest form of that idea, which the two
// m-tiles of a warpgroup make possible:
//
//   issue S = Q K_jᵀ for m-tile 0, commit;  issue S = Q K_jᵀ for m-tile 1, commit
//   wait for m-tile 0's S   → softmax of m-tile 0  (while the tensor cores compute m-tile 1's S)
//   issue O += P̃ V_j for m-tile 0, commit
//   wait for m-tile 1's S   → softmax of m-tile 1  (while the tensor cores compute m-tile 0's O)
//   issue O += P̃ V_j for m-tile 1, commit;  wait for everything
//
// Groups complete in order, so "wait for m-tile mt's S" is always wait_group(M_t − 1): after S(mt)
// come M_t − 1 − mt products S and mt products O. Only the first S and the last O run alone.
// At d = 256 (M_t = 1) there is nothing to overlap inside a warpgroup.
//
// The overlap costs registers: m-tile 1's S_ij is in flight while m-tile 0's is exponentiated and
// packed. So B_c = 64 at every d (08e: 128 for d <= 64), and with that a thread block at d <= 64 needs
// few enough registers (<= 168, __launch_bounds__ below) for 3 blocks per SM instead of 2, which is
// most of what this step gains at d = 64 (measured: docs/results, README).
//
// What did not work: deferring the last m-tile's O product into the next iteration (FlashAttention-3
// rotates its loop that way, so that product overlaps the next softmax too). ptxas serializes every
// wgmma of the kernel when a product is still in flight at the loop's back edge, or sits in a branch
// (warnings C7514, C7515); rotated so that neither happens, the copy of V_{j+1} has to wait for that
// product, and at d = 128 the step got 4–8% slower (H200, docs/results/2026-11-22-h200-*).
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/device/wgmma.cuh"
#include "steps/launch.cuh"

namespace fl::s08f {

// The tiles per head dim (see the header): one warpgroup (4 warps) per block, owning M_t m-tiles of
// 64 rows (the m of wgmma m64nNk16), B_r = 64·M_t rows of Q_i; B_c rows of K_j, V_j per iteration;
// shared-memory panels P columns wide.
template <int d>
struct Tiles {
  static constexpr int M_t = d <= 128 ? 2 : 1;
  static constexpr int B_r = 64 * M_t;
  static constexpr int B_c = 64;                    // every d (see the header)
  static constexpr int kBlocksPerSM = d <= 64 ? 3 : 1;  // asked of the compiler: <= 168 registers at d <= 64
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int P = d % 64 == 0 ? 64 : 32;
};

// Offset of element (row, col) of a [ROWS][d] tile in shared memory, stored as d/P panels [ROWS][P]
// one after the other (the layout wgmma reads, steps/device/wgmma.cuh), the 16-byte chunk c of a panel row
// stored at chunk c ^ swizzle(row):
//   P = 64 (d = 64, 128, 256): rows of 128 bytes, swizzle = row % 8 (the 128-byte swizzle).
//   P = 32 (d = 32, 96): rows of 64 bytes, swizzle = row / 2 % 4 (the 64-byte swizzle).
// Either way 8 consecutive rows put a chunk in 8 different bank groups, as in 08b.
template <int d, int ROWS>
__device__ __forceinline__ int at(int row, int col) {
  constexpr int P = Tiles<d>::P;
  const int swizzle = P == 64 ? row % 8 : row / 2 % 4;
  return col / P * ROWS * P + row * P + ((col % P / 8) ^ swizzle) * 8 + col % 8;
}

// Rows [0, ROWS) of a [rows_left…][d] block in device memory → a [ROWS][d] tile in shared memory.
// Each thread issues 16-byte cp.async copies (8 elements), device memory → shared memory, and does not
// wait for them: the caller commits them as one group and waits for the group when it needs the tile.
// Rows at or past rows_left (the partial last block of Q or K/V) are zero-filled by the copy (src-size
// 0) and never read; their source address is the block's first row, which exists.
template <class T, int d, int ROWS>
__device__ __forceinline__ void load_tile(T* tile, const T* block, int rows_left) {
  constexpr int kThreads = Tiles<d>::kThreads;
  constexpr int kChunks = d / 8;  // 16-byte chunks per row
  static_assert(ROWS * kChunks % kThreads == 0, "every thread moves the same number of chunks");
  // Unrolled by 4, not fully, as in 08c: fully unrolled, the copies' addresses crowd O_i's registers.
#pragma unroll 4
  for (int step = 0; step < ROWS * kChunks / kThreads; ++step) {
    const int idx = step * kThreads + threadIdx.x;  // consecutive threads, consecutive 16-byte chunks
    const int row = idx / kChunks, col = idx % kChunks * 8;
    const bool valid = row < rows_left;
    mma::cp_async_16(tile + at<d, ROWS>(row, col), block + (valid ? int64_t(row) * d + col : 0), valid);
  }
}

// One thread block computes O_i and L_i for one Q_i (B_r rows) of one (batch, head).
// Fragment names: lane = 4·g + t; in m-tile mt (rows 64·mt … 64·mt + 63 of Q_i) warp w holds rows
// 64·mt + 16w + g and + 8, and in each 8-column n-tile the columns 2t and 2t + 1: the accumulator of
// wgmma m64nNk16 is, per warp, the mma.m16n8 layout of 08d (steps/device/wgmma.cuh). Row and key indices
// are 32-bit (limits() keeps Nq, Nk below 2^30); offsets into the tensors are 64-bit.
template <class T, int d>
__global__ void __launch_bounds__(Tiles<d>::kThreads, Tiles<d>::kBlocksPerSM)
attention_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                 T* __restrict__ O, float* __restrict__ L, int64_t H, int64_t H_kv, int Nq, int Nk,
                 int64_t T_r, float scale, bool causal) {
  constexpr int B_r = Tiles<d>::B_r, B_c = Tiles<d>::B_c, M_t = Tiles<d>::M_t, P = Tiles<d>::P;
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // wgmma's swizzle is applied to address bits, so every panel starts on a 1024-byte boundary.
  unsigned char* smem = smem_raw + (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* Q_s = reinterpret_cast<T*>(smem);  // Q_i: d/P panels [B_r][P] in shared memory
  T* K_buf = Q_s + B_r * d;             // K_j, K_{j+1}: [2] × d/P panels [B_c][P] (double buffer)
  T* V_buf = K_buf + 2 * B_c * d;       // V_j, V_{j+1}: [2] × d/P panels [B_c][P]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair (see above)
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma exists only in sm_90a code; the ladder (Arch::sm90a) refuses other GPUs before any launch
#else

  // blockIdx.x = i + T_r · (b·H + h): the Q blocks of one head are neighbours, so they run together
  // and share that head's K and V in L2. One flat x dimension: gridDim.y/z would cap B·H at 65535.
  // Causal: i runs backwards, so the blocks with the most K_j start first.
  const int64_t i = causal ? T_r - 1 - blockIdx.x % T_r : blockIdx.x % T_r, bh = blockIdx.x / T_r;
  const int64_t b = bh / H, h = bh % H, h_kv = h / (H / H_kv);  // GQA/MQA: head h reads K/V head h_kv
  const int i0 = int(i) * B_r;                                   // first row of Q_i
  const T* Q_g = Q + (bh * Nq + i0) * d;                         // Q_i: [min(B_r, Nq − i0)][d] in HBM
  const T* K_g = K + (b * H_kv + h_kv) * Nk * d;                 // K:   [Nk][d] in HBM
  const T* V_g = V + (b * H_kv + h_kv) * Nk * d;                 // V:   [Nk][d] in HBM
  T* O_g = O + (bh * Nq + i0) * d;                               // O_i: [min(B_r, Nq − i0)][d] in HBM
  float* L_g = L + bh * Nq + i0;                                 // L_i: [min(B_r, Nq − i0)] in HBM

  // ---- Prologue (lines 4–5): Q_i → shared memory. Rows past Nq are zero-filled, computed, not stored.
  load_tile<T, d, B_r>(Q_s, Q_g, Nq - i0);  // (committed below with K_0, V_0)

  // The accumulators of this thread's rows: in m-tile mt, r = 0 (row g) and r = 1 (row g + 8).
  float O_i[M_t][d / 8][4];  // O_i: the warp's [M_t × 16][d]; O_i[mt][n][2r+e] = O[64mt+16w+g+8r][8n+2t+e]
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
  const int row0 = i0 + warp * 16 + g;  // this thread's row g of m-tile 0, as a row of Q
  if (T_c > 0) {  // K_0, V_0 into buffer 0, in flight with Q_i
    load_tile<T, d, B_c>(K_buf, K_g, Nk);
    load_tile<T, d, B_c>(V_buf, V_g, Nk);
  }
  mma::cp_async_commit();

  // ---- Main loop (lines 6–11), once per K_j, V_j. Line 7: K_j, V_j → shared memory, issued early.
  for (int j = 0; j < T_c; ++j) {
    const int j0 = j * B_c;   // first key of K_j
    mma::cp_async_wait<0>();  // this thread's copies of K_j, V_j (and, at j = 0, Q_i) have landed
    wgmma::fence_proxy_async();  // ... and are visible to the tensor cores, which read them directly
    __syncthreads();          // everyone's have; every warp is done reading K_{j−1}, V_{j−1}
    if (j + 1 < T_c) {        // K_{j+1}, V_{j+1} into the other buffers, in flight during the math below
      const int j1 = j0 + B_c;  // first key of K_{j+1}
      load_tile<T, d, B_c>(K_buf + (j + 1) % 2 * B_c * d, K_g + int64_t(j1) * d, Nk - j1);
      load_tile<T, d, B_c>(V_buf + (j + 1) % 2 * B_c * d, V_g + int64_t(j1) * d, Nk - j1);
      mma::cp_async_commit();
    }
    const T* K_s = K_buf + j % 2 * B_c * d;  // K_j: d/P panels [B_c][P] in shared memory
    const T* V_s = V_buf + j % 2 * B_c * d;  // V_j: d/P panels [B_c][P] in shared memory

    // Line 8: S_ij = Q_i K_jᵀ, unscaled, the warp's [M_t × 16][B_c] in registers: M_t × B_c/8 tiles.
    // Per m-tile, d/16 wgmma m64n{B_c}k16: A = rows 64mt.. of Q_i, B = K_j, k-step kk reading the 16
    // columns 16kk.. (panel 16kk / P, 32 bytes further into the row for each 16 columns).
    float S_ij[M_t][B_c / 8][4];  // S_ij[mt][n][2r + e] = S[64mt + 16w + g + 8r][8n + 2t + e]
    wgmma::fence();  // S_ij's registers were last read by the previous iteration's P̃_ij
#pragma unroll
    for (int mt = 0; mt < M_t; ++mt) {  // one group per m-tile, so each can be waited for alone
#pragma unroll
      for (int kk = 0; kk < d / 16; ++kk)
        wgmma::mma_ss<T, B_c>(reinterpret_cast<float(&)[B_c / 2]>(S_ij[mt]),
                              wgmma::desc<P>(Q_s + 16 * kk / P * B_r * P + 64 * mt * P + 16 * kk % P, 16),
                              wgmma::desc<P>(K_s + 16 * kk / P * B_c * P + 16 * kk % P, 16), kk > 0);
      wgmma::commit();
    }

    // No pass scaling S_ij by τ: the scale is folded into the exponent below.

    // From here on, one m-tile at a time: its softmax runs while the tensor cores work on the other.
#pragma unroll
    for (int mt = 0; mt < M_t; ++mt) {
      wgmma::wait<M_t - 1>();  // S_ij of m-tile mt is complete (M_t − 1 later groups may still run)
      wgmma::pin(reinterpret_cast<float(&)[B_c / 2]>(S_ij[mt]));

      // Mask only blocks that need it: the partial last block (keys past Nk) and, when causal, the
      // blocks the diagonal crosses (some key past the first row's last visible key, i0 + diag).
      if (j0 + B_c > Nk || (causal && j0 + B_c - 1 > i0 + diag)) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // Row row0 + 64mt + 8r sees keys [0, last): in this block, the columns [0, seen) of S_ij.
          const int row = row0 + 64 * mt + 8 * r;
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
        const float alpha = mma::exp2_approx(__fmul_rn(m_i[mt][r], scale_log2) - m_sub);  // 0 at first
        m_i[mt][r] = m_new;
        float rowsum = 0.f;
#pragma unroll
        for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {  // one FFMA, one EX2; S_ij becomes P̃_ij in place
            float& s = S_ij[mt][n][2 * r + e];
            s = mma::exp2_approx(fmaf(s, scale_log2, -m_sub));
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

      // Line 10, second half: O_i += P̃_ij V_j, B_c/16 k-steps of 16 keys, d/P wgmma m64n{P}k16 each
      // (one per panel of V_j: the n of one instruction is one panel, P columns of O_i).
      // A = P̃_ij[16 rows][16 keys at 16k] from the accumulators of n-tiles 2k and 2k + 1, rounded to T:
      // a0 = P̃[g][16k + 2t..]     = S_ij[2k][0, 1]      a1 = P̃[g+8][16k + 2t..]     = S_ij[2k][2, 3]
      // a2 = P̃[g][16k + 8 + 2t..] = S_ij[2k+1][0, 1]    a3 = P̃[g+8][16k + 8 + 2t..] = S_ij[2k+1][2, 3]
      uint32_t a[B_c / 16][4];  // P̃_ij fragments of m-tile mt: B_c/16 × [16][16]
#pragma unroll
      for (int k = 0; k < B_c / 16; ++k) {
        a[k][0] = mma::pack2<T>(S_ij[mt][2 * k][0], S_ij[mt][2 * k][1]);
        a[k][1] = mma::pack2<T>(S_ij[mt][2 * k][2], S_ij[mt][2 * k][3]);
        a[k][2] = mma::pack2<T>(S_ij[mt][2 * k + 1][0], S_ij[mt][2 * k + 1][1]);
        a[k][3] = mma::pack2<T>(S_ij[mt][2 * k + 1][2], S_ij[mt][2 * k + 1][3]);
      }
      wgmma::fence();  // the rescaled O_i and the new P̃_ij are written before the tensor cores read them
#pragma unroll
      for (int k = 0; k < B_c / 16; ++k)
#pragma unroll
        for (int p = 0; p < d / P; ++p)  // V_j rows 16k.. of panel p: 16 rows of 2P bytes further on
          wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(O_i[mt][p * P / 8]), a[k],
                              wgmma::desc<P>(V_s + p * B_c * P + 16 * k * P, B_c * P * sizeof(T)));
      wgmma::commit();  // runs while the next m-tile's softmax does
    }
    wgmma::wait<0>();  // every O_i product is complete before the next rescale and the next S_ij
#pragma unroll
    for (int mt = 0; mt < M_t; ++mt) wgmma::pin(reinterpret_cast<float(&)[d / 2]>(O_i[mt]));
  }

  mma::cp_async_wait<0>();  // no copy outlives the loop (with T_c = 0, Q_i's were never waited for)

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
      const int row = 64 * mt + 16 * warp + g + 8 * r;  // within Q_i
      if (i0 + row < Nq) {
#pragma unroll
        for (int n = 0; n < d / 8; ++n)  // 2 elements (4 bytes) per store
          *reinterpret_cast<uint32_t*>(O_g + int64_t(row) * d + 8 * n + 2 * t) =
              mma::pack2<T>(O_i[mt][n][2 * r] * inv_l, O_i[mt][n][2 * r + 1] * inv_l);
        if (t == 0) L_g[row] = log_sum_exp(m_i[mt][r], l, scale, scale_log2);
      }
    }
#endif
}

size_t workspace_bytes(const Problem&) { return 0; }

std::string limits(const Problem& p) {
  if (p.Nq >= (int64_t(1) << 30) || p.Nk >= (int64_t(1) << 30))
    return "keeps row and key indices in 32 bits: Nq = " + std::to_string(p.Nq) +
           " and Nk = " + std::to_string(p.Nk) + " must both be below 2^30";
  const int64_t B_r = p.d <= 128 ? 128 : 64;  // Tiles<d>::B_r
  const int64_t blocks = ceil_div<int64_t>(p.Nq, B_r) * p.B * p.H;
  if (blocks > INT_MAX)
    return "launches one thread block per (Q block of " + std::to_string(B_r) +
           " rows, batch, head): " + std::to_string(blocks) + " blocks exceed the grid limit 2^31 − 1";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  constexpr int B_r = Tiles<d>::B_r, B_c = Tiles<d>::B_c, kThreads = Tiles<d>::kThreads;
  const int64_t T_r = ceil_div<int64_t>(p.Nq, B_r);
  const size_t smem = size_t(B_r + 4 * B_c) * d * sizeof(T) + 1024;  // Q_i, 2 × K_j, 2 × V_j; alignment
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

}  // namespace fl::s08f

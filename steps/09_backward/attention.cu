// flashladder — step 09: the backward pass, FlashAttention-2's Algorithm 2, on tensor cores.
//
// Given dO = ∂loss/∂O, the backward returns dQ, dK, dV without ever holding the N×N matrices S or P.
// It keeps from the forward only O and L = logsumexp of the scaled scores, and recomputes each block
// P_ij = exp(S_ij − L_i) on chip (L_i already holds the max and the sum, so no online softmax is
// needed: the backward has no rescaling at all). Three kernels:
//
//   1. D_i = rowsum(dO_i ∘ O_i)                          [B][H][Nq] fp32, and dQ's fp32 accumulator = 0
//   2. one thread block per (K_j/V_j column block j, batch, K/V head):            (Algorithm 2, line 5)
//        load K_j, V_j once; dK_j = dV_j = 0 in registers (fp32)
//        for every query head h of the K/V head's group, for every Q block i that sees a key of K_j:
//          S_ij  = scale · Q_i K_jᵀ                                              (tensor cores)
//          P_ij  = exp(S_ij − L_i)            masked entries 0; L_i = +∞ rows give P = 0
//          dV_j += P_ijᵀ dO_i                                                    (tensor cores)
//          dP_ij = dO_i V_jᵀ                                                     (tensor cores)
//          dS_ij = P_ij ∘ (dP_ij − D_i)
//          dQ_i += scale · dS_ij K_j          atomicAdd into an fp32 buffer in device memory (tensor cores)
//          dK_j += scale · dS_ijᵀ Q_i                                            (tensor cores)
//        write dK_j, dV_j
//   3. dQ (fp32 accumulator) → the storage type.
//
// The forward is step 08d's, this step's base: the backward needs O and L from a forward, and any
// correct one will do, so it runs 08d's (the last forward on mma.sync, which this backward also uses)
// through 08d's own impl. This file is the backward's kernel 2; kernels 1 and 3, the limits and the
// workspace are in steps/backward.cuh, which step 09b shares.
//
// Work split (kernel 2), following FlashAttention-2's own sm80 kernel: 8 warps; each of the five
// products gets its own warp grid over its own output, so that every warp has an equal share of every
// product. The price is that P_ij and dS_ij cross warps, so they go through shared memory once per
// iteration; that is also where the transposes P_ijᵀ and dS_ijᵀ come from (ldmatrix.trans), which the
// register-resident trick of the forward cannot give: a thread's accumulator holds two neighbouring
// columns of one row, and the A operand of P_ijᵀ dO_i needs two neighbouring *rows* of P_ij.
//
// Fragment names, as in steps/device/mma.cuh: lane = 4·g + t; a thread holds rows g and g + 8 of each 16-row
// m-tile, and columns 2t, 2t + 1 of each 8-column n-tile. acc[mt][nt][e]: e = 0, 1 row g, e = 2, 3
// row g + 8; e & 1 the column 2t + (e & 1).
#include "steps/backward.cuh"

namespace fl::s08d { extern const StepImpl impl; }  // the forward this step runs: its base's

namespace fl::s09 {

using namespace fl::mma;
using namespace fl::bwd;

// ==== Shared-memory tiles and tensor-core fragments ================================================
// Every shared tile is row-major with a row stride of (columns + 8) elements. The 16 padding bytes
// per row make the stride an odd number of 16-byte units (d = 32, 64, 96, 128 → 5, 9, 13, 17; the
// [B_r][B_c] tiles 17), so the 8 rows that one ldmatrix phase reads fall in 8 different 16-byte bank
// groups: no bank conflicts, at the cost of 6% more shared memory at d = 128. (Step 08b's XOR swizzle
// does the same without the padding; padding keeps every index here readable as row·ld + col.)

/// Rows [0, ROWS) of a [rows][d] block in device memory (row stride d) → a [ROWS][d + 8] tile in
/// shared memory, 16 bytes per cp.async (the copy bypasses registers and overlaps with the math until
/// the cp_async_wait that needs it). Rows ≥ valid are zero-filled and not read: partial tiles stay in
/// bounds and contribute zeros.
template <int ROWS, int d, int kThreads, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* block, int valid, int tid) {
  constexpr int kChunks = d / 8;  // 16-byte chunks per row
  constexpr int kTotal = ROWS * kChunks;
#pragma unroll
  for (int step = 0; step < (kTotal + kThreads - 1) / kThreads; ++step) {
    const int idx = step * kThreads + tid;  // consecutive threads, consecutive chunks of a row
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int row = idx / kChunks, col = idx % kChunks * 8;
      const bool ok = row < valid;
      cp_async_16(tile + row * (d + 8) + col, block + (ok ? int64_t(row) * d + col : 0), ok);
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

// ==== Backward 2 of 3: the main loop, one thread block per (K_j/V_j, batch, K/V head) ==============
// Tile shapes per head dim, FlashAttention-2's own for sm80/sm90 (B_c = 128 K/V rows, B_r = 128 Q rows
// at d ≤ 64, 64 at d ≥ 96, where dK_j and dV_j take 2·128·d/256 = d registers per thread), and the
// warp grids: WR_S of the 8 warps along B_r for S_ij and dP_ij ([B_r][B_c]), WR_KV along B_c for dK_j
// and dV_j ([B_c][d]), WR_Q along B_r for dQ_i ([B_r][d]); the rest of the 8 along the other side.
template <int d> struct BwdTile;
template <> struct BwdTile<32>  { static constexpr int B_r = 128, B_c = 128, WR_S = 4, WR_KV = 4, WR_Q = 4; };
template <> struct BwdTile<64>  { static constexpr int B_r = 128, B_c = 128, WR_S = 4, WR_KV = 4, WR_Q = 4; };
template <> struct BwdTile<96>  { static constexpr int B_r = 64,  B_c = 128, WR_S = 2, WR_KV = 4, WR_Q = 2; };
template <> struct BwdTile<128> { static constexpr int B_r = 64,  B_c = 128, WR_S = 2, WR_KV = 4, WR_Q = 2; };

template <int d>
struct Bwd : BwdTile<d> {
  using Tile = BwdTile<d>;
  static constexpr int B_r = Tile::B_r, B_c = Tile::B_c;
  static constexpr int kWarps = 8, kThreads = 32 * kWarps;
  static constexpr int ld = d + 8;     // row stride of the [·][d] tiles in shared memory
  static constexpr int ldS = B_c + 8;   // row stride of P_ij, dS_ij [B_r][B_c]
  // S_ij, dP_ij: each warp a [B_r/WR_S][B_c/WC_S] block = MT_S × NT_S mma tiles
  static constexpr int WC_S = kWarps / Tile::WR_S;
  static constexpr int MT_S = B_r / Tile::WR_S / 16, NT_S = B_c / WC_S / 8;
  // dK_j, dV_j: each warp a [B_c/WR_KV][d/WC_KV] block
  static constexpr int WC_KV = kWarps / Tile::WR_KV;
  static constexpr int MT_KV = B_c / Tile::WR_KV / 16, NT_KV = d / WC_KV / 8;
  // dQ_i: each warp a [B_r/WR_Q][d/WC_Q] block
  static constexpr int WC_Q = kWarps / Tile::WR_Q;
  static constexpr int MT_Q = B_r / Tile::WR_Q / 16, NT_Q = d / WC_Q / 8;
  static_assert(MT_S * 16 * Tile::WR_S == B_r && NT_S * 8 * WC_S == B_c, "S warp grid must tile [B_r][B_c]");
  static_assert(MT_KV * 16 * Tile::WR_KV == B_c && NT_KV * 8 * WC_KV == d, "dK/dV warp grid must tile [B_c][d]");
  static_assert(MT_Q * 16 * Tile::WR_Q == B_r && NT_Q * 8 * WC_Q == d, "dQ warp grid must tile [B_r][d]");
  // K_j, V_j [B_c][d]; Q_i, dO_i [2][B_r][d] (double buffer); P_ij, dS_ij [B_r][B_c]; all 16-bit.
  static constexpr int smem_bytes = ((2 * B_c + 4 * B_r) * ld + 2 * B_r * ldS) * 2;
};

template <class T, int d>
__global__ void __launch_bounds__(Bwd<d>::kThreads, 1)
backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                const T* __restrict__ dO, const float* __restrict__ L, const float* __restrict__ D,
                float* __restrict__ dQ_acc, T* __restrict__ dK, T* __restrict__ dV, Dims n) {
  using C = Bwd<d>;
  constexpr int B_r = C::B_r, B_c = C::B_c, kThreads = C::kThreads, ld = C::ld, ldS = C::ldS;
  constexpr int MT_S = C::MT_S, NT_S = C::NT_S, MT_KV = C::MT_KV, NT_KV = C::NT_KV;
  constexpr int MT_Q = C::MT_Q, NT_Q = C::NT_Q;
  extern __shared__ __align__(128) unsigned char smem[];
  T* K_s = reinterpret_cast<T*>(smem);  // K_j:   [B_c][d] in shared memory (row stride d + 8)
  T* V_s = K_s + B_c * ld;              // V_j:   [B_c][d]
  T* Q_s = V_s + B_c * ld;              // Q_i:   [2][B_r][d], double buffer
  T* dO_s = Q_s + 2 * B_r * ld;         // dO_i:  [2][B_r][d], double buffer
  T* P_s = dO_s + 2 * B_r * ld;         // P_ij:  [B_r][B_c] (row stride B_c + 8)
  T* dS_s = P_s + B_r * ldS;            // dS_ij: [B_r][B_c]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // blockIdx.x = j + T_c·(b·H_kv + h_kv): one flat x dimension (y/z would cap B·H_kv at 65535). The
  // column blocks of one head are neighbours, so they run together and share Q, dO in L2.
  const int T_c = ceil_div(n.Nk, B_c), T_r = ceil_div(n.Nq, B_r);
  const int j = blockIdx.x % T_c, bk = blockIdx.x / T_c;  // bk = b·H_kv + h_kv
  const int b = bk / n.H_kv, h_kv = bk % n.H_kv;
  const int j0 = j * B_c;  // first key of K_j

  // The Q blocks that see a key of K_j (causal: rows r ≥ j0 + Nq − Nk; blocks entirely above the
  // diagonal are skipped), for each of the `group` query heads that read K/V head h_kv (GQA/MQA: their
  // dK_j, dV_j contributions are summed here, on chip, in a fixed order: deterministic).
  const int i_first = n.causal ? max(0, j0 + n.Nq - n.Nk) / B_r : 0;
  const int n_i = T_r - i_first;          // Q blocks per query head (≥ 1: row Nq − 1 sees every key)
  const int n_iter = n.group * n_i;       // (query head, Q block) pairs, head-major

  // Each warp's corner in the three warp grids.
  const int s_m = warp % C::WR_S * (MT_S * 16), s_n = warp / C::WR_S * (NT_S * 8);      // in [B_r][B_c]
  const int kv_m = warp % C::WR_KV * (MT_KV * 16), kv_n = warp / C::WR_KV * (NT_KV * 8);  // in [B_c][d]
  const int q_m = warp % C::WR_Q * (MT_Q * 16), q_n = warp / C::WR_Q * (NT_Q * 8);       // in [B_r][d]
  const float scale_log2 = n.scale * kLog2e;

  // Q_i and dO_i of iteration `it` → buffer `buf` (cp.async, zero-filled past Nq).
  auto load_q_do = [&](int it, int buf) {
    const int h = h_kv * n.group + it / n_i, i0 = (i_first + it % n_i) * B_r;
    const int64_t off = ((int64_t(b) * n.H + h) * n.Nq + i0) * d;
    load_tile<B_r, d, kThreads>(Q_s + buf * B_r * ld, Q + off, n.Nq - i0, tid);
    load_tile<B_r, d, kThreads>(dO_s + buf * B_r * ld, dO + off, n.Nq - i0, tid);
  };

  // ---- Prologue (Algorithm 2, lines 6–7): K_j, V_j once (zero-filled past Nk) and the first Q_i,
  // dO_i, in one cp.async group; dK_j = dV_j = 0.
  const int64_t kv_off = (int64_t(bk) * n.Nk + j0) * d;
  load_tile<B_c, d, kThreads>(K_s, K + kv_off, n.Nk - j0, tid);
  load_tile<B_c, d, kThreads>(V_s, V + kv_off, n.Nk - j0, tid);
  if (n_iter > 0) load_q_do(0, 0);
  cp_async_commit();

  float dK_j[MT_KV][NT_KV][4];  // the warp's [16·MT_KV][8·NT_KV] of dK_j, fp32, summed over i and h
  float dV_j[MT_KV][NT_KV][4];  // the same block of dV_j
  zero(dK_j);
  zero(dV_j);

  // ---- Main loop over (query head h, Q block i) (Algorithm 2, lines 8–17).
  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    const int h = h_kv * n.group + it / n_i;
    const int i0 = (i_first + it % n_i) * B_r;  // first row of Q_i
    const int64_t bh = int64_t(b) * n.H + h;
    const T* Q_i = Q_s + buf * B_r * ld;    // [B_r][d] in shared memory
    const T* dO_i = dO_s + buf * B_r * ld;  // [B_r][d] in shared memory

    // Barrier A: Q_i, dO_i (and at it = 0 K_j, V_j) have landed for every thread; every warp is done
    // with iteration it − 1, so the other buffer and P_s, dS_s may be overwritten.
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_iter) load_q_do(it + 1, buf ^ 1);  // prefetch: lands during this iteration's math
    cp_async_commit();

    // L_i and D_i of the 2·MT_S rows this thread holds in S_ij (plain loads, consumed after the
    // S_ij product, which hides their latency). Rows past Nq: L = +∞ makes their P = 0.
    float L2_i[MT_S][2], D_i[MT_S][2];  // L in the exp2 domain (L·log2 e), and D
#pragma unroll
    for (int mt = 0; mt < MT_S; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = i0 + s_m + 16 * mt + g + 8 * hh;
        const bool ok = r < n.Nq;
        L2_i[mt][hh] = ok ? L[bh * n.Nq + r] * kLog2e : INFINITY;
        D_i[mt][hh] = ok ? D[bh * n.Nq + r] : 0.f;
      }

    // The k-loops of the products are unrolled fully, so that ptxas can issue the ldmatrix of later
    // k-steps while the mma of earlier ones run: with one block (8 warps, 2 per scheduler) per SM,
    // that overlap inside a warp is the only latency hiding there is. dP_ij's loop is unrolled by 2
    // only: it runs while the packed P_ij is live too, and fully unrolled it spilled (bf16, d = 64 and
    // 128). With this split no kernel spills, at any d and either type (-Xptxas -v, nvcc 13.0).

    // S_ij = Q_i K_jᵀ: the warp's [16·MT_S][8·NT_S] block, fp32.
    float S_ij[MT_S][NT_S][4];
    zero(S_ij);
    warp_gemm<MT_S, NT_S, d, false, false, d / 16>(S_ij, Q_i, ld, s_m, K_s, ld, s_n, lane);

    // P_ij = exp(scale·S_ij − L_i), in place. The mask only where a key is missing (past Nk) or
    // invisible (causal, the block crosses the diagonal); L = +∞ rows give exp2(−∞) = 0 unmasked.
    const bool need_mask = j0 + B_c > n.Nk || (n.causal && j0 + B_c - 1 > i0 + n.Nk - n.Nq);
    // LAB:BEGIN Algorithm 2, line 11: P_ij = exp(scale·S_ij − L_i) recomputed from the forward's L (L2_i is L_i·log₂e, so in base 2: exp2_ftz(S·scale_log2 − L2_i)), in place in S_ij, 0 for a key past Nk or above the diagonal when need_mask; element e of tile (mt, nt) is row s_m + 16mt + g + 8(e >> 1), column s_n + 8nt + 2t + (e & 1)
#pragma unroll
    for (int mt = 0; mt < MT_S; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT_S; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = exp2_ftz(fmaf(S_ij[mt][nt][e], scale_log2, -L2_i[mt][e >> 1]));
          if (need_mask) {
            const int r = i0 + s_m + 16 * mt + g + 8 * (e >> 1);
            const int c = j0 + s_n + 8 * nt + 2 * t + (e & 1);
            if (c >= n.Nk || (n.causal && c > r + n.Nk - n.Nq)) p = 0.f;
          }
          S_ij[mt][nt][e] = p;  // now P_ij
        }
    // LAB:END

    // P_ij, rounded to the storage type, → registers (packed in pairs) and → shared memory: dV_j +=
    // P_ijᵀ dO_i needs it transposed and spread over other warps' rows. The packed copy is what dS_ij
    // uses below; keeping 16 bits instead of the fp32 P_ij through the dP_ij product saves
    // 2·MT_S·NT_S registers, and the tolerance's baseline rounds P before dS too. 32-bit stores; with
    // the row stride of 68 words the 32 lanes hit banks 4g + t: no conflicts.
    uint32_t P_ij[MT_S][NT_S][2];  // [16·MT_S][8·NT_S] of P_ij, two neighbouring columns per word
#pragma unroll
    for (int mt = 0; mt < MT_S; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT_S; ++nt) {
        P_ij[mt][nt][0] = pack2<T>(S_ij[mt][nt][0], S_ij[mt][nt][1]);  // row g
        P_ij[mt][nt][1] = pack2<T>(S_ij[mt][nt][2], S_ij[mt][nt][3]);  // row g + 8
        T* p_s = P_s + (s_m + 16 * mt + g) * ldS + s_n + 8 * nt + 2 * t;
        store2(p_s, P_ij[mt][nt][0]);
        store2(p_s + 8 * ldS, P_ij[mt][nt][1]);
      }

    // dP_ij = dO_i V_jᵀ: the same warp block as S_ij, so dS_ij is elementwise in registers.
    float dP_ij[MT_S][NT_S][4];
    zero(dP_ij);
    warp_gemm<MT_S, NT_S, d, false, false, 2>(dP_ij, dO_i, ld, s_m, V_s, ld, s_n, lane);

    // dS_ij = P_ij ∘ (dP_ij − D_i) → shared memory (dQ_i needs rows of it that other warps computed,
    // dK_j needs it transposed).
    // LAB:BEGIN Algorithm 2, line 14: dS_ij = P_ij ∘ (dP_ij − D_i), elementwise in registers (P_ij from its packed copy, D_i per row: D_i[mt][0] for row g, [1] for row g + 8), rounded to T and stored to dS_s at the same place P_ij went in P_s
#pragma unroll
    for (int mt = 0; mt < MT_S; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT_S; ++nt) {
        const float2 p0 = unpack2<T>(P_ij[mt][nt][0]), p1 = unpack2<T>(P_ij[mt][nt][1]);
        T* ds_s = dS_s + (s_m + 16 * mt + g) * ldS + s_n + 8 * nt + 2 * t;
        store2(ds_s, pack2<T>(p0.x * (dP_ij[mt][nt][0] - D_i[mt][0]), p0.y * (dP_ij[mt][nt][1] - D_i[mt][0])));
        store2(ds_s + 8 * ldS,
               pack2<T>(p1.x * (dP_ij[mt][nt][2] - D_i[mt][1]), p1.y * (dP_ij[mt][nt][3] - D_i[mt][1])));
      }
    // LAB:END

    // Barrier B: P_ij and dS_ij are complete in shared memory.
    __syncthreads();

    // dV_j += P_ijᵀ dO_i: A = P_ijᵀ (ldmatrix.trans of P_s), B = dO_i (ldmatrix.trans: [B_r][d] rows).
    warp_gemm<MT_KV, NT_KV, B_r, true, true, B_r / 16>(dV_j, P_s, ldS, kv_m, dO_i, ld, kv_n, lane);
    // dK_j += dS_ijᵀ Q_i (the scale is applied once, in the epilogue).
    warp_gemm<MT_KV, NT_KV, B_r, true, true, B_r / 16>(dK_j, dS_s, ldS, kv_m, Q_i, ld, kv_n, lane);

    // dQ_i += dS_ij K_j: A = dS_ij (rows), B = K_j ([B_c][d] rows, ldmatrix.trans). Every column block
    // j adds into the same rows of dQ, so the sum goes to device memory with atomicAdd, in fp32
    // (Algorithm 2, line 15; FA2 §3.2): two neighbouring columns per float2 atomic (sm_90's vector
    // red.global.add). The scale is applied when dQ is converted (kernel 3).
    float dQ_i[MT_Q][NT_Q][4];  // the warp's [16·MT_Q][8·NT_Q] block of this Q_i's dQ contribution
    zero(dQ_i);
    warp_gemm<MT_Q, NT_Q, B_c, false, true, B_c / 16>(dQ_i, dS_s, ldS, q_m, K_s, ld, q_n, lane);
    // LAB:BEGIN Algorithm 2, line 15: add this block's dQ_i contribution (the warp's dQ_i[mt][nt], rows q_m + 16mt + g + 8hh, columns q_n + 8nt + 2t, +1) into dQ_acc (fp32, [bh][Nq][d]) with atomicAdd: every K_j block adds into the same rows; rows past Nq are not stored
#pragma unroll
    for (int mt = 0; mt < MT_Q; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = i0 + q_m + 16 * mt + g + 8 * hh;
        if (r < n.Nq) {  // rows past Nq are never stored
          float* acc = dQ_acc + (bh * n.Nq + r) * d + q_n + 2 * t;  // dQ row r, [d] fp32
#pragma unroll
          for (int nt = 0; nt < NT_Q; ++nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(acc + 8 * nt),
                      make_float2(dQ_i[mt][nt][2 * hh], dQ_i[mt][nt][2 * hh + 1]));
#else
            atomicAdd(acc + 8 * nt, dQ_i[mt][nt][2 * hh]);
            atomicAdd(acc + 8 * nt + 1, dQ_i[mt][nt][2 * hh + 1]);
#endif
          }
        }
      }
    // LAB:END
  }
  cp_async_wait<0>();  // nothing in flight at exit (n_iter = 0 cannot happen, but stay safe)

  // ---- Epilogue (Algorithm 2, line 18): dK_j = scale · Σ dS_ijᵀ Q_i and dV_j → device memory, rows
  // past Nk never stored.
  // Every block writes its rows whatever its loop did, so no poisoned value survives.
#pragma unroll
  for (int mt = 0; mt < MT_KV; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int c = j0 + kv_m + 16 * mt + g + 8 * hh;
      if (c < n.Nk) {
        const int64_t row = (int64_t(bk) * n.Nk + c) * d + kv_n + 2 * t;
#pragma unroll
        for (int nt = 0; nt < NT_KV; ++nt) {
          store2(dK + row + 8 * nt, pack2<T>(n.scale * dK_j[mt][nt][2 * hh], n.scale * dK_j[mt][nt][2 * hh + 1]));
          store2(dV + row + 8 * nt, pack2<T>(dV_j[mt][nt][2 * hh], dV_j[mt][nt][2 * hh + 1]));
        }
      }
    }
}

template <class T, int d>
void launch_backward_main(const Problem& p, const BackwardArgs& a, const float* D, float* dQ_acc, cudaStream_t s) {
  using C = Bwd<d>;
  const unsigned blocks = unsigned(ceil_div<int64_t>(p.Nk, C::B_c) * p.B * p.H_kv);
  allow_smem(backward_kernel<T, d>, C::smem_bytes);
  backward_kernel<T, d><<<blocks, C::kThreads, C::smem_bytes, s>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<const T*>(a.dO), a.lse, D, dQ_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), dims_of(p));
  FL_CUDA(cudaGetLastError());
}

// ==== The step's interface ========================================================================
size_t workspace_bytes(const Problem& p) { return s08d::impl.workspace_bytes(p); }
void forward(const Problem& p, const ForwardArgs& a) { s08d::impl.forward(p, a); }

std::string limits(const Problem& p) {
  const std::string why = s08d::impl.limits(p);  // the forward's
  return why.empty() ? bwd::limits(p) : why;
}

void backward(const Problem& p, const BackwardArgs& a) {
  bwd::run<BwdD>(p, a, [&](auto T_, auto d_, const float* D, float* dQ_acc, cudaStream_t s) {
    launch_backward_main<decltype(T_), decltype(d_)::value>(p, a, D, dQ_acc, s);
  });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, bwd::workspace_bytes, backward};

}  // namespace fl::s09

// flashladder — step 10: split-KV decoding ("flash-decoding"): the keys are split across thread blocks
// too, and the partial results are merged by the logsumexp rule.
//
// Every step before this one parallelises over query blocks: B·H·⌈Nq/B_r⌉ thread blocks. When a model
// generates text, Nq is 1 (or a few rows of speculative decoding) and Nk is the whole KV cache, so
// that is B·H blocks, each streaming its head's K and V alone; at B = 1, H = 32 they cannot fill 132
// SMs, and each of the H/H_kv query heads of a GQA group reads the same K/V again. Decoding does
// G·Nq/2 multiply-adds per byte of K and V (G = H/H_kv; 0.5 to 8 on the issue's shapes, against ~100
// where an H200 turns compute-bound, by its datasheet): it is a memory problem, and the only
// question is whether K and V stream at the device's bandwidth. Three changes against 08d (the last
// mma.sync step), one idea:
//
// 1. GQA packing. The G = H/H_kv query heads that share K/V head h_kv, times their Nq rows, are ONE
//    tile of M = G·Nq rows: in the layout [B][H][Nq][d] those rows are contiguous (rows r = h'·Nq + i
//    of heads h_kv·G + h'), so the tile is a plain [M][d] block of Q, O and L. K/V are read once per
//    group. A tile is B_r = 16 rows (the m of m16n8k16): decode has M = 1…16 (the sweep's shapes);
//    larger M gets ⌈M/16⌉ row tiles, or ⌈M/32⌉ tiles of 32 rows (two m-tiles per warp, sharing each K
//    and V fragment) where m_tiles() below finds them faster: M ≥ 64, unless they starve the grid.
// 2. Split-KV. The key range [0, n_end) of each (batch, K/V head, row tile) is cut into S contiguous
//    chunks, one thread block each: grid B·H_kv·T_r·S (T_r row tiles). A block computes ordinary attention of its
//    rows over its chunk, an (O_s, L_s) pair like any step's output, and writes it in fp32 to the
//    workspace; a second kernel merges the S pairs with the logsumexp rule
//        m = max_s L_s,   L = m + ln Σ_s e^{L_s − m},   O = Σ_s e^{L_s − L} O_s,
//    which is step 02's online-softmax update (rescale by e^{old max − new max}, add) applied to whole
//    key chunks instead of one key: the same merge, across thread blocks. With S = 1 the block writes
//    O and L itself and the merge kernel is not launched (no workspace).
//    S comes from splits() below (enough blocks for one per SM) or the environment variable
//    FLASHLADDER_SPLITS (the benchmark sweeps it).
// 3. Warps split the keys, not the rows (there are only 16 rows). Each of the 4 warps owns every 4th
//    tile of B_w = 16 keys of the block's chunk, and has its OWN ring of kStages K/V tiles in shared
//    memory that only it fills (cp.async, 16-byte copies) and only it reads (ldmatrix): no block-wide
//    barrier in the main loop, a warp waits for its own copies (cp.async.wait_group + __syncwarp), and
//    with 16-row tiles it sends the copies of its next tile before it waits for this one (2 × 4 × 8 KiB
//    in flight per block while the warps wait at d = 128, half that while they multiply). The 4
//    warps' (m, ℓ, O) are merged at the end through shared memory by the same rule in base 2 (the
//    merge inside a block), then the blocks' by the merge kernel.
//
// The variants a decode batch needs (issue 21), the same diff as 08j's against 08i: per-sequence cache
// lengths (seqused_k: sequence b uses the first seqused_k[b] of the Nk cached keys, its diagonal is
// seqused_k[b] − Nq) and the sliding window (the mask gains a left edge, and the splits divide only the
// keys a row tile can see, so a window of w keys reads ~w keys, not the cache). Softcap and ALiBi are
// refused (issue 21 asks neither of the decode step): neither is 08j's one line here. A tile mixes the
// G query heads of a group, so ALiBi's slope is one per packed row, not per block; a softcap puts m in
// logit units, which the merge inside the block and L_s read too.
//
// Tensor cores (mma.sync m16n8k16, 08d's fragments), not CUDA cores: the 16-row tile is padded (at
// Nq = 1, G = 4 three quarters of each mma is wasted), but an m16n8k16 is one warp instruction for
// 2048 multiply-adds where an FFMA is 32: 16× fewer instructions at 4 real rows, 64× at 16. The issue
// slots it saves keep a warp's turn through a tile short, so that the loads, not the math, set the
// pace; and the same kernel must also answer any Nq (prefill shapes run as many 16-row tiles, S = 1).
#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/launch.cuh"
#include "steps/variants.cuh"  // VariantArgs: the window, causal folded in

namespace fl::s10 {

constexpr int B_r = 16;      // rows of an m-tile; a tile of the G·Nq packed query rows of one K/V head has 1 or 2 (R; Tiles::kRows = 16R rows)
constexpr int B_w = 16;      // keys per warp tile (one k-step of P̃V, two n-tiles of S)
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxSplits = 256;  // S is clamped to this (and to the number of warp tiles)

// kStages warp tiles of K and V per warp ring. A warp of a 16-row tile sends the copies of tile
// k + kStages − 1 before it waits for tile k (the main loop): kStages tiles in flight while it waits,
// kStages − 1 while it multiplies. At d = 128 that is 2 stages (64 KiB of ring per block) where the
// copies used to go out after the wait with 3: the same 2 tiles in flight at the wait, one fewer
// during the arithmetic, and no warp waiting with its next copy not sent. Runs 154–157 (H100,
// docs/results/explorations/…-run153-157-*, three or five interleaved rounds, each variant's O and L
// equal to the old kernel's bit for bit): up to 2.1% faster where 128 or more blocks stream (B 16,
// H_kv 8, Nq 1, Nk 32768: 688.4 against 691.7 µs; B 64, H_kv 32, Nq 4, Nk 32768: 10903 against 11141;
// one point 0.1% slower), −2.1% to +2.8% at B 1 (H_kv 8, Nq 1, Nk 32768: 52.1 against 51.8; Nq 4:
// 52.4 against 53.0; Nk 8192 19.5 against 19.9 in run 155, 19.7 against 19.1 in run 158). 2 stages
// with the copies after the wait were 3–6% slower (run 154), 3 stages with them before it up to 4%
// slower at 6 of 7 points (run 153). At d = 64, 5 stages so sent: −1.4% to +0.9% (B 8, H_kv 32,
// Nq 1, Nk 8192: 179.7 against 182.2 µs). Tiles of 32 rows (R = 2) keep 3 (6) stages with the copies
// after the wait: a warp's arithmetic there is twice as long, and the early copies with a stage fewer
// were 2.6–6.8% slower (run 156). Blocks share an SM: two, or three of the 68 KiB blocks at d = 128
// with 16-row tiles (run 157, B 6–12, H_kv 32: the same times as with two per SM); one_per_sm() says
// when one block per SM is asked for instead (kSmemAlone), and deep_ring() when a grid of
// 16-row tiles takes the 32-row tiles' ring (Late: 3 stages, the copies after the wait) on a device
// whose memory needs more bytes in flight.
// R: the row tile's m-tiles of B_r rows, 1 or 2. With R = 2 a tile of 32 rows has each warp multiply
// both halves by the K and V fragments it loaded once: the keys are read by half as many blocks
// (m_tiles() says where that pays).
template <int d, int R = 1, bool Late = (R == 2)>
struct Tiles {
  static constexpr bool kLate = Late;  // the copies after the wait, with one stage more
  static constexpr int kStages = (d <= 64 ? 5 : 2) + (kLate ? 1 : 0);
  static constexpr int kRows = R * B_r;                                    // rows of a tile
  static constexpr int kTileElems = B_w * d;                               // one K or V warp tile
  static constexpr int kRingElems = kWarps * kStages * 2 * kTileElems;     // every warp's K and V slots
  static constexpr size_t kSmem = size_t(kRows * d + kRingElems) * 2;      // Q tile + rings (16-bit T)
  // What a launch asks for to run one block per SM: more than half of an SM's 228 KiB (the extra
  // 16 KiB are not used).
  static constexpr size_t kSmemAlone = 116 * 1024;
  static_assert(kSmemAlone >= kSmem, "the one-per-SM request holds the tiles");
  // After the loop the rings hold the warps' partial O (fp32, rows padded by 4 floats) and m, ℓ.
  static constexpr size_t kMergeBytes = size_t(kWarps * kRows * (d + 4) + 2 * kWarps * kRows) * 4;
  static_assert(kMergeBytes <= size_t(kRingElems) * 2, "the merge buffers fit in the rings");
};

// Offset of element (row, col) of a [rows][d] tile, 08d's XOR swizzle (d = 64, 128: chunk ^ row % 8),
// so that ldmatrix's 8 rows of one 16-byte column fall in 8 different bank groups.
template <int d>
__device__ __forceinline__ int at(int row, int col) {
  return row * d + ((col / 8) ^ (row % 8)) * 8 + col % 8;
}

// cp.async of ROWS rows of a row-major [rows_left…][d] block into a [ROWS][d] swizzled tile by N
// threads (id = this thread's index among them). Rows at or past rows_left are zero-filled (src-size
// 0; the source address is then the block's first row, which exists) and never read unmasked.
template <class T, int d, int ROWS, int N>
__device__ __forceinline__ void load_rows(T* tile, const T* block, int64_t rows_left, int id) {
  constexpr int kChunks = d / 8;  // 16-byte chunks per row
  static_assert(ROWS * kChunks % N == 0, "every thread moves the same number of chunks");
#pragma unroll
  for (int step = 0; step < ROWS * kChunks / N; ++step) {
    const int idx = step * N + id;  // consecutive threads, consecutive 16-byte chunks
    const int row = idx / kChunks, col = idx % kChunks * 8;
    const bool valid = row < rows_left;
    mma::cp_async_16(tile + at<d>(row, col), block + (valid ? int64_t(row) * d + col : 0), valid);
  }
}

// Programmatic dependent launch (Hopper): the merge kernel may be scheduled while the split kernel's
// last blocks still run, and waits (griddepcontrol.wait) for the split kernel to complete and its
// writes to be visible before it reads a partial. Launched without the attribute, both are no-ops.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// One thread block: the rows [r0, r0 + 16R) of the packed [M][d] tile of one (batch, K/V head), over
// the key chunk of split s. Fragment names as in 08d: lane = 4·g + t holds rows g and g + 8 of each
// m-tile and, in each 8-column n-tile, columns 2t and 2t + 1. Key and row-in-head indices are 32-bit
// (limits() keeps Nq, Nk below 2^30); packed rows and tensor offsets are 64-bit.
// S == 1: O and L are written directly (storage type, fp32). S > 1: the normalised partial O_s
// (fp32) and L_s go to O_part [S][B·H·Nq][d] and L_part [S][B·H·Nq] for merge_kernel.
template <class T, int d, int R, bool Late = (R == 2)>
__global__ void __launch_bounds__(kThreads)
attention_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                 T* __restrict__ O, float* __restrict__ L, float* __restrict__ O_part,
                 float* __restrict__ L_part, int64_t M, int Nq, int Nk, int64_t H_kv, int64_t T_r, int S,
                 int64_t rows_total, float scale, bool causal, const int32_t* __restrict__ seqused_k,
                 VariantArgs var) {
  using Tl = Tiles<d, R, Late>;
  constexpr int kStages = Tl::kStages, kTileElems = Tl::kTileElems, kRows = Tl::kRows;
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_s = reinterpret_cast<T*>(smem);  // Q tile: [kRows][d] in shared memory
  T* ring = Q_s + kRows * d;            // [kWarps][kStages][K, V][B_w][d]: each warp's own slots

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  // blockIdx.x = s + S·(tile + T_r·(b·H_kv + h_kv)): the splits of one tile are neighbours, and so are
  // the row tiles of one K/V head (with S = 1 and many row tiles they share K, V in L2). Causal: the
  // row tiles run backwards, the ones that see the most keys first. One flat x dimension.
  const int s = int(blockIdx.x % S);
  const int64_t rest = blockIdx.x / S, bh = rest / T_r;  // bh = b·H_kv + h_kv
  const int64_t tile = causal ? T_r - 1 - rest % T_r : rest % T_r;
  const int64_t r0 = tile * kRows;                                    // first packed row of the tile
  const int rows_here = M - r0 < kRows ? int(M - r0) : kRows;         // rows of it that exist
  const T* Q_g = Q + (bh * M + r0) * d;  // packed rows r = h'·Nq + i of heads h_kv·G + h': [rows_here][d]
  const T* K_g = K + bh * Nk * d;        // K: [Nk][d] of K/V head h_kv
  const T* V_g = V + bh * Nk * d;        // V: [Nk][d]

  // The keys this sequence uses: the first seqused_k[b] of the Nk rows its cache holds (a batch of
  // decode requests whose caches are filled to different lengths), or all Nk. Every rule below reads
  // them as its Nk: the diagonal is the sequence's own, and no key past n_k is loaded.
  const int n_k = seqused_k ? seqused_k[bh / H_kv] : Nk;
  // The window, bottom-right aligned (08j's key_lo, key_hi; causal is its right edge 0, folded in by
  // VariantArgs): query i sees the keys [key_lo(i), key_hi(i)). Packed row r is query i = r % Nq, so a
  // tile's rows need not be in order (it can wrap from i = Nq − 1 to 0); both edges move right with i,
  // so the tile visits the keys [n_begin, n_end) (its smallest i starts them, its largest ends them)
  // and every row sees at least [lo_max, n_min): the tiles outside it are the ones to mask.
  const int diag = n_k - Nq;
  auto key_lo = [&](int i) { return var.left < 0 ? 0 : max(0, i + diag - var.left); };
  auto key_hi = [&](int i) { return var.right < 0 ? n_k : min(n_k, i + diag + var.right + 1); };
  const int i_first = int(r0 % Nq);
  const bool wraps = i_first + rows_here - 1 >= Nq;
  const int i_max = wraps ? Nq - 1 : i_first + rows_here - 1, i_min = wraps ? 0 : i_first;
  const int n_begin = key_lo(i_min), n_end = key_hi(i_max);
  const int lo_max = key_lo(i_max), n_min = key_hi(i_min);
  int first[2 * R], last[2 * R];  // this thread's rows g + 8rr see keys [first, last); padded rows: all (never stored)
#pragma unroll
  for (int rr = 0; rr < 2 * R; ++rr) {
    const int i = (i_first + g + 8 * rr) % Nq;
    first[rr] = g + 8 * rr < rows_here ? key_lo(i) : 0;
    last[rr] = g + 8 * rr < rows_here ? key_hi(i) : n_k;
  }

  // This split's warp tiles of B_w keys: [t_begin, t_end) of the T_c tiles the row tile visits, from
  // tile j_first on (a window's first key, rounded down to a tile); warp w takes t_begin + w, + w + 4,
  // … (n_mine of them), so a partial last tile costs one warp one tile, not the block.
  const int j_first = n_begin / B_w;
  const int T_c = n_end > n_begin ? (n_end + B_w - 1) / B_w - j_first : 0;
  const int t_begin = j_first + int(int64_t(T_c) * s / S), t_end = j_first + int(int64_t(T_c) * (s + 1) / S);
  const int n_mine = t_end - t_begin > warp ? (t_end - t_begin - warp + kWarps - 1) / kWarps : 0;
  T* my_ring = ring + warp * kStages * 2 * kTileElems;
  auto load_kv = [&](int k) {  // this warp's k-th tile → slot k % kStages (copies not waited for)
    const int j0 = (t_begin + warp + kWarps * k) * B_w;
    T* K_s = my_ring + k % kStages * 2 * kTileElems;
    load_rows<T, d, B_w, 32>(K_s, K_g + int64_t(j0) * d, n_k - j0, lane);  // keys past n_k: zeros, never read
    load_rows<T, d, B_w, 32>(K_s + kTileElems, V_g + int64_t(j0) * d, n_k - j0, lane);
  };

  // ---- Prologue: Q (the whole block), then each warp's first kStages − 1 tiles, one group each
  // (committed even when empty, so that group k + 1 is always tile k: the waits below count on it).
  load_rows<T, d, kRows, kThreads>(Q_s, Q_g, rows_here, threadIdx.x);
  mma::cp_async_commit();
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < n_mine) load_kv(k);
    mma::cp_async_commit();
  }
  allow_dependent_launch();
  mma::cp_async_wait<kStages - 1>();  // this thread's part of Q has landed
  __syncthreads();                    // everyone's has
  // Q's A fragments for all d/16 k-steps, kept in registers for the whole loop (08d's ldmatrix). With
  // two m-tiles they are read from Q_s at every k-step instead: 64 more registers at d = 128 beside the
  // second m-tile's O would spill (ptxas: 255 registers and 20 bytes of spills), and an ldmatrix from
  // shared memory per mma costs no load from global memory.
  uint32_t q[d / 16][4];
  if constexpr (R == 1) {
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk) mma::ldmatrix_x4(q[kk], Q_s + at<d>(lane % 16, 16 * kk + lane / 16 * 8));
  }

  // The warp's unnormalised O over its keys: O_i[mt][n][2h+e] = O[16mt + g + 8h][8n + 2t + e]; the
  // thread's row slots rr = 2mt + h (rows g + 8rr) carry the running max (unscaled S) and sum.
  float O_i[R][d / 8][4];
  float m_i[2 * R], l_i[2 * R];
#pragma unroll
  for (int rr = 0; rr < 2 * R; ++rr) {
    m_i[rr] = -INFINITY;
    l_i[rr] = 0.f;
  }
#pragma unroll
  for (int mt = 0; mt < R; ++mt)
#pragma unroll
    for (int n = 0; n < d / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) O_i[mt][n][e] = 0.f;

  // ---- Main loop: the warp's tiles, kStages − 1 ahead in its own ring. With 16-row tiles the block's
  // warps advance in step: one barrier per round, in the rounds that all four have (n_step), so that the
  // block's copies in flight stay one stretch of 4·B_w keys of K and one of V per round instead of
  // drifting apart. Run 124 (H100, 10b's kernel with and without it, beside cuDNN, three interleaved
  // rounds): at the unsplit B ≥ 16 decode points 0.984–0.998× cuDNN without, 0.990–0.999× with (B 16,
  // H_kv 8, Nq 1, Nk 131072: 2771.8 → 2744.5 µs), none more than 0.3 µs slower. Not with 32-row tiles,
  // whose warps have twice the math per tile and then wait on each other: 0.94–0.95× (run 125).
  const int n_step = (t_end - t_begin) / kWarps;
  for (int k = 0; k < n_mine; ++k) {
    if constexpr (R == 1) {
      if (k < n_step) __syncthreads();
    }
    if constexpr (!Late) {  // the next copies first (Tiles: the same tiles in flight at the wait)
      __syncwarp();  // every lane is done reading tile k − 1: its slot takes tile k + kStages − 1
      if (k + kStages - 1 < n_mine) load_kv(k + kStages - 1);
      mma::cp_async_commit();
      mma::cp_async_wait<kStages - 1>();  // groups 0 … k + 1 done: Q and this thread's copies of tile k
      __syncwarp();                       // every lane's copies of tile k visible to the warp
    } else {
      mma::cp_async_wait<kStages - 2>();  // groups 0 … k + 1 done: Q and this thread's copies of tile k
      __syncwarp();  // every lane's copies of tile k visible to the warp; every lane done reading tile k − 1
      if (k + kStages - 1 < n_mine) load_kv(k + kStages - 1);  // into tile k − 1's slot
      mma::cp_async_commit();
    }
    const T* K_s = my_ring + k % kStages * 2 * kTileElems;  // K_j: [B_w][d], swizzled
    const T* V_s = K_s + kTileElems;                        // V_j: [B_w][d], swizzled
    const int j0 = (t_begin + warp + kWarps * k) * B_w;     // first key of the tile

    // S_ij = Q K_jᵀ, unscaled: [16R][16], each m-tile in two n-tiles (08d's K fragments, one
    // ldmatrix.x4 per k-step, used by every m-tile).
    float S_ij[R][2][4];
#pragma unroll
    for (int mt = 0; mt < R; ++mt)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) S_ij[mt][n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk) {
      uint32_t kb[4];
      mma::ldmatrix_x4(kb, K_s + at<d>(lane % 8 + lane / 16 * 8, 16 * kk + lane / 8 % 2 * 8));
      const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
      for (int mt = 0; mt < R; ++mt) {
        uint32_t qa[4];  // Q_i's A fragment of this m-tile and k-step
        if constexpr (R == 1) {
#pragma unroll
          for (int x = 0; x < 4; ++x) qa[x] = q[kk][x];
        } else {
          mma::ldmatrix_x4(qa, Q_s + at<d>(B_r * mt + lane % 16, 16 * kk + lane / 16 * 8));
        }
        mma::mma_m16n8k16<T>(S_ij[mt][0], qa, b0);
        mma::mma_m16n8k16<T>(S_ij[mt][1], qa, b1);
      }
    }

    // Mask only tiles that need it: keys left of lo_max (the window's left edge of some row) or at or
    // past n_min (the causal or right edge of some row, or n_k).
    if (j0 < lo_max || j0 + B_w > n_min) {
#pragma unroll
      for (int rr = 0; rr < 2 * R; ++rr)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = j0 + 8 * n + 2 * t + e;
            if (j >= last[rr] || j < first[rr]) S_ij[rr / 2][n][2 * (rr % 2) + e] = -INFINITY;
          }
    }

    // Online softmax in base 2, exactly 08d's (see there for m_sub and __fmul_rn), row slot by row slot.
#pragma unroll
    for (int rr = 0; rr < 2 * R; ++rr) {
      float(&S_m)[2][4] = S_ij[rr / 2];  // the slot's m-tile; its elements 2h, 2h + 1 (h = rr % 2)
      const int h = rr % 2;
      float m_new = fmaxf(m_i[rr], fmaxf(fmaxf(S_m[0][2 * h], S_m[0][2 * h + 1]),
                                         fmaxf(S_m[1][2 * h], S_m[1][2 * h + 1])));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
      const float m_sub = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, scale_log2);
      const float alpha = mma::exp2_approx(__fmul_rn(m_i[rr], scale_log2) - m_sub);
      m_i[rr] = m_new;
      float rowsum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = S_m[n][2 * h + e];
          x = mma::exp2_approx(fmaf(x, scale_log2, -m_sub));
          rowsum += x;
        }
      l_i[rr] = alpha * l_i[rr] + rowsum;
#pragma unroll
      for (int n = 0; n < d / 8; ++n) {
        O_i[rr / 2][n][2 * h] *= alpha;
        O_i[rr / 2][n][2 * h + 1] *= alpha;
      }
    }

    // O_i += P̃_ij V_j: one k-step of 16 keys, P̃ from the accumulators (08d's A layout), V_j by
    // ldmatrix.trans, two n-tiles per x4, used by every m-tile.
    uint32_t a[R][4];
#pragma unroll
    for (int mt = 0; mt < R; ++mt) {
      a[mt][0] = mma::pack2<T>(S_ij[mt][0][0], S_ij[mt][0][1]);
      a[mt][1] = mma::pack2<T>(S_ij[mt][0][2], S_ij[mt][0][3]);
      a[mt][2] = mma::pack2<T>(S_ij[mt][1][0], S_ij[mt][1][1]);
      a[mt][3] = mma::pack2<T>(S_ij[mt][1][2], S_ij[mt][1][3]);
    }
#pragma unroll
    for (int n = 0; n < d / 16; ++n) {
      uint32_t vb[4];
      mma::ldmatrix_x4_trans(vb, V_s + at<d>(lane % 16, 16 * n + lane / 16 * 8));
      const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
      for (int mt = 0; mt < R; ++mt) {
        mma::mma_m16n8k16<T>(O_i[mt][2 * n], a[mt], b0);
        mma::mma_m16n8k16<T>(O_i[mt][2 * n + 1], a[mt], b1);
      }
    }
  }
  mma::cp_async_wait<0>();  // no copy outlives the loop (the trailing groups are empty)

  // ---- The merge inside the block: the 4 warps' (m_w, ℓ_w, O_w) over disjoint keys, through shared
  // memory (the rings, no longer read), by the rule of the online softmax in base 2:
  //   m = max_w m_w,  f_w = 2^(m_w·τlog2e − m·τlog2e),  ℓ = Σ_w f_w ℓ_w,  O = Σ_w f_w O_w / ℓ.
  // A warp that saw no key for a row has m_w = −∞, ℓ_w = 0, O_w = 0, so f_w = 0; if no warp saw one,
  // m_sub is 0 instead of −∞ (no −∞ − −∞) and ℓ = 0: O = 0, and L = +∞ (S = 1) or −∞ (a partial:
  // weight e^{−∞} = 0 in the merge kernel).
  float* O_w = reinterpret_cast<float*>(ring);  // [kWarps][kRows][d + 4] (4 floats of padding per row)
  float* m_w = O_w + kWarps * kRows * (d + 4);  // [kWarps][kRows]
  float* l_w = m_w + kWarps * kRows;            // [kWarps][kRows]
  __syncthreads();  // every warp is done with its ring
#pragma unroll
  for (int rr = 0; rr < 2 * R; ++rr) {
    float l = l_i[rr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);  // the quad's partial sums: the warp's ℓ of the row
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = warp * kRows + g + 8 * rr, h = rr % 2;
#pragma unroll
    for (int n = 0; n < d / 8; ++n)
      *reinterpret_cast<float2*>(O_w + row * (d + 4) + 8 * n + 2 * t) =
          make_float2(O_i[rr / 2][n][2 * h], O_i[rr / 2][n][2 * h + 1]);
    if (t == 0) {
      m_w[row] = m_i[rr];
      l_w[row] = l;
    }
  }
  __syncthreads();
  const int64_t row_g = bh * M + r0;  // flat row (b·H + h)·Nq + i of the tile's first row
  constexpr int kC = d / 4;           // 4-column chunks per row
  for (int c = threadIdx.x; c < kRows * kC; c += kThreads) {
    const int row = c / kC, col = c % kC * 4;
    if (row >= rows_here) break;  // rows grow with c: the rest are padding too
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, m_w[w * kRows + row]);
    const float m_sub = m == -INFINITY ? 0.f : __fmul_rn(m, scale_log2);
    float l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = mma::exp2_approx(__fmul_rn(m_w[w * kRows + row], scale_log2) - m_sub);
      const float4 x = *reinterpret_cast<const float4*>(O_w + (w * kRows + row) * (d + 4) + col);
      l = fmaf(f, l_w[w * kRows + row], l);
      o = make_float4(fmaf(f, x.x, o.x), fmaf(f, x.y, o.y), fmaf(f, x.z, o.z), fmaf(f, x.w, o.w));
    }
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
    o = make_float4(o.x * inv_l, o.y * inv_l, o.z * inv_l, o.w * inv_l);
    if (S == 1) {  // the final answer: O in the storage type (8-byte stores), L = τ m + ln ℓ or +∞
      *reinterpret_cast<uint2*>(O + (row_g + row) * d + col) =
          make_uint2(mma::pack2<T>(o.x, o.y), mma::pack2<T>(o.z, o.w));
      if (col == 0) L[row_g + row] = log_sum_exp(m, l, scale, scale_log2);
    } else {       // split s's partial: normalised O_s in fp32, L_s (−∞: no key of this chunk)
      const int64_t at_row = int64_t(s) * rows_total + row_g + row;
      *reinterpret_cast<float4*>(O_part + at_row * d + col) = o;
      if (col == 0) L_part[at_row] = l > 0.f ? log_sum_exp(m, l, scale, scale_log2) : -INFINITY;
    }
  }
}

// The merge of the S partials of one row (one block per row of [B·H·Nq]), the logsumexp rule:
//   m = max_s L_s,   ℓ = Σ_s e^{L_s − m},   L = m + ln ℓ,
//   O = Σ_s e^{L_s − L} O_s = Σ_s (e^{L_s − m}/ℓ) O_s.
// A split that saw no key of the row has L_s = −∞ and weight e^{−∞ − m} = 0. If every L_s is −∞ the
// row saw no key at all: m − m would be NaN, so that case is decided first: O = 0, L = +∞.
// The block's threads read the S partials side by side: thread (group, c) sums the 4 columns c of the
// splits s ≡ group (mod kMergeGroups), and the groups' sums are added in shared memory. One warp per
// row, each lane reading its columns of split after split, was this kernel first: at B 1, H 32,
// H_kv 1, Nq 1 (32 rows, S = 60) the call ended ~16 µs after the split kernel's 31.7 µs, where cuDNN's
// reduction takes 4.0 (run 106, H100, scripts/kernel_times.py --decode): 60 loads in turn per lane.
constexpr int kMergeThreads = 256;
template <class T, int d>
__global__ void __launch_bounds__(kMergeThreads)
merge_kernel(const float* __restrict__ O_part, const float* __restrict__ L_part, T* __restrict__ O,
             float* __restrict__ L, int S, int64_t rows_total) {
  constexpr int kChunks = d / 4;                          // 4-column pieces of a row: 32 at d = 128
  constexpr int kGroups = kMergeThreads / kChunks;        // splits read side by side: 8 at d = 128, 16 at 64
  __shared__ float w_s[kMaxSplits];                       // e^{L_s − m}: [S]
  __shared__ float4 sum_s[kGroups][kChunks];              // each group's Σ_s e^{L_s − m} O_s
  __shared__ float red_s[kMergeThreads / 32];             // one value per warp (the block's max, then sum)
  wait_for_prerequisite_grid();  // the partials are the split kernel's: wait for all of them
  const int64_t R = blockIdx.x;  // this block's row
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  auto block_reduce = [&](float x, auto op) {  // op over the block's threads, returned to every thread
#pragma unroll
    for (int k = 16; k > 0; k /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, k));
    __syncthreads();  // red_s is free (a previous reduction's readers are done)
    if (lane == 0) red_s[warp] = x;
    __syncthreads();
    x = red_s[0];
#pragma unroll
    for (int w = 1; w < kMergeThreads / 32; ++w) x = op(x, red_s[w]);
    return x;
  };
  // LAB:BEGIN the logsumexp merge of row R's S partials (O_s in O_part, L_s in L_part, [S][rows_total](×d)), one block per row: m = max_s L_s (threads stride over s; block_reduce with fmaxf), the weights e^{L_s − m} into w_s and ℓ = their sum (block_reduce with +), then thread (group, c) sums e^{L_s − m} O_s over the 4 columns c and the splits s ≡ group (mod kGroups) into sum_s, and the first kChunks threads add the groups: O = (Σ)/ℓ stored as T, L = m + ln ℓ; a row no split saw (every L_s = −∞) gets O = 0, L = +∞ without computing −∞ − (−∞)
  float m = -INFINITY;
  for (int s = tid; s < S; s += kMergeThreads) m = fmaxf(m, L_part[s * rows_total + R]);
  m = block_reduce(m, [](float a, float b) { return fmaxf(a, b); });
  T* O_g = O + R * d;
  if (m == -INFINITY) {  // no split saw a key of this row (m is the block's: every thread returns here)
    if (tid < kChunks)
      *reinterpret_cast<uint2*>(O_g + 4 * tid) = make_uint2(mma::pack2<T>(0.f, 0.f), mma::pack2<T>(0.f, 0.f));
    if (tid == 0) L[R] = INFINITY;
    return;
  }
  float l = 0.f;
  for (int s = tid; s < S; s += kMergeThreads) {
    w_s[s] = expf(L_part[s * rows_total + R] - m);
    l += w_s[s];
  }
  l = block_reduce(l, [](float a, float b) { return a + b; });  // its barriers also publish w_s
  const int group = tid / kChunks, c = tid % kChunks;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = group; s < S; s += kGroups) {
    const float w = w_s[s];
    const float4 x = *reinterpret_cast<const float4*>(O_part + (s * rows_total + R) * d + 4 * c);
    o = make_float4(fmaf(w, x.x, o.x), fmaf(w, x.y, o.y), fmaf(w, x.z, o.z), fmaf(w, x.w, o.w));
  }
  sum_s[group][c] = o;
  __syncthreads();
  if (tid < kChunks) {
    const float inv_l = 1.f / l;  // l >= 1: the split with L_s = m contributes e^0
    float4 t = sum_s[0][tid];
#pragma unroll
    for (int k = 1; k < kGroups; ++k) t = make_float4(t.x + sum_s[k][tid].x, t.y + sum_s[k][tid].y, t.z + sum_s[k][tid].z, t.w + sum_s[k][tid].w);
    *reinterpret_cast<uint2*>(O_g + 4 * tid) =
        make_uint2(mma::pack2<T>(t.x * inv_l, t.y * inv_l), mma::pack2<T>(t.z * inv_l, t.w * inv_l));
  }
  if (tid == 0) L[R] = m + logf(l);
  // LAB:END
}

// ---- Host side ----------------------------------------------------------------------------------

// What the heuristic needs from the device: SMs, how many blocks of this kernel one SM holds (from
// the occupancy calculator, so a GPU with less shared memory gets the right count), and the memory's
// peak (deep_ring). Queried once per device and head dim; zeros without a usable device (then S = 1).
struct DeviceFacts {
  int sms = 0, blocks_per_sm = 0, major = 0;
  double memory_bytes_per_s = 0;  // 2 transfers per clock × bus width: H100 SXM 3.35e12, H200 4.81e12 (run 234)
};

// deep_ring's kernels (d = 128 only): the one-per-SM request, as the 2-stage ring's.
template <int d>
bool allow_deep_ring(int alone) {
  if constexpr (d == 128)
    return cudaFuncSetAttribute(attention_kernel<__half, d, 1, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                alone) == cudaSuccess &&
           cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, d, 1, true>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, alone) == cudaSuccess;
  else
    return true;
}

template <int d>
DeviceFacts device_facts() {
  static std::mutex mu;
  static DeviceFacts cache[64];
  static bool known[64] = {};
  constexpr int smem = int(Tiles<d>::kSmem), smem2 = int(Tiles<d, 2>::kSmem), alone = int(Tiles<d>::kSmemAlone);
  int dev = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64 && known[dev]) return cache[dev];
  DeviceFacts f;
  int memory_khz = 0, bus_bits = 0;
  // Both storage types have the same resources; the attribute is needed before any launch (the
  // 16-row kernels' is the one-per-SM request, the most they are launched with).
  const bool ok =
      cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64 &&
      cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess &&
      cudaFuncSetAttribute(attention_kernel<__half, d, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, alone) ==
          cudaSuccess &&
      cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, d, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, alone) ==
          cudaSuccess &&
      allow_deep_ring<d>(alone) &&
      cudaFuncSetAttribute(attention_kernel<__half, d, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem2) ==
          cudaSuccess &&
      cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, d, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem2) ==
          cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.blocks_per_sm, attention_kernel<__half, d, 1>, kThreads, smem) ==
          cudaSuccess;
  if (!ok) {
    cudaGetLastError();  // no usable device: the runner reports that (and a launch would, checked)
    return {};
  }
  f.memory_bytes_per_s = 2.0 * memory_khz * 1e3 * bus_bits / 8;
  cache[dev] = f;
  known[dev] = true;
  return f;
}

DeviceFacts facts_for(int64_t d) { return d <= 64 ? device_facts<64>() : device_facts<128>(); }

// FLASHLADDER_SPLITS, if set: the number of splits the benchmark asks for (0: unset).
int64_t requested_splits() {
  return env_knob("FLASHLADDER_SPLITS", 1, INT64_MAX, "the number of key splits").value_or(0);
}

// The keys a row tile visits at most: what the splits divide. The longest sequence's keys (seqused_k[b]
// when given: the grid's S is one for all sequences, and the longest sets the time; a shorter one's
// chunks are shorter, or empty), and with a window's left edge at most Nq + left of them: a tile's
// rows i ∈ [0, Nq) start at key_lo(0) = n_k − Nq − left at the earliest and end at n_k at the latest.
// Counting Nk instead would split a window as if the whole cache were read: on 132 SMs a window of
// 256 keys (17 key tiles) in a cache of 131072 would get the cache's 16 splits (B 1, H_kv 8) of one or
// two key tiles each, 16 partials and a merge for 257 keys; counted as visited, it gets none (the
// 256-key floor).
int64_t keys_visited(const Problem& p) {
  int64_t n = 0;
  for (int64_t b = 0; b < p.B; ++b) n = std::max(n, p.seqlen_k(b));
  return p.window_left >= 0 ? std::min(n, p.Nq + p.window_left) : n;
}

// The number of key splits S for p (see README.md, "How many splits"), from the keys a row tile
// visits (keys_visited above; Nk for the plain problem).
//  - At most kMaxSplits, at most one warp tile (16 keys) per split, and, unless FLASHLADDER_SPLITS
//    asks for more, at least max(256, 32·rows) keys per split: a split costs a fixed prologue (Q, the
//    ring filling) and a partial of rows·d·4 bytes written and read again, 2·rows/keys of the K/V
//    bytes; 32·rows keeps that under 7%.
//  - Within that, enough blocks to give 90% of the SMs one each (blocks_wanted): at least the smallest
//    S with B·H_kv·T_r·S ≥ 0.9·SMs, and no split once the grid has that many (FlashAttention-2's
//    num_splits_heuristic stops at 80%). Then more, if more still fit one wave (block_slots: one block
//    per SM, two from d rows below; S = ⌊slots / (B·H_kv·T_r)⌋): 90% counts blocks, not SMs, and an SM
//    left without a block leaves its share of the read to the others. S forced at B 1, H 32, d 128 (runs 139 and
//    140 on H100s, 128 on an H200): 8 tiles in 16 splits (128 blocks) against 15 (120) 0.8–2.4%
//    faster at Nk 32768 and 131072 on the H100s (Nq 1, Nk 32768: 51.2–52.4 µs against 52.2–53.5),
//    0.5–1.3% on the H200 at 8192 and 32768, and within ±1.6% either way at 8192 on the H100s; 4 tiles
//    of 32 rows at M = 128 (two per SM: 66 splits, 264 blocks, against 60) 8% faster at Nk 131072
//    (56.2–57.4 µs against 61.7–62.0; at 32768 the 512-key floor stops it at 64: 1.7%); 4 tiles of
//    16 rows, 33 splits against 30, ±1% (32, not chosen, was 1–4% faster than both). A block here keeps up to 64 KiB of K and V in flight, and one per SM
//    already streams at the copy's rate: run 46 (H100, --decode-splits) found S = 16, 4 and 1 fastest for
//    8, 32 and 128 unsplit blocks. The first rule, which filled every block slot (2 per SM) to the last
//    wave, took S = 29–30, 8 and 2 there: up to 16% slower (README.md, "How many splits").
//  - Two per SM where the group has d rows or more (M ≥ d: 128 at d = 128, 64 at d = 64): such a block
//    does M rows' math for each key it loads, the more per byte the smaller d (the softmax's work per
//    key does not shrink with d), and a second block on the SM loads while the first multiplies. Run
//    116 (H100, d 128, B 1–16, H_kv 1–4, Nq 4–16, Nk 8192–131072, every S from 1 to 32 with both tile
//    sizes): about 256 blocks were fastest wherever M ≥ 128 (e.g. B 1, H_kv 1, Nq 8, Nk 131072, tiles of
//    32 rows: 102.0 µs with 8 tiles × 32 splits against 111.7 with 16 and 121.5 with the one-per-SM
//    rule's 15), about 128 where M = 64 (B 1, H_kv 4, Nq 8, Nk 131072: 8 tiles × 16 splits 115.4 µs, ×
//    32 120.1). Run 120 (d 64, M = 64): about 256 at 5 of 6 points (B 16, H_kv 4, Nq 8, Nk 32768: 128
//    tiles of 32 rows in 2 splits 227.4 µs, unsplit 273.2; B 4: 8 splits 61.9 µs, 4 splits 76.9); at
//    the sixth (B 1, Nk 131072) 128 blocks were the fastest of S ≤ 16.
int64_t block_slots(const Problem& p, int sms) { return (p.group() * p.Nq >= p.d ? 2 : 1) * int64_t(sms); }
double blocks_wanted(const Problem& p, int sms) { return 0.9 * double(block_slots(p, sms)); }

int splits_for(const Problem& p, int R) {  // with row tiles of 16R rows
  const int64_t M = p.group() * p.Nq, T_r = ceil_div<int64_t>(M, int64_t(B_r) * R);
  const int64_t keys = keys_visited(p);
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, ceil_div<int64_t>(keys, B_w)));
  const int64_t asked = requested_splits();
  if (asked > 0) return int(std::min(asked, cap));
  const DeviceFacts f = facts_for(p.d);
  if (f.sms <= 0 || f.blocks_per_sm <= 0) return 1;
  const int64_t rows = std::min<int64_t>(M, B_r);
  const int64_t s_max = std::min(cap, keys / std::max<int64_t>(256, 32 * rows));
  if (s_max <= 1) return 1;
  const double blocks = double(p.B * p.H_kv * T_r), target = blocks_wanted(p, f.sms);
  if (blocks >= target) return 1;
  const int64_t reach = int64_t(std::ceil(target / blocks)), fill = block_slots(p, f.sms) / int64_t(blocks);
  return int(std::min<int64_t>(s_max, std::max(reach, fill)));
}

// The grid with row tiles of 16R rows: B·H_kv·T_r·S blocks.
int64_t grid_for(const Problem& p, int R) {
  return p.B * p.H_kv * ceil_div<int64_t>(p.group() * p.Nq, int64_t(B_r) * R) * splits_for(p, R);
}

// The m-tiles of a row tile (Tiles): 2, tiles of 32 rows, for a group of 64 rows or more, unless that
// grid falls short of the blocks wanted where 16-row tiles would have more; else 1. With 32-row tiles
// each key is read by half as many blocks, and splits_for doubles S to keep the blocks; where the keys
// cannot be cut that fine (the 512-key floor) the grid halves instead.
// Run 116 (H100, d 128, B 1, 4, 16, H_kv 1, 2, 4, Nq 4–16, Nk 8192–131072, both tile sizes at every S
// from 1 to 32; docs/results/explorations/…-run116-rows.log): 32-row tiles won wherever M ≥ 64 and their grid was
// full — unsplit too, where the old rule kept 16 rows (B 16, H_kv 1, Nq 16, Nk 32768: 691.9 µs against
// 967.7; B 16, H_kv 4, Nq 8, Nk 32768: 420.5 against 525.4) — and lost where the floor halved their grid
// (B 1, H_kv 1, Nq 4, Nk 8192, S = 16: 64 blocks of 32 rows 16.8 µs, 128 of 16 rows 14.8). With 32 rows
// (MQA at Nq 1) 16-row tiles are faster (run 104: 0.84–0.97×). Run 104 had drawn the line at splits
// of 1024 keys and kept 16-row tiles where the grid needs no split (README.md, "Tiles of 32 rows").
int m_tiles(const Problem& p) {
  if (p.group() * p.Nq < 64) return 1;
  const double wanted = blocks_wanted(p, facts_for(p.d).sms);
  return double(grid_for(p, 2)) >= std::min(wanted, double(grid_for(p, 1))) ? 2 : 1;
}
int64_t row_tiles(const Problem& p) { return ceil_div<int64_t>(p.group() * p.Nq, int64_t(B_r) * m_tiles(p)); }
int splits(const Problem& p) { return splits_for(p, m_tiles(p)); }

// One block per SM instead of two, for an unsplit grid of 16-row tiles at d = 128 with three blocks per
// SM or more (in the decode sweep: B 16 and 64 at H_kv 32, B 64 at H_kv 8). Such a grid is a pure
// stream of K and V at the memory's rate, and with 64 KiB of copies in flight per SM instead of 128 the
// same bytes stream faster. Runs 133 (H200) and 134 (H100), 10b's kernel asking 116 KiB against its
// two per SM, beside cuDNN, two interleaved rounds, B 16 and 64, H_kv 8 and 32, Nq 1 and 4, Nk
// 8192–131072: at 512 and 2048 blocks 0.0–2.3% faster on the H200 (B 64, H_kv 8, Nq 1, Nk 131072:
// 7459–7462 µs against 7585–7607; cuDNN 7574–7612) and 0.4–1.3% on the H100 (B 64, H_kv 8, Nq 1, Nk
// 8192: 690.2–690.5 against 697.9–698.3; cuDNN 698.6–699.5), except one H100 point 0.3% slower (B 64,
// H_kv 32, Nq 4, Nk 32768: 11124–11131 against 11093–11097). At 128 blocks it is the same launch (one
// per SM either way). Below three waves of one per SM the last wave would hold a larger share of the
// read, on too few blocks to keep up with the memory: not measured, left at two per SM (or three: Tiles);
// d = 64 (5 stages, 80 KiB of ring) was not measured either.
bool one_per_sm(const Problem& p) {
  if (p.d != 128 || m_tiles(p) != 1 || splits(p) != 1) return false;
  const int sms = facts_for(p.d).sms;
  return sms > 0 && p.B * p.H_kv * row_tiles(p) >= 3 * int64_t(sms);
}

// The ring of the 32-row tiles (Late: 3 stages at d = 128, the copies after the wait) for a grid of
// 16-row tiles at d = 128, on a device whose memory's peak is 4 TB/s or more (an H200: 4.81;
// an H100 SXM: 3.35). Little's law: the bytes a kernel keeps in flight are its bandwidth times the
// memory's latency, so the faster memory needs more of them at the same latency. The 2-stage ring keeps
// one warp tile of K and V (8 KiB) per warp in flight while the warp multiplies, 32 KiB per block; the
// Late ring keeps two, 64 KiB. One block per SM at the H200's ~4.6 TB/s moves ~35 bytes per ns, so 32
// KiB cover ~0.9 µs of latency, and an H100's ~3.0 TB/s ~1.4 µs (our reading; latency under load not
// measured). Runs 172 (H200) and 173 (H100): 10b's unsplit launches (the same kernel as this step's)
// with 1–3 more stages, three interleaved rounds, six points (B 16 and 64, H_kv 8 and 32, Nq 1 and 4,
// Nk 8192–131072; docs/results/explorations/…-run172-*, …-run173-*), outputs equal bit for bit: on the
// H200 the Late ring was 2.2–2.9% faster than the 2-stage ring at all six (B 64, H_kv 32, Nq 1, Nk
// 32768: 7534 against 7722 µs, cuDNN 7640), 2 more stages with the early copies about as fast; on the
// H100 the 2-stage ring was the fastest at all six (Late 0.1–2.1% slower: 11118 against 10892 µs at
// that point) — why the deeper ring costs there is not known. H200s differ: run 174's reads ~2% faster
// than run 176's (fl_read_stream at B 64, H_kv 32, Nq 1, Nk 32768: 7376 against 7515 µs), and there
// the unsplit points gained (10b 7565 → 7372 µs, runs 171 → 174, against cuDNN's 7425); on one like
// run 176's they did not move (7535 in run 144, 7535 in run 176). Split grids of 16-row tiles take the
// Late ring too, on the same reading (at B 1 they are the same 128-odd streaming blocks, and on run
// 174's H200 10b, which runs this step's kernels there, was 0.967–0.993× cuDNN at three B 1 points):
// on run 176's H200 no change against run 144 (B 1, H_kv 32, Nq 1, Nk 131072: 480.1 against 479.8 µs);
// on one like run 174's (runs 177–178) those three points 2–3% faster (483.1 → 469.1–470.0 µs there).
bool deep_memory(int64_t d) { return facts_for(d).memory_bytes_per_s >= 4e12; }  // 10b reads it too
bool deep_ring(const Problem& p) { return p.d == 128 && m_tiles(p) == 1 && deep_memory(p.d); }

size_t workspace_bytes(const Problem& p) {
  const int64_t S = splits(p);
  if (S == 1) return 0;  // the split kernel writes O and L itself
  return size_t(S) * size_t(p.lse_elems()) * size_t(p.d + 1) * sizeof(float);  // O_part, L_part
}

std::string limits(const Problem& p) {
  if (p.Nq >= (int64_t(1) << 30) || p.Nk >= (int64_t(1) << 30))
    return "this step keeps query and key indices in 32 bits: Nq = " + std::to_string(p.Nq) + " and Nk = " +
           std::to_string(p.Nk) + " must both be below 2^30";
  int64_t S = 1;
  try {
    S = splits(p);
  } catch (const Error& e) {
    return e.what();
  }
  const int64_t T_r = row_tiles(p);
  const int64_t blocks = p.B * p.H_kv * T_r * S;
  if (blocks > INT_MAX)
    return "this step launches one thread block per (16 or 32 packed query rows, batch, K/V head, split): " +
           std::to_string(blocks) + " blocks (S = " + std::to_string(S) + ") exceed the grid limit 2^31 − 1";
  if (S > 1 && p.lse_elems() > INT_MAX)
    return "this step's merge kernel takes one row per block: " + std::to_string(p.lse_elems()) +
           " rows exceed the grid limit 2^31 − 1 blocks";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  const DeviceFacts f = device_facts<d>();  // also sets the kernel's shared-memory attribute
  if (f.sms == 0) {  // the query failed: set the attributes here, so that the failure is reported
    FL_CUDA(cudaFuncSetAttribute(attention_kernel<T, d, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(Tiles<d>::kSmemAlone)));
    FL_CUDA(cudaFuncSetAttribute(attention_kernel<T, d, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(Tiles<d, 2>::kSmem)));
  }
  if (!p.seqused_k.empty() && !a.seqused_k) throw Error("seqused_k needs its device copy: the call passed none");
  const int S = splits(p);
  const int64_t M = p.group() * p.Nq, T_r = row_tiles(p), rows_total = p.lse_elems();
  const auto stream = static_cast<cudaStream_t>(a.stream);
  float* O_part = S > 1 ? static_cast<float*>(a.workspace) : nullptr;
  float* L_part = S > 1 ? O_part + size_t(S) * size_t(rows_total) * size_t(d) : nullptr;
  auto split = [&](auto kernel, size_t smem) {  // the split kernel with 16- or 32-row tiles
    kernel<<<dim3(unsigned(p.B * p.H_kv * T_r * S)), dim3(kThreads), smem, stream>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
        a.lse, O_part, L_part, M, int(p.Nq), int(p.Nk), p.H_kv, T_r, S, rows_total, float(p.softmax_scale()), p.causal,
        p.seqused_k.empty() ? nullptr : a.seqused_k, VariantArgs::of(p, a.alibi_slopes, nullptr, nullptr, a.seqused_k));
  };
  if (m_tiles(p) == 2)
    split(attention_kernel<T, d, 2>, Tiles<d, 2>::kSmem);
  else if (!deep_ring(p))
    split(attention_kernel<T, d, 1>, one_per_sm(p) ? Tiles<d>::kSmemAlone : Tiles<d>::kSmem);
  else if constexpr (d == 128)  // deep_ring is d = 128 only
    split(attention_kernel<T, d, 1, true>, one_per_sm(p) ? Tiles<d>::kSmemAlone : Tiles<d, 1, true>::kSmem);
  FL_CUDA(cudaGetLastError());
  if (S == 1) return;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(rows_total));
  cfg.blockDim = dim3(kMergeThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl;
  auto merge = merge_kernel<T, d>;
  const float *O_in = O_part, *L_in = L_part;
  cudaError_t e = cudaErrorNotSupported;
  if (f.major >= 9) {  // programmatic dependent launch is a Hopper feature
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, merge, O_in, L_in, static_cast<T*>(a.o), a.lse, S, rows_total);
    if (e != cudaSuccess) cudaGetLastError();  // refused at once, not sticky: launch without it below
  }
  if (e != cudaSuccess) {  // an ordinary launch; griddepcontrol.wait is then a no-op
    cfg.numAttrs = 0;
    FL_CUDA(cudaLaunchKernelEx(&cfg, merge, O_in, L_in, static_cast<T*>(a.o), a.lse, S, rows_total));
  }
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<DecodeD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s10

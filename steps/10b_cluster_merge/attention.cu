// flashladder — step 10b: the merge of step 10's splits inside a thread-block cluster, through
// distributed shared memory, instead of a second kernel.
//
// Step 10 splits the keys of each (batch, K/V head, row tile) into S chunks, one thread block each;
// every block writes its partial (O_s, L_s) to global memory, and a merge kernel, launched after it
// (programmatic dependent launch: scheduled early, waiting in griddepcontrol.wait), reads the S
// partials back and applies the logsumexp rule. At the small decode reads that need splitting, that
// merge is a fixed cost the bytes cannot hide: run 79 (H100, B 1, H 32, H_kv 8, Nq 1, Nk 32768, d 128,
// scripts/kernel_times.py --decode) timed step 10's call at 55.0 µs by CUDA events, of which the split
// kernel is 47.9 µs and a single kernel's launch and events ~2.7 µs (the S = 1 shapes): ~4.4 µs go to
// the merge after the split kernel ends — waiting for the whole grid to finish and flush, then one
// round trip to L2 for L_s and another for O_s.
//
// The one idea: on Hopper the S blocks of one tile can be ONE thread-block cluster (cluster dims
// (S, 1, 1); the splits of a tile are neighbours in the grid already, s = blockIdx.x % S is the
// block's rank in its cluster). A cluster's blocks run at the same time on one GPC, and each can read
// the others' shared memory (distributed shared memory, DSMEM: ld.shared::cluster through an address
// mapped to the other block, cooperative_groups' map_shared_rank). So a block keeps its partial in its
// own shared memory, the cluster meets at one barrier (barrier.cluster.arrive.release / wait.acquire:
// every partial written and visible), and the merge reads the S partials from the neighbours' shared
// memory: the same rule as step 10's merge kernel,
//     m = max_s L_s,   L = m + ln Σ_s e^{L_s − m},   O = Σ_s e^{L_s − L} O_s,
// with the rows' (row, 4-column) pieces dealt out over the cluster's threads. A second cluster
// barrier keeps every block (and its shared memory) alive until the others have read it. No
// workspace, no second kernel, no wait for a whole grid: only the cluster's own blocks.
//
// What it costs: where the blocks run. A cluster lives in one GPC; Hopper schedules clusters of 8
// blocks portably and 16 with cudaFuncAttributeNonPortableClusterSizeAllowed, so S ≤ 16 (step 10
// takes more: 33 at 4 tiles). A split launch asks for more than half of an SM's shared memory, so that a
// cluster's blocks run one per SM (Tiles::kSmemAlone says what two per SM cost), and S is lowered until
// all the clusters are resident at once (cudaOccupancyMaxActiveClusters): on an H100, S = 9 at B 1,
// H_kv 8 (72 SMs stream, against step 10's 128 blocks). Fewer SMs stream, nothing waits for a grid:
// 10b is faster where the read is short and ties where it is long (README.md, "Measured"). Where so
// few blocks cannot read as fast as the memory (one or two K/V heads at B 1), or where each split
// would read 8192 keys or more, 10b calls step 10's kernels instead (uses_step10, below); on an H200,
// where the clusters are 0.8 of the blocks its memory needs or more, blocks of 8 warps instead of 4
// keep up, and so do they in the last wave of an unsplit grid that leaves it mostly empty (eight_warps,
// below). Where a tile has 8 rows or fewer (decoding with up to 8 query heads per K/V head), the
// kernel puts the keys on the MMA's 16-row side and the rows on its 8-column side (N8, swapped()).

#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <string>
#include <type_traits>

#include <cooperative_groups.h>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/launch.cuh"
#include "steps/variants.cuh"  // VariantArgs: the window, causal folded in

namespace fl::s10 {  // this step's base (steps/10_split_kv): its split rule and its two launches
int splits(const Problem& p);
bool deep_memory(int64_t d);  // the device's memory needs the deeper ring (step 10's deep_ring)
extern const StepImpl impl;
}  // namespace fl::s10

namespace fl::s10b {

namespace cg = cooperative_groups;

constexpr int B_r = 16;      // rows of an m-tile; a tile of the G·Nq packed query rows of one K/V head has 1 or 2 (R; Tiles::kRows = 16R rows)
constexpr int B_w = 16;      // keys per warp tile (one k-step of P̃V, two n-tiles of S)
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxSplits = 16;  // S: at most one cluster of blocks (Hopper's non-portable maximum), see above
constexpr int kLead = 2;        // V_j's copies this many warp tiles ahead of K_j's, where v_ahead()

// kStages warp tiles of K and V per warp ring, as in step 10 (see there, runs 153–157): a warp of a
// 16-row tile sends the copies of tile k + kStages − 1 before it waits for tile k, with a stage fewer
// (2 at d = 128: 64 KiB of ring per block); 32-row tiles keep 3 (6 at d = 64) with the copies after
// the wait (Late). So do the clusters of a split launch here: their 72–96 blocks each stream more of
// the read than step 10's 128, and the early copies made them slower (run 158, H100, B 1: 54.1 against
// 50.6 µs at H_kv 8, Nk 32768, 72 blocks; the same at H_kv 32, 96 blocks). Blocks share an SM unless
// one_per_sm() asks for one per SM (kSmemAlone).
// R: the row tile's m-tiles of B_r rows, 1 or 2. With R = 2 a tile of 32 rows has each warp multiply
// both halves by the K and V fragments it loaded once: the keys are read by half as many blocks
// (m_tiles() says where that pays). Extra: stages more still, for a split launch's clusters on a fast
// memory (deep_clusters()). W: warps per block, kWarps, or 8 for the split clusters too few to keep up
// with the memory in 4 and for an unsplit grid's mostly empty last wave (eight_warps()), which release each
// slot early where their tiles are not swapped (the kernel's kEarly). The kernel's
// N8: the product transposed for tiles of at most 8 rows (swapped()). Lead: V_j's copies that many
// warp tiles ahead of K_j's, in Lead more V slots (v_ahead(); 0 or kLead).
template <int d, int R = 1, bool Late = (R == 2), int Extra = 0, int W = kWarps, int Lead = 0>
struct Tiles {
  static constexpr bool kLate = Late;  // the copies after the wait, with one stage more
  static constexpr int kStages = (d <= 64 ? 5 : 2) + (kLate ? 1 : 0) + Extra;
  static constexpr int kRows = R * B_r;                                    // rows of a tile
  static constexpr int kTileElems = B_w * d;                               // one K or V warp tile
  static constexpr int kRingElems = W * (kStages * 2 + Lead) * kTileElems;  // every warp's K and V slots
  static constexpr size_t kSmem = size_t(kRows * d + kRingElems) * 2;      // Q tile + rings (16-bit T)
  // What a launch asks for to run one block per SM: more than half of an SM's 228 KiB (the extra
  // 16 KiB are not used). Every split launch (S > 1) asks for it, so that the blocks of a cluster run
  // one per SM. Measured on H100s, B 1, H_kv 8, Nk 32768:
  //  - with kSmem two blocks fit an SM: run 80 (S = 15) timed the split kernel at 55.4 µs against step
  //    10's 47.0, which we read as the cluster scheduler putting a cluster's blocks two to an SM (half
  //    of a GPC's SMs idle; not observed directly);
  //  - asking 116 KiB, 8 clusters fit at once only up to 9 blocks each (a cluster lives in one GPC),
  //    so S = 9 and 72 SMs stream: 53.0 µs per call against step 10's 54.9 and cuDNN's 54.8 (run 81);
  //  - filling one SM with deeper rings instead (6 stages at d = 128, 192 KiB, run 82) was no faster:
  //    2.45 TB/s here against 2.53 with these rings (run 81, another H100), and at B 1, H_kv 32 (S = 3)
  //    2.33–2.64 TB/s against step 10's 2.61–3.10 in the same run (README.md, "What did not work").
  static constexpr size_t kSmemAlone = 116 * 1024;
  static_assert(Extra > 0 || W > kWarps || kSmemAlone >= kSmem, "the one-per-SM request holds the tiles");
  static_assert(kSmem <= 227 * 1024, "a block's shared memory: at most Hopper's 227 KiB");
  // After the loop the rings hold the warps' partial O (fp32, rows padded by 4 floats) and m, ℓ.
  static constexpr size_t kMergeBytes = size_t(W * kRows * (d + 4) + 2 * W * kRows) * 4;
  // Then, behind them, the block's partial for the cluster: O_s [kRows][d] and L_s [kRows], fp32.
  static constexpr size_t kPartialBytes = size_t(kRows * d + kRows) * 4;
  static_assert(kMergeBytes + kPartialBytes <= size_t(kRingElems) * 2, "the merge buffers and the partial fit in the rings");
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

// One thread block: the rows [r0, r0 + 16R) of the packed [M][d] tile of one (batch, K/V head), over
// the key tiles of split s (dealt out over the cluster's warps, below). Fragment names as in 08d:
// lane = 4·g + t holds rows g and g + 8 of each m-tile and, in each 8-column n-tile, columns 2t and 2t + 1. Key and row-in-head indices are 32-bit
// (limits() keeps Nq, Nk below 2^30); packed rows and tensor offsets are 64-bit.
// S == 1: O and L are written directly (storage type, fp32). S > 1: the normalised partial O_s and L_s
// (fp32) stay in this block's shared memory, and the cluster of the tile's S blocks merges them.
// With N8 the loop's body ends in `continue` after the transposed product, and the front end calls the
// loops of the product below it unreachable in those instances (warning 128, 30 of them): they are, by
// design, and are compiled out. Silenced for this kernel only, rather than re-indent the product into
// an `else`.
#pragma nv_diag_suppress 128
template <class T, int d, int R, bool Late, int Extra = 0, int W = kWarps, bool N8 = false, int Lead = 0>
__global__ void __launch_bounds__(32 * W)
attention_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                 T* __restrict__ O, float* __restrict__ L, int64_t M, int Nq, int Nk, int64_t H_kv, int64_t T_r,
                 int S, float scale, bool causal, const int32_t* __restrict__ seqused_k,
                 VariantArgs var) {
  static_assert(!N8 || R == 1, "the swapped product takes tiles of one m-tile (at most 8 rows of it used)");
  static_assert(Lead == 0 || (!Late && Extra == 0 && W == kWarps), "V ahead of K: in the ring measured, 4 warps copying before the wait");
  using Tl = Tiles<d, R, Late, Extra, W, Lead>;
  constexpr int kStages = Tl::kStages, kTileElems = Tl::kTileElems, kRows = Tl::kRows;
  constexpr int kBlock = 32 * W;  // threads
  // Early release (blocks of 8 warps, 16-row tiles not swapped): a warp reads all of tile k's K and V
  // fragments into registers first (64 more: 255, no spills), and its slot takes tile k + kStages
  // before the math on tile k, so kStages tiles are in flight while it multiplies instead of
  // kStages − 1, in the same shared memory (8 warps × 3 stages fill it; a fourth stage would not fit).
  // S_ij then runs as two accumulator chains, even and odd k-steps (alone no faster: run 255).
  // Runs 269–271 (H200s, five interleaved rounds, means; bitwise the tip's O and L without the chains,
  // within an ulp with them): B 1, H_kv 8, Nq 4, Nk 32768 38.59 → 37.35 µs released early, → 36.81
  // with the chains (two machines: 0.954 and 0.974–0.977 of the tip); Nk 8192 15.90 → 15.52; unsplit
  // 8-warp grids 0.996–1.000. Not where the warps have less math: the swapped tiles (N8) were 1.8–3.0%
  // slower released early, the 4-warp clusters of 3 8% (run 268).
  constexpr bool kEarly = W == 8 && !N8;
  constexpr int kAhead = kEarly ? kStages : kStages - 1;  // the prologue's tiles in flight
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_s = reinterpret_cast<T*>(smem);  // Q tile: [kRows][d] in shared memory
  T* ring = Q_s + kRows * d;  // [W][kStages][K, V][B_w][d]: each warp's own slots
                              // (with a Lead: [W][2·kStages + Lead][B_w][d], below)

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
  // This thread's rows see keys [first, last); padded rows: all (never stored). Its rows are g + 8rr,
  // or with N8 (below) 2t + rr: there the rows are the accumulator's columns.
  int first[2 * R], last[2 * R];
#pragma unroll
  for (int rr = 0; rr < 2 * R; ++rr) {
    const int row = N8 ? 2 * t + rr : g + 8 * rr;
    const int i = (i_first + row) % Nq;
    first[rr] = row < rows_here ? key_lo(i) : 0;
    last[rr] = row < rows_here ? key_hi(i) : n_k;
  }

  // This warp's tiles of B_w keys, of the T_c tiles the row tile visits from tile j_first on (a
  // window's first key, rounded down to a tile). Any partition of the keys merges to the same answer;
  // step 10 gives each split a contiguous chunk. Here the cluster's merge waits for its slowest block,
  // so the blocks should finish together: the cluster's S·W warps deal the tiles out in turn, warp
  // gw = Ws + w taking tiles gw, gw + WS, … (n_mine of them; with S = 1 and W = 4 this is step 10's
  // t_begin + w + 4k). At each step a block's W warps read W neighbouring tiles, and the cluster sweeps the keys
  // front to back together. Per-block timestamps (run 88, H100, B 1, H_kv 8, Nk 32768, S = 9): with
  // contiguous chunks the blocks' loops ended a median 3.6 µs apart within a call; dealt in turn, 2.6.
  // Calls at H_kv 8, Nk >= 32768 were 1.5-4.0% faster (runs 88, 90), at Nk <= 8192 up to 0.5 µs
  // slower (README.md, "Where the time goes").
  const int j_first = n_begin / B_w;
  const int T_c = n_end > n_begin ? (n_end + B_w - 1) / B_w - j_first : 0;
  const int gw = s * W + warp, stride = S * W;  // this warp among the cluster's, and their count
  const int n_mine = T_c > gw ? (T_c - gw + stride - 1) / stride : 0;
  // Tile k's slots: K_j and V_j side by side in slot k % kStages. With a Lead (v_ahead()), the warp's
  // kStages slots of K, then kStages + Lead of V, whose copies run Lead tiles ahead of K's. At tile k
  // the warp copies K of tile k + kStages − 1 and V of tile k + kStages − 1 + Lead, and both land in
  // slots that tile k − 1 has just freed: K's (k − 1) mod kStages, V's (k − 1) mod (kStages + Lead).
  T* my_ring = ring + warp * (kStages * 2 + Lead) * kTileElems;
  constexpr int kSlot = Lead ? 1 : 2;  // tiles from one K slot to the next
  auto V_slot = [&](int k) { return my_ring + (kStages + k % (kStages + Lead)) * kTileElems; };  // with a Lead
  auto load_v = [&](int k) {  // with a Lead: V of this warp's k-th tile (copies not waited for)
    const int j0 = (j_first + gw + stride * k) * B_w;
    load_rows<T, d, B_w, 32>(V_slot(k), V_g + int64_t(j0) * d, n_k - j0, lane);
  };
  auto load_kv = [&](int k) {  // this warp's k-th tile → slot k % kStages (copies not waited for)
    const int j0 = (j_first + gw + stride * k) * B_w;
    T* K_s = my_ring + k % kStages * kSlot * kTileElems;
    load_rows<T, d, B_w, 32>(K_s, K_g + int64_t(j0) * d, n_k - j0, lane);  // keys past n_k: zeros, never read
    if constexpr (Lead == 0) load_rows<T, d, B_w, 32>(K_s + kTileElems, V_g + int64_t(j0) * d, n_k - j0, lane);
    else if (k + Lead < n_mine) load_v(k + Lead);  // in the group of K's tile k: waited for before tile k + Lead
  };

  // ---- Prologue: Q (the whole block; with a Lead, the warp's first Lead tiles of V too), then each
  // warp's first kStages − 1 tiles (kStages released early), one group each (committed even when empty,
  // so that group k + 1 is always tile k: the waits below count on it).
  load_rows<T, d, kRows, kBlock>(Q_s, Q_g, rows_here, threadIdx.x);
#pragma unroll
  for (int k = 0; k < Lead; ++k)  // V's first Lead tiles, with Q
    if (k < n_mine) load_v(k);
  mma::cp_async_commit();
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    if (k < n_mine) load_kv(k);
    mma::cp_async_commit();
  }
  mma::cp_async_wait<kAhead>();  // this thread's part of Q has landed
  __syncthreads();                    // everyone's has
  // Q's A fragments for all d/16 k-steps, kept in registers for the whole loop (08d's ldmatrix). With
  // two m-tiles they are read from Q_s at every k-step instead: 64 more registers at d = 128 beside the
  // second m-tile's O would spill (ptxas: 255 registers and 20 bytes of spills), and an ldmatrix from
  // shared memory per mma costs no load from global memory.
  uint32_t q[d / 16][4];
  if constexpr (R == 1 && !N8) {
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk) mma::ldmatrix_x4(q[kk], Q_s + at<d>(lane % 16, 16 * kk + lane / 16 * 8));
  }
  // N8: Q_iᵀ's B fragments instead (k = the d columns, n = the tile's first 8 rows): lane 4g + t holds
  // Q[g][16kk + 2t..2t+1] and Q[g][16kk + 8 + 2t..2t+1], two k-steps per ldmatrix.x4 of rows 0–7.
  // Rows 8–15 are never read: swapped() launches N8 only where a tile's rows are 8 or fewer.
  uint32_t qt[d / 16][2];
  if constexpr (N8) {
#pragma unroll
    for (int kk = 0; kk < d / 32; ++kk) {
      uint32_t x[4];
      mma::ldmatrix_x4(x, Q_s + at<d>(lane % 8, 32 * kk + lane / 8 * 8));
      qt[2 * kk][0] = x[0], qt[2 * kk][1] = x[1], qt[2 * kk + 1][0] = x[2], qt[2 * kk + 1][1] = x[3];
    }
  }

  // The warp's unnormalised O over its keys: O_i[mt][n][2h+e] = O[16mt + g + 8h][8n + 2t + e]; the
  // thread's row slots rr = 2mt + h (rows g + 8rr) carry the running max (unscaled S) and sum.
  float O_i[R][d / 8][4];
  // N8: O_iᵀ instead, [d][8]: O_t[mt][2h + e] = O[2t + e][16mt + g + 8h] (the row slots rr = e).
  float O_t[d / 16][4];
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
#pragma unroll
  for (int mt = 0; mt < d / 16; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) O_t[mt][e] = 0.f;

  // ---- Main loop: the warp's tiles, kStages − 1 ahead in its own ring. With 16-row tiles the block's
  // warps advance in step: one barrier per round, in the rounds that all four have (n_step), so that the
  // block's copies in flight stay one stretch of 4·B_w keys of K and one of V per round instead of
  // drifting apart. Run 124 (H100, 10b's kernel with and without it, beside cuDNN, three interleaved
  // rounds): at the unsplit B ≥ 16 decode points 0.984–0.998× cuDNN without, 0.990–0.999× with (B 16,
  // H_kv 8, Nq 1, Nk 131072: 2771.8 → 2744.5 µs), none more than 0.3 µs slower. Not with 32-row tiles,
  // whose warps have twice the math per tile and then wait on each other: 0.94–0.95× (run 125). Nor
  // in eight_warps()' blocks of 8 warps: with the barrier 38.4 µs, without 36.8–36.9 (runs 187–188, H200,
  // B 1, H_kv 8, Nq 1, Nk 32768, 9 splits; Nq 4: 39.2 against 37.6).
  const int n_step = T_c / stride;
  for (int k = 0; k < n_mine; ++k) {
    if constexpr (R == 1 && W == kWarps) {
      if (k < n_step) __syncthreads();
    }
    if constexpr (kEarly) {  // the copies after the fragments are read, below
      mma::cp_async_wait<kStages - 1>();  // groups 0 … k + 1 done: Q and this thread's copies of tile k
      __syncwarp();                       // every lane's copies of tile k visible to the warp
    } else if constexpr (!Late) {  // the next copies first (Tiles: the same tiles in flight at the wait)
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
    const T* K_s = my_ring + k % kStages * kSlot * kTileElems;  // K_j: [B_w][d], swizzled
    const T* V_s = Lead ? V_slot(k) : K_s + kTileElems;  // V_j: [B_w][d], swizzled
    const int j0 = (j_first + gw + stride * k) * B_w;      // first key of the tile

    if constexpr (N8) {
      // ---- Keys on the MMA's long side (N8: a tile of at most 8 rows). mma.m16n8k16 multiplies 16
      // rows by 8 columns; the loop below it pads a decode tile of 4 rows (4 query heads, Nq 1) to 16,
      // so 3/4 of its products and exponentials are of zero rows. Transposed, S_ijᵀ = K_j Q_iᵀ puts the
      // 16 keys of the warp tile on the 16-row side and the rows on the 8-column side: one n-tile of S
      // instead of two, and O_iᵀ += V_jᵀ P̃_ijᵀ one n-tile instead of two per 16 columns of d. Half
      // the mma and half the exponentials, and 128 registers instead of 168–178 (as measured, before 8 warps'
      // early release took theirs to 255). Where it pays and where
      // it does not: swapped(), on the host (B 1, H_kv 8, Nq 1, Nk 32768: 37.60 → 36.05 µs, run 245).
      float S_t[4] = {0.f, 0.f, 0.f, 0.f};  // S_ijᵀ: [16 keys][8 rows]; lane: keys g, g + 8 × rows 2t, 2t + 1
#pragma unroll
      for (int kk = 0; kk < d / 16; ++kk) {
        uint32_t ka[4];  // K_j's A fragment (rows = keys), the layout of Q's above
        mma::ldmatrix_x4(ka, K_s + at<d>(lane % 16, 16 * kk + lane / 16 * 8));
        mma::mma_m16n8k16<T>(S_t, ka, qt[kk]);
      }
      if (j0 < lo_max || j0 + B_w > n_min) {  // the masks of the loop below, element (key g + 8h, row 2t + e)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = j0 + g + 8 * h;
            if (j >= last[e] || j < first[e]) S_t[2 * h + e] = -INFINITY;
          }
      }
      // The online softmax of the loop below, per row 2t + e: a row's 16 keys are in the 8 lanes of
      // its column (g = 0…7), so its maximum takes three shuffles (xor 4, 8, 16) instead of two, and
      // ℓ stays a per-lane partial sum until after the loop.
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float m_new = fmaxf(m_i[e], fmaxf(S_t[e], S_t[2 + e]));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 4));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 8));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 16));
        const float m_sub = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, scale_log2);
        const float alpha = mma::exp2_approx(__fmul_rn(m_i[e], scale_log2) - m_sub);
        m_i[e] = m_new;
        S_t[e] = mma::exp2_approx(fmaf(S_t[e], scale_log2, -m_sub));
        S_t[2 + e] = mma::exp2_approx(fmaf(S_t[2 + e], scale_log2, -m_sub));
        l_i[e] = alpha * l_i[e] + (S_t[e] + S_t[2 + e]);
#pragma unroll
        for (int mt = 0; mt < d / 16; ++mt) {
          O_t[mt][e] *= alpha;
          O_t[mt][2 + e] *= alpha;
        }
      }
      // P̃_ijᵀ as the B operand (k = 16 keys, n = 8 rows): lane 4g + t needs P̃ᵀ[2t..2t+1][g] and
      // P̃ᵀ[8 + 2t..][g], the transpose of what it holds; movmatrix transposes each 8×8 half in registers.
      const uint32_t pb[2] = {mma::movmatrix_trans(mma::pack2<T>(S_t[0], S_t[1])),
                              mma::movmatrix_trans(mma::pack2<T>(S_t[2], S_t[3]))};
#pragma unroll
      for (int mt = 0; mt < d / 16; ++mt) {
        uint32_t va[4];  // V_jᵀ's A fragment (rows = 16 columns of d, k = keys): ldmatrix.trans of V_j
        mma::ldmatrix_x4_trans(va, V_s + at<d>(lane % 8 + lane / 16 * 8, 16 * mt + lane / 8 % 2 * 8));
        mma::mma_m16n8k16<T>(O_t[mt], va, pb);
      }
      continue;
    }

    // S_ij = Q K_jᵀ, unscaled: [16R][16], each m-tile in two n-tiles (08d's K fragments, one
    // ldmatrix.x4 per k-step, used by every m-tile).
    float S_ij[R][2][4];
#pragma unroll
    for (int mt = 0; mt < R; ++mt)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) S_ij[mt][n][e] = 0.f;
    // K_j's B fragments of k-step kk (08d's, one ldmatrix.x4) and V_j's of columns [16n, 16n + 16)
    // (ldmatrix.trans): read here in the loops below, or all of them first with early release.
    auto k_frag = [&](uint32_t(&kb)[4], int kk) {
      mma::ldmatrix_x4(kb, K_s + at<d>(lane % 8 + lane / 16 * 8, 16 * kk + lane / 8 % 2 * 8));
    };
    auto v_frag = [&](uint32_t(&vb)[4], int n) { mma::ldmatrix_x4_trans(vb, V_s + at<d>(lane % 16, 16 * n + lane / 16 * 8)); };
    // Early release: tile k's fragments, then its slot takes tile k + kStages, then the math.
    uint32_t k_r[kEarly ? d / 16 : 1][4], v_r[kEarly ? d / 16 : 1][4];  // K_j's B fragments per k-step, V_j's per 16 columns
    float S_odd[2][4] = {};  // early release: the odd k-steps' chain of S_ij (one m-tile)
    if constexpr (kEarly) {
#pragma unroll
      for (int kk = 0; kk < d / 16; ++kk) k_frag(k_r[kk], kk);
#pragma unroll
      for (int n = 0; n < d / 16; ++n) v_frag(v_r[n], n);
      __syncwarp();  // every lane is done reading slot k
      if (k + kStages < n_mine) load_kv(k + kStages);
      mma::cp_async_commit();
    }
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk) {
      uint32_t kb[4];
      if constexpr (kEarly) {
#pragma unroll
        for (int x = 0; x < 4; ++x) kb[x] = k_r[kk][x];
      } else {
        k_frag(kb, kk);
      }
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
        float(&S_c)[2][4] = kEarly && kk % 2 ? S_odd : S_ij[mt];  // the k-step's chain
        mma::mma_m16n8k16<T>(S_c[0], qa, b0);
        mma::mma_m16n8k16<T>(S_c[1], qa, b1);
      }
    }
    if constexpr (kEarly)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) S_ij[0][n][e] += S_odd[n][e];

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
      if constexpr (kEarly) {
#pragma unroll
        for (int x = 0; x < 4; ++x) vb[x] = v_r[n][x];
      } else {
        v_frag(vb, n);
      }
      const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
      for (int mt = 0; mt < R; ++mt) {
        mma::mma_m16n8k16<T>(O_i[mt][2 * n], a[mt], b0);
        mma::mma_m16n8k16<T>(O_i[mt][2 * n + 1], a[mt], b1);
      }
    }
  }
  mma::cp_async_wait<0>();  // no copy outlives the loop (the trailing groups are empty)

  // ---- The merge inside the block: the W warps' (m_w, ℓ_w, O_w) over disjoint keys, through shared
  // memory (the rings, no longer read), by the rule of the online softmax in base 2:
  //   m = max_w m_w,  f_w = 2^(m_w·τlog2e − m·τlog2e),  ℓ = Σ_w f_w ℓ_w,  O = Σ_w f_w O_w / ℓ.
  // A warp that saw no key for a row has m_w = −∞, ℓ_w = 0, O_w = 0, so f_w = 0; if no warp saw one,
  // m_sub is 0 instead of −∞ (no −∞ − −∞) and ℓ = 0: O = 0, and L = +∞ (S = 1) or −∞ (a partial:
  // weight e^{−∞} = 0 in the merge kernel).
  float* O_w = reinterpret_cast<float*>(ring);  // [W][kRows][d + 4] (4 floats of padding per row)
  float* m_w = O_w + W * kRows * (d + 4);       // [W][kRows]
  float* l_w = m_w + W * kRows;                 // [W][kRows]
  __syncthreads();  // every warp is done with its ring
  if constexpr (N8) {  // O_t's columns are rows 2t + e; the row's ℓ is spread over the 8 lanes g
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float l = l_i[e];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      const int row = warp * kRows + 2 * t + e;
#pragma unroll
      for (int mt = 0; mt < d / 16; ++mt) {
        O_w[row * (d + 4) + 16 * mt + g] = O_t[mt][e];
        O_w[row * (d + 4) + 16 * mt + 8 + g] = O_t[mt][2 + e];
      }
      if (g == 0) {
        m_w[row] = m_i[e];
        l_w[row] = l;
      }
    }
  } else {
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
  }
  __syncthreads();
  const int64_t row_g = bh * M + r0;  // flat row (b·H + h)·Nq + i of the tile's first row
  constexpr int kC = d / 4;           // 4-column chunks per row
  float* P_s = l_w + W * kRows;       // S > 1: this split's normalised O_s, [kRows][d] fp32 (Tiles::kPartialBytes)
  float* Ls_s = P_s + kRows * d;      // S > 1: its L_s, [kRows]
  for (int c = threadIdx.x; c < kRows * kC; c += kBlock) {
    const int row = c / kC, col = c % kC * 4;
    if (row >= rows_here) break;  // rows grow with c: the rest are padding too
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) m = fmaxf(m, m_w[w * kRows + row]);
    const float m_sub = m == -INFINITY ? 0.f : __fmul_rn(m, scale_log2);
    float l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < W; ++w) {
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
    } else {       // split s's partial stays here, for the cluster: O_s in fp32, L_s (−∞: none of its keys)
      *reinterpret_cast<float4*>(P_s + row * d + col) = o;
      if (col == 0) Ls_s[row] = l > 0.f ? log_sum_exp(m, l, scale, scale_log2) : -INFINITY;
    }
  }
  if (S == 1) return;  // a cluster of one block: nothing to merge

  // ---- The merge across the cluster (step 10's merge kernel, reading shared memory, not global):
  //   m = max_s L_s,   ℓ = Σ_s e^{L_s − m},   L = m + ln ℓ,   O = Σ_s (e^{L_s − m}/ℓ) O_s.
  // The tile's rows_here·d/4 pieces (row, 4 columns) are dealt out over the cluster's S·32W threads;
  // each reads the piece from every rank r < S (rank r is split r of this tile) through DSMEM. A
  // split that saw no key of the row has L_s = −∞ and weight 0; if all have, O = 0 and L = +∞.
  // LAB:BEGIN the merge across the cluster: a cluster barrier (every block's partial in P_s, Ls_s written and visible), then each of the tile's rows_here·d/4 pieces (row, 4 columns), dealt out over the cluster's S·kBlock threads (kBlock = 32W: 128, or 256 with eight_warps()), reads L_r and O_r of that piece from every rank r < S through distributed shared memory (cooperative_groups: this_cluster(), map_shared_rank) and writes O = Σ_r e^{L_r − m}/ℓ · O_r (as T) and L = m + ln ℓ (m = max_r L_r, ℓ = Σ_r e^{L_r − m}; a row no split saw: O = 0, L = +∞); then a second barrier so that no block leaves while another reads its shared memory
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partial is written, and visible to the others (release / acquire)
  for (int c = s * kBlock + threadIdx.x; c < rows_here * kC; c += S * kBlock) {
    const int row = c / kC, col = c % kC * 4;
    float e[kMaxSplits];  // L_r, then e^{L_r − m}
    float4 x[kMaxSplits];
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r)  // all S reads issued before any is used: one round trip
      if (r < S) {
        e[r] = *cluster.map_shared_rank(Ls_s + row, r);
        x[r] = *cluster.map_shared_rank(reinterpret_cast<const float4*>(P_s + row * d + col), r);
      }
    float m = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r)
      if (r < S) m = fmaxf(m, e[r]);
    T* O_g = O + (row_g + row) * d + col;
    if (m == -INFINITY) {  // no split saw a key of this row
      *reinterpret_cast<uint2*>(O_g) = make_uint2(mma::pack2<T>(0.f, 0.f), mma::pack2<T>(0.f, 0.f));
      if (col == 0) L[row_g + row] = INFINITY;
      continue;
    }
    float l = 0.f;
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r)
      if (r < S) {
        e[r] = expf(e[r] - m);
        l += e[r];
      }
    const float inv_l = 1.f / l;  // l >= 1: the split with L_s = m contributes e^0
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r)
      if (r < S) {
        const float w = e[r] * inv_l;
        o = make_float4(fmaf(w, x[r].x, o.x), fmaf(w, x[r].y, o.y), fmaf(w, x[r].z, o.z), fmaf(w, x[r].w, o.w));
      }
    *reinterpret_cast<uint2*>(O_g) = make_uint2(mma::pack2<T>(o.x, o.y), mma::pack2<T>(o.z, o.w));
    if (col == 0) L[row_g + row] = m + logf(l);
  }
  // No block leaves (and frees its shared memory) while another still reads it. This barrier orders no
  // memory: every DSMEM load above has returned (its value went into O), so the arrive is relaxed. A
  // release arrive (cluster.sync()) would first make this thread's writes, the stores of O, visible
  // to the cluster, which no one here needs. Run 92 (H100, B 1): 0.2-0.6 µs faster per call at Nk <=
  // 32768 (H_kv 8) and <= 8192 (H_kv 32), within the noise at longer reads
  // (docs/results/explorations/…-run92-10b-tail.*).
  __cluster_barrier_arrive_relaxed();
  __cluster_barrier_wait();
  // LAB:END
}

#pragma nv_diag_default 128

// ---- Host side ----------------------------------------------------------------------------------

// What the heuristic needs from the device: SMs, how many blocks of this kernel one SM holds (from
// the occupancy calculator, so a GPU with less shared memory gets the right count), the largest
// cluster of split blocks that can be scheduled (16, non-portable, else 8, the portable size, else 1:
// no split), and how many clusters of each size the device runs at once (cudaOccupancyMaxActiveClusters:
// a cluster lives in one GPC, so this is per GPC, not SMs / size). Queried once per device and head
// dim; zeros without a usable device (then S = 1).
struct DeviceFacts {
  int sms = 0, blocks_per_sm = 0, max_cluster = 0;
  double memory_bytes_per_s = 0;  // the memory's peak: 2 transfers per clock × bus width (uses_step10)
  int clusters_at_once[kMaxSplits + 1] = {};  // [size]: clusters of that many split blocks resident together
};

template <int d>
int clusters_that_fit(int size) {  // how many clusters of `size` blocks the device holds at once (0: none)
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(size));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Tiles<d>::kSmemAlone;  // what a split launch asks for (with either kind of tile)
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(size);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, attention_kernel<__half, d, 1, true>, &cfg) != cudaSuccess) {
    cudaGetLastError();  // not sticky: this size is simply not available
    return 0;
  }
  return n;
}

// A kernel's attributes for split launches: the one-per-SM shared memory, clusters of up to 16 blocks.
template <class Kernel>
bool allow_clusters(Kernel kernel, int smem_alone) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_alone) == cudaSuccess &&
         cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
}
// The same for a kernel of 16-row tiles in both forms of its product (N8: the swapped one).
template <class T, int d, bool Late, int Extra = 0, int W = kWarps>
bool allow_clusters_16(int smem_alone) {
  return allow_clusters(attention_kernel<T, d, 1, Late, Extra, W>, smem_alone) &&
         allow_clusters(attention_kernel<T, d, 1, Late, Extra, W, true>, smem_alone);
}

// The split clusters' kernels of d = 128 only, each still one block per SM (so the clusters resident
// at once are those of the 4-warp kernel, counted below): deep_clusters()' (a ring a stage deeper,
// 132 KiB) and eight_warps()' (8 warps, 3 stages each, 196 KiB; also launched unsplit, in clusters of
// one block).
template <int d>
bool allow_d128_clusters() {
  if constexpr (d == 128) {
    constexpr int deep = int(Tiles<d, 1, true, 1>::kSmem), eight = int(Tiles<d, 1, true, 0, 8>::kSmem);
    return allow_clusters(attention_kernel<__half, d, 1, true, 1>, deep) &&
           allow_clusters(attention_kernel<__nv_bfloat16, d, 1, true, 1>, deep) &&
           allow_clusters_16<__half, d, true, 0, 8>(eight) && allow_clusters_16<__nv_bfloat16, d, true, 0, 8>(eight);
  }
  return true;
}

template <int d>
DeviceFacts device_facts() {
  static std::mutex mu;
  static DeviceFacts cache[64];
  static bool known[64] = {};
  constexpr int smem = int(Tiles<d>::kSmem), smem_alone = int(Tiles<d>::kSmemAlone);
  int dev = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64 && known[dev]) return cache[dev];
  DeviceFacts f;
  int major = 0, memory_khz = 0, bus_bits = 0;
  // Both storage types have the same resources; the attributes are needed before any launch.
  const bool ok =
      cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64 &&
      cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 &&
      allow_clusters_16<__half, d, true>(smem_alone) && allow_clusters_16<__nv_bfloat16, d, true>(smem_alone) &&
      allow_clusters(attention_kernel<__half, d, 2, true>, smem_alone) &&
      allow_clusters(attention_kernel<__nv_bfloat16, d, 2, true>, smem_alone) &&
      allow_clusters_16<__half, d, false>(smem_alone) &&  // unsplit: one_per_sm's request
      allow_clusters_16<__nv_bfloat16, d, false>(smem_alone) && allow_d128_clusters<d>() &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.blocks_per_sm, attention_kernel<__half, d, 1, false>, kThreads, smem) ==
          cudaSuccess;
  if (!ok) {
    cudaGetLastError();  // no usable device: the runner reports that (and a launch would, checked)
    return {};
  }
  f.memory_bytes_per_s = 2.0 * memory_khz * 1e3 * bus_bits / 8;  // H100 SXM: 2619 MHz, 5120 bits, 3.35e12
  for (int size = 1; size <= kMaxSplits; ++size) f.clusters_at_once[size] = clusters_that_fit<d>(size);
  f.max_cluster = f.clusters_at_once[kMaxSplits] > 0 ? kMaxSplits : f.clusters_at_once[8] > 0 ? 8 : 1;
  cache[dev] = f;
  known[dev] = true;
  return f;
}

DeviceFacts facts_for(int64_t d) { return d <= 64 ? device_facts<64>() : device_facts<128>(); }

// For the tests: how many clusters of `size` split blocks this device runs at once (0 for a size it
// does not schedule, or without a device). Run 85 (H100, a probe kernel asking 116 KiB): 132, 66, 39,
// 30, 22, 17, 15, 15, 9 for sizes 1 to 9, then 7 for every size from 10 to 16 — so 8 clusters fit at
// once up to S = 9 (B 1, H_kv 8), 32 only up to S = 3 (B 1, H_kv 32).
int clusters_at_once(int64_t d, int size) {
  return size >= 1 && size <= kMaxSplits ? facts_for(d).clusters_at_once[size] : 0;
}

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

// The number of key splits S for p: step 10's rule (its README.md, "How many splits"), from the keys a
// row tile visits (keys_visited above; Nk for the plain problem), clamped to one cluster.
//  - At most the largest cluster the device schedules (DeviceFacts::max_cluster), at most one warp tile (16 keys) per split, and, unless FLASHLADDER_SPLITS
//    asks for more, at least max(256, 32·rows) keys per split: a split costs a fixed prologue (Q, the
//    ring filling) and a partial of rows·d·4 bytes written and read again, 2·rows/keys of the K/V
//    bytes; 32·rows keeps that under 7%.
//  - Within that, enough blocks to give 90% of the SMs one each (blocks_wanted): at least the smallest
//    S with B·H_kv·T_r·S ≥ 0.9·SMs, and no split once the grid has that many (FlashAttention-2's
//    num_splits_heuristic stops at 80%). Then more, if more still fit one wave (block_slots: one block
//    per SM, two from d rows below; S = ⌊slots / (B·H_kv·T_r)⌋): 90% counts blocks, not SMs, and an SM
//    left without a block leaves its share of the read to the others (runs 128, 139, 140: step 10's
//    attention.cu). A block here keeps up to 64 KiB of K and V in flight, and one per SM
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
//    (A split launch here runs one block per SM: the clusters' residency below mostly lowers that S
//    again, and uses_step10 sends most such problems to step 10's blocks.)
int64_t block_slots(const Problem& p, int sms) { return (p.group() * p.Nq >= p.d ? 2 : 1) * int64_t(sms); }
double blocks_wanted(const Problem& p, int sms) { return 0.9 * double(block_slots(p, sms)); }

int splits_for(const Problem& p, int R) {  // with row tiles of 16R rows
  const int64_t M = p.group() * p.Nq, T_r = ceil_div<int64_t>(M, int64_t(B_r) * R);
  const int64_t keys = keys_visited(p);
  const int64_t asked = requested_splits();  // read first: a bad value is refused with or without a device
  const DeviceFacts f = facts_for(p.d);
  if (f.sms <= 0 || f.blocks_per_sm <= 0 || f.max_cluster <= 1) return 1;  // no device, or no cluster to merge in
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(f.max_cluster, ceil_div<int64_t>(keys, B_w)));
  if (asked > 0) return int(std::min(asked, cap));
  const int64_t rows = std::min<int64_t>(M, B_r);
  const int64_t s_max = std::min(cap, keys / std::max<int64_t>(256, 32 * rows));
  if (s_max <= 1) return 1;
  const double blocks = double(p.B * p.H_kv * T_r), target = blocks_wanted(p, f.sms);
  if (blocks >= target) return 1;
  const int64_t reach = int64_t(std::ceil(target / blocks)), fill = block_slots(p, f.sms) / int64_t(blocks);
  int64_t S = std::min<int64_t>(s_max, std::max(reach, fill));
  // And all B·H_kv·T_r clusters at once: a cluster runs inside one GPC, so clusters of S blocks may not
  // all fit where S·clusters SMs would (a GPC of 16 SMs holds one cluster of 9, not 1.8). A cluster
  // left for a second wave would double the time: take the largest S up to here whose clusters fit.
  while (S > 1 && f.clusters_at_once[S] < blocks) --S;
  return int(S);
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
// (Run 116 timed step 10's kernels; here the rule reads this step's splits, and its points mostly run
// step 10's: uses_step10.)
int m_tiles(const Problem& p) {
  if (p.group() * p.Nq < 64) return 1;
  const double wanted = blocks_wanted(p, facts_for(p.d).sms);
  return double(grid_for(p, 2)) >= std::min(wanted, double(grid_for(p, 1))) ? 2 : 1;
}
int64_t row_tiles(const Problem& p) { return ceil_div<int64_t>(p.group() * p.Nq, int64_t(B_r) * m_tiles(p)); }

// No GPC holding two clusters of more than 8 blocks (Hopper's portable size), on a memory of 4 TB/s or
// more (step 10's deep_memory): a GPC that holds a cluster of 16 holds one such cluster, so where the
// clusters outnumber those GPCs (clusters_at_once[16]: 7 on an H100 or H200) and splits_for kept S = 9 (8
// or 9 tiles), two of them share a GPC, and on some H200s that GPC streams slower. Runs 210–226 (14 H200
// machines, `explorations/…-run210-*` to `…-run226-*`): at B 1, H_kv 8, Nq 1, Nk 32768 10b's 72 blocks in
// 8 clusters of 9 took 36.7–37.5 µs on 10 machines and 41.7–42.5 on 4 (three by uuid: GPU-35921d39,
// -59707981, -0fa61e3c), and a program that only streams 10b's ring on the same launch (no math; run 218's
// streamprobe) 36.16–38.43 against 42.11–42.37; on every machine alike (within 2.2 µs) 72 blocks without
// clusters, 64 in 8 clusters of 8 (35.78–37.86), step 10, the read-only kernel and cuDNN. A probe launch
// (gpcmap) puts the 8th cluster of 9 on the SMs of the GPC that holds the 7th, on fast and slow machines
// alike, and asking for the load-balancing cluster policy leaves it there (run 225). Clusters of 8 take
// the 8 tiles with 64 blocks, one cluster per GPC: 10b in 8-warp blocks (eight_warps) then took 37.4–37.8
// µs on fast machines and 37.8–37.9 on slow ones (runs 219–226), against the 9-block clusters' 36.7–37.5
// and 41.9–42.3. The hold changes where the clusters run, not how many blocks the grid has: m_tiles()
// compares splits_for's grids. A forced S (FLASHLADDER_SPLITS) is not held. Not on an H100: its 4-warp
// clusters of 9 were not measured on a slow machine.
bool two_to_a_gpc(const Problem& p, int64_t S) {  // S: splits_for's
  if (S <= 8 || requested_splits() > 0 || !fl::s10::deep_memory(p.d)) return false;
  const DeviceFacts f = facts_for(p.d);
  const int64_t tiles = p.B * p.H_kv * row_tiles(p);
  return tiles > f.clusters_at_once[kMaxSplits] && f.clusters_at_once[8] >= tiles;
}
int splits(const Problem& p) {
  const int S = splits_for(p, m_tiles(p));
  return two_to_a_gpc(p, S) ? 8 : S;
}

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
// d = 64 (5 stages, 80 KiB of ring) was not measured either. On an H100, only where a tile reads 8192
// keys or more: run 292 (GPU-5e9ba26b; this rule beside the old in one library, outputs bit-identical,
// the decode sweep twice) found one block per SM the slower launch at Nk 1024, where the ring's own
// 68 KiB put three to an SM: B 64, H_kv 8, Nq 4 99.3 → 94.5 µs; B 64, H_kv 8, Nq 1 and H_kv 32 1.0–2.2%
// faster, B 16, H_kv 32 1.5–2.4% (10b 0.980–1.001× cuDNN at those five points before, 1.0005–1.025×
// after). Between 1024 and 8192 keys not measured; on a memory of 4 TB/s or more (step 10's
// deep_memory: an H200) not below 8192.
bool one_per_sm(const Problem& p) {
  if (p.d != 128 || m_tiles(p) != 1 || splits(p) != 1) return false;
  if (keys_visited(p) < 8192 && !fl::s10::deep_memory(p.d)) return false;
  const int sms = facts_for(p.d).sms;
  return sms > 0 && p.B * p.H_kv * row_tiles(p) >= 3 * int64_t(sms);
}

// V_j's copies kLead of the warp's tiles ahead of K_j's (the kernel's Lead; as a block's 4 warps deal
// the tiles in turn, 128 keys ahead, 32 KiB of the head's V at d = 128), where the grid is unsplit and
// one block per SM (one_per_sm(), whose 116 KiB hold these rings' 100), each tile reads 8192 keys or
// more, and the copies go before the wait (not on step 10's deep_memory: an H100). Why: for some
// placements of the K and V buffers in DRAM, reading row x of K and row x of V together is slow for
// any kernel that does so, our read-only kernel included, and cuDNN less so (step 10's README, "Where
// K and V sit in DRAM", runs 163–170: there V ahead of K fixed it on older kernels, and was not kept
// for want of device time to verify it). Run 287 (an H100, GPU-460598cb; this ring as a separate step
// beside 10b in one library, O and L bit-identical to 10b's at seven shapes; issue 17's decode sweep
// twice, fp16, H 32, d 128): at B 64, H_kv 32, Nq 4, Nk 32768, slow on that machine (the read-only
// kernel 11264 µs), 10b took 11158 µs and this ring 10898 (cuDNN 11162); at the rule's other points
// (B 16, H_kv 32; B 64, H_kv 8 and 32; Nk 8192 to 131072) 0.998–1.0005× 10b's speed, the least at B 64,
// H_kv 8, Nq 4, Nk 8192. Not below 8192 keys: at Nk 1024 it ran at 0.971–0.983× 10b's speed at B 16
// and 64 (B 64, H_kv 32, Nq 1: 359.7–359.9 against 350.7–350.8 µs; 16 tiles a warp; we did not find
// why). Not where blocks share an SM: 32 KiB more per block would fit 2 there instead of 3.
bool v_ahead(const Problem& p) {
  return one_per_sm(p) && keys_visited(p) >= 8192 && !fl::s10::deep_memory(p.d);
}

// A split launch's clusters of 16-row tiles at d = 128 a stage deeper (4 stages, copies after the wait:
// 3 warp tiles in flight while a warp multiplies; 132 KiB, still one block per SM) on a memory of 4
// TB/s or more (step 10's deep_memory), where each split reads 2048 keys or more. The clusters' 96
// blocks (B 1, H_kv 32) each stream a larger share of the read than step 10's 128, and on a faster
// memory each wants more bytes in flight (Little's law, as step 10's deep_ring). Runs 180 and 181
// (H200, B 1, H = 32, an FL_EXP switch, not committed; three and five interleaved rounds, means): at H_kv
// 32, Nk 8192 (S = 3, 2731 keys per split) 36.7 µs against 37.1 at Nq 1 and 37.3 against 37.5 at Nq 4
// (run 180: 36.9 against 37.3); at Nk 1024 (341 keys per split) 0.3 µs slower (11.3 against 11.0 at
// Nq 1, 11.5 against 11.2 at Nq 4: the deeper ring's first fill is most of so short a read). Two stages
// more (5, 164 KiB) were slower than none (39.0 µs at Nq 4, Nk 8192), three more slower still (40.4).
// Between 341 and 2731 keys per split not measured: the line is drawn at 2048. The 32-row tiles'
// clusters (R = 2) and d = 64 were not measured; the H100's launches do not change.
bool deep_clusters(const Problem& p, int64_t S) {
  return p.d == 128 && S > 1 && m_tiles(p) == 1 && fl::s10::deep_memory(p.d) && keys_visited(p) / S >= 2048;
}

// Where the clusters cannot read fast enough: a tile's splits are one cluster, so 10b streams on S
// blocks per tile (S ≤ 16, and lowered until every cluster is resident), where step 10's splits are
// free blocks (33 per tile at 4 tiles). One of these blocks reads ≈ 48.8 GB/s when the SM, not the memory,
// is the limit (run 94, H100: B 1, H_kv 1, Nq 4, Nk 131072, 72 blocks), and the copy moves ~90% of the
// memory's peak (3.02 of 3.35 TB/s on an H100, 4.29 of ~4.8 on an H200, runs 125 and 127): it takes
// blocks_for_memory() = ⌈0.9·peak / 48.8 GB/s⌉ blocks to keep up with the memory, 62 on an H100 and
// 89 on an H200 (run 128). Every K/V byte is read by the T_r row tiles of its head, so 10b needs
// min(SMs, blocks_for_memory()·T_r) blocks; with fewer (on an H100 B 1 and H_kv ≤ 2 at Nq 1, H_kv ≤ 4 at
// Nq 4; on an H200 also H_kv 4 and 8 at Nq 1, H_kv 8 at Nq 4) step 10's extra blocks win once the splits
// are long enough. Run 107 (H100, B 1, H 32, d 128, step 10 with its merge kernel of one block per row), 10b's
// own clusters against step 10: H_kv 1 and 2, Nq 1 1.03-1.07× at Nk 8192 (512 keys per split),
// 0.59-0.74× at 32768 (2048); Nq 4 0.89× at 8192 (910 keys), 0.72-0.73× at 32768. (Run 94, before that
// merge kernel, had put the line at 2048 keys.) Run 127 (the first H200 run of 10b, with the line
// still at 62 blocks): at H_kv 8 (72 blocks) 10b's clusters ran at 0.94-0.95× step 10 at Nk 8192 and
// 0.86-0.88× at 32768, where on an H100 72 blocks had been enough (1.03-1.06×, run 125).
// So where 10b's blocks are fewer than that, step 10 has more, and each split would read over 512
// keys, 10b runs step 10's kernels (and reports their workspace). And where each split would read
// 8192 keys or more whatever the blocks: the merge that 10b saves is then a fixed cost under 2% of the
// call, and step 10's extra blocks read 1-5% faster (runs 95 and 107, H100, B 1, H_kv 32, S 3 against
// 4: 0.98-0.99× at Nk 32768 and 131072; H_kv 8, S 9 against 15: 0.99-1.00× at 131072 in run 107;
// run 112: H_kv 4, Nq 1, S 16 against 30, 0.95× at 131072, 8192 keys per split, and 1.02× at 32768).
// Unless FLASHLADDER_SPLITS asks for a number of splits, which always means 10b's own clusters
// (README.md, "Where the clusters cannot read fast enough").
constexpr double kBlockBytesPerS = 48.8e9;  // one block's read where the SM is the limit (run 94)

int64_t blocks_for_memory(int64_t d) {
  const double peak = facts_for(d).memory_bytes_per_s;
  return peak > 0 ? int64_t(std::ceil(0.9 * peak / kBlockBytesPerS)) : 0;
}

// Where 10b's clusters are fewer than blocks_for_memory() asks, but not by much (at least 0.8 of it),
// on a memory of 4 TB/s or more (step 10's deep_memory), at d = 128 in 16-row tiles with over 512 keys
// per split: blocks of 8 warps instead of 4 (3 stages each, copies after the wait, 196 KiB, one per
// SM), running free of the per-round barrier (the kernel's main loop), instead of step 10's kernels.
// A warp waits on its own math between its loads (the rings are per warp); with one warp per scheduler
// nothing hides that, and a block streams no faster than its math allows: run 184 (H200, B 1, H_kv 8,
// Nq 1, Nk 32768, 72 blocks in clusters of 9) timed 10b's 4-warp clusters at 45.1–45.7 µs with 3, 4
// or 5 stages alike, while a program that only streams the same ring (run 185, 72 blocks of 4 warps, 4
// stages) read 4.47 TB/s: 62 GB/s per block against the clusters' 46 (run 184 at Nk 131072: 537 MB in
// 163.3 µs). Two warps per scheduler: run 188 (H200, 72 blocks, five interleaved rounds, means)
// 36.9 µs against step 10's 38.8 at Nq 1, Nk 32768
// (37.6 against 40.2 at Nq 4; Nk 8192: 15.4 against 16.3, 16.3 against 17.3; Nk 131072, 14563 keys per
// split: 122.8 against 125.6, cuDNN 127.2). At 96 blocks (H_kv 32, clusters of 3, where the 4-warp
// blocks already keep up) 8 warps were slower, 41.3 against 36.6 µs at Nk 8192 and 558.7 against 469.7 at
// 131072; so were 6 warps (two schedulers with one warp) and 4 warps without the barrier (runs 187–188).
// The 0.8 is drawn under the one band measured, 72 of the H200's 89 blocks (0.81); B 1, H_kv 4 (64
// blocks, 0.72) keeps step 10, and the H100's launches do not change (its 72 blocks already keep up).
// And an unsplit grid of three waves or more (one_per_sm) whose last wave is at most 0.6 full, on such a
// memory, at d = 128 in 16-row tiles, 8192 keys or more per tile: blocks of 8 warps there too. While the
// SMs are full each block needs only its share of the memory (35 GB/s, 4.6 TB/s over 132), and there 8
// warps are the slower (2.1–3.4% at 512 tiles; why, not measured); but the last wave's few blocks could
// each read faster than that, and 4 warps cannot (46 GB/s, above: our reading of the gain, not observed
// block by block). Run 196 (H200, H_kv 32, Nq 1, Nk 8192, five interleaved rounds, 8 warps forced against
// 4): a last wave 0.24 full (B 34, 1088 tiles) 983.5 µs against 1028.3 (cuDNN 977.1), 0.48 (B 35) 1007.7
// against 1031.5, 0.52 (B 64, 2048 tiles) 1838.8 against 1852.2 (run 195: 1880.1 against 1892.8, and
// 7505.6 against 7528.9 at Nk 32768); 0.73 (B 36) 1063.0 against 1036.5, 0.97 (B 37) 1071.9 against
// 1064.9, 1.00 (B 33) 957.6 against 951.7; 512 tiles (0.88, B 16 H_kv 32 and B 64 H_kv 8) 2.1–3.4% slower
// (runs 195–196). The line at 0.6 lies between the 0.52 measured and the 0.73; 8192 keys is the shortest
// read measured; an H100's launches do not change.
bool eight_warps(const Problem& p, int64_t S) {
  if (p.d != 128 || m_tiles(p) != 1 || !fl::s10::deep_memory(p.d)) return false;
  const int64_t T_r = row_tiles(p), sms = facts_for(p.d).sms;
  if (S == 1) {
    if (!one_per_sm(p) || keys_visited(p) < 8192) return false;
    const int64_t last = p.B * p.H_kv * T_r % sms;  // blocks of the last wave (0: it is full)
    return last > 0 && 10 * last <= 6 * sms;
  }
  if (keys_visited(p) / S <= 512) return false;
  const int64_t blocks = p.B * p.H_kv * T_r * S;
  const int64_t needed = std::min<int64_t>(sms, blocks_for_memory(p.d) * T_r);
  if (blocks < needed && 10 * blocks >= 8 * needed) return true;
  // The clusters splits() held to 8 blocks (two_to_a_gpc: at B 1, H_kv 8, 64 blocks, 0.72 of an H200's
  // 89) keep the warps the clusters of 9 would have had, where each split reads under 8192 keys; at
  // 8192 or more step 10's kernels run (uses_step10).
  // Runs 219–226 (H200s, B 1, H_kv 8): at Nk 32768 8 warps 37.4–37.9 µs (Nq 1) against step 10's
  // 39.2–39.3 and 4 warps' 49.6 (runs 215–218); at Nk 131072 (16384 keys per split) step 10's 125.5–125.6
  // on fast and slow machines alike against 8 warps' 130.3–133.0 (and the 9-block clusters' 122.7–126.7
  // on fast machines, 145.6–147.7 on slow ones; cuDNN 127.6–129.9). Between (Nk 65536, 8192 keys per
  // split): step 10 67.7–67.9, 8 warps 68.0–68.1 (runs 224, 226).
  const int64_t S_rule = splits_for(p, m_tiles(p));
  return S == 8 && two_to_a_gpc(p, S_rule) && keys_visited(p) / S < 8192 && eight_warps(p, S_rule);
}

// Keys on the MMA's long side (the kernel's N8): where the packed rows of a K/V head are 8 or fewer
// (G·Nq ≤ 8: decoding with up to 8 query heads per K/V head, or speculative rows with fewer), one tile
// of 16 rows would be mostly padding, and the kernel computes S_ijᵀ = K_j Q_iᵀ instead, half the mma.
// Run 245 (an H200, GPU-658cd63a, this kernel with and without it in one library, five interleaved
// rounds, fp16, H 32, d 128, µs): B 1, H_kv 8, Nq 1, Nk 32768 (clusters of 8, 8 warps) 37.60 → 36.05,
// Nk 8192 15.03 → 14.14; the unsplit grids 0.998–1.000× (B 16, H_kv 8, Nk 32768: 476.08 → 475.53;
// B 64, H_kv 32, Nk 8192: 1882.4 → 1879.0). Not in deep_clusters()' ring: at B 1, H_kv 32, Nq 1,
// Nk 8192 (4-warp clusters of 3, 2730 keys a split) it was slower, 36.80 → 37.11, as half the mma
// alone had been in run 244 (36.5 → 37.0); we did not find why. (Blocks of 8 warps take precedence
// over that ring, as in launch(): B 1, H_kv 8, Nk 32768 is both, and runs the 8-warp kernel swapped.)
bool swapped(const Problem& p, int64_t S) {
  return m_tiles(p) == 1 && p.group() * p.Nq <= 8 && (eight_warps(p, S) || !deep_clusters(p, S));
}

bool uses_step10(const Problem& p) {
  if (requested_splits() > 0) return false;
  const int64_t S = splits(p), S10 = fl::s10::splits(p);
  if (eight_warps(p, S)) return false;
  const int64_t T_r = row_tiles(p), tiles = p.B * p.H_kv * T_r;
  const int64_t needed = std::min<int64_t>(facts_for(p.d).sms, blocks_for_memory(p.d) * T_r);
  const int64_t per_split = keys_visited(p) / S;
  return S10 > S && per_split > 512 && (tiles * S < needed || per_split >= 8192);
}

size_t workspace_bytes(const Problem& p) {  // 0: the partials live in the cluster's shared memory
  return uses_step10(p) ? fl::s10::impl.workspace_bytes(p) : 0;
}

std::string limits(const Problem& p) {
  if (p.Nq >= (int64_t(1) << 30) || p.Nk >= (int64_t(1) << 30))
    return "this step keeps query and key indices in 32 bits: Nq = " + std::to_string(p.Nq) + " and Nk = " +
           std::to_string(p.Nk) + " must both be below 2^30";
  int64_t S = 1;
  try {
    S = splits(p);
    if (uses_step10(p)) return fl::s10::impl.limits ? fl::s10::impl.limits(p) : "";
  } catch (const Error& e) {
    return e.what();
  }
  const int64_t T_r = row_tiles(p);
  const int64_t blocks = p.B * p.H_kv * T_r * S;
  if (blocks > INT_MAX)
    return "this step launches one thread block per (16 or 32 packed query rows, batch, K/V head, split): " +
           std::to_string(blocks) + " blocks (S = " + std::to_string(S) + ") exceed the grid limit 2^31 − 1";
  return "";
}

// One launch: the grid of step 10, in clusters of S blocks (the S splits of a tile; S = 1: clusters of
// one block, which write O and L themselves).
template <class T, int d, int R>
void launch(const Problem& p, const ForwardArgs& a) {
  device_facts<d>();  // sets the kernels' shared-memory and cluster-size attributes
  if (!p.seqused_k.empty() && !a.seqused_k) throw Error("seqused_k needs its device copy: the call passed none");
  const int S = splits(p);
  // A split launch's clusters send the copies after the wait (Tiles), and so does an unsplit grid of
  // 16-row tiles on a device whose memory wants more bytes in flight (step 10's deep_ring); else the
  // copies first, with a stage fewer.
  const bool late = R == 2 || S > 1 || (d == 128 && fl::s10::deep_memory(d));
  const bool deeper = deep_clusters(p, S);  // the clusters' ring a stage deeper (R = 1, d = 128 only)
  const bool eight = eight_warps(p, S);     // blocks of 8 warps (R = 1, d = 128 only)
  const bool n8 = swapped(p, S);  // keys on the MMA's long side (the kernel's N8)
  const bool lead = !late && v_ahead(p);  // V's copies kLead tiles ahead of K's (R = 1, d = 128 only)
  auto kernel = attention_kernel<T, d, R, true>;
  if constexpr (R == 1) {
    if (!late) kernel = n8 ? attention_kernel<T, d, 1, false, 0, kWarps, true> : attention_kernel<T, d, 1, false>;
    if (late && n8) kernel = attention_kernel<T, d, 1, true, 0, kWarps, true>;
    if constexpr (d == 128) {
      if (lead)
        kernel = n8 ? attention_kernel<T, d, 1, false, 0, kWarps, true, kLead>
                    : attention_kernel<T, d, 1, false, 0, kWarps, false, kLead>;
      if (deeper) kernel = attention_kernel<T, d, 1, true, 1>;  // never swapped (swapped())
      if (eight) kernel = n8 ? attention_kernel<T, d, 1, true, 0, 8, true> : attention_kernel<T, d, 1, true, 0, 8>;
    }
  }
  // One block per SM:
  const size_t smem_alone = eight    ? Tiles<d, 1, true, 0, 8>::kSmem
                            : deeper ? Tiles<d, 1, true, 1>::kSmem
                                     : Tiles<d>::kSmemAlone;
  FL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(smem_alone)));  // again, checked: a failed query above is reported here
  const int64_t M = p.group() * p.Nq, T_r = row_tiles(p);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.B * p.H_kv * T_r * S));
  cfg.blockDim = dim3(eight ? 8 * 32 : kThreads);
  size_t smem = Tiles<d, R>::kSmem;  // the ring's own size: two blocks per SM
  if constexpr (R == 1) smem = late ? Tiles<d, 1, true>::kSmem : Tiles<d, 1, false>::kSmem;
  cfg.dynamicSmemBytes = S > 1 || one_per_sm(p) ? smem_alone : smem;
  cfg.stream = static_cast<cudaStream_t>(a.stream);
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = unsigned(S);  // the grid is a multiple of S: splits are neighbours
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  cfg.attrs = cluster;
  cfg.numAttrs = 1;
  FL_CUDA(cudaLaunchKernelEx(&cfg, kernel, static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                             static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, M, int(p.Nq), int(p.Nk), p.H_kv,
                             T_r, S, float(p.softmax_scale()), p.causal,
                             p.seqused_k.empty() ? nullptr : a.seqused_k,
                             VariantArgs::of(p, a.alibi_slopes, nullptr, nullptr, a.seqused_k)));
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  if (uses_step10(p)) return fl::s10::impl.forward(p, a);  // see uses_step10
  dispatch<DecodeD>(p, [&](auto T_, auto d_) {
    if (m_tiles(p) == 2)
      launch<decltype(T_), decltype(d_)::value, 2>(p, a);
    else
      launch<decltype(T_), decltype(d_)::value, 1>(p, a);
  });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s10b

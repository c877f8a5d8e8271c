// flashladder — step 10c: work stealing. Where the tiles already fill the GPU (no split), the blocks
// share a tile's keys at run time, so that they all end together.
//
// Step 10b (and 10 before it) cuts the work at launch. Where the B·H_kv·T_r tiles already give every SM
// a block (B 16 and 64 in issue 17's sweep), S = 1: one block per tile, each block reading its head's K
// and V alone, and the call ends when the slowest block does. The blocks do not read at one speed:
// run 87 (10b, H100, B 16, H 32, H_kv 8, Nq 1, d 128, 128 blocks, %globaltimer stamped in each block)
// saw their loops end up to 11% apart at Nk 131072, the slowest 3.3% after the mean (2.2–3% at 8192).
// While the first blocks have ended and the last still read, the memory serves fewer blocks than it
// could: the call takes the slowest block's time, not the mean's. cuDNN reads the same bytes 0.1–0.8%
// faster there (run 96).
//
// The one idea: hand the keys out at run time. A tile's T_c key tiles are cut into chunks of kChunk;
// the tile's counter (a global int) says how many chunks have been handed out, and each warp takes the
// next chunk (atomicAdd) when it needs one, so a warp that reads faster takes more. A block whose tile
// is used up looks for a tile with at least kMinSteal chunks left and joins it as its second block,
// the thief. Online softmax does not care in which order or by whom the keys are read (step 02's
// merge), so:
//   - a warp keeps one (m, ℓ, O) over whatever chunks it took, and the block merges its 4 warps (10b);
//   - a tile that no thief joined is finished by its home block, which writes O and L as 10b does;
//   - a tile that a thief joined has two partials, (O_0, L_0) from the home block, (O_1, L_1) from the
//     thief, in the workspace; the second of the two to finish merges them by step 10's rule
//     (m = max L_s, L = m + ln Σ e^{L_s − m}, O = Σ e^{L_s − L} O_s), with S = 2.
// The home block closes its tile to thieves when its warps find the counter used up (a compare-and-swap,
// 0 → 2); a thief joins with the same word (0 → 1), so exactly one of them wins: "alone" or "two".
// The cost: a memset of the counters before every call (the workspace is poisoned between calls; 3
// ints per tile), one atomic per warp per chunk (~1 µs round trip, asked for a chunk ahead), and for a
// joined tile a second Q, ring filling and merge. The answer's rounding now depends on who read which
// chunk: two calls can differ in the last bits (within the tolerance; every key is still read once).
//
// 10b's clusters (S > 1) and its call of step 10's kernels are unchanged: there the splits are fixed
// by the merge in a cluster, and the time is in the merge (README.md).

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
extern const StepImpl impl;
}  // namespace fl::s10

namespace fl::s10c {

namespace cg = cooperative_groups;

constexpr int B_r = 16;      // rows of a tile: the G·Nq packed query rows of one K/V head, padded to 16
constexpr int B_w = 16;      // keys per warp tile (one k-step of P̃V, two n-tiles of S)
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxSplits = 16;  // S: at most one cluster of blocks (Hopper's non-portable maximum), see above
// A block joins a tile only if kMinSteal chunks (Tiles::kChunk, 512 KiB of K and V in all) are left:
// more than a second Q, ring filling and merge cost.
constexpr int kMinSteal = 16;

// kStages warp tiles of K and V per warp ring: 96 KiB of ring per block at d = 64 and 128, so two
// blocks (8 warps, 2·4·(kStages − 1) tiles in flight) share an SM.
template <int d>
struct Tiles {
  static constexpr int kStages = d <= 64 ? 6 : 3;
  static constexpr int kTileElems = B_w * d;                               // one K or V warp tile
  static constexpr int kRingElems = kWarps * kStages * 2 * kTileElems;     // every warp's K and V slots
  static constexpr size_t kSmem = size_t(B_r * d + kRingElems) * 2;        // Q tile + rings (16-bit T)
  // What a split launch (S > 1) asks for instead: more than half of an SM's 228 KiB, so that one block
  // of a cluster runs per SM (the extra 16 KiB are not used). Measured on H100s, B 1, H_kv 8, Nk 32768:
  //  - with kSmem two blocks fit an SM: run 80 (S = 15) timed the split kernel at 55.4 µs against step
  //    10's 47.0, which we read as the cluster scheduler putting a cluster's blocks two to an SM (half
  //    of a GPC's SMs idle; not observed directly);
  //  - asking 116 KiB, 8 clusters fit at once only up to 9 blocks each (a cluster lives in one GPC),
  //    so S = 9 and 72 SMs stream: 53.0 µs per call against step 10's 54.9 and cuDNN's 54.8 (run 81);
  //  - filling one SM with deeper rings instead (6 stages at d = 128, 192 KiB, run 82) was no faster:
  //    2.45 TB/s here against 2.53 with these rings (run 81, another H100), and at B 1, H_kv 32 (S = 3)
  //    2.33–2.64 TB/s against step 10's 2.61–3.10 in the same run (README.md, "What did not work").
  static constexpr size_t kSmemAlone = 116 * 1024;
  // The balance's grain: a warp takes kChunk key tiles at a time, 32 KiB of K and V (64 keys at d = 128,
  // 128 at d = 64). A warp's prologue stays inside its first chunk (kStages − 1 tiles), which a home
  // block's warps take without asking: the first atomic comes after the first loads.
  static constexpr int kChunk = d <= 64 ? 8 : 4;
  static_assert(kStages - 1 < kChunk, "the prologue's tiles are the first chunk's, before its last");
  static_assert(kSmemAlone >= kSmem, "the one-per-SM request holds the tiles");
  // After the loop the rings hold the warps' partial O (fp32, rows padded by 4 floats) and m, ℓ.
  static constexpr size_t kMergeBytes = size_t(kWarps * B_r * (d + 4) + 2 * kWarps * B_r) * 4;
  // Then, behind them, the block's partial for the cluster: O_s [B_r][d] and L_s [B_r], fp32.
  static constexpr size_t kPartialBytes = size_t(B_r * d + B_r) * 4;
  static_assert(kMergeBytes + kPartialBytes <= size_t(kRingElems) * 2, "the merge buffers and the partial fit in the rings");
};

// Offset of element (row, col) of a [rows][d] tile, 08d's XOR swizzle (d = 64, 128: chunk ^ row % 8),
// so that ldmatrix's 8 rows of one 16-byte column fall in 8 different bank groups.
template <int d>
__device__ __forceinline__ int at(int row, int col) {
  return row * d + ((col / 8) ^ (row % 8)) * 8 + col % 8;
}

// Query i sees the keys [key_lo(i), key_hi(i)) of the n_k its sequence uses: the window, bottom-right
// aligned (08j's; causal is its right edge 0, folded in by VariantArgs).
__device__ __forceinline__ int key_lo(const VariantArgs& var, int i, int n_k, int Nq) {
  return var.left < 0 ? 0 : max(0, i + n_k - Nq - var.left);
}
__device__ __forceinline__ int key_hi(const VariantArgs& var, int i, int n_k, int Nq) {
  return var.right < 0 ? n_k : min(n_k, i + n_k - Nq + var.right + 1);
}

// Programmatic dependent launch (step 10's): the zeroing kernel lets this grid be scheduled at once,
// and this grid waits (griddepcontrol.wait) for it to complete, its writes visible, before an atomic.
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

// The shared state of the run-time balance (an S = 1 launch that has a workspace; null pointers: the
// launch is 10b's, every block reads its own tile). Zeroed by the launcher before every call.
struct Balance {
  int* queue = nullptr;      // [1]: tiles handed out after the grid's first (block b starts with tile b)
  int* next = nullptr;       // [tiles]: the tile's chunks handed out so far past the home warps' first 4
  int* thief = nullptr;      // [tiles]: 0 open, 1 a thief block has joined, 2 closed by the home block
  int* done = nullptr;       // [tiles]: the tile's two workers that have written their partial
  float* O_part = nullptr;   // [2][rows_total][d]: the home block's (0) and the thief's (1) normalised partial O
  float* L_part = nullptr;   // [2][rows_total]: their L_s (−∞: no key)
  int64_t rows_total = 0;    // B·H·Nq
  int64_t tiles = 0;         // B·H_kv·T_r
};

// Which keys a row tile visits. Everything below that depends on the tile: its place in the grid (bh,
// r0), its rows, the keys its sequence uses and the window's edges, and its T_c tiles of B_w keys
// from tile j_first on. A thief reads it for the tiles it may join (their T_c says what is left).
struct TileKeys {
  int64_t bh, r0;           // bh = b·H_kv + h_kv; r0 = the tile's first packed row
  int rows_here, n_k, i_first;
  int lo_max, n_min;        // every row sees at least the keys [lo_max, n_min): tiles outside are masked
  int j_first, T_c;         // the key tiles [j_first, j_first + T_c) of B_w keys
};

// tile_id = tile + T_r·(b·H_kv + h_kv) (blockIdx.x / S in 10b). Causal: the row tiles run backwards,
// the ones that see the most keys first.
__device__ __forceinline__ TileKeys tile_keys(int64_t tile_id, int64_t M, int Nq, int Nk, int64_t H_kv, int64_t T_r,
                                              bool causal, const int32_t* __restrict__ seqused_k,
                                              const VariantArgs& var) {
  TileKeys k;
  k.bh = tile_id / T_r;
  const int64_t tile = causal ? T_r - 1 - tile_id % T_r : tile_id % T_r;
  k.r0 = tile * B_r;
  k.rows_here = M - k.r0 < B_r ? int(M - k.r0) : B_r;
  // The keys this sequence uses: the first seqused_k[b] of the Nk rows its cache holds (a batch of
  // decode requests whose caches are filled to different lengths), or all Nk. Every rule below reads
  // them as its Nk: the diagonal is the sequence's own, and no key past n_k is loaded.
  k.n_k = seqused_k ? seqused_k[k.bh / H_kv] : Nk;
  // The window, bottom-right aligned (08j's key_lo, key_hi; causal is its right edge 0, folded in by
  // VariantArgs): query i sees the keys [key_lo(i), key_hi(i)). Packed row r is query i = r % Nq, so a
  // tile's rows need not be in order (it can wrap from i = Nq − 1 to 0); both edges move right with i,
  // so the tile visits the keys [n_begin, n_end) (its smallest i starts them, its largest ends them)
  // and every row sees at least [lo_max, n_min): the tiles outside it are the ones to mask.
  k.i_first = int(k.r0 % Nq);
  const bool wraps = k.i_first + k.rows_here - 1 >= Nq;
  const int i_max = wraps ? Nq - 1 : k.i_first + k.rows_here - 1, i_min = wraps ? 0 : k.i_first;
  const int n_begin = key_lo(var, i_min, k.n_k, Nq), n_end = key_hi(var, i_max, k.n_k, Nq);
  k.lo_max = key_lo(var, i_max, k.n_k, Nq);
  k.n_min = key_hi(var, i_min, k.n_k, Nq);
  k.j_first = n_begin / B_w;
  k.T_c = n_end > n_begin ? (n_end + B_w - 1) / B_w - k.j_first : 0;
  return k;
}

// One thread block: the rows [r0, r0 + 16) of the packed [M][d] tile of one (batch, K/V head), over
// the key tiles of split s (dealt out over the cluster's warps, below) — or, in a balanced launch,
// over the chunks its warps take at run time, first of its own tile and then of the tiles it joins.
// Fragment names as in 08d: lane = 4·g + t holds rows g and g + 8 of the tile and, in each 8-column
// n-tile, columns 2t and 2t + 1. Key and row-in-head indices are 32-bit (limits() keeps Nq, Nk below
// 2^30); packed rows and tensor offsets are 64-bit.
// S == 1: O and L are written directly (storage type, fp32) — in a balanced launch, by the tile's home
// block if no thief joined it, else by whichever of the two finishes second, from both partials. S > 1:
// the normalised partial O_s and L_s (fp32) stay in this block's shared memory, and the cluster of the
// tile's S blocks merges them.
template <class T, int d>
__global__ void __launch_bounds__(kThreads)
attention_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                 T* __restrict__ O, float* __restrict__ L, int64_t M, int Nq, int Nk, int64_t H_kv, int64_t T_r,
                 int S, float scale, bool causal, const int32_t* __restrict__ seqused_k,
                 VariantArgs var, Balance bal) {
  constexpr int kStages = Tiles<d>::kStages, kTileElems = Tiles<d>::kTileElems, kChunk = Tiles<d>::kChunk;
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_s = reinterpret_cast<T*>(smem);  // Q tile: [B_r][d] in shared memory
  T* ring = Q_s + B_r * d;              // [kWarps][kStages][K, V][B_w][d]: each warp's own slots
  __shared__ int slot_tile[kWarps][kStages];  // the key tile (from j_first) in each ring slot of each warp
  __shared__ int verdict;                     // thread 0's answers from the balance's atomics, for the block
  __shared__ long long best[kWarps];          // a thief's search: (chunks left, tile) per warp, packed

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const bool balanced = bal.next != nullptr;
  const int s = int(blockIdx.x % S);
  int64_t tile_id = blockIdx.x / S;  // its own tile first (the home block); in a balanced launch, then others
  bool home = true;

  for (;;) {
    const TileKeys tk = tile_keys(tile_id, M, Nq, Nk, H_kv, T_r, causal, seqused_k, var);
    const int64_t bh = tk.bh, r0 = tk.r0;
    const int rows_here = tk.rows_here, n_k = tk.n_k;
    const T* Q_g = Q + (bh * M + r0) * d;  // packed rows r = h'·Nq + i of heads h_kv·G + h': [rows_here][d]
    const T* K_g = K + bh * Nk * d;        // K: [Nk][d] of K/V head h_kv
    const T* V_g = V + bh * Nk * d;        // V: [Nk][d]
    int first[2], last[2];  // this thread's rows g and g + 8 see keys [first, last); padded rows: all (never stored)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int i = (tk.i_first + g + 8 * rr) % Nq;
      first[rr] = g + 8 * rr < rows_here ? key_lo(var, i, n_k, Nq) : 0;
      last[rr] = g + 8 * rr < rows_here ? key_hi(var, i, n_k, Nq) : n_k;
    }

    // Where this warp's key tiles come from.
    //  - 10b's deal (a cluster, and any launch without a balance): the cluster's S·4 warps take the
    //    tiles in turn, warp gw = 4s + w taking tiles gw, gw + 4S, … (README.md of 10b, "Where the time
    //    goes"). With S = 1 and a block per tile, each block's share is fixed at launch, and so is its
    //    end: run 87 (10b, H100, B 16, H_kv 8, Nq 1, 128 blocks) stamped the blocks' loops ending up to
    //    11% apart, the slowest 2–3% after the mean, while the memory could have served them all.
    //  - The balance: the tile's T_c key tiles are cut into chunks of kChunk, and a warp takes the next
    //    chunk of its tile's counter (atomicAdd, one lane) when it needs one. A warp that reads faster
    //    takes more chunks; a block whose tile is used up goes on to another (below). The chunk after
    //    the one being loaded is asked for a whole chunk ahead, so the atomic's round trip to L2 (~1
    //    µs) is hidden behind kChunk tiles of loads.
    const int T_c = tk.T_c, n_chunks = (T_c + kChunk - 1) / kChunk;
    const int gw = s * kWarps + warp, stride = S * kWarps;  // 10b's deal: this warp among the cluster's, and their count
    int dealt = 0;                                          // 10b's deal: tiles handed out so far
    int* const counter = balanced ? bal.next + tile_id : nullptr;
    auto grab = [&]() { return lane == 0 ? atomicAdd(counter, 1) : 0; };  // lane 0's answer, not waited for
    // A home block's warps start on chunks 0-3 without asking; the counter hands out chunk kWarps + n.
    // A thief's first tile comes after its home tiles: the counters were zeroed long before.
    int c_load = !balanced ? 0 : home ? warp : kWarps + __shfl_sync(0xffffffffu, grab(), 0);  // being loaded (all lanes)
    int c_ahead = balanced && !home ? grab() : 0;  // the next one (lane 0 only, kWarps short; in flight)
    int pos = 0;                                                       // tiles of c_load loaded so far
    auto next_tile = [&]() -> int {  // the next key tile (from j_first) this warp loads, or −1: none left
      if (!balanced) {
        const int tt = gw + stride * dealt;
        if (tt >= T_c) return -1;
        ++dealt;
        return tt;
      }
      const int tt = c_load * kChunk + pos;
      if (c_load >= n_chunks || tt >= T_c) return -1;  // the counter ran past the tile: it stays there
      if (++pos == kChunk) {
        pos = 0;
        c_load = kWarps + __shfl_sync(0xffffffffu, c_ahead, 0);
        c_ahead = grab();
      }
      return tt;
    };
    T* my_ring = ring + warp * kStages * 2 * kTileElems;
    int loaded = 0;  // tiles this warp has loaded (warp-uniform)
    auto load_next = [&](int k) {  // this warp's k-th tile → slot k % kStages (copies not waited for)
      const int tt = next_tile();
      if (tt < 0) return;
      const int j0 = (tk.j_first + tt) * B_w;
      T* K_s = my_ring + k % kStages * 2 * kTileElems;
      load_rows<T, d, B_w, 32>(K_s, K_g + int64_t(j0) * d, n_k - j0, lane);  // keys past n_k: zeros, never read
      load_rows<T, d, B_w, 32>(K_s + kTileElems, V_g + int64_t(j0) * d, n_k - j0, lane);
      if (lane == 0) slot_tile[warp][k % kStages] = tt;
      ++loaded;
    };

    // ---- Prologue: Q (the whole block), then each warp's first kStages − 1 tiles, one group each
    // (committed even when empty, so that group k + 1 is always tile k: the waits below count on it).
    load_rows<T, d, B_r, kThreads>(Q_s, Q_g, rows_here, threadIdx.x);
    mma::cp_async_commit();
#pragma unroll
    for (int k = 0; k < kStages - 1; ++k) {
      if (loaded == k) load_next(k);
      mma::cp_async_commit();
    }
    if (balanced && home) {
      // The counters are zeroed by a kernel launched just before this one, which lets this grid start
      // at once (programmatic dependent launch): the copies above read only Q, K and V. Wait for it
      // before the first atomic (a no-op when that launch was not programmatic, or after the first tile).
      wait_for_prerequisite_grid();
      c_ahead = grab();
    }
    mma::cp_async_wait<kStages - 1>();  // this thread's part of Q has landed
    __syncthreads();                    // everyone's has
    // Q's A fragments for all d/16 k-steps, kept in registers for the whole loop (08d's ldmatrix).
    uint32_t q[d / 16][4];
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk) mma::ldmatrix_x4(q[kk], Q_s + at<d>(lane % 16, 16 * kk + lane / 16 * 8));

    float O_i[d / 8][4];  // the warp's unnormalised O over its keys: O_i[n][2rr+e] = O[g+8rr][8n+2t+e]
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};  // running max (unscaled S), running sum
#pragma unroll
    for (int n = 0; n < d / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) O_i[n][e] = 0.f;

    // ---- Main loop: the warp's tiles, kStages − 1 ahead in its own ring (how many there are is known
    // only when the counter runs past the tile: loaded grows until then).
    for (int k = 0; k < loaded; ++k) {
      mma::cp_async_wait<kStages - 2>();  // groups 0 … k + 1 done: Q and this thread's copies of tile k
      __syncwarp();  // every lane's copies of tile k visible to the warp; every lane done reading tile k − 1
      if (loaded == k + kStages - 1) load_next(k + kStages - 1);  // into tile k − 1's slot
      mma::cp_async_commit();
      const T* K_s = my_ring + k % kStages * 2 * kTileElems;  // K_j: [B_w][d], swizzled
      const T* V_s = K_s + kTileElems;                        // V_j: [B_w][d], swizzled
      const int j0 = (tk.j_first + slot_tile[warp][k % kStages]) * B_w;  // first key of the tile

      // S_ij = Q K_jᵀ, unscaled: [16][16] in two n-tiles (08d's K fragments, one ldmatrix.x4 per k-step).
      float S_ij[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int kk = 0; kk < d / 16; ++kk) {
        uint32_t kb[4];
        mma::ldmatrix_x4(kb, K_s + at<d>(lane % 8 + lane / 16 * 8, 16 * kk + lane / 8 % 2 * 8));
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        mma::mma_m16n8k16<T>(S_ij[0], q[kk], b0);
        mma::mma_m16n8k16<T>(S_ij[1], q[kk], b1);
      }

      // Mask only tiles that need it: keys left of lo_max (the window's left edge of some row) or at or
      // past n_min (the causal or right edge of some row, or n_k).
      if (j0 < tk.lo_max || j0 + B_w > tk.n_min) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr)
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = j0 + 8 * n + 2 * t + e;
              if (j >= last[rr] || j < first[rr]) S_ij[n][2 * rr + e] = -INFINITY;
            }
      }

      // Online softmax in base 2, exactly 08d's (see there for m_sub and __fmul_rn).
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float m_new = fmaxf(m_i[rr], fmaxf(fmaxf(S_ij[0][2 * rr], S_ij[0][2 * rr + 1]),
                                           fmaxf(S_ij[1][2 * rr], S_ij[1][2 * rr + 1])));
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
            float& x = S_ij[n][2 * rr + e];
            x = mma::exp2_approx(fmaf(x, scale_log2, -m_sub));
            rowsum += x;
          }
        l_i[rr] = alpha * l_i[rr] + rowsum;
#pragma unroll
        for (int n = 0; n < d / 8; ++n) {
          O_i[n][2 * rr] *= alpha;
          O_i[n][2 * rr + 1] *= alpha;
        }
      }

      // O_i += P̃_ij V_j: one k-step of 16 keys, P̃ from the accumulators (08d's A layout), V_j by
      // ldmatrix.trans, two n-tiles per x4.
      const uint32_t a[4] = {mma::pack2<T>(S_ij[0][0], S_ij[0][1]), mma::pack2<T>(S_ij[0][2], S_ij[0][3]),
                             mma::pack2<T>(S_ij[1][0], S_ij[1][1]), mma::pack2<T>(S_ij[1][2], S_ij[1][3])};
#pragma unroll
      for (int n = 0; n < d / 16; ++n) {
        uint32_t vb[4];
        mma::ldmatrix_x4_trans(vb, V_s + at<d>(lane % 16, 16 * n + lane / 16 * 8));
        const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        mma::mma_m16n8k16<T>(O_i[2 * n], a, b0);
        mma::mma_m16n8k16<T>(O_i[2 * n + 1], a, b1);
      }
    }
    mma::cp_async_wait<0>();  // no copy outlives the loop (the trailing groups are empty)

    // ---- The merge inside the block: the 4 warps' (m_w, ℓ_w, O_w) over disjoint keys, through shared
    // memory (the rings, no longer read), by the rule of the online softmax in base 2:
    //   m = max_w m_w,  f_w = 2^(m_w·τlog2e − m·τlog2e),  ℓ = Σ_w f_w ℓ_w,  O = Σ_w f_w O_w / ℓ.
    // A warp that saw no key for a row has m_w = −∞, ℓ_w = 0, O_w = 0, so f_w = 0; if no warp saw one,
    // m_sub is 0 instead of −∞ (no −∞ − −∞) and ℓ = 0: O = 0, and L = +∞ (S = 1) or −∞ (a partial:
    // weight e^{−∞} = 0 in the merge).
    float* O_w = reinterpret_cast<float*>(ring);  // [kWarps][B_r][d + 4] (4 floats of padding per row)
    float* m_w = O_w + kWarps * B_r * (d + 4);    // [kWarps][B_r]
    float* l_w = m_w + kWarps * B_r;              // [kWarps][B_r]
    __syncthreads();  // every warp is done with its ring
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float l = l_i[rr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);  // the quad's partial sums: the warp's ℓ of the row
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = warp * B_r + g + 8 * rr;
#pragma unroll
      for (int n = 0; n < d / 8; ++n)
        *reinterpret_cast<float2*>(O_w + row * (d + 4) + 8 * n + 2 * t) = make_float2(O_i[n][2 * rr], O_i[n][2 * rr + 1]);
      if (t == 0) {
        m_w[row] = m_i[rr];
        l_w[row] = l;
      }
    }
    __syncthreads();
    const int64_t row_g = bh * M + r0;  // flat row (b·H + h)·Nq + i of the tile's first row
    constexpr int kC = d / 4;           // 4-column chunks per row
    // The block's (row, 4 columns) piece: its normalised O, its m (unscaled) and ℓ.
    auto piece = [&](int row, int col, float4& o, float& m, float& l) {
      m = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = fmaxf(m, m_w[w * B_r + row]);
      const float m_sub = m == -INFINITY ? 0.f : __fmul_rn(m, scale_log2);
      l = 0.f;
      o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = mma::exp2_approx(__fmul_rn(m_w[w * B_r + row], scale_log2) - m_sub);
        const float4 x = *reinterpret_cast<const float4*>(O_w + (w * B_r + row) * (d + 4) + col);
        l = fmaf(f, l_w[w * B_r + row], l);
        o = make_float4(fmaf(f, x.x, o.x), fmaf(f, x.y, o.y), fmaf(f, x.z, o.z), fmaf(f, x.w, o.w));
      }
      const float inv_l = l > 0.f ? 1.f / l : 0.f;
      o = make_float4(o.x * inv_l, o.y * inv_l, o.z * inv_l, o.w * inv_l);
    };
    auto store = [&](int row, int col, float4 o, float L_row) {  // the final answer: O as T (8-byte stores), L
      *reinterpret_cast<uint2*>(O + (row_g + row) * d + col) = make_uint2(mma::pack2<T>(o.x, o.y), mma::pack2<T>(o.z, o.w));
      if (col == 0) L[row_g + row] = L_row;
    };

    if (!balanced) {  // 10b's end: S = 1 writes O and L, S > 1 keeps its partial for the cluster (below the loop)
      float* P_s = l_w + kWarps * B_r;  // S > 1: this split's normalised O_s, [B_r][d] fp32 (Tiles::kPartialBytes)
      float* Ls_s = P_s + B_r * d;      // S > 1: its L_s, [B_r]
      for (int c = threadIdx.x; c < B_r * kC; c += kThreads) {
        const int row = c / kC, col = c % kC * 4;
        if (row >= rows_here) break;  // rows grow with c: the rest are padding too
        float4 o;
        float m, l;
        piece(row, col, o, m, l);
        if (S == 1) {  // L = τ m + ln ℓ, or +∞ for a row that saw no key
          store(row, col, o, log_sum_exp(m, l, scale, scale_log2));
        } else {       // split s's partial stays here, for the cluster: O_s in fp32, L_s (−∞: none of its keys)
          *reinterpret_cast<float4*>(P_s + row * d + col) = o;
          if (col == 0) Ls_s[row] = l > 0.f ? log_sum_exp(m, l, scale, scale_log2) : -INFINITY;
        }
      }
      break;
    }

    // ---- The balance's end of a tile. The home block closes its tile to thieves (0 → 2). If no thief
    // had joined (the common case: a tile whose home block is not among the last), the home block's
    // result is the answer, written as 10b writes it. Otherwise both blocks write their partials to the
    // workspace, and the second to finish (a counter) merges the two by the logsumexp rule (step 10's
    // merge kernel, for S = 2): the threadfence before its count makes a block's partial visible to the
    // other before the other can see the count.
    if (threadIdx.x == 0) verdict = home ? atomicCAS(bal.thief + tile_id, 0, 2) : 1;
    __syncthreads();
    if (verdict == 0) {
      for (int c = threadIdx.x; c < rows_here * kC; c += kThreads) {
        const int row = c / kC, col = c % kC * 4;
        float4 o;
        float m, l;
        piece(row, col, o, m, l);
        store(row, col, o, log_sum_exp(m, l, scale, scale_log2));
      }
    } else {
      const int64_t slot = home ? 0 : 1;
      for (int c = threadIdx.x; c < rows_here * kC; c += kThreads) {
        const int row = c / kC, col = c % kC * 4;
        float4 o;
        float m, l;
        piece(row, col, o, m, l);
        const int64_t at_row = slot * bal.rows_total + row_g + row;
        *reinterpret_cast<float4*>(bal.O_part + at_row * d + col) = o;
        if (col == 0) bal.L_part[at_row] = l > 0.f ? log_sum_exp(m, l, scale, scale_log2) : -INFINITY;
      }
      __threadfence();  // this thread's part of the partial, visible device-wide before the count below
      __syncthreads();  // every thread's
      if (threadIdx.x == 0) {
        verdict = atomicAdd(bal.done + tile_id, 1);  // 1: the other block's partial is already written
        __threadfence();
      }
      __syncthreads();
      if (verdict == 1) {
        for (int c = threadIdx.x; c < rows_here * kC; c += kThreads) {
          const int row = c / kC, col = c % kC * 4;
          const int64_t r_0 = row_g + row, r_1 = bal.rows_total + row_g + row;  // the two slots' rows
          const float L0 = __ldcg(bal.L_part + r_0), L1 = __ldcg(bal.L_part + r_1);  // L2, not a stale L1 line
          const float m = fmaxf(L0, L1);
          if (m == -INFINITY) {  // neither saw a key of this row
            store(row, col, make_float4(0.f, 0.f, 0.f, 0.f), INFINITY);
            continue;
          }
          const float e0 = expf(L0 - m), e1 = expf(L1 - m), inv_l = 1.f / (e0 + e1);
          const float4 x0 = __ldcg(reinterpret_cast<const float4*>(bal.O_part + r_0 * d + col));
          const float4 x1 = __ldcg(reinterpret_cast<const float4*>(bal.O_part + r_1 * d + col));
          const float w0 = e0 * inv_l, w1 = e1 * inv_l;
          store(row, col,
                make_float4(fmaf(w0, x0.x, w1 * x1.x), fmaf(w0, x0.y, w1 * x1.y), fmaf(w0, x0.z, w1 * x1.z),
                            fmaf(w0, x0.w, w1 * x1.w)),
                m + logf(e0 + e1));
        }
      }
    }

    // ---- The next tile: the queue's, while it has any (a grid of at most one block per slot reads
    // every tile as its home block, in order: the hardware's order, without waves); then a tile to join.
    // Steal: once the queue is empty every tile has its home block, and the ones still read are the last
    // handed out. Join the one with the most chunks left among the last 2·128, if that is at least
    // kMinSteal — less is not worth a second Q, ring filling and merge. The first thief to mark it
    // (0 → 1) joins; the others look again (up to 4 times), then the block ends. The first look is made
    // while the queue's atomic is in flight: the last blocks of a call end one round trip after their
    // tile, not two.
    __syncthreads();  // the shared memory (rings, verdict) is free for the next tile
    if (threadIdx.x == 0) verdict = int(gridDim.x) + atomicAdd(bal.queue, 1);
    bool joined = false, next_home = false;
    for (int attempt = 0; attempt < 4 && !joined && !next_home; ++attempt) {
      long long mine = -1;  // (chunks left) << 32 | tile, the best this thread saw
      int taken[2], state[2];
#pragma unroll
      for (int side = 0; side < 2; ++side) {  // both loads of both candidates in flight together
        const int64_t cand = bal.tiles - 1 - threadIdx.x - side * kThreads;
        taken[side] = cand < 0 ? 0 : __ldcg(bal.next + cand);
        state[side] = cand < 0 ? 1 : __ldcg(bal.thief + cand);
      }
#pragma unroll
      for (int side = 0; side < 2; ++side) {
        const int64_t cand = bal.tiles - 1 - threadIdx.x - side * kThreads;
        if (state[side] != 0) continue;  // no such tile, or joined or closed already
        const TileKeys ck = tile_keys(cand, M, Nq, Nk, H_kv, T_r, causal, seqused_k, var);
        const int left = (ck.T_c + kChunk - 1) / kChunk - kWarps - taken[side];
        if (left >= kMinSteal && ((static_cast<long long>(left) << 32) | cand) > mine)
          mine = (static_cast<long long>(left) << 32) | cand;
      }
#pragma unroll
      for (int x = 16; x > 0; x /= 2) {
        const long long other = __shfl_xor_sync(0xffffffffu, mine, x);
        mine = other > mine ? other : mine;
      }
      if (lane == 0) best[warp] = mine;
      __syncthreads();  // best[] and (first time) the queue's answer
      if (attempt == 0 && verdict < bal.tiles) {
        next_home = true;  // uniform: everyone read the same verdict
        tile_id = verdict;
        home = true;
      }
      __syncthreads();  // everyone has read verdict before thread 0 writes it again
      if (next_home) break;
      if (threadIdx.x == 0) {
        long long b = best[0];
        for (int w = 1; w < kWarps; ++w) b = best[w] > b ? best[w] : b;
        verdict = b < 0 ? -1 : atomicCAS(bal.thief + (b & 0xffffffffll), 0, 1) == 0 ? int(b & 0xffffffffll) : -2;
      }
      __syncthreads();
      const int v = verdict;
      __syncthreads();  // everyone has read verdict before thread 0 writes it again
      if (v == -1) break;  // nothing worth joining
      if (v >= 0) {
        tile_id = v;
        home = false;
        joined = true;
      }
    }
    if (!joined && !next_home) return;
  }
  if (S == 1) return;  // a cluster of one block: nothing to merge

  // ---- The cluster's end (S > 1; never balanced): the tile this block read, its partial in P_s, Ls_s.
  const TileKeys tk = tile_keys(tile_id, M, Nq, Nk, H_kv, T_r, causal, seqused_k, var);
  const int rows_here = tk.rows_here;
  const int64_t row_g = tk.bh * M + tk.r0;
  constexpr int kC = d / 4;
  const float* P_s = reinterpret_cast<const float*>(ring) + kWarps * B_r * (d + 4) + 2 * kWarps * B_r;
  const float* Ls_s = P_s + B_r * d;

  // ---- The merge across the cluster (step 10's merge kernel, reading shared memory, not global):
  //   m = max_s L_s,   ℓ = Σ_s e^{L_s − m},   L = m + ln ℓ,   O = Σ_s (e^{L_s − m}/ℓ) O_s.
  // The tile's rows_here·d/4 pieces (row, 4 columns) are dealt out over the cluster's S·128 threads;
  // each reads the piece from every rank r < S (rank r is split r of this tile) through DSMEM. A
  // split that saw no key of the row has L_s = −∞ and weight 0; if all have, O = 0 and L = +∞.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partial is written, and visible to the others (release / acquire)
  for (int c = s * kThreads + threadIdx.x; c < rows_here * kC; c += S * kThreads) {
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
}

// The balance's counters, zeroed before every call (the workspace is poisoned between calls). It lets
// the attention kernel be scheduled at once; that kernel waits for it to finish before its first atomic.
__global__ void __launch_bounds__(256) zero_kernel(int* __restrict__ counters, int64_t n) {
  allow_dependent_launch();
  for (int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x; i < n; i += int64_t(gridDim.x) * 256) counters[i] = 0;
}

// ---- Host side ----------------------------------------------------------------------------------

// What the heuristic needs from the device: SMs, how many blocks of this kernel one SM holds (from
// the occupancy calculator, so a GPU with less shared memory gets the right count), the largest
// cluster of split blocks that can be scheduled (16, non-portable, else 8, the portable size, else 1:
// no split), and how many clusters of each size the device runs at once (cudaOccupancyMaxActiveClusters:
// a cluster lives in one GPC, so this is per GPC, not SMs / size). Queried once per device and head
// dim; zeros without a usable device (then S = 1).
struct DeviceFacts {
  int sms = 0, blocks_per_sm = 0, max_cluster = 0;
  int clusters_at_once[kMaxSplits + 1] = {};  // [size]: clusters of that many split blocks resident together
};

template <int d>
int clusters_that_fit(int size) {  // how many clusters of `size` blocks the device holds at once (0: none)
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(size));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Tiles<d>::kSmemAlone;  // what a split launch asks for
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(size);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, attention_kernel<__half, d>, &cfg) != cudaSuccess) {
    cudaGetLastError();  // not sticky: this size is simply not available
    return 0;
  }
  return n;
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
  int major = 0;
  // Both storage types have the same resources; the attributes are needed before any launch.
  const bool ok =
      cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64 &&
      cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 &&
      cudaFuncSetAttribute(attention_kernel<__half, d>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_alone) ==
          cudaSuccess &&
      cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, d>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem_alone) == cudaSuccess &&
      cudaFuncSetAttribute(attention_kernel<__half, d>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
          cudaSuccess &&
      cudaFuncSetAttribute(attention_kernel<__nv_bfloat16, d>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
          cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.blocks_per_sm, attention_kernel<__half, d>, kThreads, smem) ==
          cudaSuccess;
  if (!ok) {
    cudaGetLastError();  // no usable device: the runner reports that (and a launch would, checked)
    return {};
  }
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
// 256 keys (17 key tiles) in a cache of 131072 would get the cache's 30 splits, 13 of them empty, 30
// partials and a merge for 257 keys; counted as visited, it gets none (the 256-key floor).
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
//  - Within that, enough blocks to give 90% of the SMs one each: the smallest S with
//    B·H_kv·T_r·S ≥ 0.9·SMs, and no split once the grid has that many (FlashAttention-2's
//    num_splits_heuristic stops at 80%). A block here keeps 64 KiB of K and V in flight, and one per SM
//    already streams at the copy's rate: run 46 (H100, --decode-splits) found S = 16, 4 and 1 fastest for
//    8, 32 and 128 unsplit blocks. The first rule, which filled every block slot (2 per SM) to the last
//    wave, took S = 29–30, 8 and 2 there: up to 16% slower (README.md, "How many splits").
int splits(const Problem& p) {
  const int64_t M = p.group() * p.Nq, T_r = ceil_div<int64_t>(M, B_r);
  const int64_t keys = keys_visited(p);
  const int64_t asked = requested_splits();  // read first: a bad value is refused with or without a device
  const DeviceFacts f = facts_for(p.d);
  if (f.sms <= 0 || f.blocks_per_sm <= 0 || f.max_cluster <= 1) return 1;  // no device, or no cluster to merge in
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(f.max_cluster, ceil_div<int64_t>(keys, B_w)));
  if (asked > 0) return int(std::min(asked, cap));
  const int64_t rows = std::min<int64_t>(M, B_r);
  const int64_t s_max = std::min(cap, keys / std::max<int64_t>(256, 32 * rows));
  if (s_max <= 1) return 1;
  const double blocks = double(p.B * p.H_kv * T_r), target = 0.9 * double(f.sms);
  if (blocks >= target) return 1;
  int64_t S = std::min<int64_t>(s_max, int64_t(std::ceil(target / blocks)));
  // And all B·H_kv·T_r clusters at once: a cluster runs inside one GPC, so clusters of S blocks may not
  // all fit where S·clusters SMs would (a GPC of 16 SMs holds one cluster of 9, not 1.8). A cluster
  // left for a second wave would double the time: take the largest S up to here whose clusters fit.
  while (S > 1 && f.clusters_at_once[S] < blocks) --S;
  return int(S);
}

// Where the clusters cannot read fast enough: a tile's splits are one cluster, so 10b streams on S
// blocks per tile (S ≤ 16, and lowered until every cluster is resident), where step 10's splits are
// free blocks (up to 30 per tile). One of these blocks reads ≈ 48.8 GB/s when the SM, not the memory,
// is the limit (run 94, H100: B 1, H_kv 1, Nq 4, Nk 131072, 72 blocks), and the copy moves 3.0 TB/s:
// it takes ~62 blocks to keep up with the memory. Every K/V byte is read by the T_r row tiles of its
// head, so 10b needs min(SMs, 62·T_r) blocks; with fewer (B 1 and H_kv ≤ 2 at Nq 1; H_kv ≤ 4 at Nq 4)
// step 10's extra blocks win once the read is long. Run 94, 10b against step 10: H_kv 1, Nq 1 0.53× at
// Nk 131072 (8192 keys per split), 0.95× at 32768 (2048 keys), 1.25× at 8192; H_kv 1-4, Nq 4 0.69-0.74×
// at 131072, 0.82-0.86× at 32768 (3641 keys), 1.05-1.06× at 8192. So where 10b's blocks are fewer than
// that, step 10 has more, and each split would read over 2048 keys, 10b runs step 10's kernels (and
// reports their workspace) — unless FLASHLADDER_SPLITS asks for a number of splits, which always means
// 10b's own clusters (README.md, "Where the clusters cannot read fast enough").
constexpr int64_t kBlocksPerMemory = 62;

bool uses_step10(const Problem& p) {
  if (requested_splits() > 0) return false;
  const int64_t S = splits(p), S10 = fl::s10::splits(p);
  const int64_t T_r = ceil_div<int64_t>(p.group() * p.Nq, B_r), tiles = p.B * p.H_kv * T_r;
  const int64_t needed = std::min<int64_t>(facts_for(p.d).sms, kBlocksPerMemory * T_r);
  return S10 > S && tiles * S < needed && keys_visited(p) / S > 2048;
}

// The balance runs where 10b would launch one block per tile (S = 1, its own kernel), unless
// FLASHLADDER_BALANCE = 0 (the benchmark's A/B: 10b's launch, in this build).
bool balanced(const Problem& p) {
  const bool off = env_knob("FLASHLADDER_BALANCE", 0, 1, "1: share the keys at run time, 0: one block per tile").value_or(1) == 0;
  return !off && splits(p) == 1 && !uses_step10(p);
}

// The balance's workspace: the counters queue [1] and next, thief, done [3][tiles] (ints, padded to 16
// bytes), then the two partials of every row, O_part [2][rows_total][d] and L_part [2][rows_total] (fp32).
int64_t tiles_of(const Problem& p) { return p.B * p.H_kv * ceil_div<int64_t>(p.group() * p.Nq, B_r); }
size_t counter_bytes(const Problem& p) { return size_t(ceil_div<int64_t>(1 + 3 * tiles_of(p), 4)) * 16; }

size_t workspace_bytes(const Problem& p) {  // 0 on the clusters: their partials live in shared memory
  if (uses_step10(p)) return fl::s10::impl.workspace_bytes(p);
  if (!balanced(p)) return 0;
  return counter_bytes(p) + size_t(2) * size_t(p.lse_elems()) * size_t(p.d + 1) * sizeof(float);
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
  const int64_t T_r = ceil_div<int64_t>(p.group() * p.Nq, B_r);
  const int64_t blocks = p.B * p.H_kv * T_r * S;
  if (blocks > INT_MAX)
    return "this step launches one thread block per (16 packed query rows, batch, K/V head, split): " +
           std::to_string(blocks) + " blocks (S = " + std::to_string(S) + ") exceed the grid limit 2^31 − 1";
  return "";
}

// One launch: the grid of step 10, in clusters of S blocks (the S splits of a tile; S = 1: clusters of
// one block, which write O and L themselves).
template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  device_facts<d>();  // sets the kernel's shared-memory and cluster-size attributes
  FL_CUDA(cudaFuncSetAttribute(attention_kernel<T, d>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(Tiles<d>::kSmemAlone)));  // again, checked: a failed query above is reported here
  if (!p.seqused_k.empty() && !a.seqused_k) throw Error("seqused_k needs its device copy: the call passed none");
  const int S = splits(p);
  const int64_t M = p.group() * p.Nq, T_r = ceil_div<int64_t>(M, B_r);
  Balance bal;
  if (balanced(p)) {  // the counters start at 0 in every call; the partials are written before they are read
    if (!a.workspace) throw Error("step 10c's balance needs its workspace (" + std::to_string(workspace_bytes(p)) + " bytes): the call passed none");
    bal.tiles = tiles_of(p);
    bal.rows_total = p.lse_elems();
    bal.queue = static_cast<int*>(a.workspace);
    bal.next = bal.queue + 1;
    bal.thief = bal.next + bal.tiles;
    bal.done = bal.thief + bal.tiles;
    bal.O_part = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + counter_bytes(p));
    bal.L_part = bal.O_part + size_t(2) * size_t(bal.rows_total) * size_t(d);
    const int64_t n = 1 + 3 * bal.tiles;
    zero_kernel<<<unsigned(std::min<int64_t>(ceil_div<int64_t>(n, 256), 64)), 256, 0, static_cast<cudaStream_t>(a.stream)>>>(bal.queue, n);
    FL_CUDA(cudaGetLastError());
  }
  cudaLaunchConfig_t cfg = {};
  // Balanced: at most one block per slot (blocks_per_sm · SMs, all resident at once); the rest of the
  // tiles come from the queue.
  const DeviceFacts f = facts_for(d);
  const int64_t slots = int64_t(f.blocks_per_sm) * f.sms;
  const int64_t grid = bal.next && slots > 0 ? std::min(bal.tiles, slots) : p.B * p.H_kv * T_r * S;
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = S > 1 ? Tiles<d>::kSmemAlone : Tiles<d>::kSmem;  // S = 1: two blocks per SM, as step 10
  cfg.stream = static_cast<cudaStream_t>(a.stream);
  cudaLaunchAttribute attrs[1];
  if (bal.next) {  // after the zeroing kernel, scheduled at once (it waits for it in griddepcontrol.wait)
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[0].val.programmaticStreamSerializationAllowed = 1;
  } else {         // 10b's launch: clusters of S blocks (S = 1: of one block)
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = unsigned(S);  // the grid is a multiple of S: splits are neighbours
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = 1;
  auto kernel = attention_kernel<T, d>;
  const VariantArgs var = VariantArgs::of(p, a.alibi_slopes, nullptr, nullptr, a.seqused_k);
  const int32_t* used = p.seqused_k.empty() ? nullptr : a.seqused_k;
  auto go = [&] {
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                              static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, M, int(p.Nq), int(p.Nk), p.H_kv,
                              T_r, S, float(p.softmax_scale()), p.causal, used, var, bal);
  };
  cudaError_t e = go();
  if (e != cudaSuccess && bal.next) {  // refused at once, not sticky: an ordinary launch after the zeroing
    cudaGetLastError();
    cfg.numAttrs = 0;
    e = go();
  }
  FL_CUDA(e);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  if (uses_step10(p)) return fl::s10::impl.forward(p, a);  // see uses_step10
  dispatch<DecodeD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s10c

// flashladder — step 09e: step 09d's backward, issuing fewer instructions per wgmma.
//
// Profiled beside cuDNN's backward (B = 4, H = 16, N = 4096, d = 128, fp16, non-causal; H100, run 35,
// docs/results/2026-11-25-h100-run34-37.md), 09d issued instructions at cuDNN's rate (34% against
// 35% of the issue slots) but issued 1.48× as many (1106M against 747M), and took 1.45× as long (3.39
// against 2.33 ms): the consumers wait on their own instruction stream, not on the tensor cores. Per
// iteration of the consumer loop (one K_j against one Q_i: 40 wgmma at d = 128) the SASS of 09d's
// plain kernel (cuobjdump; the counts are instructions in the loop's body, nvcc 13.0, fp16) was:
//   - 1219 instructions for 40 wgmma; the 64 wgmma descriptors were each re-derived from a
//     generic pointer (cvta, & 0x3FFFF, >> 4, | LBO, the upper word), in ordinary registers, then
//     copied to the uniform registers wgmma reads them from (134 R2UR). The compiler cannot keep them
//     uniform: the warpgroup index wg = tid / 128 and the stage s come from registers it must assume
//     differ between the threads of a warp.
//   - the mask, tested element by element: 32 branches per iteration, each with its convergence
//     barrier (36 BSSY/BSYNC pairs in the loop), on every tile, masked or not.
// Two changes, the mathematics untouched (every line of FA2 Algorithm 2 as 09d):
//   1. Descriptors from one warp-uniform number. wg and the stage's offset come from lane 0 through
//      __shfl_sync (one SHFL per iteration), which the compiler knows makes them warp-uniform; each
//      descriptor is then base16 + a constant: K_s's shared address / 16, plus the tile's, stage's
//      and k-step's offset in 16-byte units, plus the LBO field, with no mask (shared memory ends
//      below 256 KiB, so the 14-bit start-address field never carries). They live in uniform
//      registers: 134 R2UR → 4 per iteration.
//   2. The mask applied once per tile: the exponentials of the whole tile first, then, only where
//      need_mask, one pass that clears the masked elements' halves of the packed P_ijᵀ.
// The loop's body, plain kernel, fp16 (scripts/sass_loop.py, nvcc 13.0): 1219 → 709 instructions at
// d = 128 (882 → 598 with the mask's code taken out of both, as a tile that needs none runs), 1621 →
// 1040 at d = 64 (1112 → 828); every variant's loop 29–42% shorter. ptxas's spills of the plain
// kernel: 56 → 0 bytes at d = 128, 72 → 12 at d = 64 (bf16: 52 → 0, 64 → 12). Whether the time
// follows the count is the GPU's to say: see the README.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "steps/backward.cuh"
#include "steps/device/tma.cuh"
#include "steps/device/wgmma.cuh"
#include "steps/variants.cuh"  // VariantArgs: the window (causal folded in), the softcap c, the ALiBi slopes

namespace fl::s08j { extern const StepImpl impl; }  // the forward this backward reads O and L from

namespace fl::s09e {

using namespace fl::mma;
using namespace fl::bwd;  // Dims, unpack2, exp2_ftz, kLog2e, check_aligned: what the backward steps share

// Tiles (09b's): B_c = 128 keys (2 consumers × 64), B_r = 128 query rows at d = 64 and 64 at d = 128.
template <int d>
struct Bwd {
  static constexpr int B_c = 128, B_r = d <= 64 ? 128 : 64;
  static constexpr int kConsumers = 2, kThreads = 128 * (kConsumers + 1);
  static constexpr int kStages = 2;  // Q_i, dO_i, L_i, D_i ring
  static constexpr int P = 64;       // panel width (columns of 128 bytes)
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 128·24 + 256·240 = 64 512
  static_assert(B_r * d == 2 * 64 * 64, "dQ_i is two m64n64 tiles, one per consumer");
  // K_j, V_j [B_c][d]; Q_i, dO_i [kStages][B_r][d]; dS_ijᵀ [B_c][B_r] (16-bit swizzled panels); dQ_i
  // [B_r·d] fp32 (the accumulator's layout); L_i·log2 e, D_i [kStages][B_r] fp32; 1 + 3·kStages
  // barriers; +1024 to align the panels.
  static constexpr int smem_bytes = (2 * B_c * d + 2 * kStages * B_r * d + B_c * B_r) * 2 + B_r * d * 4 +
                                    2 * kStages * B_r * 4 + 8 * (1 + 3 * kStages) + 1024;
};

// Offset of element (row, col) of a [ROWS][COLS] 16-bit tile stored as COLS/64 panels [ROWS][64],
// the 16-byte chunk c of a panel row at chunk c ^ (row % 8): the TMA's and wgmma's 128-byte swizzle.
template <int ROWS>
__device__ __forceinline__ int at(int row, int col) {
  return col / 64 * ROWS * 64 + row * 64 + ((col % 64 / 8) ^ (row % 8)) * 8 + col % 8;
}

// ==== The dQ accumulator's layout ================================================================
// Per (batch·head, Q block i) a run of B_r·d floats, in the order the 256 consumer threads hold
// their dQ fragments: float x of consumer thread c (0 … 255) is at ((x / 4)·256 + c)·4 + x % 4, so
// each of a thread's P/8 float4 writes lands next to its neighbours' (a warp writes 512 contiguous
// bytes: no bank conflicts) and the whole block is contiguous for the bulk add. Fragment x of thread c
// (consumer w = c / 128, warp c / 32 % 4, lane = 4g + t) is element (qm + 16·warp + g + 8·(x % 4 / 2),
// qn + 8·(x / 4) + 2t + x % 2) of dQ_i, with (qm, qn) = (64w, 0) at d = 64 and (0, 64w) at d = 128.
template <int d>
__host__ __device__ __forceinline__ void dq_element(int c, int x, int& row, int& col) {
  const int w = c / 128, warp = c / 32 % 4, lane = c % 32, g = lane / 4, t = lane % 4;
  const int qm = d == 64 ? 64 * w : 0, qn = d == 64 ? 0 : 64 * w;
  row = qm + 16 * warp + g + 8 * (x % 4 / 2);
  col = qn + 8 * (x / 4) + 2 * t + x % 2;
}

/// The workspace, in order: the dQ accumulator [Q blocks][B_r·d] fp32, L·log2 e and D padded
/// [Q blocks][B_r] fp32 each, the turn counters [Q blocks] int. The Q blocks are [B·H][T_r]; packed
/// (variable length) [H][total_q / B_r + B], see packed_block.
template <int d>
struct Workspace {
  float* dQ_acc;
  float* L2;
  float* D;
  int* turn;
  static int64_t blocks(const Problem& p) {
    constexpr int B_r = Bwd<d>::B_r;
    return p.varlen() ? p.H * (p.total_q() / B_r + p.B) : p.B * p.H * ceil_div<int64_t>(p.Nq, B_r);
  }
  Workspace(const Problem& p, void* base) {
    const int64_t rows = blocks(p) * Bwd<d>::B_r;
    dQ_acc = static_cast<float*>(base);
    L2 = dQ_acc + rows * d;
    D = L2 + rows;
    turn = reinterpret_cast<int*>(D + rows);
  }
  static size_t bytes(const Problem& p) {
    const int64_t rows = blocks(p) * Bwd<d>::B_r;
    return sizeof(float) * size_t(rows * d + 2 * rows) + sizeof(int) * size_t(blocks(p));
  }
};

// Packed, the workspace's Q block i of sequence b, head h. Sequence b's blocks start at the block that
// holds its first token, cu_q[b] / B_r, moved up by b: each earlier sequence may end inside a block, so
// this gives each its own and no two sequences share one (an accumulator block or turn counter shared
// by two sequences would mix their dQ), in total_q / B_r + B blocks per head rather than B·T_r for the
// longest sequence (FlashAttention-3 pads its varlen dQ accumulator and dP sums the same way).
template <int B_r>
__device__ __forceinline__ int64_t packed_block(const VariantArgs& var, int B, int b, int h, int i) {
  return int64_t(h) * (var.total_q / B_r + B) + var.cu_q[b] / B_r + b + i;
}

// ==== Backward 1 of 3: D = rowsum(dO ∘ O); L·log2 e and D padded to whole Q blocks; zeroes ========
// One warp per padded row (09b's kernel 1, which read L in the main kernel instead). Packed: the same
// walk, B sequences of T_r blocks (the longest sequence's), each skipping the rows past its own last block.
constexpr int kRowWarps = 8;

template <class T, int d, bool kPacked>
__global__ void __launch_bounds__(32 * kRowWarps)
prepare_kernel(const T* __restrict__ o, const T* __restrict__ dO, const float* __restrict__ lse,
               Workspace<d> ws, int64_t bh_count, int Nq, int H, VariantArgs var) {
  constexpr int B_r = Bwd<d>::B_r;
  const int lane = threadIdx.x % 32;
  const int T_r = ceil_div(Nq, B_r);
  const int64_t rows = bh_count * T_r * B_r;  // padded rows
  for (int64_t prow = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; prow < rows;
       prow += int64_t(gridDim.x) * kRowWarps) {  // the same trip count for the 32 lanes of a warp
    const int64_t bh = prow / (int64_t(T_r) * B_r);
    const int r = int(prow % (int64_t(T_r) * B_r));  // row within the (batch, head)
    int b = 0, h = 0, q_tok = 0, n_q = Nq;  // packed: row r of sequence b, head h is token q_tok + r
    if constexpr (kPacked) {
      b = int(bh / H), h = int(bh % H), q_tok = var.cu_q[b];
      n_q = var.cu_q[b + 1] - q_tok;
      if (r >= ceil_div(n_q, B_r) * B_r) continue;  // past the sequence's last block (the whole warp)
    }
    const int64_t w_row =  // the workspace's row
        kPacked ? packed_block<B_r>(var, int(bh_count / H), b, h, r / B_r) * B_r + r % B_r : prow;
    float sum = 0.f;
    if (r < n_q) {
      const int64_t at = kPacked ? (int64_t(q_tok) + r) * H + h : bh * Nq + r;
      const T* o_r = o + at * d;    // O row  [d]
      const T* do_r = dO + at * d;  // dO row [d]
      for (int c = 2 * lane; c < d; c += 64) {
        const float2 x = unpack2<T>(*reinterpret_cast<const uint32_t*>(o_r + c));
        const float2 y = unpack2<T>(*reinterpret_cast<const uint32_t*>(do_r + c));
        sum += x.x * y.x + x.y * y.y;
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    if (lane == 0) {
      ws.D[w_row] = sum;  // 0 past Nq
      ws.L2[w_row] = r < n_q ? lse[kPacked ? h * var.total_q + q_tok + r : bh * Nq + r] * kLog2e
                             : INFINITY;  // past Nq: P = exp2(· − ∞) = 0
    }
    float4* acc = reinterpret_cast<float4*>(ws.dQ_acc + w_row * d);  // one padded row's worth [d]
    for (int c = lane; c < d / 4; c += 32) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (lane == 0 && r % B_r == 0) ws.turn[w_row / B_r] = 0;  // one counter per Q block
  }
}

// ==== Backward 2 of 3: the main loop, one thread block per (K_j/V_j, batch, K/V head) ==============
// 09b's products, per consumer warpgroup w (keys 64w … 64w + 63 of K_j):
//   S_ijᵀ = K_j Q_iᵀ,  dP_ijᵀ − D_i/2 = V_j dO_iᵀ − D_i/2        (shared-memory operands)
//   P_ijᵀ = exp2(S_ijᵀ·τ log2 e − L_i log2 e),  dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i)   (registers)
//   dV_j += P_ijᵀ dO_i,  dK_j += dS_ijᵀ Q_i                        (A from registers)
//   dQ_i = dS_ij K_j                                             (dS_ijᵀ through shared memory)
// 09b's README explains the turned products and the −D_i/2 start.
template <class T, int d, int kV>
__global__ void __launch_bounds__(Bwd<d>::kThreads, 1)
backward_kernel(const __grid_constant__ CUtensorMap tm_Q, const __grid_constant__ CUtensorMap tm_dO,
                const __grid_constant__ CUtensorMap tm_K, const __grid_constant__ CUtensorMap tm_V,
                const __grid_constant__ CUtensorMap tm_L2, const __grid_constant__ CUtensorMap tm_D,
                Workspace<d> ws, T* __restrict__ dK, T* __restrict__ dV, Dims n, VariantArgs var) {
  using C = Bwd<d>;
  constexpr int B_r = C::B_r, B_c = C::B_c, P = C::P, kStages = C::kStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* K_s = reinterpret_cast<T*>(smem);     // K_j:    d/64 panels [B_c][64]
  T* V_s = K_s + B_c * d;                 // V_j:    d/64 panels [B_c][64]
  T* Q_buf = V_s + B_c * d;               // Q_i:    [kStages] × d/64 panels [B_r][64]
  T* dO_buf = Q_buf + kStages * B_r * d;  // dO_i:   [kStages] × d/64 panels [B_r][64]
  T* dS_s = dO_buf + kStages * B_r * d;   // dS_ijᵀ: B_r/64 panels [B_c][64]: row = key, column = query row
  float* dQ_s = reinterpret_cast<float*>(dS_s + B_c * B_r);  // dQ_i: [B_r·d] in the accumulator's layout
  float* L2_buf = dQ_s + B_r * d;                           // L_i·log2 e: [kStages][B_r]
  float* D_buf = L2_buf + kStages * B_r;                     // D_i:        [kStages][B_r]
  uint64_t* full_KV = reinterpret_cast<uint64_t*>(D_buf + kStages * B_r);  // K_j, V_j have landed
  uint64_t* full_Q = full_KV + 1;         // [kStages]: Q_i and L_i have landed
  uint64_t* full_dO = full_Q + kStages;   // [kStages]: dO_i and D_i have landed
  uint64_t* empty = full_dO + kStages;    // [kStages]: every consumer warp is done with the stage
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma, setmaxnreg exist only in sm_90a code; limits() refuses other GPUs before any launch
#else
  // blockIdx.x = j + T_c·(b·H_kv + h_kv), as in 09b; the Q blocks (of every query head of the group)
  // this column block meets: `it` = 0 … n_iter − 1 in the order (head, Q block).
  const int T_c = ceil_div(n.Nk, B_c), T_r = ceil_div(n.Nq, B_r);
  const int j = blockIdx.x % T_c, bk = blockIdx.x / T_c;
  const int b = bk / n.H_kv, h_kv = bk % n.H_kv;
  const int j0 = j * B_c;
  // Variable length and seqused_k: a template bit (kVarlen), as in 08j, so the plain problem's kernel has
  // none of these reads. Packed, sequence b is the tokens [q_tok, q_tok + Nq) of Q, dO, dQ and
  // [k_tok, k_tok + n_k) of K, V, dK, dV; from here on n.Nq and n.Nk are its own lengths (n.Nk =
  // seqused_k[b] keys when given) in every rule, and n_k the key rows it holds. The grid covers the
  // longest sequence: a K_j past this one's rows leaves at once; a K_j that no query sees (past the used
  // keys, or a sequence without queries) writes dK_j = dV_j = 0 on the rows it holds and leaves; both
  // before any barrier is set up.
  const bool packed = (kV & kVarlen) && var.cu_q;
  int q_tok = 0, k_tok = 0, n_k = n.Nk;
  auto kv_row = [&](int c) {  // dK and dV's row of key c: [B·H_kv][Nk][d], packed [total_k][H_kv][d]
    return packed ? ((int64_t(k_tok) + c) * n.H_kv + h_kv) * d : (int64_t(bk) * n_k + c) * d;
  };
  if constexpr ((kV & kVarlen) != 0) {
    if (packed) {
      q_tok = var.cu_q[b], k_tok = var.cu_k[b];
      n.Nq = var.cu_q[b + 1] - q_tok, n.Nk = n_k = var.cu_k[b + 1] - k_tok;
    }
    if (var.used_k) n.Nk = var.used_k[b];
    if (j0 >= n_k) return;
    if (j0 >= n.Nk || n.Nq == 0) {
      for (int x = threadIdx.x; x < B_c * d / 8; x += blockDim.x) {  // 16-byte chunks of rows j0 …
        const int c = j0 + x / (d / 8), col = x % (d / 8) * 8;
        if (c < n_k) {
          *reinterpret_cast<uint4*>(dK + kv_row(c) + col) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(dV + kv_row(c) + col) = make_uint4(0, 0, 0, 0);
        }
      }
      return;
    }
  }
  // The rows that see a key of K_j (see the header): [q_lo, q_hi], so the Q blocks [i_first, i_last].
  // Without the kWindow bit (the plain problem, causal or not) these are 09c's lines, so its kernel is
  // 09c's. Run through the general rule below, the plain causal backward at d = 64 ran at 0.93–0.98×
  // 09c's in the same run (H100, runs 26 and 29: docs/results/2026-11-25-h100-09d-vs-09c-plain.md,
  // where 09c's own run-to-run ratios span 0.974–1.018). Variable length takes the bit too: its n.Nq
  // is the sequence's, and T_r the longest sequence's.
  const int diag = n.Nk - n.Nq;
  int i_first = n.causal ? max(0, j0 + n.Nq - n.Nk) / B_r : 0, i_last = T_r - 1, n_i = T_r - i_first;
  if constexpr ((kV & kWindow) != 0) {
    const int k_last = min(j0 + B_c, n.Nk) - 1;
    const int q_lo = var.right < 0 ? 0 : max(0, j0 - diag - var.right);
    const int q_hi = var.left < 0 ? n.Nq - 1 : min(n.Nq - 1, k_last - diag + var.left);
    i_first = q_lo / B_r, i_last = q_hi / B_r;
    n_i = q_lo <= q_hi ? i_last - i_first + 1 : 0;
  }
  const int n_iter = n.group * n_i;
  // The Q blocks run from the last down (09b: from i_first up). Every column block then starts on Q
  // block T_r − 1, which all of them meet, so in the deterministic mode the turns at one Q block
  // follow each other one bulk add apart; upward, block j's first Q block (i_first(j), near the
  // diagonal) would wait for blocks 0 … j − 1 to work up to it: 110 against 236 TFLOP/s at N = 2048,
  // d = 64, causal (H200, docs/results/2026-11-23-h200-09c-first.md).
  auto q_block = [&](int it, int& h, int& i) {
    h = h_kv * n.group + it / n_i;
    i = ((kV & kWindow) != 0 ? i_last : T_r - 1) - it % n_i;  // (09c: T_r − 1)
  };

  if (threadIdx.x == 0) {
    tma::init(full_KV, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::init(&full_Q[s], 1);
      tma::init(&full_dO[s], 1);
      tma::init(&empty[s], 4 * C::kConsumers);  // one arrival per consumer warp
    }
    tma::fence_init();
  }
  __syncthreads();  // the last block-wide barrier

  if (threadIdx.x < 128) {
    // ---- Producer: K_j, V_j once; then Q_i, L_i and dO_i, D_i of every iteration, kStages ahead.
    tma::regs_dec<C::kProducerRegs>();
    // L_i·log2 e and D_i come by TMA like Q_i: a tensor map per array, one row of B_r floats per Q block.
    // (Two other ways were correct and ordered by the same mbarriers, but compute-sanitizer's racecheck
    // does not follow an mbarrier between ordinary accesses and reported them: 1-D bulk copies, 2
    // hazards at d = 128 where a stage is reused, runs 21–22; the producer warp's ordinary stores, 12
    // at d = 64 and 128, run 24.)
    if (threadIdx.x == 0) {
      tma::arrive_expect_tx(full_KV, 2 * B_c * d * sizeof(T));
#pragma unroll
      for (int p = 0; p < d / P; ++p) {
        tma::load_3d(K_s + p * B_c * P, &tm_K, p * P, k_tok + j0, packed ? h_kv : bk, full_KV);
        tma::load_3d(V_s + p * B_c * P, &tm_V, p * P, k_tok + j0, packed ? h_kv : bk, full_KV);
      }
      for (int it = 0; it < n_iter; ++it) {
        const int s = it % kStages;
        int h, i;
        q_block(it, h, i);
        const int bh = b * n.H + h;
        const int qb = packed ? int(packed_block<B_r>(var, n.B, b, h, i)) : bh * T_r + i;  // Q_i's row of L·log2 e, D
        tma::wait(&empty[s], (it / kStages & 1) ^ 1);
        tma::arrive_expect_tx(&full_Q[s], B_r * d * sizeof(T) + B_r * sizeof(float));
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(Q_buf + s * B_r * d + p * B_r * P, &tm_Q, p * P, q_tok + i * B_r, packed ? h : bh, &full_Q[s]);
        tma::load_2d(L2_buf + s * B_r, &tm_L2, 0, qb, &full_Q[s]);
        tma::arrive_expect_tx(&full_dO[s], B_r * d * sizeof(T) + B_r * sizeof(float));
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(dO_buf + s * B_r * d + p * B_r * P, &tm_dO, p * P, q_tok + i * B_r, packed ? h : bh, &full_dO[s]);
        tma::load_2d(D_buf + s * B_r, &tm_D, 0, qb, &full_dO[s]);
      }
    }
    return;
  }

  // ---- Consumers ---------------------------------------------------------------------------------
  tma::regs_inc<C::kConsumerRegs>();
  const int tid = threadIdx.x - 128;  // 0 … 255 among the consumers
  // wg from lane 0: the compiler then knows it is the same in every thread of a warp (a warpgroup's
  // warps agree too), so whatever is computed from it may live in uniform registers (see the header).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = tid / 32 % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const float scale_log2 = n.scale * kLog2e;
  const int key0 = 64 * wg + 16 * warp + g;  // this thread's keys in the accumulators: key0 + 8r

  float dK_j[d / 2], dV_j[d / 2];  // the warpgroup's [64 keys][d]: [n][2r + e] = (key_r, 8n + 2t + e)
#pragma unroll
  for (int x = 0; x < d / 2; ++x) dK_j[x] = dV_j[x] = 0.f;
  tma::wait(full_KV, 0);
  if constexpr ((kV & kVarlen) != 0) {
    // seqused_k: the rows of a cache past its used keys may hold anything, NaN included. The mask sets
    // P_ij to 0 there (an assignment), but 0 times a NaN is NaN, and the products multiply those rows
    // in: dP_ijᵀ = V_j dO_iᵀ, so dS_ij = P_ij ∘ (dP_ij − D_i) = 0 · NaN; dQ_i = dS_ij K_j, where a NaN of
    // K_j spoils the row even with dS_ij = 0; and the softcap's 1 − t² of S_ij. So the consumers clear
    // K_j's and V_j's rows from the first unused key on, once the copy has landed, and order the stores
    // before the tensor cores' reads (as 08j's producer clears V_j's). Those keys' dK_j, dV_j then come
    // out 0, the convention for keys no query sees. Packed sequences alone need none of this: their rows
    // past N_k are the next sequence's keys, with P_ij = dS_ij = 0.
    if (var.used_k && j0 + B_c > n.Nk) {
      for (int x = tid; x < (j0 + B_c - n.Nk) * (d / 8); x += 256) {  // 16-byte chunks of whole rows
        const int r = n.Nk - j0 + x / (d / 8), ch = x % (d / 8);      // (the swizzle permutes within one)
        const int at = ch / 8 * B_c * P + r * P + ch % 8 * 8;
        *reinterpret_cast<uint4*>(K_s + at) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(V_s + at) = make_uint4(0, 0, 0, 0);
      }
      wgmma::fence_proxy_async();  // the zeros, visible to the tensor cores after the barrier
      tma::named_sync(1, 256);
    }
  }

  // The wgmma descriptors, as base16 + constants (see the header): base16 is K_s's shared address in
  // 16-byte units, the descriptor's start-address field; a tile at `elems` elements of T past K_s
  // adds elems·sizeof(T)/16, its leading-dimension byte offset (LBO) / 16 goes to bits 16–29, and the
  // upper word (the 8-row stride and the 128-byte swizzle) is wgmma::desc's constant.
  static_assert(C::smem_bytes < (1 << 18), "the start-address field (bits 0-13, in 16-byte units) must not carry");
  constexpr uint32_t sz = sizeof(T);
  constexpr uint64_t kHi = (uint64_t(8 * 2 * P) >> 4 << 32) | (uint64_t(P == 64 ? 1 : 2) << 62);
  const uint32_t base16 = __shfl_sync(0xffffffffu, static_cast<uint32_t>(__cvta_generic_to_shared(K_s)) >> 4, 0);
  auto desc = [&](uint32_t at16, uint32_t elems, uint32_t lbo_bytes) {  // at16: a uniform offset / 16 bytes
    return uint64_t(base16 + at16 + elems * sz / 16 + (lbo_bytes >> 4 << 16)) | kHi;
  };
  constexpr uint32_t oV = B_c * d, oQ = 2 * B_c * d, oO = oQ + kStages * B_r * d, oS = oO + kStages * B_r * d;
  static_assert(oS * sz + B_c * B_r * sz <= C::smem_bytes, "K_s, V_s, Q_buf, dO_buf, dS_s in this order from smem");

  for (int it = 0; it < n_iter; ++it) {
    const int s = it % kStages;
    const uint32_t parity = it / kStages & 1;
    int h, i;
    q_block(it, h, i);
    const int bh = b * n.H + h, i0 = i * B_r;
    // Q_i, dO_i: stage s of Q_buf, dO_buf, reached through the descriptors (oQ, oO + s16).
    const float* L2_i = L2_buf + s * B_r;
    const float* D_i = D_buf + s * B_r;
    const uint32_t s16 = __shfl_sync(0xffffffffu, s * (B_r * d * sz / 16), 0);  // stage s's offset, uniform

    // S_ijᵀ = K_j Q_iᵀ and dP_ijᵀ − D_i/2 = V_j dO_iᵀ − D_i/2: two commit groups (as 09b).
    tma::wait(&full_Q[s], parity);
    tma::wait(&full_dO[s], parity);
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
    for (int kk = 0; kk < d / 16; ++kk)
      wgmma::mma_ss<T, B_r>(S, desc(0, 16 * kk / P * B_c * P + 64 * wg * P + 16 * kk % P, 16),
                            desc(s16, oQ + 16 * kk / P * B_r * P + 16 * kk % P, 16), kk > 0);
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk)
      wgmma::mma_ss<T, B_r>(dP, desc(0, oV + 16 * kk / P * B_c * P + 64 * wg * P + 16 * kk % P, 16),
                            desc(s16, oO + 16 * kk / P * B_r * P + 16 * kk % P, 16), true);
    wgmma::commit();

    // P_ijᵀ, while dP_ijᵀ is still being multiplied; masked where a key is past Nk or invisible, in a
    // pass of its own (below). Rows past Nq have L = +∞ (kernel 1): P = 0 there without a test.
    wgmma::wait<1>();
    wgmma::pin(S);
    const bool need_mask = (kV & kWindow) == 0  // (09c's)
        ? j0 + B_c > n.Nk || (n.causal && j0 + B_c - 1 > i0 + n.Nk - n.Nq)
        : j0 + B_c > n.Nk || (var.right >= 0 && j0 + B_c - 1 > i0 + diag + var.right) ||
              (var.left >= 0 && j0 < i0 + B_r - 1 + diag - var.left);
    const float slope_log2 = kV & kAlibi ? var.slopes[b * var.slopes_b + h] * kLog2e : 0.f;
    uint32_t P_a[B_r / 16][4];  // P_ijᵀ as dV_j's A operand (as 09b)
#pragma unroll
    for (int nt = 0; nt < B_r / 8; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(L2_i + 8 * nt + 2 * t);
      float P_e[4];  // (softcap) this n-tile's P_ijᵀ, packed below
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = j0 + key0 + 8 * (e >> 1), r = i0 + 8 * nt + 2 * t + (e & 1);  // key, query row
        float z = S[4 * nt + e] * scale_log2, u = 0.f;  // the logit z_ij·log2 e; u = 1 − t_ij² (softcap)
        if constexpr ((kV & kSoftcap) != 0) {
          const float tt = tanh_fast(S[4 * nt + e] * (n.scale / var.softcap));
          z = var.softcap * kLog2e * tt;
          u = 1.f - tt * tt;
        }
        if constexpr ((kV & kAlibi) != 0) z -= slope_log2 * fabsf(float(r + diag - c));
        const float p = (kV & ~kWindow) == 0 ? exp2_ftz(fmaf(S[4 * nt + e], scale_log2, -(e & 1 ? l2.y : l2.x)))
                                             : exp2_ftz(z - (e & 1 ? l2.y : l2.x));
        P_e[e] = p;
        S[4 * nt + e] = (kV & kSoftcap) != 0 ? u : p;  // P_ijᵀ; the softcap keeps 1 − t_ij² here instead
      }
      if constexpr ((kV & kSoftcap) != 0) {  // and its P_ijᵀ goes straight into P_a
        P_a[nt / 2][2 * (nt % 2)] = pack2<T>(P_e[0], P_e[1]);
        P_a[nt / 2][2 * (nt % 2) + 1] = pack2<T>(P_e[2], P_e[3]);
      }
    }
    if constexpr ((kV & kSoftcap) == 0) {
#pragma unroll
      for (int kk = 0; kk < B_r / 16; ++kk) {
        P_a[kk][0] = pack2<T>(S[8 * kk + 0], S[8 * kk + 1]);
        P_a[kk][1] = pack2<T>(S[8 * kk + 2], S[8 * kk + 3]);
        P_a[kk][2] = pack2<T>(S[8 * kk + 4], S[8 * kk + 5]);
        P_a[kk][3] = pack2<T>(S[8 * kk + 6], S[8 * kk + 7]);
      }
    }
    // The mask, one branch for the whole tile (09d tested need_mask at each of its B_r / 2 elements: a
    // branch and its convergence barrier each, on every tile). Element S[4·nt + e] is the half e % 2
    // (the low one for e even, as pack2 puts it) of P_a[nt / 2][2·(nt % 2) + e / 2]; a masked one is
    // cleared to +0, the bits pack2 gives 0.f, so P_a is what 09d's p = 0 produced.
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < B_r / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = j0 + key0 + 8 * (e >> 1), r = i0 + 8 * nt + 2 * t + (e & 1);  // key, query row
          const bool out = (kV & kWindow) == 0
              ? c >= n.Nk || (n.causal && c > r + n.Nk - n.Nq)
              : c >= n.Nk || (var.right >= 0 && c > r + diag + var.right) || (var.left >= 0 && c < r + diag - var.left);
          if (out) P_a[nt / 2][2 * (nt % 2) + e / 2] &= e % 2 ? 0x0000ffffu : 0xffff0000u;
        }
    }
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < d / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dV_j[p * P / 2]), P_a[kk],
                            desc(s16, oO + p * B_r * P + 16 * kk * P, B_r * P * sz));
    wgmma::commit();

    // dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i), replacing P_ijᵀ in P_a once dV_j no longer reads it (as 09b).
    wgmma::wait<0>();
    wgmma::pin(dP);
    wgmma::pin(dV_j);
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int nt = 2 * kk + x / 2, r = x % 2;
        const float2 pp = unpack2<T>(P_a[kk][x]);
        const float2 dd = *reinterpret_cast<const float2*>(D_i + 8 * nt + 2 * t);
        float2 ds = make_float2(pp.x * (dP[4 * nt + 2 * r] - 0.5f * dd.x), pp.y * (dP[4 * nt + 2 * r + 1] - 0.5f * dd.y));
        if constexpr ((kV & kSoftcap) != 0) {  // dL/dS = dL/dz · (1 − t²) (· τ at the end)
          ds.x *= S[4 * nt + 2 * r];
          ds.y *= S[4 * nt + 2 * r + 1];
        }
        P_a[kk][x] = pack2<T>(ds.x, ds.y);
      }
    uint32_t (&dS_a)[B_r / 16][4] = P_a;
    // dS_ijᵀ → shared memory for dQ_i. Every consumer finished the previous iteration's dQ_i product
    // (the barrier at its end), so dS_s is free.
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x)
        store2(dS_s + at<B_c>(key0 + 8 * (x % 2), 16 * kk + 8 * (x / 2) + 2 * t), dS_a[kk][x]);
    wgmma::fence_proxy_async();  // the stores, visible to the tensor cores after the barrier below
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < d / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dK_j[p * P / 2]), dS_a[kk],
                            desc(s16, oQ + p * B_r * P + 16 * kk * P, B_r * P * sz));
    wgmma::commit();
    // The previous iteration's bulk add has read dQ_s (only its issuing thread can tell), so dQ_s may
    // be refilled below; and both consumers' dS_ijᵀ rows are in shared memory.
    if (tid == 0) tma::bulk_wait<0, true>();
    tma::named_sync(1, 256);

    // dQ_i = dS_ij K_j (as 09b), this consumer's m64n64 tile.
    const int qm = d == 64 ? 64 * wg : 0, qn = d == 64 ? 0 : 64 * wg;
    float dQ[P / 2];  // [n][2r + e] = (query row qm + 16·warp + g + 8r, column qn + 8n + 2t + e)
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_c / 16; ++kk)
      wgmma::mma_ss_tt<T, P>(dQ, desc(0, oS + qm / P * B_c * P + 16 * kk * P, B_c * P * sz),
                             desc(0, qn / P * B_c * P + 16 * kk * P, B_c * P * sz), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();  // dK_j and dQ_i are complete: stage s (Q_i, dO_i) is no longer read
    wgmma::pin(dQ);
    wgmma::pin(dK_j);
    __syncwarp();
    if (lane == 0) tma::arrive(&empty[s]);
    // dQ_i → shared memory in the accumulator's layout (16-byte writes side by side), then one bulk add.
#pragma unroll
    for (int x4 = 0; x4 < P / 8; ++x4)
      *reinterpret_cast<float4*>(dQ_s + (x4 * 256 + tid) * 4) =
          make_float4(dQ[4 * x4], dQ[4 * x4 + 1], dQ[4 * x4 + 2], dQ[4 * x4 + 3]);
    wgmma::fence_proxy_async();       // the writes, visible to the copy engine after the barrier
    tma::named_sync(2, 256);          // also: every consumer is done reading dS_s for this iteration
    if (tid == 0) {
      const int64_t qb = packed ? packed_block<B_r>(var, n.B, b, h, i) : int64_t(bh) * T_r + i;  // the workspace's Q_i
      float* dst = ws.dQ_acc + qb * (B_r * d);
      int* turn = ws.turn + qb;
      if (n.deterministic) {  // wait until the column blocks before this one have added theirs
        // The column blocks that meet Q_i are j_lo … J: j_lo holds Q_i's first visible key (0 without a
        // left edge), so block j's turn is the (j − j_lo)-th. Block j − 1 has the smaller blockIdx: it is
        // running or done, never waiting on j.
        const int j_lo = (kV & kWindow) == 0 || var.left < 0 ? 0 : max(0, i0 + diag - var.left) / B_c;
        int seen;
        do {
          asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
        } while (seen != j - j_lo);
        tma::fence_proxy_async_global();  // the adds before ours (async proxy) are ordered before ours
      }
      tma::reduce_add_1d(dst, dQ_s, B_r * d * sizeof(float));
      tma::bulk_commit();
      if (n.deterministic) {  // our add has landed before the next block's turn starts
        tma::bulk_wait<0, false>();
        tma::fence_proxy_async_global();
        asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(turn) : "memory");
      }
    }
  }
  if (tid == 0) tma::bulk_wait<0, false>();  // no bulk add outlives the block (nor reads freed shared memory)

  // ---- Epilogue: dK_j = τ · Σ dS_ijᵀ Q_i and dV_j → device memory, keys past Nk never stored (as 09b).
  // (seqused_k: the keys past the used ones up to the rows held, n_k, are stored: their rows are 0.)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int c = j0 + key0 + 8 * r;
    if (c < n_k) {
      const int64_t row = kv_row(c) + 2 * t;
#pragma unroll
      for (int nt = 0; nt < d / 8; ++nt) {
        store2(dK + row + 8 * nt, pack2<T>(n.scale * dK_j[4 * nt + 2 * r], n.scale * dK_j[4 * nt + 2 * r + 1]));
        store2(dV + row + 8 * nt, pack2<T>(dV_j[4 * nt + 2 * r], dV_j[4 * nt + 2 * r + 1]));
      }
    }
  }
#endif
}

// ==== Backward 3 of 3: dQ = τ · (fp32 accumulator), back in [B][H][Nq][d] order, rounded to T =======
// Packed: back in [total_q][H][d] order, the same walk as kernel 1's.
template <class T, int d, bool kPacked>
__global__ void convert_dq_kernel(Workspace<d> ws, T* __restrict__ dq, int64_t bh_count, int Nq, float scale,
                                  int H, VariantArgs var) {
  constexpr int B_r = Bwd<d>::B_r;
  const int T_r = ceil_div(Nq, B_r);
  const int64_t pairs = bh_count * T_r * (B_r * d / 2);  // one thread: the two floats x, x + 1 (x even)
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t blk = k / (B_r * d / 2), bh = blk / T_r;
    const int i = int(blk % T_r), e = int(k % (B_r * d / 2)) * 2;  // e: float offset within the block
    const int c = e / 4 % 256, x = e / 1024 * 4 + e % 4;             // consumer thread, fragment index
    int row, col;
    dq_element<d>(c, x, row, col);  // x and x + 1: the same row, columns col and col + 1
    row += i * B_r;
    int b = 0, h = 0, q_tok = 0, n_q = Nq;  // packed: row `row` of sequence b, head h is token q_tok + row
    if constexpr (kPacked) {
      b = int(bh / H), h = int(bh % H), q_tok = var.cu_q[b];
      n_q = var.cu_q[b + 1] - q_tok;
    }
    if (row < n_q) {
      const int64_t w_blk = kPacked ? packed_block<B_r>(var, int(bh_count / H), b, h, i) : blk;  // the workspace's
      const float2 f = *reinterpret_cast<const float2*>(ws.dQ_acc + w_blk * (B_r * d) + e);
      store2(dq + (kPacked ? (int64_t(q_tok) + row) * H + h : bh * Nq + row) * d + col, pack2<T>(scale * f.x, scale * f.y));
    }
  }
}

// ==== The step's interface ========================================================================
size_t workspace_bytes(const Problem& p) { return s08j::impl.workspace_bytes(p); }
void forward(const Problem& p, const ForwardArgs& a) { s08j::impl.forward(p, a); }

std::string limits(const Problem& p) {
  const std::string fwd = s08j::impl.limits(p);
  if (!fwd.empty()) return fwd;
  const int64_t kMaxRows = int64_t(1) << 29;  // int row indices; r + Nk − Nq must not overflow
  if (p.Nq > kMaxRows || p.Nk > kMaxRows)
    return "supports Nq, Nk up to 2^29 (its row indices are int); Nq = " +
           std::to_string(p.Nq) + ", Nk = " + std::to_string(p.Nk);
  const int64_t bwd_blocks = ceil_div<int64_t>(p.Nk, 128) * p.B * p.H_kv;
  if (bwd_blocks > INT_MAX || p.B * p.H * ceil_div<int64_t>(p.Nq, 64) > INT_MAX)
    return "launches one block per (K/V block of 128, batch, K/V head) and counts "
           "(batch, head, Q block) triples in int: this problem needs more than 2^31 − 1";
  if (p.varlen() && p.H * (p.total_q() / 64 + p.B) > INT_MAX)
    return "numbers the Q blocks of its packed workspace (H · (total_q / 64 + B)) in int: " +
           std::to_string(p.H * (p.total_q() / 64 + p.B)) + " is over 2^31 − 1";
  if (p.group() * ceil_div<int64_t>(p.Nq, 64) > kMaxRows)
    return "walks (query head, Q block) pairs with an int counter; H/H_kv · Nq/64 = " +
           std::to_string(p.group() * ceil_div<int64_t>(p.Nq, 64)) + " is over 2^29";
  return "";
}

size_t backward_workspace_bytes(const Problem& p) {
  return p.d <= 64 ? Workspace<64>::bytes(p) : Workspace<128>::bytes(p);
}

template <class T, int d>
void launch_backward(const Problem& p, const BackwardArgs& a) {
  using C = Bwd<d>;
  cudaStream_t s = static_cast<cudaStream_t>(a.stream);
  const std::pair<const void*, const char*> ptrs[] = {{a.o, "O"},   {a.dO, "dO"}, {a.dq, "dQ"},
                                                      {a.dk, "dK"}, {a.dv, "dV"}, {a.workspace, "the workspace"}};
  for (const auto& [ptr, name] : ptrs) check_aligned(ptr, name);  // (Q, K, V: the tensor maps check theirs)
  const Workspace<d> ws(p, a.workspace);
  const int64_t bh = p.B * p.H, T_r = ceil_div<int64_t>(p.Nq, C::B_r);  // packed: Nq is the longest sequence
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const bool vl = p.varlen();
  const VariantArgs var = VariantArgs::of(p, a.alibi_slopes, a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k);
  // 1: D, the padded L·log2 e and D, zeroes.
  const int64_t prows = bh * T_r * C::B_r;
  const unsigned prep_blocks = unsigned(std::min<int64_t>(ceil_div<int64_t>(prows, kRowWarps), 1 << 20));
  (vl ? prepare_kernel<T, d, true> : prepare_kernel<T, d, false>)<<<prep_blocks, 32 * kRowWarps, 0, s>>>(
      static_cast<const T*>(a.o), static_cast<const T*>(a.dO), a.lse, ws, bh, int(p.Nq), int(p.H), var);
  FL_CUDA(cudaGetLastError());
  // 2: the main kernel, reading Q, dO as [B·H][Nq][d] and K, V as [B·H_kv][Nk][d] through tensor maps;
  // packed, as 08j's: H slices d apart of total_q rows H·d apart (K, V: H_kv, total_k).
  const CUtensorMap tm_Q = tma::make_tensor_map(a.q, bf16, vl ? p.H : bh, vl ? p.total_q() : p.Nq, d, C::B_r, "Q",
                                                p.q_stride(), vl ? d : 0);
  const CUtensorMap tm_dO = tma::make_tensor_map(a.dO, bf16, vl ? p.H : bh, vl ? p.total_q() : p.Nq, d, C::B_r, "dO",
                                                 p.q_stride(), vl ? d : 0);
  const CUtensorMap tm_K = tma::make_tensor_map(a.k, bf16, vl ? p.H_kv : p.B * p.H_kv, vl ? p.total_k() : p.Nk, d,
                                                C::B_c, "K", p.kv_stride(), vl ? d : 0);
  const CUtensorMap tm_V = tma::make_tensor_map(a.v, bf16, vl ? p.H_kv : p.B * p.H_kv, vl ? p.total_k() : p.Nk, d,
                                                C::B_c, "V", p.kv_stride(), vl ? d : 0);
  const int64_t q_blocks = Workspace<d>::blocks(p);
  const CUtensorMap tm_L2 = tma::make_row_map(ws.L2, q_blocks, C::B_r, "L·log2 e");  // [Q blocks][B_r]
  const CUtensorMap tm_D = tma::make_row_map(ws.D, q_blocks, C::B_r, "D");
  const unsigned blocks = unsigned(ceil_div<int64_t>(p.Nk, C::B_c) * p.B * p.H_kv);
  auto run = [&](auto kv_) {  // the kernel instantiated for the problem's variant bits (plain: 09c's)
    auto kernel = backward_kernel<T, d, decltype(kv_)::value>;
    allow_smem(kernel, C::smem_bytes);
    kernel<<<blocks, C::kThreads, C::smem_bytes, s>>>(tm_Q, tm_dO, tm_K, tm_V, tm_L2, tm_D, ws, static_cast<T*>(a.dk),
                                                       static_cast<T*>(a.dv), dims_of(p), var);
  };
  auto with_len = [&](auto kv_) {  // varlen or seqused_k: the kVarlen bit (08j's)
    if (VariantArgs::per_sequence(p)) run(std::integral_constant<int, decltype(kv_)::value | kVarlen>{});
    else run(kv_);
  };
  // The plain problem (causal or not) runs the kernel without the window's rule: 09c's. Every other
  // problem runs one with the kWindow bit, whatever its window (the rule reduces to causal's and to none).
  if (VariantArgs::bits(p) == 0 && !p.windowed() && !VariantArgs::per_sequence(p)) {
    run(std::integral_constant<int, 0>{});
  } else {
    switch (VariantArgs::bits(p)) {
      case 0: with_len(std::integral_constant<int, kWindow>{}); break;
      case kSoftcap: with_len(std::integral_constant<int, kWindow | kSoftcap>{}); break;
      case kAlibi: with_len(std::integral_constant<int, kWindow | kAlibi>{}); break;
      default: with_len(std::integral_constant<int, kWindow | kSoftcap | kAlibi>{}); break;
    }
  }
  FL_CUDA(cudaGetLastError());
  // 3: dQ.
  const int64_t pairs = bh * T_r * (C::B_r * d / 2);
  const unsigned conv_blocks = unsigned(std::min<int64_t>(ceil_div<int64_t>(pairs, 256), 1 << 20));
  (vl ? convert_dq_kernel<T, d, true> : convert_dq_kernel<T, d, false>)<<<conv_blocks, 256, 0, s>>>(
      ws, static_cast<T*>(a.dq), bh, int(p.Nq), float(p.softmax_scale()), int(p.H), var);
  FL_CUDA(cudaGetLastError());
}

void backward(const Problem& p, const BackwardArgs& a) {
  dispatch<WgmmaBwdD>(p, [&](auto T_, auto d_) { launch_backward<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, backward_workspace_bytes, backward};

}  // namespace fl::s09e

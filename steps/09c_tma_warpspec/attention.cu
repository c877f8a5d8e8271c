// flashladder — step 09c: step 09b's backward with a TMA producer, warp-specialised consumers, and dQ
// added to device memory by the copy engine, with an optional deterministic order.
//
// 09b's main kernel has two warpgroups that do everything: each iteration they issue cp.async copies of
// the next Q_i, dO_i, load L_i, D_i into registers, stop at two __syncthreads, and add dQ_i into device
// memory with 16 float2 atomics per thread (4096 per iteration at d = 128). FlashAttention-3's backward
// (Shah et al. 2024, §3 and its appendix B "backward pass") does it as the forward rungs 08h and 08i do:
//   - a producer warpgroup, one thread of which loads Q_i and dO_i by TMA (tensor maps, 128-byte
//     swizzle, rows past Nq zero-filled), and L_i·log2 e and D_i by TMA too (one row of a 2-D map each),
//     into a ring of kStages stages guarded by mbarriers; K_j, V_j once, at the start;
//   - two consumer warpgroups that only compute 09b's five products and hold dK_j, dV_j in registers
//     (setmaxnreg: 24 for the producer, 240 for each consumer);
//   - dQ_i: each consumer writes its fp32 part of dQ_i to shared memory, and one thread hands the whole
//     [B_r][d] block to the copy engine in a single cp.reduce.async.bulk .add.f32, which adds it into
//     the fp32 accumulator in device memory (in the L2) while the consumers go on. The accumulator is
//     laid out as the threads hold it (below), so the block is one contiguous run of bytes and each
//     thread's shared-memory writes are 16-byte, conflict-free; kernel 3 puts it back in [Nq][d] order.
//   - Deterministic mode (Problem::deterministic): the column blocks add into a Q block's dQ in a
//     fixed order, j = 0, 1, 2, …: a per-(batch, head, Q block) counter in device memory says whose
//     turn it is, and a block waits for its turn before its bulk add and advances the counter after the
//     add has landed (FA3's semaphore). Atomic floating-point adds in any order are the only source of
//     run-to-run differences in this backward, so dQ, dK, dV are then bitwise reproducible.
// The mathematics is 09b's line for line (FA2 Algorithm 2; the dP accumulator started at −D_i/2).
// The kernels before and after the main one: 1 computes D_i = rowsum(dO_i ∘ O_i) and writes L_i·log2 e
// and D_i padded to whole Q blocks (rows past Nq: L = +∞, so P = 0; D = 0), so that a Q block's L and
// D are whole runs of B_r floats read with no test; it also zeroes the accumulator and the counters.
// 3 converts the accumulator to dQ. The forward is step 08i's, reused (the backward reads its O and L).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "steps/backward.cuh"
#include "steps/device/tma.cuh"
#include "steps/device/wgmma.cuh"

namespace fl::s08i { extern const StepImpl impl; }  // the forward this backward reads O and L from

namespace fl::s09c {

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

/// The workspace, in order: the dQ accumulator [B·H][T_r][B_r·d] fp32, L·log2 e and D padded
/// [B·H][T_r·B_r] fp32 each, the turn counters [B·H][T_r] int.
template <int d>
struct Workspace {
  float* dQ_acc;
  float* L2;
  float* D;
  int* turn;
  Workspace(const Problem& p, void* base) {
    const int64_t T_r = ceil_div<int64_t>(p.Nq, Bwd<d>::B_r), rows = p.B * p.H * T_r * Bwd<d>::B_r;
    dQ_acc = static_cast<float*>(base);
    L2 = dQ_acc + rows * d;
    D = L2 + rows;
    turn = reinterpret_cast<int*>(D + rows);
  }
  static size_t bytes(const Problem& p) {
    const int64_t T_r = ceil_div<int64_t>(p.Nq, Bwd<d>::B_r), rows = p.B * p.H * T_r * Bwd<d>::B_r;
    return sizeof(float) * size_t(rows * d + 2 * rows) + sizeof(int) * size_t(p.B * p.H * T_r);
  }
};

// ==== Backward 1 of 3: D = rowsum(dO ∘ O); L·log2 e and D padded to whole Q blocks; zeroes ========
// One warp per padded row (09b's kernel 1, which read L in the main kernel instead).
constexpr int kRowWarps = 8;

template <class T, int d>
__global__ void __launch_bounds__(32 * kRowWarps)
prepare_kernel(const T* __restrict__ o, const T* __restrict__ dO, const float* __restrict__ lse,
               Workspace<d> ws, int64_t bh_count, int Nq) {
  constexpr int B_r = Bwd<d>::B_r;
  const int lane = threadIdx.x % 32;
  const int T_r = ceil_div(Nq, B_r);
  const int64_t rows = bh_count * T_r * B_r;  // padded rows
  for (int64_t prow = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; prow < rows;
       prow += int64_t(gridDim.x) * kRowWarps) {  // the same trip count for the 32 lanes of a warp
    const int64_t bh = prow / (int64_t(T_r) * B_r);
    const int r = int(prow % (int64_t(T_r) * B_r));  // row within the (batch, head)
    float sum = 0.f;
    if (r < Nq) {
      const T* o_r = o + (bh * Nq + r) * d;    // O row  [d]
      const T* do_r = dO + (bh * Nq + r) * d;  // dO row [d]
      for (int c = 2 * lane; c < d; c += 64) {
        const float2 x = unpack2<T>(*reinterpret_cast<const uint32_t*>(o_r + c));
        const float2 y = unpack2<T>(*reinterpret_cast<const uint32_t*>(do_r + c));
        sum += x.x * y.x + x.y * y.y;
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    if (lane == 0) {
      ws.D[prow] = sum;  // 0 past Nq
      ws.L2[prow] = r < Nq ? lse[bh * Nq + r] * kLog2e : INFINITY;  // past Nq: P = exp2(· − ∞) = 0
    }
    float4* acc = reinterpret_cast<float4*>(ws.dQ_acc + prow * d);  // one padded row's worth [d]
    for (int c = lane; c < d / 4; c += 32) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (lane == 0 && r % B_r == 0) ws.turn[prow / B_r] = 0;  // one counter per Q block
  }
}

// ==== Backward 2 of 3: the main loop, one thread block per (K_j/V_j, batch, K/V head) ==============
// 09b's products, per consumer warpgroup w (keys 64w … 64w + 63 of K_j):
//   S_ijᵀ = K_j Q_iᵀ,  dP_ijᵀ − D_i/2 = V_j dO_iᵀ − D_i/2        (shared-memory operands)
//   P_ijᵀ = exp2(S_ijᵀ·τ log2 e − L_i log2 e),  dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i)   (registers)
//   dV_j += P_ijᵀ dO_i,  dK_j += dS_ijᵀ Q_i                        (A from registers)
//   dQ_i = dS_ij K_j                                             (dS_ijᵀ through shared memory)
// 09b's README explains the turned products and the −D_i/2 start.
template <class T, int d>
__global__ void __launch_bounds__(Bwd<d>::kThreads, 1)
backward_kernel(const __grid_constant__ CUtensorMap tm_Q, const __grid_constant__ CUtensorMap tm_dO,
                const __grid_constant__ CUtensorMap tm_K, const __grid_constant__ CUtensorMap tm_V,
                const __grid_constant__ CUtensorMap tm_L2, const __grid_constant__ CUtensorMap tm_D,
                Workspace<d> ws, T* __restrict__ dK, T* __restrict__ dV, Dims n) {
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
  const int i_first = n.causal ? max(0, j0 + n.Nq - n.Nk) / B_r : 0;  // Q blocks before it see none of K_j
  const int n_i = T_r - i_first;
  const int n_iter = n.group * n_i;
  // The Q blocks run from the last down (09b: from i_first up). Every column block then starts on Q
  // block T_r − 1, which all of them meet, so in the deterministic mode the turns at one Q block
  // follow each other one bulk add apart; upward, block j's first Q block (i_first(j), near the
  // diagonal) would wait for blocks 0 … j − 1 to work up to it: 110 against 236 TFLOP/s at N = 2048,
  // d = 64, causal (H200, docs/results/2026-11-23-h200-09c-first.md).
  auto q_block = [&](int it, int& h, int& i) {
    h = h_kv * n.group + it / n_i;
    i = T_r - 1 - it % n_i;
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
        tma::load_3d(K_s + p * B_c * P, &tm_K, p * P, j0, bk, full_KV);
        tma::load_3d(V_s + p * B_c * P, &tm_V, p * P, j0, bk, full_KV);
      }
      for (int it = 0; it < n_iter; ++it) {
        const int s = it % kStages;
        int h, i;
        q_block(it, h, i);
        const int bh = b * n.H + h;
        const int qb = bh * T_r + i;  // Q_i's row of the padded L·log2 e and D
        tma::wait(&empty[s], (it / kStages & 1) ^ 1);
        tma::arrive_expect_tx(&full_Q[s], B_r * d * sizeof(T) + B_r * sizeof(float));
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(Q_buf + s * B_r * d + p * B_r * P, &tm_Q, p * P, i * B_r, bh, &full_Q[s]);
        tma::load_2d(L2_buf + s * B_r, &tm_L2, 0, qb, &full_Q[s]);
        tma::arrive_expect_tx(&full_dO[s], B_r * d * sizeof(T) + B_r * sizeof(float));
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(dO_buf + s * B_r * d + p * B_r * P, &tm_dO, p * P, i * B_r, bh, &full_dO[s]);
        tma::load_2d(D_buf + s * B_r, &tm_D, 0, qb, &full_dO[s]);
      }
    }
    return;
  }

  // ---- Consumers ---------------------------------------------------------------------------------
  tma::regs_inc<C::kConsumerRegs>();
  const int tid = threadIdx.x - 128;  // 0 … 255 among the consumers
  const int wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const float scale_log2 = n.scale * kLog2e;
  const int key0 = 64 * wg + 16 * warp + g;  // this thread's keys in the accumulators: key0 + 8r

  float dK_j[d / 2], dV_j[d / 2];  // the warpgroup's [64 keys][d]: [n][2r + e] = (key_r, 8n + 2t + e)
#pragma unroll
  for (int x = 0; x < d / 2; ++x) dK_j[x] = dV_j[x] = 0.f;
  tma::wait(full_KV, 0);

  for (int it = 0; it < n_iter; ++it) {
    const int s = it % kStages;
    const uint32_t parity = it / kStages & 1;
    int h, i;
    q_block(it, h, i);
    const int bh = b * n.H + h, i0 = i * B_r;
    const T* Q_i = Q_buf + s * B_r * d;
    const T* dO_i = dO_buf + s * B_r * d;
    const float* L2_i = L2_buf + s * B_r;
    const float* D_i = D_buf + s * B_r;

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
      wgmma::mma_ss<T, B_r>(S, wgmma::desc<P>(K_s + 16 * kk / P * B_c * P + 64 * wg * P + 16 * kk % P, 16),
                            wgmma::desc<P>(Q_i + 16 * kk / P * B_r * P + 16 * kk % P, 16), kk > 0);
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk)
      wgmma::mma_ss<T, B_r>(dP, wgmma::desc<P>(V_s + 16 * kk / P * B_c * P + 64 * wg * P + 16 * kk % P, 16),
                            wgmma::desc<P>(dO_i + 16 * kk / P * B_r * P + 16 * kk % P, 16), true);
    wgmma::commit();

    // P_ijᵀ, while dP_ijᵀ is still being multiplied; masked where a key is past Nk or invisible.
    // Rows past Nq have L = +∞ (kernel 1): P = 0 there without a test.
    wgmma::wait<1>();
    wgmma::pin(S);
    const bool need_mask = j0 + B_c > n.Nk || (n.causal && j0 + B_c - 1 > i0 + n.Nk - n.Nq);
#pragma unroll
    for (int nt = 0; nt < B_r / 8; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(L2_i + 8 * nt + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2_ftz(fmaf(S[4 * nt + e], scale_log2, -(e & 1 ? l2.y : l2.x)));
        if (need_mask) {
          const int c = j0 + key0 + 8 * (e >> 1), r = i0 + 8 * nt + 2 * t + (e & 1);
          if (c >= n.Nk || (n.causal && c > r + n.Nk - n.Nq)) p = 0.f;
        }
        S[4 * nt + e] = p;  // now P_ijᵀ
      }
    }
    uint32_t P_a[B_r / 16][4];  // P_ijᵀ as dV_j's A operand (as 09b)
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk) {
      P_a[kk][0] = pack2<T>(S[8 * kk + 0], S[8 * kk + 1]);
      P_a[kk][1] = pack2<T>(S[8 * kk + 2], S[8 * kk + 3]);
      P_a[kk][2] = pack2<T>(S[8 * kk + 4], S[8 * kk + 5]);
      P_a[kk][3] = pack2<T>(S[8 * kk + 6], S[8 * kk + 7]);
    }
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < d / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dV_j[p * P / 2]), P_a[kk],
                            wgmma::desc<P>(dO_i + p * B_r * P + 16 * kk * P, B_r * P * sizeof(T)));
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
        P_a[kk][x] = pack2<T>(pp.x * (dP[4 * nt + 2 * r] - 0.5f * dd.x), pp.y * (dP[4 * nt + 2 * r + 1] - 0.5f * dd.y));
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
                            wgmma::desc<P>(Q_i + p * B_r * P + 16 * kk * P, B_r * P * sizeof(T)));
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
      wgmma::mma_ss_tt<T, P>(dQ, wgmma::desc<P>(dS_s + qm / P * B_c * P + 16 * kk * P, B_c * P * sizeof(T)),
                             wgmma::desc<P>(K_s + qn / P * B_c * P + 16 * kk * P, B_c * P * sizeof(T)), kk > 0);
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
      float* dst = ws.dQ_acc + (int64_t(bh) * T_r + i) * (B_r * d);
      int* turn = ws.turn + int64_t(bh) * T_r + i;
      if (n.deterministic) {  // wait until the column blocks before this one have added theirs
        // The column blocks that meet Q_i are j = 0 … J (causal: i_first grows with j), so block j's
        // turn is the j-th. Block j − 1 has the smaller blockIdx: it is running or done, never waiting on j.
        int seen;
        do {
          asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
        } while (seen != j);
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
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int c = j0 + key0 + 8 * r;
    if (c < n.Nk) {
      const int64_t row = (int64_t(bk) * n.Nk + c) * d + 2 * t;
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
template <class T, int d>
__global__ void convert_dq_kernel(Workspace<d> ws, T* __restrict__ dq, int64_t bh_count, int Nq, float scale) {
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
    if (row < Nq) {
      const float2 f = *reinterpret_cast<const float2*>(ws.dQ_acc + blk * (B_r * d) + e);
      store2(dq + (bh * Nq + row) * d + col, pack2<T>(scale * f.x, scale * f.y));
    }
  }
}

// ==== The step's interface ========================================================================
size_t workspace_bytes(const Problem& p) { return s08i::impl.workspace_bytes(p); }
void forward(const Problem& p, const ForwardArgs& a) { s08i::impl.forward(p, a); }

std::string limits(const Problem& p) {
  const std::string fwd = s08i::impl.limits(p);
  if (!fwd.empty()) return fwd;
  const int64_t kMaxRows = int64_t(1) << 29;  // int row indices; r + Nk − Nq must not overflow
  if (p.Nq > kMaxRows || p.Nk > kMaxRows)
    return "supports Nq, Nk up to 2^29 (its row indices are int); Nq = " +
           std::to_string(p.Nq) + ", Nk = " + std::to_string(p.Nk);
  const int64_t bwd_blocks = ceil_div<int64_t>(p.Nk, 128) * p.B * p.H_kv;
  if (bwd_blocks > INT_MAX || p.B * p.H * ceil_div<int64_t>(p.Nq, 64) > INT_MAX)
    return "launches one block per (K/V block of 128, batch, K/V head) and counts "
           "(batch, head, Q block) triples in int: this problem needs more than 2^31 − 1";
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
  const int64_t bh = p.B * p.H, T_r = ceil_div<int64_t>(p.Nq, C::B_r);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // 1: D, the padded L·log2 e and D, zeroes.
  const int64_t prows = bh * T_r * C::B_r;
  prepare_kernel<T, d><<<unsigned(std::min<int64_t>(ceil_div<int64_t>(prows, kRowWarps), 1 << 20)), 32 * kRowWarps, 0, s>>>(
      static_cast<const T*>(a.o), static_cast<const T*>(a.dO), a.lse, ws, bh, int(p.Nq));
  FL_CUDA(cudaGetLastError());
  // 2: the main kernel, reading Q, dO as [B·H][Nq][d] and K, V as [B·H_kv][Nk][d] through tensor maps.
  const CUtensorMap tm_Q = tma::make_tensor_map(a.q, bf16, bh, p.Nq, d, C::B_r, "Q");
  const CUtensorMap tm_dO = tma::make_tensor_map(a.dO, bf16, bh, p.Nq, d, C::B_r, "dO");
  const CUtensorMap tm_K = tma::make_tensor_map(a.k, bf16, p.B * p.H_kv, p.Nk, d, C::B_c, "K");
  const CUtensorMap tm_V = tma::make_tensor_map(a.v, bf16, p.B * p.H_kv, p.Nk, d, C::B_c, "V");
  const CUtensorMap tm_L2 = tma::make_row_map(ws.L2, bh * T_r, C::B_r, "L·log2 e");  // [B·H·T_r][B_r]
  const CUtensorMap tm_D = tma::make_row_map(ws.D, bh * T_r, C::B_r, "D");
  auto kernel = backward_kernel<T, d>;
  allow_smem(kernel, C::smem_bytes);
  const unsigned blocks = unsigned(ceil_div<int64_t>(p.Nk, C::B_c) * p.B * p.H_kv);
  kernel<<<blocks, C::kThreads, C::smem_bytes, s>>>(tm_Q, tm_dO, tm_K, tm_V, tm_L2, tm_D, ws, static_cast<T*>(a.dk),
                                                     static_cast<T*>(a.dv), dims_of(p));
  FL_CUDA(cudaGetLastError());
  // 3: dQ.
  const int64_t pairs = bh * T_r * (C::B_r * d / 2);
  convert_dq_kernel<T, d><<<unsigned(std::min<int64_t>(ceil_div<int64_t>(pairs, 256), 1 << 20)), 256, 0, s>>>(
      ws, static_cast<T*>(a.dq), bh, int(p.Nq), float(p.softmax_scale()));
  FL_CUDA(cudaGetLastError());
}

void backward(const Problem& p, const BackwardArgs& a) {
  dispatch<WgmmaBwdD>(p, [&](auto T_, auto d_) { launch_backward<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, backward_workspace_bytes, backward};

}  // namespace fl::s09c

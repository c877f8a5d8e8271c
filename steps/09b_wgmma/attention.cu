// flashladder — step 09b: step 09's backward with its main kernel on Hopper's wgmma.
//
// Everything but kernel 2 is step 09's, unchanged and shared (steps/backward.cuh): D_i = rowsum(dO_i ∘
// O_i) first, dQ summed in fp32 with atomics and converted at the end; the forward is step 09's (08d's).
// Kernel 2 keeps FA2's Algorithm 2 (one thread block per K_j/V_j column block, walking the Q blocks,
// dK_j and dV_j on chip) and moves its five products from mma.sync to wgmma, as step 08e did for the
// forward. The section "Backward 2 of 3" below says how the products are turned so that P_ijᵀ and
// dS_ijᵀ are wgmma operands as they come out of the accumulators.
//
// Why: step 09 reached 0.82–0.96 of PyTorch's FlashAttention-2 backward at N ≥ 4096 on the H200
// (docs/results/2026-11-22-h200-run8-torch.*): with mma.sync every operand passes through ldmatrix
// and the register file, and P_ij and dS_ij make a round trip through shared memory each.
//
// Fragment names, as in steps/device/mma.cuh: lane = 4·g + t; a thread holds rows g and g + 8 of each 16-row
// m-tile, and columns 2t, 2t + 1 of each 8-column n-tile. acc[mt][nt][e]: e = 0, 1 row g, e = 2, 3
// row g + 8; e & 1 the column 2t + (e & 1). A wgmma m64nN accumulator is, per warp of the warpgroup,
// N/8 such tiles side by side (steps/device/wgmma.cuh).
#include "steps/backward.cuh"
#include "steps/device/wgmma.cuh"

namespace fl::s09 { extern const StepImpl impl; }  // the forward this step runs: its base's

namespace fl::s09b {

using namespace fl::mma;
using namespace fl::bwd;

// ==== Backward 2 of 3: the main loop on wgmma, one thread block per (K_j/V_j, batch, K/V head) =====
// Step 09 gives each of the five products its own warp grid and feeds mma.sync through ldmatrix; P_ij
// and dS_ij cross warps through shared memory, and their transposes come from ldmatrix.trans. Here two
// warpgroups (8 warps) share the block, and warpgroup w owns keys 64w … 64w + 63 of K_j. The products
// are turned so that each one's A operand is already where wgmma wants it:
//
//   S_ijᵀ  = K_j Q_iᵀ       [64 keys][B_r]  A = K_j, B = Q_i: both shared memory, K-major (as 08e's S)
//   dP_ijᵀ = V_j dO_iᵀ      [64 keys][B_r]  A = V_j, B = dO_i: the same
//   P_ijᵀ  = exp(scale·S_ijᵀ − L_i), dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i)        in registers, per column
//   dV_j  += P_ijᵀ dO_i     [64 keys][d]    A = P_ijᵀ from registers (the accumulator, rounded in
//                                           pairs: 08e's P̃ trick), B = dO_i MN-major
//   dK_j  += dS_ijᵀ Q_i     [64 keys][d]    A = dS_ijᵀ from registers, B = Q_i MN-major
//   dQ_i   = dS_ij K_j      [B_r][d]        A = dS_ijᵀ stored to shared memory and read transposed
//                                           (MN-major), B = K_j MN-major; summed into device memory
//                                           with vector atomics, as in step 09
//
// Because a warpgroup computes S_ijᵀ rather than S_ij, the rows of the accumulator are keys and its
// columns are query rows: P_ijᵀ is the A operand of dV_j as it stands, and so is dS_ijᵀ for dK_j. Only
// dQ_i needs dS_ij the other way round, which wgmma reads from shared memory transposed: one store of
// dS_ijᵀ per iteration, where step 09 stores both P_ij and dS_ij and reads each back with ldmatrix.
// Every operand in shared memory is in 08e's swizzled panels of 64 columns (128-byte rows), and the
// same panel of Q_i serves as K-major B (for S_ijᵀ, K = d contiguous) and as MN-major B (for dK_j,
// N = d contiguous): no second copy.
//
// Tiles: B_c = 128 keys (2 warpgroups × 64). B_r = 128 query rows at d = 64 and 64 at d = 128, as in
// step 09 (FlashAttention-2's own choice): registers per thread for the accumulators S_ijᵀ, dP_ijᵀ
// (B_r/2 each), dK_j and dV_j (d/2 each) are 192 at either d, under the 255 a thread can have.
//
// A note on accuracy: dS_ij = P_ij ∘ (dP_ij − D_i) subtracts two nearly equal numbers wherever P_ij is
// large (with one key, dP_ij = D_i exactly). The tensor cores' fp32 accumulation is not IEEE: each
// k-step's sum is cut toward zero, not rounded, so an accumulator that grows from 0 to dP_ij ≈ D_i
// (≈ 32 with the tests' Normal(0.5, 1) inputs) errs by a few ulps of 32, always in the same direction;
// dK_j = τ Σ_i dS_ij Q_i then adds that bias over every row. The test that caught it (Ragged backward,
// Nq = 17, Nk = 1, d = 128, fp16, Q × 20: dK is exactly 0, so the tolerance is the fp16 floor 4.9e-4)
// used 270% of its tolerance with the accumulator started at 0. Started at −D_i it used 151%; started
// at −D_i/2, so that it runs from −D_i/2 to about +D_i/2 and the cuts toward zero fall on both sides,
// 57%, and the last subtraction, dP − D_i/2 with both near D_i/2, is exact (H200, docs/results/
// explorations/2026-11-22-h200-run13-15-09b-dP-accuracy.txt). Step 09 subtracts D_i after its mma.sync
// sums, as FlashAttention-2 does.
template <int d>
struct Bwd {
  static constexpr int B_c = 128, B_r = d <= 64 ? 128 : 64;
  static constexpr int kWarpgroups = 2, kThreads = 128 * kWarpgroups;
  static constexpr int P = 64;  // panel width (columns of 128 bytes)
  // The dQ_i product, [B_r][d], one wgmma m64n64 per warpgroup: at d = 64 warpgroup w takes rows
  // 64w.. (all 64 columns), at d = 128 the 64 rows and columns 64w.. .
  static_assert(B_r * d == 2 * 64 * 64, "dQ_i is two m64n64 tiles, one per warpgroup");
  // K_j, V_j [B_c][d]; Q_i, dO_i [2][B_r][d] (double buffer); dS_ijᵀ [B_c][B_r]: 16-bit, swizzled
  // panels; L_i·log2 e and D_i [2][B_r] fp32; +1024 bytes to align the panels.
  static constexpr int smem_bytes = (2 * B_c * d + 4 * B_r * d + B_c * B_r) * 2 + 4 * B_r * 4 + 1024;
};

// Offset of element (row, col) of a [ROWS][COLS] 16-bit tile stored as COLS/64 panels [ROWS][64],
// the 16-byte chunk c of a panel row at chunk c ^ (row % 8): 08e's layout (128-byte swizzle).
template <int ROWS>
__device__ __forceinline__ int at(int row, int col) {
  return col / 64 * ROWS * 64 + row * 64 + ((col % 64 / 8) ^ (row % 8)) * 8 + col % 8;
}

// Rows [0, ROWS) of a [rows][d] block in device memory → a [ROWS][d] panel tile (cp.async, 16 bytes
// a copy, not waited for). Rows at or past `valid` are zero-filled; their source is the block's first
// row, which exists.
template <int ROWS, int d, int kThreads, class T>
__device__ __forceinline__ void load_panels(T* tile, const T* block, int valid, int tid) {
  constexpr int kChunks = d / 8;
  static_assert(ROWS * kChunks % kThreads == 0, "every thread moves the same number of chunks");
#pragma unroll 4
  for (int step = 0; step < ROWS * kChunks / kThreads; ++step) {
    const int idx = step * kThreads + tid;
    const int row = idx / kChunks, col = idx % kChunks * 8;
    const bool ok = row < valid;
    cp_async_16(tile + at<ROWS>(row, col), block + (ok ? int64_t(row) * d + col : 0), ok);
  }
}

template <class T, int d>
__global__ void __launch_bounds__(Bwd<d>::kThreads, 1)
backward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                const T* __restrict__ dO, const float* __restrict__ L, const float* __restrict__ D,
                float* __restrict__ dQ_acc, T* __restrict__ dK, T* __restrict__ dV, Dims n) {
  using C = Bwd<d>;
  constexpr int B_r = C::B_r, B_c = C::B_c, kThreads = C::kThreads, P = C::P;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // wgmma's swizzle is applied to address bits: every panel starts on a 1024-byte boundary.
  unsigned char* smem = smem_raw + (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* K_s = reinterpret_cast<T*>(smem);  // K_j:    d/64 panels [B_c][64]
  T* V_s = K_s + B_c * d;              // V_j:    d/64 panels [B_c][64]
  T* Q_s = V_s + B_c * d;              // Q_i:    [2] × d/64 panels [B_r][64] (double buffer)
  T* dO_s = Q_s + 2 * B_r * d;         // dO_i:   [2] × d/64 panels [B_r][64]
  T* dS_s = dO_s + 2 * B_r * d;        // dS_ijᵀ: B_r/64 panels [B_c][64]: row = key, column = query row
  float* L2_s = reinterpret_cast<float*>(dS_s + B_c * B_r);  // L_i·log2 e: [2][B_r]
  float* D_s = L2_s + 2 * B_r;                                // D_i:        [2][B_r]

  const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32 % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma exists only in sm_90a code; the ladder (Arch::sm90a) refuses other GPUs before any launch
#else
  // blockIdx.x = j + T_c·(b·H_kv + h_kv), as in step 09.
  const int T_c = ceil_div(n.Nk, B_c), T_r = ceil_div(n.Nq, B_r);
  const int j = blockIdx.x % T_c, bk = blockIdx.x / T_c;
  const int b = bk / n.H_kv, h_kv = bk % n.H_kv;
  const int j0 = j * B_c;
  const int i_first = n.causal ? max(0, j0 + n.Nq - n.Nk) / B_r : 0;
  const int n_i = T_r - i_first;
  const int n_iter = n.group * n_i;
  const float scale_log2 = n.scale * kLog2e;
  // This thread's keys in the accumulators of S_ijᵀ, dP_ijᵀ, dK_j, dV_j: key_r = 64·wg + 16·warp + g + 8r.
  const int key0 = 64 * wg + 16 * warp + g;

  // Q_i, dO_i of iteration `it` → buffer `buf` (cp.async), and the first row of its Q block.
  auto q_block = [&](int it, int& h, int& i0) {
    h = h_kv * n.group + it / n_i;
    i0 = (i_first + it % n_i) * B_r;
  };
  auto load_q_do = [&](int it, int buf) {
    int h, i0;
    q_block(it, h, i0);
    const int64_t off = ((int64_t(b) * n.H + h) * n.Nq + i0) * d;
    load_panels<B_r, d, kThreads>(Q_s + buf * B_r * d, Q + off, n.Nq - i0, tid);
    load_panels<B_r, d, kThreads>(dO_s + buf * B_r * d, dO + off, n.Nq - i0, tid);
  };
  // L_i·log2 e and D_i of iteration `it`, one row per thread (tid < B_r): loaded into registers here,
  // stored to shared memory later, so that the loads' latency hides behind the products.
  auto load_l_d = [&](int it, float& l2, float& dd) {
    int h, i0;
    q_block(it, h, i0);
    const int r = i0 + tid;
    const bool ok = tid < B_r && r < n.Nq;
    const int64_t row = (int64_t(b) * n.H + h) * n.Nq + r;
    l2 = ok ? L[row] * kLog2e : INFINITY;  // rows past Nq: P = 0
    dd = ok ? D[row] : 0.f;
  };

  // ---- Prologue: K_j, V_j once (zero-filled past Nk) and the first Q_i, dO_i, L_i, D_i.
  const int64_t kv_off = (int64_t(bk) * n.Nk + j0) * d;
  load_panels<B_c, d, kThreads>(K_s, K + kv_off, n.Nk - j0, tid);
  load_panels<B_c, d, kThreads>(V_s, V + kv_off, n.Nk - j0, tid);
  if (n_iter > 0) {
    load_q_do(0, 0);
    float l2, dd;
    load_l_d(0, l2, dd);
    if (tid < B_r) L2_s[tid] = l2, D_s[tid] = dd;
  }
  cp_async_commit();

  float dK_j[d / 2], dV_j[d / 2];  // the warpgroup's [64 keys][d]: [n][2r + e] = (key_r, 8n + 2t + e)
#pragma unroll
  for (int x = 0; x < d / 2; ++x) dK_j[x] = dV_j[x] = 0.f;

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    int h, i0;
    q_block(it, h, i0);
    const int64_t bh = int64_t(b) * n.H + h;
    const T* Q_i = Q_s + buf * B_r * d;
    const T* dO_i = dO_s + buf * B_r * d;
    const float* L2_i = L2_s + buf * B_r;
    const float* D_i = D_s + buf * B_r;

    // Barrier A: this iteration's tiles have landed and are visible to the tensor cores; every warp is
    // done with iteration it − 1 (its buffers and dS_s may be overwritten).
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();
    float l2_next = INFINITY, d_next = 0.f;
    if (it + 1 < n_iter) {
      load_q_do(it + 1, buf ^ 1);
      load_l_d(it + 1, l2_next, d_next);
    }
    cp_async_commit();

    // S_ijᵀ = K_j Q_iᵀ and dP_ijᵀ − D_i/2 = V_j dO_iᵀ − D_i/2: d/16 k-steps each, two commit groups.
    // The dP accumulator starts at −D_i/2 instead of 0 (see the note on accuracy above).
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

    // P_ijᵀ = exp2(S_ijᵀ·scale·log2 e − L_i·log2 e), while dP_ijᵀ is still being multiplied. The mask
    // only where a key is missing (past Nk) or invisible (causal, the block crosses the diagonal).
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
    // P_ijᵀ as dV_j's A operand: k-step kk (query rows 16kk..) from n-tiles 2kk, 2kk + 1, as in 08e.
    uint32_t P_a[B_r / 16][4];
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk) {
      P_a[kk][0] = pack2<T>(S[8 * kk + 0], S[8 * kk + 1]);
      P_a[kk][1] = pack2<T>(S[8 * kk + 2], S[8 * kk + 3]);
      P_a[kk][2] = pack2<T>(S[8 * kk + 4], S[8 * kk + 5]);
      P_a[kk][3] = pack2<T>(S[8 * kk + 6], S[8 * kk + 7]);
    }
    // dV_j += P_ijᵀ dO_i: B_r/16 k-steps, one wgmma per 64-column panel of dO_i (and of dV_j).
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < d / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dV_j[p * P / 2]), P_a[kk],
                            wgmma::desc<P>(dO_i + p * B_r * P + 16 * kk * P, B_r * P * sizeof(T)));
    wgmma::commit();

    // dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i), from the rounded P (as step 09 and the tolerance's baseline), once
    // dP_ijᵀ is complete and dV_j no longer reads P_a (an in-flight wgmma's A registers may be neither
    // read nor written). dS_ijᵀ replaces P_ijᵀ in P_a: dK_j's A operand, laid out the same way.
    wgmma::wait<0>();
    wgmma::pin(dP);
    wgmma::pin(dV_j);
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int nt = 2 * kk + x / 2, r = x % 2;  // the n-tile and the key row (g or g + 8) of word x
        const float2 pp = unpack2<T>(P_a[kk][x]);
        const float2 dd = *reinterpret_cast<const float2*>(D_i + 8 * nt + 2 * t);
        P_a[kk][x] = pack2<T>(pp.x * (dP[4 * nt + 2 * r] - 0.5f * dd.x), pp.y * (dP[4 * nt + 2 * r + 1] - 0.5f * dd.y));
      }
    uint32_t (&dS_a)[B_r / 16][4] = P_a;
    // dS_ijᵀ → shared memory for dQ_i: word x of dS_a[kk] is (key key0 + 8(x % 2), query rows
    // 16kk + 8(x / 2) + 2t, + 1), one 32-bit store; the swizzle spreads a warp's 8 keys over 8 bank
    // groups. Stored before dK_j's wgmma is issued, which then reads these registers.
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x)
        store2(dS_s + at<B_c>(key0 + 8 * (x % 2), 16 * kk + 8 * (x / 2) + 2 * t), dS_a[kk][x]);
    wgmma::fence_proxy_async();  // the stores, visible to the tensor cores after barrier B
    // dK_j += dS_ijᵀ Q_i (the scale is applied once, in the epilogue).
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_r / 16; ++kk)
#pragma unroll
      for (int p = 0; p < d / P; ++p)
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(dK_j[p * P / 2]), dS_a[kk],
                            wgmma::desc<P>(Q_i + p * B_r * P + 16 * kk * P, B_r * P * sizeof(T)));
    wgmma::commit();
    // Barrier B: both warpgroups' dS_ijᵀ rows are in shared memory.
    __syncthreads();
    if (it + 1 < n_iter && tid < B_r) L2_s[(buf ^ 1) * B_r + tid] = l2_next, D_s[(buf ^ 1) * B_r + tid] = d_next;

    // dQ_i = dS_ij K_j: B_c/16 k-steps (keys), A = dS_ij read transposed from dS_ijᵀ (MN-major), B = K_j
    // MN-major. Warpgroup wg: rows qm.., columns qn.. of dQ_i (see Bwd).
    const int qm = d == 64 ? 64 * wg : 0, qn = d == 64 ? 0 : 64 * wg;
    float dQ[P / 2];  // [n][2r + e] = (query row qm + 16·warp + g + 8r, column qn + 8n + 2t + e)
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < B_c / 16; ++kk)
      wgmma::mma_ss_tt<T, P>(dQ, wgmma::desc<P>(dS_s + qm / P * B_c * P + 16 * kk * P, B_c * P * sizeof(T)),
                             wgmma::desc<P>(K_s + qn / P * B_c * P + 16 * kk * P, B_c * P * sizeof(T)), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();  // dK_j and dQ_i are complete
    wgmma::pin(dQ);
    wgmma::pin(dK_j);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = i0 + qm + 16 * warp + g + 8 * r;
      if (row < n.Nq) {  // rows past Nq are never stored
        float* acc = dQ_acc + (bh * n.Nq + row) * d + qn + 2 * t;  // dQ row, [d] fp32
#pragma unroll
        for (int nt = 0; nt < P / 8; ++nt)
          atomicAdd(reinterpret_cast<float2*>(acc + 8 * nt), make_float2(dQ[4 * nt + 2 * r], dQ[4 * nt + 2 * r + 1]));
      }
    }
  }
  cp_async_wait<0>();

  // ---- Epilogue: dK_j = scale · Σ dS_ijᵀ Q_i and dV_j → device memory, keys past Nk never stored.
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
size_t workspace_bytes(const Problem& p) { return s09::impl.workspace_bytes(p); }
void forward(const Problem& p, const ForwardArgs& a) { s09::impl.forward(p, a); }
std::string limits(const Problem& p) { return s09::impl.limits(p); }  // the forward's and the backward's

void backward(const Problem& p, const BackwardArgs& a) {
  bwd::run<WgmmaBwdD>(p, a, [&](auto T_, auto d_, const float* D, float* dQ_acc, cudaStream_t s) {
    launch_backward_main<decltype(T_), decltype(d_)::value>(p, a, D, dQ_acc, s);
  });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, bwd::workspace_bytes, backward};

}  // namespace fl::s09b

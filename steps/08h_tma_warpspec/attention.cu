// flashladder — step 08h: step 08g with its loads moved to a producer warp that drives the TMA.
//
// In 08g the same 128 threads issue the cp.async copies of K_{j+1}, V_{j+1} (16 per thread at
// d = 128, each with its own address arithmetic), wait for them, and do all the math; every
// iteration ends with a __syncthreads, so the whole block stalls on the slowest warp's copies.
// FlashAttention-3 (Shah et al. 2024, §3.1 "Producer-Consumer asynchrony through warp-specialization
// and pingpong scheduling") splits the roles:
//   - a producer warpgroup, of which one thread issues Hopper's tensor-memory-accelerator copies
//     (cp.async.bulk.tensor: one instruction moves a whole [B_c][64] box of K_j or V_j, with the
//     128-byte swizzle wgmma reads, and fills rows past Nk with zeros) into a ring of kStages
//     shared-memory stages, each guarded by a "full" and an "empty" mbarrier (steps/device/tma.cuh);
//   - consumer warpgroups that only compute: each owns 64 rows of Q_i, waits for stage s to be full,
//     multiplies, and marks it empty. No __syncthreads in the main loop: a warpgroup waits only for
//     the data it reads.
// The producer needs few registers and the consumers many, so `setmaxnreg` moves them (FA3 §3.1: 24
// to the producer, 240 to each consumer: 128·24 + 256·240 = 64 512 of the SM's 65 536). With the
// registers and the copy threads freed, the tile grows: B_r = 128 as two consumer warpgroups of 64
// rows (FA3's choice at d = 128) and B_c = 128 keys per stage (64 at d = 256, whose O_i alone takes
// 128 registers per thread).
// What stays from 08g: S_ij = Q_i K_jᵀ and O_i += P̃_ij V_j on wgmma, the exp2-domain softmax, O_i out
// through shared memory. What 08g had that goes: 08f's overlap of one m-tile's softmax with the other's
// products inside a warpgroup (each consumer now has one m-tile; the two consumers overlap each other
// instead, as the warp schedulers interleave them; step 08i orders that overlap).
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/device/tma.cuh"
#include "steps/device/wgmma.cuh"
#include "steps/launch.cuh"

namespace fl::s08h {


// The tiles per head dim (see the header): one producer warpgroup and kConsumers consumer warpgroups
// of 64 rows each (the m of wgmma m64nNk16), B_r = 64·kConsumers rows of Q_i; B_c rows of K_j, V_j per
// stage; shared-memory panels P = 64 columns wide (128-byte rows: the TMA's and wgmma's 128-byte swizzle).
template <int d>
struct Tiles {
  static constexpr int kConsumers = 2;
  static constexpr int B_r = 64 * kConsumers;
  static constexpr int B_c = d <= 128 ? 128 : 64;  // d = 256: O_i (128 regs) + S_ij must fit in 240
  static constexpr int kStages = 2;                // K/V stages in the ring
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // FA3's split; see the header
  static constexpr int P = 64;
};

// Offset of element (row, col) of a [ROWS][d] tile in shared memory, stored as d/P panels [ROWS][P]
// one after the other, the 16-byte chunk c of a panel row stored at chunk c ^ (row % 8): the layout the
// TMA writes with CU_TENSOR_MAP_SWIZZLE_128B into 1024-byte aligned panels, and wgmma reads (as 08g).
template <int d, int ROWS>
__device__ __forceinline__ int at(int row, int col) {
  constexpr int P = Tiles<d>::P;
  return col / P * ROWS * P + row * P + ((col % P / 8) ^ row % 8) * 8 + col % 8;
}

// One thread block computes O_i and L_i for one Q_i (B_r rows) of one (batch, head). Warpgroup 0 is
// the producer, warpgroup 1 + c the consumer of rows 64c … 64c + 63 of Q_i. Fragment names: lane =
// 4·g + t; warp w of a consumer holds rows 16w + g and + 8 of its 64, and in each 8-column n-tile the
// columns 2t and 2t + 1 (the wgmma accumulator layout, steps/device/wgmma.cuh). Row and key indices
// are 32-bit (limits() keeps Nq, Nk below 2^30); offsets into the tensors are 64-bit. Q, K, V are read
// only through their tensor maps ([B·H][Nq][d] and [B·H_kv][Nk][d] as 3-D tensors).
template <class T, int d>
__global__ void __launch_bounds__(Tiles<d>::kThreads, 1)
attention_kernel(const __grid_constant__ CUtensorMap tm_Q, const __grid_constant__ CUtensorMap tm_K,
                 const __grid_constant__ CUtensorMap tm_V, T* __restrict__ O, float* __restrict__ L, int64_t H,
                 int64_t H_kv, int Nq, int Nk, int64_t T_r, float scale, bool causal) {
  constexpr int B_r = Tiles<d>::B_r, B_c = Tiles<d>::B_c, P = Tiles<d>::P, kStages = Tiles<d>::kStages;
  constexpr int kConsumers = Tiles<d>::kConsumers;
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // The 128-byte swizzle is applied to address bits, so every panel starts on a 1024-byte boundary.
  unsigned char* smem = smem_raw + (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* Q_s = reinterpret_cast<T*>(smem);   // Q_i: d/P panels [B_r][P] in shared memory
  T* K_buf = Q_s + B_r * d;              // K_j ring: [kStages] × d/P panels [B_c][P]
  T* V_buf = K_buf + kStages * B_c * d;  // V_j ring: [kStages] × d/P panels [B_c][P]
  uint64_t* full_Q = reinterpret_cast<uint64_t*>(V_buf + kStages * B_c * d);  // Q_i has landed
  uint64_t* full_K = full_Q + 1;        // [kStages]: K_j has landed in stage s
  uint64_t* full_V = full_K + kStages;  // [kStages]: V_j has landed in stage s
  uint64_t* empty = full_V + kStages;   // [kStages]: every consumer warp is done reading stage s
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma, setmaxnreg exist only in sm_90a code; limits() refuses other GPUs before any launch
#else

  // blockIdx.x = i + T_r · (b·H + h), as in 08g; causal: i runs backwards, so the longest blocks start first.
  const int64_t i = causal ? T_r - 1 - blockIdx.x % T_r : blockIdx.x % T_r, bh = blockIdx.x / T_r;
  const int64_t b = bh / H, h = bh % H, h_kv = h / (H / H_kv);  // GQA/MQA: head h reads K/V head h_kv
  const int i0 = int(i) * B_r;                                   // first row of Q_i
  T* O_g = O + (bh * Nq + i0) * d;                               // O_i: [min(B_r, Nq − i0)][d] in HBM
  float* L_g = L + bh * Nq + i0;                                 // L_i: [min(B_r, Nq − i0)] in HBM

  // Causal, bottom-right aligned: query row q sees key k iff k <= q + diag. The last row of Q_i,
  // min(i0 + B_r, Nq) − 1, sees keys [0, n_end); the blocks K_j past n_end are never loaded.
  const int diag = Nk - Nq;
  const int last_row = (i0 + B_r < Nq ? i0 + B_r : Nq) - 1;
  const int n_end = causal && last_row + diag + 1 < Nk ? last_row + diag + 1 : Nk;
  const int T_c = n_end > 0 ? ceil_div(n_end, B_c) : 0;  // K/V blocks this Q_i visits

  if (threadIdx.x == 0) {  // the barriers, before either role touches them
    tma::init(full_Q, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::init(&full_K[s], 1);               // the producer's one arrive_expect_tx (+ the bytes)
      tma::init(&full_V[s], 1);
      tma::init(&empty[s], 4 * kConsumers);   // one arrival per consumer warp
    }
    tma::fence_init();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles only meet at mbarriers

  if (threadIdx.x < 128) {
    // ---- Producer (lines 4 and 7 of FA2 Algorithm 1: the loads of Q_i and of K_j, V_j) ------------
    tma::regs_dec<Tiles<d>::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::arrive_expect_tx(full_Q, B_r * d * sizeof(T));
#pragma unroll
      for (int p = 0; p < d / P; ++p) tma::load_3d(Q_s + p * B_r * P, &tm_Q, p * P, i0, int(bh), full_Q);
      const int kv = int(b * H_kv + h_kv);  // the (batch, K/V head) slice of K and V
      for (int j = 0; j < T_c; ++j) {
        const int s = j % kStages;
        tma::wait(&empty[s], (j / kStages & 1) ^ 1);  // stage s was released by every consumer warp
        tma::arrive_expect_tx(&full_K[s], B_c * d * sizeof(T));
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(K_buf + s * B_c * d + p * B_c * P, &tm_K, p * P, j * B_c, kv, &full_K[s]);
        tma::arrive_expect_tx(&full_V[s], B_c * d * sizeof(T));  // V_j on its own barrier: S_ij needs only K_j
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(V_buf + s * B_c * d + p * B_c * P, &tm_V, p * P, j * B_c, kv, &full_V[s]);
      }
    }
    return;  // the copies still in flight complete on their barriers, which the consumers wait for
  }

  // ---- Consumers -------------------------------------------------------------------------------
  tma::regs_inc<Tiles<d>::kConsumerRegs>();
  const int c = threadIdx.x / 128 - 1;  // this consumer's rows of Q_i: 64c … 64c + 63
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair (see above)

  float O_i[d / 8][4];  // O_i: the warp's [16][d]; O_i[n][2r+e] = O[64c+16w+g+8r][8n+2t+e]
  float m_i[2], l_i[2];  // running max m_i (of the unscaled S) and running sum ℓ_i, rows g and g + 8
#pragma unroll
  for (int n = 0; n < d / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) O_i[n][e] = 0.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_i[r] = -INFINITY;
    l_i[r] = 0.f;  // over this thread's columns only; the row's 4 threads add theirs at the end
  }
  const int row0 = i0 + 64 * c + warp * 16 + g;  // this thread's row g, as a row of Q
  const T* Q_c = Q_s + 64 * c * P;                // this consumer's 64 rows within each panel of Q_i
  tma::wait(full_Q, 0);                           // Q_i has landed (lines 4–5)

  // ---- Main loop (lines 6–11), once per K_j, V_j, from stage j % kStages of the ring.
  for (int j = 0; j < T_c; ++j) {
    const int j0 = j * B_c;  // first key of K_j
    const int s = j % kStages;
    const uint32_t parity = j / kStages & 1;  // the stage's barriers complete once per pass of the ring
    const T* K_s = K_buf + s * B_c * d;       // K_j: d/P panels [B_c][P] in shared memory
    const T* V_s = V_buf + s * B_c * d;       // V_j: d/P panels [B_c][P] in shared memory
    tma::wait(&full_K[s], parity);            // line 7: K_j has landed

    // Line 8: S_ij = Q_i K_jᵀ, unscaled, the warp's [16][B_c] in registers: d/16 wgmma m64n{B_c}k16.
    float S_ij[B_c / 8][4];  // S_ij[n][2r + e] = S[64c + 16w + g + 8r][8n + 2t + e]
    wgmma::fence();          // S_ij's registers were last read by the previous iteration's P̃_ij
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk)
      wgmma::mma_ss<T, B_c>(reinterpret_cast<float(&)[B_c / 2]>(S_ij),
                            wgmma::desc<P>(Q_c + 16 * kk / P * B_r * P + 16 * kk % P, 16),
                            wgmma::desc<P>(K_s + 16 * kk / P * B_c * P + 16 * kk % P, 16), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(reinterpret_cast<float(&)[B_c / 2]>(S_ij));

    // Mask only blocks that need it: the partial last block (keys past Nk, which the TMA read as
    // zeros) and, when causal, the blocks the diagonal crosses for this consumer's rows.
    if (j0 + B_c > Nk || (causal && j0 + B_c - 1 > i0 + 64 * c + diag)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Row row0 + 8r sees keys [0, last): in this block, the columns [0, seen) of S_ij.
        const int row = row0 + 8 * r;
        const int last = causal && row + diag + 1 < Nk ? row + diag + 1 : Nk;
        const int seen = last - j0 < 0 ? 0 : last - j0 > B_c ? B_c : last - j0;
#pragma unroll
        for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * n + 2 * t + e >= seen) S_ij[n][2 * r + e] = -INFINITY;
      }
    }

    // Online softmax (line 9) in base 2, exactly as 08g: m_i the max of the unscaled S,
    // P̃_ij = 2^(S_ij·τ log2 e − m_i·τ log2 e), ℓ_i rescaled by 2^((m_i^(j−1) − m_i^(j))·τ log2 e).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m_new = m_i[r];
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n) m_new = fmaxf(m_new, fmaxf(S_ij[n][2 * r], S_ij[n][2 * r + 1]));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
      // A row that has seen no key yet has m_new = −∞: subtract 0 instead (every P̃ is then 0).
      const float m_sub = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, scale_log2);
      // Both products rounded alike (__fmul_rn), so an unchanged max rescales by exactly 2^0 (08g).
      const float alpha = mma::exp2_approx(__fmul_rn(m_i[r], scale_log2) - m_sub);  // 0 at first
      m_i[r] = m_new;
      float rowsum = 0.f;
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // one FFMA, one EX2; S_ij becomes P̃_ij in place
          float& x = S_ij[n][2 * r + e];
          x = mma::exp2_approx(fmaf(x, scale_log2, -m_sub));
          rowsum += x;
        }
      l_i[r] = alpha * l_i[r] + rowsum;
      // Line 10, first half: O_i^(j) = diag(e^{τ(m_i^(j−1) − m_i^(j))}) O_i^(j−1) (un-scaled O).
#pragma unroll
      for (int n = 0; n < d / 8; ++n) {
        O_i[n][2 * r] *= alpha;
        O_i[n][2 * r + 1] *= alpha;
      }
    }

    // Line 10, second half: O_i += P̃_ij V_j, B_c/16 k-steps of 16 keys, d/P wgmma m64n64k16 each.
    // A = P̃_ij[16 rows][16 keys at 16k] from the accumulators of n-tiles 2k and 2k + 1 (as 08g).
    uint32_t a[B_c / 16][4];  // P̃_ij fragments: B_c/16 × [16][16]
#pragma unroll
    for (int k = 0; k < B_c / 16; ++k) {
      a[k][0] = mma::pack2<T>(S_ij[2 * k][0], S_ij[2 * k][1]);
      a[k][1] = mma::pack2<T>(S_ij[2 * k][2], S_ij[2 * k][3]);
      a[k][2] = mma::pack2<T>(S_ij[2 * k + 1][0], S_ij[2 * k + 1][1]);
      a[k][3] = mma::pack2<T>(S_ij[2 * k + 1][2], S_ij[2 * k + 1][3]);
    }
    tma::wait(&full_V[s], parity);  // V_j has landed (it was in flight during S_ij and the softmax)
    wgmma::fence();  // the rescaled O_i and the new P̃_ij are written before the tensor cores read them
#pragma unroll
    for (int k = 0; k < B_c / 16; ++k)
#pragma unroll
      for (int p = 0; p < d / P; ++p)  // V_j rows 16k.. of panel p: 16 rows of 2P bytes further on
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(O_i[p * P / 8]), a[k],
                            wgmma::desc<P>(V_s + p * B_c * P + 16 * k * P, B_c * P * sizeof(T)));
    wgmma::commit();
    wgmma::wait<0>();  // every product reading stage s is complete …
    wgmma::pin(reinterpret_cast<float(&)[d / 2]>(O_i));
    __syncwarp();
    if (lane == 0) tma::arrive(&empty[s]);  // … so the producer may refill it (one arrival per warp)
  }

  // ---- Epilogue (lines 12–15): O_i = diag(ℓ_i)⁻¹ O_i, L_i = τ m_i + log ℓ_i, rows past Nq not stored.
  // O_i goes through this consumer's own 64 rows of Q_i's tile (no other warpgroup reads them; this
  // one's wgmma reads of them are complete), then leaves in 16-byte stores of whole row segments.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_i[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);  // the quad's 4 partial sums: the row's ℓ_i
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    // ℓ_i = 0 only for a row that sees no key: then O = 0 and L = +∞, so the backward's exp(S − L) is 0.
    const float inv_l = l > 0.f ? 1.f / l : 0.f;
    const int row = 64 * c + 16 * warp + g + 8 * r;  // within Q_i
#pragma unroll
    for (int n = 0; n < d / 8; ++n)  // 2 elements (4 bytes) into the swizzled tile: no bank conflicts
      *reinterpret_cast<uint32_t*>(Q_s + at<d, B_r>(row, 8 * n + 2 * t)) =
          mma::pack2<T>(O_i[n][2 * r] * inv_l, O_i[n][2 * r + 1] * inv_l);
    if (t == 0 && i0 + row < Nq) L_g[row] = log_sum_exp(m_i[r], l, scale, scale_log2);
  }
  tma::named_sync(1 + c, 128);  // this warpgroup's 128 threads only (the producer has left)
#pragma unroll 4
  for (int k = threadIdx.x % 128; k < 64 * d / 8; k += 128) {  // 16-byte chunks of rows 64c…, row-major
    const int row = 64 * c + k / (d / 8), col = k % (d / 8) * 8;
    if (i0 + row < Nq)
      *reinterpret_cast<uint4*>(O_g + int64_t(row) * d + col) =
          *reinterpret_cast<const uint4*>(Q_s + at<d, B_r>(row, col));
  }
#endif
}

size_t workspace_bytes(const Problem&) { return 0; }

std::string limits(const Problem& p) {
  if (p.Nq >= (int64_t(1) << 30) || p.Nk >= (int64_t(1) << 30))
    return "keeps row and key indices in 32 bits: Nq = " + std::to_string(p.Nq) +
           " and Nk = " + std::to_string(p.Nk) + " must both be below 2^30";
  const int64_t B_r = 128;  // Tiles<d>::B_r
  const int64_t blocks = ceil_div<int64_t>(p.Nq, B_r) * p.B * p.H;
  if (blocks > INT_MAX)
    return "launches one thread block per (Q block of " + std::to_string(B_r) +
           " rows, batch, head): " + std::to_string(blocks) + " blocks exceed the grid limit 2^31 − 1";
  if (p.B * p.H > INT_MAX)
    return "addresses the (batch, head) slices of its tensor maps with 32-bit coordinates: B·H = " +
           std::to_string(p.B * p.H) + " exceeds 2^31 − 1";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  constexpr int B_r = Tiles<d>::B_r, B_c = Tiles<d>::B_c, kStages = Tiles<d>::kStages, kThreads = Tiles<d>::kThreads;
  const int64_t T_r = ceil_div<int64_t>(p.Nq, B_r);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // The tensor maps: Q as [B·H][Nq][d] in boxes of [B_r][64], K and V as [B·H_kv][Nk][d] in boxes of [B_c][64].
  const CUtensorMap tm_Q = tma::make_tensor_map(a.q, bf16, p.B * p.H, p.Nq, d, B_r, "Q");
  const CUtensorMap tm_K = tma::make_tensor_map(a.k, bf16, p.B * p.H_kv, p.Nk, d, B_c, "K");
  const CUtensorMap tm_V = tma::make_tensor_map(a.v, bf16, p.B * p.H_kv, p.Nk, d, B_c, "V");
  // Q_i, the K and V rings, 1 + 3·kStages barriers of 8 bytes; 1024 for the panels' alignment.
  const size_t smem = size_t(B_r + 2 * kStages * B_c) * d * sizeof(T) + 8 * (1 + 3 * kStages) + 1024;
  auto kernel = attention_kernel<T, d>;
  allow_smem(kernel, smem);
  kernel<<<dim3(unsigned(T_r * p.B * p.H)), dim3(kThreads), smem, static_cast<cudaStream_t>(a.stream)>>>(
      tm_Q, tm_K, tm_V, static_cast<T*>(a.o), a.lse, p.H, p.H_kv, int(p.Nq), int(p.Nk), T_r,
      float(p.softmax_scale()), p.causal);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<TmaD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s08h

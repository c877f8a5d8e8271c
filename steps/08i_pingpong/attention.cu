// flashladder — step 08i: step 08h with the tensor cores kept busy while the softmax runs.
//
// In 08h a consumer warpgroup does S_ij = Q_i K_jᵀ, waits, does the softmax (MUFU.EX2, FMA, shuffles:
// no tensor-core work), then O_i += P̃_ij V_j, waits, and starts again. Its tensor-core work stops for
// the whole softmax; two consumers fill each other's gaps only when the warp schedulers happen to
// interleave them. FlashAttention-3 (Shah et al. 2024) orders that overlap, twice:
//   - Pingpong (§3.1, "Pingpong scheduling"): the consumers take turns issuing their products through
//     named barriers (bar.sync / bar.arrive): consumer c issues its wgmmas, hands the turn to c + 1,
//     and does its softmax while c + 1's products run. The exponentials of one warpgroup hide under
//     the matrix products of the other.
//   - Intra-warpgroup pipelining (§3.2, Algorithm 2): within one consumer, S_ij and the product of
//     the block before, O_i += P̃_i,j−1 V_j−1, are issued together; the softmax of S_ij runs while
//     that product is still on the tensor cores, and O_i is rescaled by e^{τ(m_i^(j−1) − m_i^(j))}
//     only after the product has landed. P̃_i,j−1 stays in registers one iteration longer.
// The pipeline holds two K/V blocks at once (V_j−1 and K_j), so the ring grows to 3 stages where
// shared memory has room (d ≤ 128) and the producer keeps one load in flight. At d = 64 the softmax
// costs as much as the products, and two consumers could not cover each other: three (B_r = 192).
// The mathematics is 08h's, line for line of FA2 Algorithm 1; only the order of issue changes.
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/device/tma.cuh"
#include "steps/device/wgmma.cuh"
#include "steps/launch.cuh"

namespace fl::s08i {


// The tiles per head dim (see the header): one producer warpgroup and kConsumers consumer warpgroups
// of 64 rows each (the m of wgmma m64nNk16), B_r = 64·kConsumers rows of Q_i; B_c rows of K_j, V_j per
// stage; shared-memory panels P = 64 columns wide (128-byte rows: the TMA's and wgmma's 128-byte swizzle).
template <int d, int B_c_>
struct Tiles {
  // d = 64: three consumers (B_r = 192, 160 registers each). Two left the tensor cores idle while both
  // did their softmax, which at d = 64 costs as much as the products: 430 against 371 TFLOP/s at
  // N = 2048, 504 against 412 at N = 8192 (H200, fp16, non-causal; run of 2026-11-23, see README).
  static constexpr int kConsumers = d == 64 ? 3 : 2;
  static constexpr int B_r = 64 * kConsumers;
  static constexpr int B_c = B_c_;  // kBc<d>(causal): 128, 176 or 64 (see there)
  // As many stages as the 227 KiB of shared memory hold beside Q_i, at most three: 3 at d ≤ 128 with
  // B_c = 128, 2 with B_c = 176 (88 KiB a stage) and at d = 256. The pipelined loop holds two blocks at
  // once (V_j−1 in the product, K_j in S_ij): with two stages released together the load of K_j+1
  // could start only mid-iteration (502 TFLOP/s against 08h's 587 at the headline), hence a K and a V
  // barrier per stage, each released as soon as its product is done.
  static constexpr int kStageBytes = 2 * B_c * d * 2, kQBytes = B_r * d * 2;
  static constexpr int kStages = (227 * 1024 - kQBytes - 2048) / kStageBytes < 3
                                     ? (227 * 1024 - kQBytes - 2048) / kStageBytes : 3;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // 128·24 + 256·240 = 64 512 (two consumers), 128·24 + 384·160 = 64 512 (three) of 65 536.
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;
  static constexpr int P = 64;
};

// B_c for head dim d: 128 keys at d ≤ 128 (O_i 64 + S_ij 64 + P̃ 32 registers of 240 at d = 128),
// 64 at d = 256 (O_i alone takes 128); at d = 128 without a causal mask 176, the widest S_ij (88
// registers) that fits beside O_i and P̃ (44) in 240 and leaves two stages of shared memory: FA3's
// choice, measured in the README (causal keeps 128: its diagonal block would mask more of 176).
template <int d>
constexpr int kBc(bool causal) { return d == 256 ? 64 : d == 128 && !causal ? 176 : 128; }

// Offset of element (row, col) of a [ROWS][d] tile in shared memory, stored as d/P panels [ROWS][P]
// one after the other, the 16-byte chunk c of a panel row stored at chunk c ^ (row % 8): the layout the
// TMA writes with CU_TENSOR_MAP_SWIZZLE_128B into 1024-byte aligned panels, and wgmma reads (as 08g).
template <int d, int ROWS>
__device__ __forceinline__ int at(int row, int col) {
  constexpr int P = 64;
  return col / P * ROWS * P + row * P + ((col % P / 8) ^ row % 8) * 8 + col % 8;
}

// One thread block computes O_i and L_i for one Q_i (B_r rows) of one (batch, head). Warpgroup 0 is
// the producer, warpgroup 1 + c the consumer of rows 64c … 64c + 63 of Q_i. Fragment names: lane =
// 4·g + t; warp w of a consumer holds rows 16w + g and + 8 of its 64, and in each 8-column n-tile the
// columns 2t and 2t + 1 (the wgmma accumulator layout, steps/device/wgmma.cuh). Row and key indices
// are 32-bit (limits() keeps Nq, Nk below 2^30); offsets into the tensors are 64-bit. Q, K, V are read
// only through their tensor maps ([B·H][Nq][d] and [B·H_kv][Nk][d] as 3-D tensors).
template <class T, int d, int B_c_>
__global__ void __launch_bounds__(Tiles<d, B_c_>::kThreads, 1)
attention_kernel(const __grid_constant__ CUtensorMap tm_Q, const __grid_constant__ CUtensorMap tm_K,
                 const __grid_constant__ CUtensorMap tm_V, T* __restrict__ O, float* __restrict__ L, int64_t H,
                 int64_t H_kv, int Nq, int Nk, int64_t T_r, float scale, bool causal) {
  using Tl = Tiles<d, B_c_>;
  constexpr int B_r = Tl::B_r, B_c = Tl::B_c, P = Tl::P, kStages = Tl::kStages, kConsumers = Tl::kConsumers;
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
  uint64_t* empty_K = full_V + kStages;    // [kStages]: every consumer warp is done reading K_j of stage s
  uint64_t* empty_V = empty_K + kStages;   // [kStages]: … and V_j
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
      tma::init(&empty_K[s], 4 * kConsumers);  // one arrival per consumer warp
      tma::init(&empty_V[s], 4 * kConsumers);
    }
    tma::fence_init();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles only meet at mbarriers

  if (threadIdx.x < 128) {
    // ---- Producer (lines 4 and 7 of FA2 Algorithm 1: the loads of Q_i and of K_j, V_j) ------------
    tma::regs_dec<Tl::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::arrive_expect_tx(full_Q, B_r * d * sizeof(T));
#pragma unroll
      for (int p = 0; p < d / P; ++p) tma::load_3d(Q_s + p * B_r * P, &tm_Q, p * P, i0, int(bh), full_Q);
      const int kv = int(b * H_kv + h_kv);  // the (batch, K/V head) slice of K and V
      for (int j = 0; j < T_c; ++j) {
        const int s = j % kStages;
        tma::wait(&empty_K[s], (j / kStages & 1) ^ 1);  // K of stage s was released by every consumer warp
        tma::arrive_expect_tx(&full_K[s], B_c * d * sizeof(T));
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(K_buf + s * B_c * d + p * B_c * P, &tm_K, p * P, j * B_c, kv, &full_K[s]);
        tma::wait(&empty_V[s], (j / kStages & 1) ^ 1);
        tma::arrive_expect_tx(&full_V[s], B_c * d * sizeof(T));  // V_j on its own barrier: S_ij needs only K_j
#pragma unroll
        for (int p = 0; p < d / P; ++p)
          tma::load_3d(V_buf + s * B_c * d + p * B_c * P, &tm_V, p * P, j * B_c, kv, &full_V[s]);
      }
    }
    return;  // the copies still in flight complete on their barriers, which the consumers wait for
  }

  // ---- Consumers -------------------------------------------------------------------------------
  tma::regs_inc<Tl::kConsumerRegs>();
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

  // Pingpong (FA3 §3.1): the consumers take turns issuing their products. Consumer c waits at named
  // barrier t(c) = 2 + kConsumers + c for its turn, issues, and hands the turn on at t((c + 1) % kConsumers); its softmax
  // then runs while the next consumer's products occupy the tensor cores. The last consumer hands the
  // first its first turn. Every bar.sync meets exactly 128 arrivals of the consumer before it.
  // Barrier ids 2 + kConsumers … (1 + c is the epilogue's); each counts 256 threads: the 128 of the
  // consumer whose turn it is (sync) and the 128 of the one handing it over (arrive).
  auto my_turn = [&] { tma::named_sync(2 + kConsumers + c, 128 * 2); };
  auto next_turn = [&] { tma::named_arrive(2 + kConsumers + (c + 1) % kConsumers, 128 * 2); };
  if (c == kConsumers - 1) next_turn();

  // Line 8: S_ij = Q_i K_jᵀ, unscaled, the warp's [16][B_c]: d/16 wgmma m64n{B_c}k16, one group.
  auto issue_S = [&](float (&S)[B_c / 8][4], const T* K_s) {
    wgmma::fence();  // S's registers were last read (packed into P̃) by ordinary instructions
#pragma unroll
    for (int kk = 0; kk < d / 16; ++kk)
      wgmma::mma_ss<T, B_c>(reinterpret_cast<float(&)[B_c / 2]>(S),
                            wgmma::desc<P>(Q_c + 16 * kk / P * B_r * P + 16 * kk % P, 16),
                            wgmma::desc<P>(K_s + 16 * kk / P * B_c * P + 16 * kk % P, 16), kk > 0);
    wgmma::commit();
  };
  // Line 10, second half: O_i += P̃_ij V_j, B_c/16 k-steps of 16 keys, d/P wgmma m64n64k16 each, one group.
  auto issue_PV = [&](const uint32_t (&a)[B_c / 16][4], const T* V_s) {
    wgmma::fence();  // the rescaled O_i and the packed P̃_ij are written before the tensor cores read them
#pragma unroll
    for (int k = 0; k < B_c / 16; ++k)
#pragma unroll
      for (int p = 0; p < d / P; ++p)  // V_j rows 16k.. of panel p: 16 rows of 2P bytes further on
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(O_i[p * P / 8]), a[k],
                            wgmma::desc<P>(V_s + p * B_c * P + 16 * k * P, B_c * P * sizeof(T)));
    wgmma::commit();
  };
  // Line 9 on S_ij of the block at key j0: mask, then the online softmax of 08g, S_ij becoming P̃_ij in
  // place. O_i is NOT rescaled here (a product may still be adding into it): alpha[r] is returned.
  auto softmax = [&](float (&S)[B_c / 8][4], int j0, float (&alpha)[2]) {
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
            if (8 * n + 2 * t + e >= seen) S[n][2 * r + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m_new = m_i[r];
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n) m_new = fmaxf(m_new, fmaxf(S[n][2 * r], S[n][2 * r + 1]));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
      const float m_sub = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, scale_log2);  // (as 08g)
      alpha[r] = mma::exp2_approx(__fmul_rn(m_i[r], scale_log2) - m_sub);  // 0 at first
      m_i[r] = m_new;
      float rowsum = 0.f;
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // one FFMA, one EX2; S_ij becomes P̃_ij in place
          float& x = S[n][2 * r + e];
          x = mma::exp2_approx(fmaf(x, scale_log2, -m_sub));
          rowsum += x;
        }
      l_i[r] = alpha[r] * l_i[r] + rowsum;
    }
  };
  // P̃_ij rounded to T as the A operand of O_i += P̃_ij V_j (the accumulator layout, as 08g).
  auto pack = [&](const float (&S)[B_c / 8][4], uint32_t (&a)[B_c / 16][4]) {
#pragma unroll
    for (int k = 0; k < B_c / 16; ++k) {
      a[k][0] = mma::pack2<T>(S[2 * k][0], S[2 * k][1]);
      a[k][1] = mma::pack2<T>(S[2 * k][2], S[2 * k][3]);
      a[k][2] = mma::pack2<T>(S[2 * k + 1][0], S[2 * k + 1][1]);
      a[k][3] = mma::pack2<T>(S[2 * k + 1][2], S[2 * k + 1][3]);
    }
  };
  auto release = [&](uint64_t* empty) {  // every product reading that buffer is complete: refill it
    __syncwarp();
    if (lane == 0) tma::arrive(empty);
  };

  // ---- Main loop (lines 6–11), pipelined inside the warpgroup (FA3 §3.2, Algorithm 2): while the
  // softmax of S_ij runs, the tensor cores compute O_i += P̃_i,j−1 V_j−1 of the block before. Block j
  // lives in stage j % kStages, whose barriers complete once per pass of the ring (parity j / kStages).
  float S_ij[B_c / 8][4];   // S_ij[n][2r + e] = S[64c + 16w + g + 8r][8n + 2t + e], then P̃_ij
  uint32_t a[B_c / 16][4];  // P̃_i,j−1 as the A operand: in flight in the product while S_ij is worked on
  float alpha[2];           // the rescale of O_i's rows g, g + 8 for the block just softmaxed
  tma::wait(full_Q, 0);     // Q_i has landed (lines 4–5)
  if (T_c > 0) {            // prologue: S_i0 alone, there is no product before it
    tma::wait(&full_K[0], 0);
    my_turn();
    issue_S(S_ij, K_buf);
    next_turn();
    wgmma::wait<0>();
    wgmma::pin(reinterpret_cast<float(&)[B_c / 2]>(S_ij));
    release(&empty_K[0]);
    softmax(S_ij, 0, alpha);  // O_i = 0: nothing to rescale
    pack(S_ij, a);
  }
  for (int j = 1; j < T_c; ++j) {
    const int s = j % kStages, s_prev = (j - 1) % kStages;
    tma::wait(&full_K[s], j / kStages & 1);  // line 7: K_j has landed
    my_turn();
    issue_S(S_ij, K_buf + s * B_c * d);                   // S_ij …
    tma::wait(&full_V[s_prev], (j - 1) / kStages & 1);    // (V_j−1 has landed)
    issue_PV(a, V_buf + s_prev * B_c * d);                // … and O_i += P̃_i,j−1 V_j−1, both in flight
    next_turn();
    wgmma::wait<1>();  // S_ij is complete; the product into O_i may still run
    wgmma::pin(reinterpret_cast<float(&)[B_c / 2]>(S_ij));
    release(&empty_K[s]);           // K_j is read: the producer may load K_j+kStages now
    softmax(S_ij, j * B_c, alpha);  // overlaps the product into O_i
    wgmma::wait<0>();  // O_i += P̃_i,j−1 V_j−1 is complete: stage j − 1 is no longer read
    wgmma::pin(reinterpret_cast<float(&)[d / 2]>(O_i));
    release(&empty_V[s_prev]);
#pragma unroll
    for (int r = 0; r < 2; ++r)  // line 10, first half, now that O_i is ours again
#pragma unroll
      for (int n = 0; n < d / 8; ++n) {
        O_i[n][2 * r] *= alpha[r];
        O_i[n][2 * r + 1] *= alpha[r];
      }
    pack(S_ij, a);  // a is free: the product that read it is complete
  }
  if (T_c > 0) {  // epilogue of the pipeline: the last block's product
    const int s_last = (T_c - 1) % kStages;
    tma::wait(&full_V[s_last], (T_c - 1) / kStages & 1);
    my_turn();
    issue_PV(a, V_buf + s_last * B_c * d);
    next_turn();
    wgmma::wait<0>();
    wgmma::pin(reinterpret_cast<float(&)[d / 2]>(O_i));
    release(&empty_V[s_last]);
  }
  if (c == 0) my_turn();  // the last consumer's final hand-over: every named barrier ends complete

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
  const int64_t B_r = p.d == 64 ? Tiles<64, 128>::B_r : 128;  // Tiles<d, ·>::B_r
  const int64_t blocks = ceil_div<int64_t>(p.Nq, B_r) * p.B * p.H;
  if (blocks > INT_MAX)
    return "launches one thread block per (Q block of " + std::to_string(B_r) +
           " rows, batch, head): " + std::to_string(blocks) + " blocks exceed the grid limit 2^31 − 1";
  if (p.B * p.H > INT_MAX)
    return "addresses the (batch, head) slices of its tensor maps with 32-bit coordinates: B·H = " +
           std::to_string(p.B * p.H) + " exceeds 2^31 − 1";
  return "";
}

template <class T, int d, int B_c>
void launch(const Problem& p, const ForwardArgs& a) {
  using Tl = Tiles<d, B_c>;
  constexpr int B_r = Tl::B_r, kStages = Tl::kStages, kThreads = Tl::kThreads;
  const int64_t T_r = ceil_div<int64_t>(p.Nq, B_r);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // The tensor maps: Q as [B·H][Nq][d] in boxes of [B_r][64], K and V as [B·H_kv][Nk][d] in boxes of [B_c][64].
  const CUtensorMap tm_Q = tma::make_tensor_map(a.q, bf16, p.B * p.H, p.Nq, d, B_r, "Q");
  const CUtensorMap tm_K = tma::make_tensor_map(a.k, bf16, p.B * p.H_kv, p.Nk, d, B_c, "K");
  const CUtensorMap tm_V = tma::make_tensor_map(a.v, bf16, p.B * p.H_kv, p.Nk, d, B_c, "V");
  // Q_i, the K and V rings, 1 + 4·kStages barriers of 8 bytes; 1024 for the panels' alignment.
  const size_t smem = size_t(B_r + 2 * kStages * B_c) * d * sizeof(T) + 8 * (1 + 4 * kStages) + 1024;
  auto kernel = attention_kernel<T, d, B_c>;
  allow_smem(kernel, smem);
  kernel<<<dim3(unsigned(T_r * p.B * p.H)), dim3(kThreads), smem, static_cast<cudaStream_t>(a.stream)>>>(
      tm_Q, tm_K, tm_V, static_cast<T*>(a.o), a.lse, p.H, p.H_kv, int(p.Nq), int(p.Nk), T_r,
      float(p.softmax_scale()), p.causal);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<TmaD>(p, [&](auto T_, auto d_) {
    constexpr int d = decltype(d_)::value;
    if (kBc<d>(p.causal) == kBc<d>(false))
      launch<decltype(T_), d, kBc<d>(false)>(p, a);
    else
      launch<decltype(T_), d, kBc<d>(true)>(p, a);
  });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s08i

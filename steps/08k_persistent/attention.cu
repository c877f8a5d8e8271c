// flashladder — step 08k: step 08j as a persistent kernel: one thread block per SM walks many tiles.
//
// Until 08j a thread block computes one Q_i and leaves, so every Q_i pays, with the tensor cores idle,
// the load of Q_i and of the first K_j, V_j (the pipeline's fill), and the epilogue's stores. With one
// block per SM (08j's blocks take 121–225 KiB of shared memory and all 65 536 registers) nothing else
// runs on the SM meanwhile. At N = 2048 a Q_i visits only 12–16 key blocks (half that, on average,
// causal), and those fixed costs kept 08j at 0.85–0.86× cuDNN (H100, run 26). FlashAttention-3 (Shah et al.
// 2024, §3 and its code's tile scheduler) launches one block per SM instead, each walking the tiles
// blockIdx.x, blockIdx.x + gridDim.x, …:
//   - the producer runs ahead across tiles: it loads the next tile's Q_i into a second buffer where one
//     fits (d = 64), else as soon as the consumers have issued their last S_ij = Q_i K_jᵀ of this one,
//     and the next tile's K_j, V_j into the stages as they free up, so the next tile starts on data
//     that has already landed;
//   - the consumers run across tiles too: a tile's last O_i += P̃ V_j is issued beside the next tile's
//     first S_ij and runs under its softmax, and the finished tile's epilogue follows;
//   - the ring's stage and parity count K/V blocks over the block's whole life, not per tile; Q_i gets
//     an empty barrier of its own;
//   - O_i leaves from registers (4-byte stores of the accumulator's pairs) instead of through Q_i's
//     shared tile (08g's epilogue), which is now the next tile's Q_i.
// The tiles keep 08j's order (causal: the longest first within each (batch, head)), dealt round-robin.
// Each tile's mathematics is 08j's, unchanged, variable length and seqused_k included (08j's kVarlen
// bit): a tile is one Q_i of one (sequence, head), and the persistent loop adds one rule, that a tile
// past its sequence's end is skipped by the producer and the consumers alike (see tile_of).
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/device/mma.cuh"
#include "steps/device/tma.cuh"
#include "steps/device/wgmma.cuh"
#include "steps/launch.cuh"
#include "steps/variants.cuh"  // VariantArgs: the window (causal folded in), the softcap c, the ALiBi slopes

namespace fl::s08k {


// The tiles per head dim (see the header): one producer warpgroup and kConsumers consumer warpgroups
// of 64 rows each (the m of wgmma m64nNk16), B_r = 64·kConsumers rows of Q_i; B_c rows of K_j, V_j per
// stage; shared-memory panels P = 64 columns wide (128-byte rows: the TMA's and wgmma's 128-byte swizzle).
template <int d, int B_c_, int kC>
struct Tiles {
  // kC = kConsumers<d>(short_diagonal(p)), below: three at d = 64 unless a mask's diagonal is short, else two.
  static constexpr int kConsumers = kC;
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
  // Q_i buffers: two where they fit beside the stages (d = 64: 2·16 or 2·24 KiB beside 96), so that the
  // producer loads the next tile's Q_i as soon as it has issued this tile's last K_j, V_j (up to
  // kStages blocks before the tile ends); one at d = 128 and 256, where a second Q_i
  // would cost a stage. With one, the next Q_i can be loaded only after this tile's last S_ij, and the
  // consumers wait out its latency at every tile. At d = 64, causal, N = 2048 (8.5 key blocks a tile on
  // average) 08k ran at 0.88–0.90× cuDNN, whose kernel has the same 384 threads and 168 registers but
  // 18 KB more shared memory (ncu, H100, run 57); the second buffer alone gave 0.89–0.92 (run 58), and
  // with the consumers running across tiles 0.96–0.97 (run 60; the README).
  static constexpr int kQBufs = 2 * kQBytes + kStages * kStageBytes + 2048 <= 227 * 1024 ? 2 : 1;
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

// Consumers per head dim: three at d = 64 (B_r = 192, 160 registers each). Two left the tensor cores
// idle while both did their softmax, which at d = 64 costs as much as the products: 430 against 371
// TFLOP/s at N = 2048, 504 against 412 at N = 8192 (H200, fp16, non-causal; run of 2026-11-23, see
// 08i's README). Except where a mask's diagonal is short (causal or a window, at most 2048 query rows,
// short_diagonal below): two (B_r = 128). Q_i's rows see keys up to the diagonal and the blocks that
// cross it are visited whole, so the taller the tile, the more of its work is masked: at N = 2048,
// 192-row tiles visit 101 blocks of 192 × 128 per (batch, head) for 2.1 M pairs that count (85%),
// 128-row tiles 136 blocks of 128 × 128 (94%). The masked share falls as B_r/N, and past 2048 the third
// consumer's overlap wins again. 08k, H100, fp16, causal, FA2 sweep (B·N = 16384, H = 32), TFLOP/s:
//   N                 512  1024  2048  4096  8192  16384
//   three consumers   149   218   269   399   437    470   (run 29)
//   two consumers     153   240   305   364   407    417   (run 36)
template <int d>
constexpr int kConsumers(bool short_diagonal) { return d == 64 && !short_diagonal ? 3 : 2; }
inline bool short_diagonal(const Problem& p) {
  const bool edged = p.causal || p.window_left >= 0 || p.window_right >= 0;
  return edged && p.Nq <= 2048;
}

// One thread block per SM computes O_i and L_i for the tiles blockIdx.x, blockIdx.x + gridDim.x, …, a
// tile being one Q_i (B_r rows) of one (batch, head). Warpgroup 0 is the producer, warpgroup 1 + c the
// consumer of rows 64c … 64c + 63 of each Q_i. Fragment names: lane =
// 4·g + t; warp w of a consumer holds rows 16w + g and + 8 of its 64, and in each 8-column n-tile the
// columns 2t and 2t + 1 (the wgmma accumulator layout, steps/device/wgmma.cuh). Row and key indices
// are 32-bit (limits() keeps Nq, Nk below 2^30); offsets into the tensors are 64-bit. Q, K, V are read
// only through their tensor maps ([B·H][Nq][d] and [B·H_kv][Nk][d] as 3-D tensors; packed, [H][total][d]
// with the strides of [total][H][d]: the coordinates are (column, row, slice) either way).
template <class T, int d, int B_c_, int kV, int kC>
__global__ void __launch_bounds__(Tiles<d, B_c_, kC>::kThreads, 1)
attention_kernel(const __grid_constant__ CUtensorMap tm_Q, const __grid_constant__ CUtensorMap tm_K,
                 const __grid_constant__ CUtensorMap tm_V, T* __restrict__ O, float* __restrict__ L, int64_t H,
                 int64_t H_kv, int Nq, int Nk, int64_t T_r, int n_tiles, float scale, bool causal,
                 VariantArgs var) {
  using Tl = Tiles<d, B_c_, kC>;
  constexpr int B_r = Tl::B_r, B_c = Tl::B_c, P = Tl::P, kStages = Tl::kStages, kConsumers = Tl::kConsumers;
  const float scale_log2 = scale * 1.4426950408889634f;  // τ·log2 e: exp(τ x) = 2^(x·τ·log2 e)
  // With a softcap, S_ij becomes logits (τ applied inside the tanh), so the exponent's factor is log2 e;
  // otherwise S_ij stays unscaled as in 08i, and the ALiBi bias is added divided by τ.
  const float z_log2 = kV & kSoftcap ? 1.4426950408889634f : scale_log2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // The 128-byte swizzle is applied to address bits, so every panel starts on a 1024-byte boundary.
  unsigned char* smem = smem_raw + (1024 - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* Q_s = reinterpret_cast<T*>(smem);   // Q_i: [kQBufs] × d/P panels [B_r][P] in shared memory
  T* K_buf = Q_s + Tl::kQBufs * B_r * d;  // K_j ring: [kStages] × d/P panels [B_c][P]
  T* V_buf = K_buf + kStages * B_c * d;  // V_j ring: [kStages] × d/P panels [B_c][P]
  uint64_t* full_Q = reinterpret_cast<uint64_t*>(V_buf + kStages * B_c * d);  // [kQBufs]: Q_i has landed
  uint64_t* empty_Q = full_Q + Tl::kQBufs;  // [kQBufs]: every consumer warp's last S_ij of this Q_i is complete
  uint64_t* full_K = empty_Q + Tl::kQBufs;  // [kStages]: K_j has landed in stage s
  uint64_t* full_V = full_K + kStages;  // [kStages]: V_j has landed in stage s
  uint64_t* empty_K = full_V + kStages;    // [kStages]: every consumer warp is done reading K_j of stage s
  uint64_t* empty_V = empty_K + kStages;   // [kStages]: … and V_j
  uint64_t* tail_V = empty_V + kStages;    // seqused_k: the last V_j of a tile has landed, before its unfilled rows are cleared
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma, setmaxnreg exist only in sm_90a code; limits() refuses other GPUs before any launch
#else

  // Tile t = i + T_r · (b·H + h), as 08g's blockIdx.x; causal: i runs backwards, so the longest come first.
  struct Tile {
    int bh;                // b·H + h
    int i0, j_first, T_c;  // first row of Q_i; the K/V blocks it visits, [j_first, j_first + T_c)
  };
  // Variable length and seqused_k (the kVarlen bit, as 08j's): packed, sequence b is the tokens
  // [q_tok, q_tok + Nq) of Q, O and [k_tok, k_tok + Nk) of K, V. A persistent block meets many
  // sequences, so tile_of moves these, and Nq, Nk, diag, to the tile's sequence; every rule below reads
  // them (the diagonal, the window's and causal edges, the block range, ALiBi, the rows stored).
  const bool packed = (kV & kVarlen) && var.cu_q;
  int q_tok = 0, k_tok = 0;
  int diag = Nk - Nq;
  // The window, bottom-right aligned: query row q sees the keys [key_lo(q), key_hi(q)) (as 08j).
  auto key_lo = [&](int q) { return var.left < 0 ? 0 : max(0, q + diag - var.left); };
  auto key_hi = [&](int q) { return var.right < 0 ? Nk : min(Nk, q + diag + var.right + 1); };
  // Causal tiles differ in length (Q_i visits i + 1 blocks), so they are dealt in pairs, a long one and
  // a short one: the u-th pair of a (batch, head) is i = T_r − 1 − u then i = u, and a block takes two
  // consecutive tiles (one pair) per turn. Dealt one by one, as 08j's order stands, block c got tiles
  // whose i fell in a band of its own (132 blocks, 128 tiles per head: block 0 only long ones), and the
  // slowest blocks set the time: 409 against 08j's 647 TFLOP/s at N = 16384, d = 128 (H100).
  //
  // Variable length: T_r counts the Q blocks of the longest sequence (p.Nq is max_seqlen_q), so the
  // tiles are still t = u + T_r · (b·H + h), and a sequence of T_r(b) = ⌈Nq_b / B_r⌉ < T_r blocks leaves
  // the tiles u ≥ T_r(b) empty. Its pairs are made over its own T_r(b) (u → i is the same bijection of
  // [0, T_r(b)), so each Q_i is visited once) and stay (long, short); the empty tiles come last in each
  // (batch, head) and are marked i0 ≥ Nq. The producer and the consumers count ring stages, tail_V
  // uses and Q_i's phases over the block's whole life, so both skip an empty tile before it takes any
  // (they walk the same list and read the same offsets). What this leaves unbalanced in a ragged batch:
  // a block's turn may fall on empty tiles while another's falls on a long sequence's, and a pair's
  // length is that of its sequence, so the blocks that draw the longest sequences set the time. To
  // balance it the list would hold only existing tiles, ordered by work: FlashAttention-3's varlen
  // scheduler walks only the blocks that exist (a prefix sum of ⌈Nq_b / B_r⌉ over the batch, a warp
  // searching it for tile t), and its later versions sort the sequences, longest first, before dealing
  // them. Not done here: correctness first, and no GPU run has measured what it would buy.
  auto tile_of = [&](int t) {
    Tile x;
    const int u = int(t % T_r);
    int64_t T_r_b = T_r;  // Q blocks of this tile's sequence
    if constexpr ((kV & kVarlen) != 0) {
      const int b = int(t / T_r / H);
      if (packed) {
        q_tok = var.cu_q[b], k_tok = var.cu_k[b];
        Nq = var.cu_q[b + 1] - q_tok, Nk = var.cu_k[b + 1] - k_tok;
      }
      if (var.used_k) Nk = var.used_k[b];
      diag = Nk - Nq;
      T_r_b = ceil_div(Nq, B_r);
      if (u >= T_r_b) {  // past the sequence's end: an empty tile
        x.bh = 0, x.i0 = Nq, x.j_first = 0, x.T_c = 0;
        return x;
      }
    }
    const int i = int(causal ? (u % 2 == 0 ? T_r_b - 1 - u / 2 : u / 2) : u);
    x.bh = int(t / T_r);
    x.i0 = i * B_r;
    const int last_row = (x.i0 + B_r < Nq ? x.i0 + B_r : Nq) - 1;
    const int n_begin = key_lo(x.i0), n_end = key_hi(last_row);
    x.j_first = n_begin / B_c;
    x.T_c = n_end > n_begin ? ceil_div(n_end, B_c) - x.j_first : 0;
    return x;
  };
  // This block's tiles: blockIdx.x + k·gridDim.x, or, causal, the pairs (2u, 2u + 1), u = blockIdx.x + k·gridDim.x.
  auto first_tile = [&] { return causal ? 2 * int(blockIdx.x) : int(blockIdx.x); };
  auto next_tile = [&](int t) { return !causal ? t + int(gridDim.x) : t % 2 == 0 ? t + 1 : t - 1 + 2 * int(gridDim.x); };

  if (threadIdx.x == 0) {  // the barriers, before either role touches them
    for (int q = 0; q < Tl::kQBufs; ++q) {
      tma::init(&full_Q[q], 1);
      tma::init(&empty_Q[q], 4 * kConsumers);  // one arrival per consumer warp
    }
    for (int s = 0; s < kStages; ++s) {
      tma::init(&full_K[s], 1);               // the producer's one arrive_expect_tx (+ the bytes)
      tma::init(&full_V[s], 1);
      tma::init(&empty_K[s], 4 * kConsumers);  // one arrival per consumer warp
      tma::init(&empty_V[s], 4 * kConsumers);
    }
    if constexpr (kV & kVarlen) tma::init(tail_V, 1);
    tma::fence_init();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles only meet at mbarriers

  if (threadIdx.x < 128) {
    // ---- Producer (lines 4 and 7 of FA2 Algorithm 1: the loads of Q_i and of K_j, V_j) ------------
    tma::regs_dec<Tl::kProducerRegs>();
    if (threadIdx.x == 0) {
      int blocks = 0;  // K/V blocks loaded so far, over every tile: the ring's position and parity
      int n = 0;       // tiles so far: Q_i's buffer n % kQBufs and its parity
      int tails = 0;   // seqused_k: the blocks landed on tail_V so far, its parity
      for (int tt = first_tile(); tt < n_tiles; tt = next_tile(tt), ++n) {
        const Tile x = tile_of(tt);
        if constexpr ((kV & kVarlen) != 0)
          if (x.i0 >= Nq) {  // an empty tile (see tile_of): it takes no Q_i phase, no stage
            --n;
            continue;
          }
        const int qb = n % Tl::kQBufs;  // the tile kQBufs before this one has released its buffer
        tma::wait(&empty_Q[qb], (n / Tl::kQBufs & 1) ^ 1);
        tma::arrive_expect_tx(&full_Q[qb], B_r * d * sizeof(T));
#pragma unroll
        for (int p = 0; p < d / P; ++p)  // the (batch, head) slice; packed, the head
          tma::load_3d(Q_s + qb * B_r * d + p * B_r * P, &tm_Q, p * P, q_tok + x.i0, int(packed ? x.bh % H : x.bh),
                       &full_Q[qb]);
        const int h = int(x.bh % H);
        // The (batch, K/V head) slice (GQA/MQA); packed, the K/V head.
        const int kv = int(packed ? h / (H / H_kv) : x.bh / H * H_kv + h / (H / H_kv));
        for (int j = 0; j < x.T_c; ++j) {  // the j-th block visited: K_{j_first + j}
          const int q = blocks + j;
          const int s = q % kStages, k0 = k_tok + (x.j_first + j) * B_c;
          const uint32_t ph = uint32_t(q / kStages & 1);
          tma::wait(&empty_K[s], ph ^ 1);  // K of stage s was released by every consumer warp
          tma::arrive_expect_tx(&full_K[s], B_c * d * sizeof(T));
#pragma unroll
          for (int p = 0; p < d / P; ++p)
            tma::load_3d(K_buf + s * B_c * d + p * B_c * P, &tm_K, p * P, k0, kv, &full_K[s]);
          tma::wait(&empty_V[s], ph ^ 1);
          // seqused_k: the rows of a cache past its used keys may hold anything, NaN included. The mask
          // sets their logits to −∞ (an assignment, so a NaN in K_j goes too), but P̃ = 0 times a NaN of
          // V_j is NaN in O_i: the last block's unfilled rows of V_j are cleared before the consumers see
          // it. The copy lands on tail_V (one last block per Q_i, but many Q_i per thread block: its
          // parity is the count of its uses, tails), this thread writes the zeros
          // and orders them before the tensor cores' reads (fence.proxy.async), then arrives on full_V.
          // Packed sequences alone need none of this: their rows past N_k are the next sequence's keys.
          const int unfilled = (kV & kVarlen) && var.used_k ? (x.j_first + j + 1) * B_c - Nk : 0;
          uint64_t* landed = unfilled > 0 ? tail_V : &full_V[s];
          tma::arrive_expect_tx(landed, B_c * d * sizeof(T));  // V_j on its own barrier: S_ij needs only K_j
#pragma unroll
          for (int p = 0; p < d / P; ++p)
            tma::load_3d(V_buf + s * B_c * d + p * B_c * P, &tm_V, p * P, k0, kv, landed);
          if (unfilled > 0) {
            tma::wait(tail_V, uint32_t(tails++ & 1));
            for (int p = 0; p < d / P; ++p)  // rows B_c − unfilled … B_c − 1 of each [B_c][P] panel, whole
              for (int r = B_c - unfilled; r < B_c; ++r)  // rows (the swizzle permutes within a row)
#pragma unroll
                for (int e = 0; e < P / 8; ++e)
                  *reinterpret_cast<uint4*>(V_buf + s * B_c * d + p * B_c * P + r * P + 8 * e) = make_uint4(0, 0, 0, 0);
            wgmma::fence_proxy_async();
            tma::arrive(&full_V[s]);
          }
        }
        blocks += x.T_c;
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
  // The tile being computed, set at the top of each tile (the functions below read them).
  int i0 = 0;      // first row of Q_i
  int row0 = 0;    // this thread's row g, as a row of Q (where softmax does not recompute it)
  float slope = 0.f;  // ALiBi: the head's slope, in the units of S_ij when it is biased (08j)
  const T* Q_c = Q_s;  // this consumer's 64 rows within each panel of the tile's Q_i (set per tile)

  // Pingpong (FA3 §3.1): the consumers take turns issuing their products. Consumer c waits at named
  // barrier t(c) = 2 + kConsumers + c for its turn, issues, and hands the turn on at t((c + 1) % kConsumers); its softmax
  // then runs while the next consumer's products occupy the tensor cores. The last consumer hands the
  // first its first turn. Every bar.sync meets exactly 128 arrivals of the consumer before it.
  // Barrier ids 2 + kConsumers … (as 08j; 1 + c, 08j's epilogue barrier, is unused); each counts 256 threads: the 128 of the
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
  // fresh: the tile's first product, O_i = P̃_ij V_j (its first k-step ignores O_i's old contents).
  // O_i is never zeroed by ordinary instructions: between tiles its registers hold the previous
  // tile's product until that tile's epilogue, and a zeroing there made ptxas serialize every wgmma
  // of the kernel (C7515, "non wgmma instructions defining accumulator registers"; 0.6× its base, run 59).
  auto issue_PV = [&](const uint32_t (&a)[B_c / 16][4], const T* V_s, bool fresh) {
    wgmma::fence();  // the rescaled O_i and the packed P̃_ij are written before the tensor cores read them
#pragma unroll
    for (int k = 0; k < B_c / 16; ++k)
#pragma unroll
      for (int p = 0; p < d / P; ++p)  // V_j rows 16k.. of panel p: 16 rows of 2P bytes further on
        wgmma::mma_rs<T, P>(reinterpret_cast<float(&)[P / 2]>(O_i[p * P / 8]), a[k],
                            wgmma::desc<P>(V_s + p * B_c * P + 16 * k * P, B_c * P * sizeof(T)), k > 0 || !fresh);
    wgmma::commit();
  };
  // Line 9 on S_ij of the block at key j0: the variants' logits, the mask, then the online softmax of
  // 08g, S_ij becoming P̃_ij in place. O_i is NOT rescaled here (a product may still be adding into it):
  // alpha[r] is returned.
  auto softmax = [&](float (&S)[B_c / 8][4], int j0, float (&alpha)[2]) {
    // This thread's row g as a row of Q, recomputed here or kept in row0 for the whole tile. At the
    // register cap ptxas (13.0) turns on that one register: kept, the plain d = 128, B_c = 176 kernel
    // spills 40 bytes a thread in its main loop (ncu, H100: 3.9 M spill requests, 882 µs against 08j's
    // 860 at the headline); recomputed, the three-consumer d = 64 kernel spills 60 and the per-sequence
    // (kVarlen) d = 128 ones 60–88. Each instantiation takes the choice that spills less (the
    // resources table in the README lists what is left).
    constexpr bool kRecompute = kConsumers == 2 && (kV & kVarlen) == 0;
    const int row_g = kRecompute ? i0 + 64 * c + 16 * warp + g : row0;
    if constexpr (kV & kSoftcap) {  // z = c·tanh(τ S / c): the one changed line of the softcap
      const float tau_c = scale / var.softcap;
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[n][e] = var.softcap * tanh_fast(S[n][e] * tau_c);
    }
    if constexpr (kV & kAlibi) {  // z −= slope·|q + diag − k|: the one changed line of ALiBi
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            S[n][2 * r + e] -= slope * fabsf(float(row_g + 8 * r + diag - (j0 + 8 * n + 2 * t + e)));
    }
    if (j0 < key_lo(i0 + 64 * c + 63) || j0 + B_c > key_hi(i0 + 64 * c)) {  // the block crosses an edge
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Row row_g + 8r sees keys [lo, hi): in this block, the columns [first, seen) of S_ij.
        const int row = row_g + 8 * r;
        const int lo = key_lo(row) - j0, hi = key_hi(row) - j0;
        const int first = lo < 0 ? 0 : lo, seen = hi < 0 ? 0 : hi > B_c ? B_c : hi;
#pragma unroll
        for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * n + 2 * t + e >= seen || 8 * n + 2 * t + e < first) S[n][2 * r + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m_new = m_i[r];
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n) m_new = fmaxf(m_new, fmaxf(S[n][2 * r], S[n][2 * r + 1]));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
      const float m_sub = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, z_log2);  // (as 08g)
      alpha[r] = mma::exp2_approx(__fmul_rn(m_i[r], z_log2) - m_sub);  // 0 at first
      m_i[r] = m_new;
      float rowsum = 0.f;
#pragma unroll
      for (int n = 0; n < B_c / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // one FFMA, one EX2; S_ij becomes P̃_ij in place
          float& x = S[n][2 * r + e];
          x = mma::exp2_approx(fmaf(x, z_log2, -m_sub));
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

  // ---- Epilogue (lines 12–15) of a finished tile: O_i = diag(ℓ_i)⁻¹ O_i, L_i = τ m_i + log ℓ_i, rows past
  // Nq not stored. O_i leaves from registers: the thread's two neighbouring columns in one 4-byte store
  // (Q_i's shared tile, 08g's staging buffer, may already hold a later tile's Q_i). Where it goes is
  // taken when the tile ends (Out), because the next tile's tile_of moves Nq and the sequence's offsets.
  struct Out {
    T* O_g;      // O_i: [min(B_r, Nq − i0)][d] in HBM, rows ld_O apart (packed: H·d, else d)
    float* L_g;  // L_i: [min(B_r, Nq − i0)] in HBM
    int rows;    // Nq − i0: the rows of Q_i that exist
  };
  auto out_of = [&](const Tile& x) {
    const int64_t h = x.bh % H;
    return Out{O + (packed ? (int64_t(q_tok) + x.i0) * H + h : int64_t(x.bh) * Nq + x.i0) * d,
               L + (packed ? h * var.total_q + q_tok : int64_t(x.bh) * Nq) + x.i0, Nq - x.i0};
  };
  auto store = [&](const Out& o, const float (&m)[2], const float (&l_part)[2]) {
    const int64_t ld_O = packed ? H * d : d;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_part[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);  // the quad's 4 partial sums: the row's ℓ_i
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      // ℓ_i = 0 only for a row that sees no key: then O = 0 and L = +∞, so the backward's exp(S − L) is 0.
      const float inv_l = l > 0.f ? 1.f / l : 0.f;
      const int row = 64 * c + 16 * warp + g + 8 * r;  // within Q_i
      if (row < o.rows) {
#pragma unroll
        for (int n = 0; n < d / 8; ++n)
          *reinterpret_cast<uint32_t*>(o.O_g + int64_t(row) * ld_O + 8 * n + 2 * t) =  // (a tile that sees no
              l > 0.f ? mma::pack2<T>(O_i[n][2 * r] * inv_l, O_i[n][2 * r + 1] * inv_l) : 0u;  // key: O_i is stale)
        if (t == 0) o.L_g[row] = log_sum_exp(m[r], l, kV & kSoftcap ? 1.f : scale, z_log2);
      }
    }
  };

  // ---- The tiles of this thread block, and in each the main loop (lines 6–11) of 08j: while the
  // softmax of S_ij runs, the tensor cores compute O_i += P̃_i,j−1 V_j−1. The j-th block of the block's
  // life lives in stage j % kStages (parity j / kStages), counted across tiles as the producer does.
  // Across tiles the loop does not stop: a tile's last product, O_i += P̃ V of its last block, is issued
  // beside the next tile's first S_ij and runs under that S_ij's softmax, and the tile's epilogue
  // follows it. Stopping at each tile (the last product alone, then the epilogue, then the first
  // S_ij alone and its softmax with nothing beside it) left the tensor cores idle for about one softmax
  // per tile: at d = 64, causal, N = 2048 a tile has 8.5 key blocks on average (README).
  float S_ij[B_c / 8][4];   // S_ij[n][2r + e] = S[64c + 16w + g + 8r][8n + 2t + e], then P̃_ij
  uint32_t a[B_c / 16][4];  // P̃_i,j−1 as the A operand: in flight in the product while S_ij is worked on
  float alpha[2];           // the rescale of O_i's rows g, g + 8 for the block just softmaxed
  int blocks = 0;           // K/V blocks consumed so far, over every tile
  int n_tile = 0;           // tiles so far: Q_i's buffer and parity
  // The tile whose last product is not issued yet (pending): P̃ of its last block is in a, its V_j in
  // stage s_pend (parity ph_pend), its O_i in O_i, its m_i, ℓ_i in m_i, l_i until the next tile's
  // softmax (then in m_pend, l_pend), its destination in pend.
  bool pending = false, fresh_pend = false;  // fresh_pend: that product is its tile's only one
  int s_pend = 0;
  uint32_t ph_pend = 0;
  Out pend{};
  float m_pend[2], l_pend[2];
  auto flush = [&] {  // the pending tile's last product alone, and its epilogue
    if (!pending) return;
    tma::wait(&full_V[s_pend], ph_pend);
    my_turn();
    issue_PV(a, V_buf + s_pend * B_c * d, fresh_pend);
    next_turn();
    wgmma::wait<0>();
    wgmma::pin(reinterpret_cast<float(&)[d / 2]>(O_i));
    release(&empty_V[s_pend]);
    store(pend, m_i, l_i);
    pending = false;
  };
  for (int tt = first_tile(); tt < n_tiles; tt = next_tile(tt), ++n_tile) {
    const Tile x = tile_of(tt);
    if constexpr ((kV & kVarlen) != 0)
      if (x.i0 >= Nq) {  // an empty tile, skipped as the producer skips it: no phase, no stage, no turn
        --n_tile;
        continue;
      }
    const int T_c = x.T_c, j_first = x.j_first;
    i0 = x.i0;
    row0 = i0 + 64 * c + warp * 16 + g;
    if constexpr ((kV & kAlibi) != 0)
      slope = var.slopes[x.bh / H * var.slopes_b + x.bh % H] / (kV & kSoftcap ? 1.f : scale);
    auto stage = [&](int j) { return (blocks + j) % kStages; };
    auto parity = [&](int j) { return uint32_t((blocks + j) / kStages & 1); };
    const int qb = n_tile % Tl::kQBufs;
    Q_c = Q_s + qb * B_r * d + 64 * c * P;
    tma::wait(&full_Q[qb], n_tile / Tl::kQBufs & 1);  // Q_i has landed (lines 4–5)
    if (T_c == 0) flush();  // no S_ij to put beside the pending product
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_pend[r] = m_i[r], l_pend[r] = l_i[r];  // the pending tile's, for its epilogue below
      m_i[r] = -INFINITY;
      l_i[r] = 0.f;  // over this thread's columns only; the row's 4 threads add theirs at the end
    }
    if (T_c > 0) {  // prologue: S_i0, beside the pending tile's last product (if any)
      tma::wait(&full_K[stage(0)], parity(0));
      my_turn();
      issue_S(S_ij, K_buf + stage(0) * B_c * d);
      // Two groups on both paths, so that the waits below are the same: with nothing pending, an
      // empty group stands in for the product.
      if (pending) {
        tma::wait(&full_V[s_pend], ph_pend);
        issue_PV(a, V_buf + s_pend * B_c * d, fresh_pend);
      } else {
        wgmma::commit();
      }
      next_turn();
      wgmma::wait<1>();  // S_i0 is complete; the pending product may still run
      wgmma::pin(reinterpret_cast<float(&)[B_c / 2]>(S_ij));
      release(&empty_K[stage(0)]);
      softmax(S_ij, j_first * B_c, alpha);  // alpha unused: the tile's first product starts O_i
      wgmma::wait<0>();  // the pending tile's O_i is complete: its epilogue
      if (pending) {
        wgmma::pin(reinterpret_cast<float(&)[d / 2]>(O_i));
        release(&empty_V[s_pend]);
        store(pend, m_pend, l_pend);
        pending = false;
      }
    }
    if (T_c > 0) pack(S_ij, a);  // O_i starts with the first product (fresh)
    for (int j = 1; j < T_c; ++j) {
      const int s = stage(j), s_prev = stage(j - 1);
      tma::wait(&full_K[s], parity(j));  // line 7: K_j has landed
      my_turn();
      issue_S(S_ij, K_buf + s * B_c * d);           // S_ij …
      tma::wait(&full_V[s_prev], parity(j - 1));    // (V_j−1 has landed)
      issue_PV(a, V_buf + s_prev * B_c * d, j == 1);  // … and O_i += P̃_i,j−1 V_j−1, both in flight
      next_turn();
      wgmma::wait<1>();  // S_ij is complete; the product into O_i may still run
      wgmma::pin(reinterpret_cast<float(&)[B_c / 2]>(S_ij));
      release(&empty_K[s]);  // K_j is read: the producer may load K_j+kStages now
      softmax(S_ij, (j_first + j) * B_c, alpha);  // overlaps the product into O_i
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
    release(&empty_Q[qb]);  // every S_ij of this tile is complete: the buffer may take a later Q_i
    if (T_c > 0) {          // the last block's product waits for the next tile's first S_ij (or flush)
      pending = true;
      s_pend = stage(T_c - 1), ph_pend = parity(T_c - 1), fresh_pend = T_c == 1;
      pend = out_of(x);
    } else {
      store(out_of(x), m_i, l_i);  // a tile that sees no key: O = 0, L = +∞
    }
    blocks += T_c;
  }
  flush();  // the last tile's last product and epilogue
  if (c == 0) my_turn();  // the last consumer's final hand-over: every named barrier ends complete
#endif
}

size_t workspace_bytes(const Problem&) { return 0; }

std::string limits(const Problem& p) {
  if (p.Nq >= (int64_t(1) << 30) || p.Nk >= (int64_t(1) << 30))
    return "keeps row and key indices in 32 bits: Nq = " + std::to_string(p.Nq) +
           " and Nk = " + std::to_string(p.Nk) + " must both be below 2^30";
  const int64_t B_r = 64 * (p.d == 64 ? kConsumers<64>(short_diagonal(p)) : 2);  // Tiles<d, ·, ·>::B_r
  const int64_t tiles = ceil_div<int64_t>(p.Nq, B_r) * p.B * p.H;
  if (tiles > INT_MAX)
    return "counts its tiles (Q blocks of " + std::to_string(B_r) + " rows × batch × head) in int: " +
           std::to_string(tiles) + " exceed 2^31 − 1";
  if (p.B * p.H > INT_MAX)
    return "addresses the (batch, head) slices of its tensor maps with 32-bit coordinates: B·H = " +
           std::to_string(p.B * p.H) + " exceeds 2^31 − 1";
  return "";
}

template <class T, int d, int B_c, int kV, int kC>
void launch(const Problem& p, const ForwardArgs& a) {
  using Tl = Tiles<d, B_c, kC>;
  constexpr int B_r = Tl::B_r, kStages = Tl::kStages, kThreads = Tl::kThreads;
  const int64_t T_r = ceil_div<int64_t>(p.Nq, B_r);
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // The tensor maps: Q as [B·H][Nq][d] in boxes of [B_r][64], K and V as [B·H_kv][Nk][d] in boxes of [B_c][64].
  // Packed (varlen, as 08j): Q as H slices d apart of total_q rows H·d apart, K and V likewise with
  // H_kv; a box's rows past a sequence's end are the next sequence's, which the kernel masks or drops.
  const bool vl = p.varlen();
  const CUtensorMap tm_Q = tma::make_tensor_map(a.q, bf16, vl ? p.H : p.B * p.H, vl ? p.total_q() : p.Nq, d, B_r,
                                                "Q", p.q_stride(), vl ? d : 0);
  const CUtensorMap tm_K = tma::make_tensor_map(a.k, bf16, vl ? p.H_kv : p.B * p.H_kv, vl ? p.total_k() : p.Nk, d,
                                                B_c, "K", p.kv_stride(), vl ? d : 0);
  const CUtensorMap tm_V = tma::make_tensor_map(a.v, bf16, vl ? p.H_kv : p.B * p.H_kv, vl ? p.total_k() : p.Nk, d,
                                                B_c, "V", p.kv_stride(), vl ? d : 0);
  // Q_i's buffers, the K and V rings, 2·kQBufs + 1 + 4·kStages barriers of 8 bytes (tail_V: seqused_k's);
  // 1024 for the panels' alignment.
  constexpr int kQBufs = Tl::kQBufs;
  const size_t smem = size_t(kQBufs * B_r + 2 * kStages * B_c) * d * sizeof(T) + 8 * (2 * kQBufs + 1 + 4 * kStages) + 1024;
  auto kernel = attention_kernel<T, d, B_c, kV, kC>;
  allow_smem(kernel, smem);
  // One block per SM (each takes an SM's shared memory and registers), or one per tile if fewer.
  int dev = 0, sms = 0;
  FL_CUDA(cudaGetDevice(&dev));
  FL_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t n_tiles = T_r * p.B * p.H;  // varlen: T_r of the longest sequence, the others' tiles past their end empty
  const int64_t units = p.causal ? ceil_div<int64_t>(n_tiles, 2) : n_tiles;  // causal: pairs of tiles
  unsigned grid = unsigned(units < sms ? units : sms);
  // FLASHLADDER_PERSISTENT_GRID, if set (the tests): at most that many blocks. Small problems (every
  // variable-length test case) have fewer tiles than SMs, so each block would take one and the walk
  // across tiles (empty tiles skipped, the counters and tail_V's parity carried over) would go untested.
  if (const auto v = env_knob("FLASHLADDER_PERSISTENT_GRID", 1, INT64_MAX, "the most blocks"); v && *v < grid)
    grid = unsigned(*v);
  kernel<<<dim3(grid), dim3(kThreads), smem, static_cast<cudaStream_t>(a.stream)>>>(
      tm_Q, tm_K, tm_V, static_cast<T*>(a.o), a.lse, p.H, p.H_kv, int(p.Nq), int(p.Nk), T_r, int(n_tiles),
      float(p.softmax_scale()), p.causal,
      VariantArgs::of(p, a.alibi_slopes, a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k));
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  // The masked tile (B_c = 128 at d = 128) wherever a mask has a diagonal edge: causal or a window;
  // at d = 64 two consumers where that diagonal is short (kConsumers).
  const bool edged = p.causal || p.window_left >= 0 || p.window_right >= 0;
  const int kv = VariantArgs::bits(p);
  const bool lengths = VariantArgs::per_sequence(p);  // varlen or seqused_k: the kVarlen bit
  dispatch<TmaD>(p, [&](auto T_, auto d_) {
    using T = decltype(T_);
    constexpr int d = decltype(d_)::value;
    auto with_bc = [&](auto kv_) {
      constexpr int K = decltype(kv_)::value;
      if (!edged)
        launch<T, d, kBc<d>(false), K, kConsumers<d>(false)>(p, a);
      else if (!short_diagonal(p))
        launch<T, d, kBc<d>(true), K, kConsumers<d>(false)>(p, a);
      else
        launch<T, d, kBc<d>(true), K, kConsumers<d>(true)>(p, a);
    };
    auto with_len = [&](auto kv_) {
      if (lengths) with_bc(std::integral_constant<int, decltype(kv_)::value | kVarlen>{});
      else with_bc(kv_);
    };
    switch (kv) {
      case 0: with_len(std::integral_constant<int, 0>{}); break;
      case kSoftcap: with_len(std::integral_constant<int, kSoftcap>{}); break;
      case kAlibi: with_len(std::integral_constant<int, kAlibi>{}); break;
      default: with_len(std::integral_constant<int, kSoftcap | kAlibi>{}); break;
    }
  });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s08k

// flashladder — step 03: standard attention (the seeds' Algorithm 0) on the GPU.
//
// Step 01's three lines, one kernel each, with S and P written out in device memory in fp32:
//
//   kernel 1  scores:   S = scale · Q Kᵀ              [B][H][Nq][Nk]   (Algorithm 0, line 1)
//   kernel 2  softmax:  m = rowmax(S), ℓ = rowsum(e^{S − m}), P = e^{S − m} / ℓ,
//                       L = m + log ℓ                 [B][H][Nq][Nk], [B][H][Nq]   (line 2)
//   kernel 3  output:   O = P V                       [B][H][Nq][d]    (line 3)
//
// Kernels 1 and 3 are plain 16 × 16 tiled matrix products: one thread per output element, the
// block stages 16 × 16 tiles of both operands in shared memory so that every global load is
// coalesced and each loaded value is used 16 times. Kernel 2 gives each row of S to one warp. The
// causal mask (bottom-right: query i sees key j iff j <= i + Nk − Nq) is applied by the softmax.
//
// Extra memory: S and P, 2·B·H·Nq·Nk floats — 8 GiB at the headline problem (B = 4, H = 16,
// N = 4096). Device memory traffic is O(N²) too: S is written once and read three times (max,
// sum, P), P written once and read once. Steps 04 on never write either.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "steps/device/math.cuh"
#include "steps/launch.cuh"

namespace fl::s03 {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr int TILE = 16;          // kernels 1 and 3: 16 × 16 outputs per thread block, one per thread
constexpr int ROWS_PER_BLOCK = 8; // kernel 2: one warp per row of S, 8 warps per thread block

// ---- Kernel 1: S = scale · Q Kᵀ ------------------------------------------------------------------

// Thread (x, y) of a block computes S[i0 + y][j0 + x]. Blocks are numbered (b·H + h, i tile, j tile)
// with the j tile fastest, all in blockIdx.x, so no grid dimension limits B·H.
template <class T, int d>
__global__ void scores(const T* __restrict__ Q, const T* __restrict__ K, float* __restrict__ S, int H,
                       int H_kv, int Nq, int Nk, float scale, int tiles_i, int tiles_j) {
  __shared__ float Q_t[TILE][TILE];      // [16 rows of Q][16 columns of d]
  __shared__ float K_t[TILE][TILE + 1];  // [16 rows of K][16 columns of d]; +1: K_t[x][k] hits 16 banks
  const int64_t blk = blockIdx.x;
  const int j0 = int(blk % tiles_j) * TILE, i0 = int(blk / tiles_j % tiles_i) * TILE;
  const int64_t bh = blk / tiles_j / tiles_i;
  const int64_t bh_kv = bh / H * H_kv + bh % H / (H / H_kv);  // query head h reads K/V head h / (H / H_kv)
  const T* Q_bh = Q + bh * Nq * d;  // [Nq][d]
  const T* K_bh = K + bh_kv * Nk * d;  // [Nk][d]
  const int x = int(threadIdx.x), y = int(threadIdx.y);

  float acc = 0.f;
  for (int k0 = 0; k0 < d; k0 += TILE) {
    // 16 threads of a row read 16 consecutive elements of one row of Q (of K): coalesced.
    Q_t[y][x] = i0 + y < Nq ? to_float(Q_bh[int64_t(i0 + y) * d + k0 + x]) : 0.f;
    K_t[y][x] = j0 + y < Nk ? to_float(K_bh[int64_t(j0 + y) * d + k0 + x]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc = fmaf(Q_t[y][k], K_t[x][k], acc);
    __syncthreads();
  }
  if (i0 + y < Nq && j0 + x < Nk) S[(bh * Nq + i0 + y) * Nk + j0 + x] = scale * acc;
}

// ---- Kernel 2: P = softmax(S) row by row, and L = m + log ℓ ---------------------------------------

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per row of S; consecutive lanes read consecutive keys (coalesced). Three passes over the
// row, as Algorithm 0 writes it: the max, the sum of exponentials, then P.
__global__ void softmax_rows(const float* __restrict__ S, float* __restrict__ P, float* __restrict__ L,
                             int64_t rows, int Nq, int Nk, bool causal) {
  const int64_t row = int64_t(blockIdx.x) * ROWS_PER_BLOCK + threadIdx.x / 32;  // (b·H + h)·Nq + i
  const int lane = int(threadIdx.x % 32);
  if (row >= rows) return;  // the whole warp leaves together: no shuffle is left half-done
  const int i = int(row % Nq);
  // Causal, bottom-right aligned: row i sees keys 0 … i + Nk − Nq (none if that is negative).
  const int n = causal ? max(0, min(Nk, i + Nk - Nq + 1)) : Nk;
  const float* S_row = S + row * Nk;  // [Nk]
  float* P_row = P + row * Nk;        // [Nk]

  float m = -inf;
  for (int j = lane; j < n; j += 32) m = fmaxf(m, S_row[j]);
  m = warp_max(m);
  float l = 0.f;
  for (int j = lane; j < n; j += 32) l += __expf(S_row[j] - m);
  l = warp_sum(l);
  // A row that sees no key (n = 0): P = 0, so O = 0, and L = +∞. Otherwise ℓ >= 1 (the max's term).
  const float inv = n > 0 ? 1.f / l : 0.f;
  for (int j = lane; j < Nk; j += 32) P_row[j] = j < n ? __expf(S_row[j] - m) * inv : 0.f;
  if (lane == 0) L[row] = n > 0 ? m + logf(l) : inf;
}

// ---- Kernel 3: O = P V ------------------------------------------------------------------------------

// Thread (x, y) of a block computes O[i0 + y][c0 + x]; blocks numbered (b·H + h, i tile, c tile).
template <class T, int d>
__global__ void output(const float* __restrict__ P, const T* __restrict__ V, T* __restrict__ O, int H, int H_kv,
                       int Nq, int Nk, int tiles_i) {
  constexpr int tiles_c = d / TILE;
  __shared__ float P_t[TILE][TILE];  // [16 rows of P][16 keys]
  __shared__ float V_t[TILE][TILE];  // [16 keys][16 columns of V]
  const int64_t blk = blockIdx.x;
  const int c0 = int(blk % tiles_c) * TILE, i0 = int(blk / tiles_c % tiles_i) * TILE;
  const int64_t bh = blk / tiles_c / tiles_i;
  const int64_t bh_kv = bh / H * H_kv + bh % H / (H / H_kv);
  const float* P_bh = P + bh * Nq * Nk;  // [Nq][Nk]
  const T* V_bh = V + bh_kv * Nk * d;    // [Nk][d]
  T* O_bh = O + bh * Nq * d;             // [Nq][d]
  const int x = int(threadIdx.x), y = int(threadIdx.y);

  float acc = 0.f;
  for (int j0 = 0; j0 < Nk; j0 += TILE) {
    // Past Nq or Nk: zeros, so the partial tile adds nothing and nothing is read out of bounds.
    P_t[y][x] = i0 + y < Nq && j0 + x < Nk ? P_bh[int64_t(i0 + y) * Nk + j0 + x] : 0.f;
    V_t[y][x] = j0 + y < Nk ? to_float(V_bh[int64_t(j0 + y) * d + c0 + x]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < TILE; ++j) acc = fmaf(P_t[y][j], V_t[j][x], acc);
    __syncthreads();
  }
  if (i0 + y < Nq) O_bh[int64_t(i0 + y) * d + c0 + x] = from_float<T>(acc);
}

// ---- The launcher ---------------------------------------------------------------------------------

constexpr int64_t kMaxN = int64_t(1) << 30;  // rows and keys are indexed with int inside the kernels

size_t workspace_bytes(const Problem& p) {
  return 2 * size_t(p.score_elems()) * sizeof(float);  // S and P, fp32: the O(N²) of Algorithm 0
}

// Limits that need no device: index ranges and grid sizes.
std::string index_limits(const Problem& p) {
  if (p.Nq > kMaxN || p.Nk > kMaxN)
    return "indexes rows with 32-bit integers: it needs Nq, Nk <= 2^30 (got Nq = " +
           std::to_string(p.Nq) + ", Nk = " + std::to_string(p.Nk) + ")";
  const int64_t max_blocks = std::numeric_limits<int32_t>::max();
  const int64_t tiles_i = ceil_div(p.Nq, int64_t(TILE));
  const int64_t blocks_s = p.B * p.H * tiles_i * ceil_div(p.Nk, int64_t(TILE));
  const int64_t blocks_p = ceil_div(p.B * p.H * p.Nq, int64_t(ROWS_PER_BLOCK));
  if (blocks_s > max_blocks || blocks_p > max_blocks)
    return "launches one thread block per 16 × 16 tile of S: it needs at most 2^31 − 1 of them (got " +
           std::to_string(blocks_s) + ")";
  return "";
}

std::string limits(const Problem& p) {
  std::string why = index_limits(p);
  if (!why.empty()) return why;
  size_t free_b = 0, total_b = 0;
  const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the error; the refusal says what happened
    return std::string("could not ask the device for its free memory: ") + cudaGetErrorString(e);
  }
  const size_t need = workspace_bytes(p);
  if (need > free_b)
    return "writes S and P (2·B·H·Nq·Nk fp32) to device memory: it needs " + std::to_string(need) +
           " bytes, and the device has " + std::to_string(free_b) + " bytes free (of " + std::to_string(total_b) + ")";
  return "";
}

template <class T, int d>
void launch(const Problem& p, const ForwardArgs& a) {
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  float* S = static_cast<float*>(a.workspace);  // [B][H][Nq][Nk]
  float* P = S + p.score_elems();               // [B][H][Nq][Nk]
  const int tiles_i = int(ceil_div(p.Nq, int64_t(TILE))), tiles_j = int(ceil_div(p.Nk, int64_t(TILE)));
  const int64_t BH = p.B * p.H;

  const dim3 block(TILE, TILE);
  scores<T, d><<<dim3(unsigned(BH * tiles_i * tiles_j)), block, 0, stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), S, int(p.H), int(p.H_kv), int(p.Nq), int(p.Nk),
      float(p.softmax_scale()), tiles_i, tiles_j);
  FL_CUDA(cudaGetLastError());

  const int64_t rows = BH * p.Nq;
  softmax_rows<<<dim3(unsigned(ceil_div(rows, int64_t(ROWS_PER_BLOCK)))), dim3(32 * ROWS_PER_BLOCK), 0, stream>>>(
      S, P, a.lse, rows, int(p.Nq), int(p.Nk), p.causal);
  FL_CUDA(cudaGetLastError());

  output<T, d><<<dim3(unsigned(BH * tiles_i * (d / TILE))), block, 0, stream>>>(
      P, static_cast<const T*>(a.v), static_cast<T*>(a.o), int(p.H), int(p.H_kv), int(p.Nq), int(p.Nk), tiles_i);
  FL_CUDA(cudaGetLastError());
}

void forward(const Problem& p, const ForwardArgs& a) {
  dispatch<CudaCoreD>(p, [&](auto T_, auto d_) { launch<decltype(T_), decltype(d_)::value>(p, a); });
}

extern const StepImpl impl = {workspace_bytes, forward, limits, nullptr, nullptr};

}  // namespace fl::s03

// flashladder — app/read_stream.cu: fl_read_stream's kernel, a kernel that only reads. It streams the K
// and V of a decode call into shared memory and touches them, with no arithmetic and no answer, so that
// scripts/compare_torch.py can time it beside the steps at every decode point: how long does any kernel
// of this shape take to read the bytes that the call must read, timed the same way in the same run?
// Issue 17's bar asks ≥ 85% of the copy's bandwidth; at B 1, H_kv 8, Nk 8192 (33.5 MB) a read-only
// program took at least 11.3 µs on an H200 and 14.8 on an H100 (68–75% of the copy), where the bar
// allows 9.2 and 13.1 (runs 128–131, docs/results/explorations/…-read-floor.*). Not a step.
//
// Block x reads keys [t0, t1) (in tiles of 64 rows) of head x / chunks, chunk x % chunks, of K and of V:
// [heads][n][row_bytes] each, rows contiguous. Every thread copies 16-byte pieces (cp.async) into a ring
// of 3 stages, one barrier per stage; the last tile of a head may be partial. Of run 129's read-only
// variants (per-warp rings as in steps 10/10b, block-wide rings, 1-D bulk copies) this one was within 1.5%
// of the fastest at the decode sizes on both GPUs.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "common/cuda.cuh"
#include "common/problem.hpp"  // fl::Error

namespace fl {

namespace {

constexpr int kThreads = 128;
constexpr int kRows = 64;    // keys per stage
constexpr int kStages = 3;   // 2 stages in flight while one is touched
constexpr int64_t kMaxRowBytes = 512;  // d ≤ 256 at 16 bits: 3 · 2 · 64 · 512 = 192 KiB of ring

__device__ unsigned g_sink;  // written only if the data says so (never in practice): keeps the reads

__device__ __forceinline__ void copy16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
               "l"(gmem)
               : "memory");
}

__global__ void __launch_bounds__(kThreads)
read_stream_kernel(const char* __restrict__ K, const char* __restrict__ V, int64_t n, int64_t row_bytes, int chunks) {
  extern __shared__ __align__(128) char ring[];  // [kStages][K, V][kRows][row_bytes]
  const int64_t h = blockIdx.x / chunks, c = blockIdx.x % chunks;
  const int64_t tiles = (n + kRows - 1) / kRows;
  const int64_t t0 = tiles * c / chunks, t1 = tiles * (c + 1) / chunks;
  const int64_t stage = kRows * row_bytes;
  const char* K_h = K + h * n * row_bytes;  // head h's [n][row_bytes]
  const char* V_h = V + h * n * row_bytes;
  auto bytes_of = [&](int64_t t) { return (n - t * kRows < kRows ? n - t * kRows : kRows) * row_bytes; };
  auto load = [&](int64_t t) {  // tile t → slot (t − t0) % kStages
    char* s = ring + (t - t0) % kStages * 2 * stage;
    const int64_t bytes = bytes_of(t);
    for (int64_t i = 16 * threadIdx.x; i < bytes; i += 16 * kThreads) {
      copy16(s + i, K_h + t * stage + i);
      copy16(s + stage + i, V_h + t * stage + i);
    }
  };
  for (int k = 0; k < kStages - 1; ++k) {
    if (t0 + k < t1) load(t0 + k);
    asm volatile("cp.async.commit_group;\n" ::: "memory");  // one group per tile, empty past the end
  }
  unsigned acc = 0;
  for (int64_t t = t0; t < t1; ++t) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");  // tile t's pieces of this thread
    __syncthreads();  // everyone's have landed; everyone is done touching tile t − 1's slot
    if (t + kStages - 1 < t1) load(t + kStages - 1);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    const char* s = ring + (t - t0) % kStages * 2 * stage;
    const int64_t bytes = bytes_of(t);
    for (int64_t i = 4 * threadIdx.x; i < bytes; i += 32 * kThreads) {  // one word in 8 of K and of V
      acc ^= *reinterpret_cast<const unsigned*>(s + i) ^ *reinterpret_cast<const unsigned*>(s + stage + i);
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (acc == 0x9e3779b9u) g_sink = acc;
}

}  // namespace

/// Reads K and V ([heads][n][row_bytes] each, device memory) once with about `blocks` thread blocks
/// (at least one per head), on `stream`. Throws fl::Error naming a bad argument and its limit.
void read_stream(const void* k, const void* v, int64_t heads, int64_t n, int64_t row_bytes, int64_t blocks,
                 void* stream) {
  if (!k || !v) throw Error("read_stream: K and V must be device pointers (got a null one)");
  if (heads < 1 || n < 1) throw Error("read_stream: heads = " + std::to_string(heads) + " and n = " + std::to_string(n) +
                                      " must both be at least 1");
  if (row_bytes < 16 || row_bytes > kMaxRowBytes || row_bytes % 16 != 0)
    throw Error("read_stream: a row of " + std::to_string(row_bytes) + " bytes must be a multiple of 16 from 16 to " +
                std::to_string(kMaxRowBytes) + " (d ≤ 256 at 16 bits)");
  // n near 2^63 overflowed (n + kRows − 1) below before any size was judged: a tensor is bounded first.
  constexpr int64_t kMaxBytes = int64_t(1) << 40;
  if (n > kMaxBytes / row_bytes || heads > kMaxBytes / (n * row_bytes))
    throw Error("read_stream: heads × n × row_bytes = " + std::to_string(heads) + " × " + std::to_string(n) + " × " +
                std::to_string(row_bytes) + " bytes exceeds 2^40 bytes (1 TiB) a tensor");
  if (reinterpret_cast<uintptr_t>(k) % 16 != 0 || reinterpret_cast<uintptr_t>(v) % 16 != 0)
    throw Error("read_stream: K and V must be 16-byte aligned (the copies move 16 bytes)");
  const int64_t tiles = (n + kRows - 1) / kRows;
  const int64_t chunks = std::clamp<int64_t>(blocks / heads, 1, tiles);
  if (heads * chunks > INT_MAX)
    throw Error("read_stream: " + std::to_string(heads * chunks) + " blocks exceed the grid limit 2^31 − 1");
  const int smem = int(kStages * 2 * kRows * row_bytes);
  FL_CUDA(cudaFuncSetAttribute(read_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  read_stream_kernel<<<dim3(unsigned(heads * chunks)), dim3(kThreads), smem, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const char*>(k), static_cast<const char*>(v), n, row_bytes, int(chunks));
  FL_CUDA(cudaGetLastError());
}

}  // namespace fl

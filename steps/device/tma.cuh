// flashladder — steps/device/tma.cuh: Hopper's tensor memory accelerator (TMA), the mbarriers that
// say when its copies have landed, and the register hand-over between warpgroups (sm_90a), used from
// step 08h on. Each device function is one PTX instruction (PTX ISA: "cp.async.bulk.tensor",
// "mbarrier", "setmaxnreg", "bar"); the host half builds the tensor map a copy reads.
//
// A TMA copy moves a whole box of a tensor (here up to 64 columns × 256 rows) from device memory to
// shared memory. One thread issues it; the copy engine computes every address, fills rows past the
// tensor's end with zeros (how a partial tile stays in bounds: nothing is read past the end), applies
// the 128-byte swizzle that wgmma reads (the layout of steps/device/wgmma.cuh), and, when the box has
// landed, adds its byte count to an mbarrier's transaction count.
//
// An mbarrier is a 64-bit object in shared memory with a phase bit. It completes a phase when the
// expected number of threads have arrived AND the expected bytes have landed; a waiter names the
// parity of the phase it waits for (0 first, then 1, 0, …), so a ring of stages reuses its barriers.
//   full[s]:  the producer arrives once, announcing B bytes (arrive_expect_tx); the TMA delivers them.
//   empty[s]: each consumer warp arrives once when it no longer reads stage s.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums: types only, libcuda is not linked (see make_tensor_map)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "common/cuda.cuh"

namespace fl::tma {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Sets up a barrier that completes a phase after `count` arrivals (plus any announced bytes).
__device__ __forceinline__ void init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
/// Makes the initialised barriers visible to the copy engine (then a __syncthreads for the threads).
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/// One arrival that also announces `bytes` still to land (the producer, before issuing the copies).
__device__ __forceinline__ void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
/// One plain arrival (a consumer warp releasing a stage).
__device__ __forceinline__ void arrive(uint64_t* bar) {
  // The phase token it returns goes to the sink `_`: these barriers are waited on by parity.
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
/// Spins until the phase of the given parity has completed. A fresh barrier is in phase 0, and the
/// phase "before" it counts as complete: waiting for parity 1 on it returns at once, which is how the
/// producer's first pass over the empty barriers goes through.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  } while (!done);
}

/// The box at (c0 columns, c1 rows, c2 = the (batch, head) slice) of the tensor map's 3-D tensor →
/// shared memory at dst (1024-byte aligned for the 128-byte swizzle); completes on bar.
__device__ __forceinline__ void load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
}

/// The box at (c0, c1 = the row) of a 2-D tensor map (make_row_map) → shared memory at dst (16-byte
/// aligned); completes on bar. Step 09c: a Q block's L·log2 e and D.
__device__ __forceinline__ void load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

/// dst[k] += src[k] for `bytes` / 4 floats, shared memory → device memory, done by the copy engine
/// (cp.reduce.async.bulk: the additions happen in the L2, one request for the whole block instead of
/// one atomic per element). Closed into a bulk group by bulk_commit, waited for by bulk_wait.
__device__ __forceinline__ void reduce_add_1d(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(dst), "r"(smem_u32(src)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most N bulk groups of this thread are pending; READ: only until their sources in
/// shared memory have been read (the buffer may be refilled), not until the writes are done.
template <int N, bool READ>
__device__ __forceinline__ void bulk_wait() {
  if constexpr (READ) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
/// Orders this thread's generic-proxy accesses to device memory with the copy engine's (async proxy).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/// Warp specialization's register hand-over: a warpgroup that only issues copies gives registers
/// back (dec), the ones that compute take them (inc). Every thread of the warpgroup executes it.
template <int N>
__device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

/// Named barriers (ids 1–15; 0 is __syncthreads): sync waits until `threads` threads have arrived
/// at id; arrive counts this thread without waiting. Lets a subset of the block synchronise.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Host: the driver's tensor-map encoder, reached through the runtime (see make_tensor_map).
inline PFN_cuTensorMapEncodeTiled_v12000 encoder(const std::string& what) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) fn = nullptr;
    cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) throw Error(what + ": the driver has no cuTensorMapEncodeTiled (CUDA driver 12.0 or newer needed)");
  return encode;
}

/// Host: the tensor map of a [slices][rows][cols] row-major tensor of 16-bit elements (Q: slices = B·H,
/// rows = Nq, cols = d), read in boxes of [box_rows][64] with the 128-byte swizzle. Rows past `rows`
/// read as zeros. The driver's encoder is reached through the runtime (cudaGetDriverEntryPointByVersion),
/// so the program links without libcuda and still starts on a machine with no GPU. Throws fl::Error
/// naming the requirement a tensor breaks (alignment, stride, size) before any launch.
/// row_stride, slice_stride (elements; 0: cols and rows·cols, the contiguous tensor) address other
/// layouts with the same coordinates: step 08j's packed Q [total_q][H][d] is rows = total_q tokens of
/// stride H·d and slices = H heads of stride d. The box is still [box_rows][64] in shared memory (the
/// strides need not grow with the dimension: FlashAttention-3 maps its [B][N][H][d] tensors this way).
inline CUtensorMap make_tensor_map(const void* base, bool bf16, int64_t slices, int64_t rows, int64_t cols,
                                   int box_rows, const char* name, int64_t row_stride = 0, int64_t slice_stride = 0) {
  const std::string what = std::string("the TMA tensor map of ") + name;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    throw Error(what + " needs a 16-byte aligned address; this tensor starts at " +
                std::to_string(reinterpret_cast<uintptr_t>(base)) + " (offset " +
                std::to_string(reinterpret_cast<uintptr_t>(base) % 16) + " from 16)");
  if (cols * 2 % 16 != 0)
    throw Error(what + " needs rows of a multiple of 16 bytes: d = " + std::to_string(cols));
  if (slices > (int64_t(1) << 32) || rows > (int64_t(1) << 32))
    throw Error(what + " allows at most 2^32 rows and 2^32 (batch, head) slices: " + std::to_string(rows) +
                " rows, " + std::to_string(slices) + " slices");
  if (row_stride == 0) row_stride = cols;
  if (slice_stride == 0) slice_stride = rows * cols;
  if (slice_stride * 2 >= (int64_t(1) << 40) || row_stride * 2 >= (int64_t(1) << 40))
    throw Error(what + " allows strides (a row, a (batch, head) slice) of less than 2^40 bytes: " +
                std::to_string(row_stride * 2) + " and " + std::to_string(slice_stride * 2) + " bytes");
  if (row_stride * 2 % 16 != 0 || slice_stride * 2 % 16 != 0)
    throw Error(what + " needs strides of a multiple of 16 bytes: " + std::to_string(row_stride * 2) + " and " +
                std::to_string(slice_stride * 2) + " bytes");
  const auto encode = encoder(what);
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(slices)};
  const cuuint64_t strides[2] = {cuuint64_t(row_stride * 2), cuuint64_t(slice_stride * 2)};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                            const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(what + ": cuTensorMapEncodeTiled refused it (CUresult " + std::to_string(int(r)) + ") for " +
                std::to_string(slices) + " × " + std::to_string(rows) + " × " + std::to_string(cols) +
                " elements in boxes of " + std::to_string(box_rows) + " × 64");
  return map;
}

/// Host: the tensor map of `rows` rows of `row_len` floats, one after the other (step 09c's padded L·log2 e
/// and D: one row per Q block), read one whole row per box, with no swizzle.
inline CUtensorMap make_row_map(const float* base, int64_t rows, int row_len, const char* name) {
  const std::string what = std::string("the TMA tensor map of ") + name;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || row_len * 4 % 16 != 0 || row_len > 256)
    throw Error(what + " needs a 16-byte aligned start and rows of a multiple of 16 bytes, at most 256 floats");
  if (rows > (int64_t(1) << 31))
    throw Error(what + " addresses its rows with 32-bit coordinates: " + std::to_string(rows) + " rows");
  const auto encode = encoder(what);
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(row_len), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_len * 4)};
  const cuuint32_t box[2] = {cuuint32_t(row_len), 1};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(what + ": cuTensorMapEncodeTiled refused it (CUresult " + std::to_string(int(r)) + ") for " +
                std::to_string(rows) + " rows of " + std::to_string(row_len) + " floats");
  return map;
}

}  // namespace fl::tma

// flashladder — app/baselines.cu: what the ladder is measured against, on the same GPU, same run.
//
//   cublas_gemm        cuBLAS's dense matrix product (n×n×n): the "% of peak" denominator
//   cublas_attention   standard attention as a user writes it without FlashAttention: batched GEMM for
//                      S = scale·QKᵀ (stored in the storage type), a row-softmax kernel writing P and L,
//                      batched GEMM for O = PV. S and P live in device memory: 2·B·H·Nq·Nk elements.
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include "steps/device/math.cuh"
#include "app/commands.hpp"

namespace fl::cli {

namespace {

void cublas_check(cublasStatus_t s, const char* call, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS error in ") + call + " at app/baselines.cu:" + std::to_string(line) + ": " +
                cublasGetStatusString(s));
}
#define FL_CUBLAS(call) cublas_check((call), #call, __LINE__)

struct Handle {
  cublasHandle_t h{};
  Handle() { FL_CUBLAS(cublasCreate(&h)); }
  ~Handle() { cublasDestroy(h); }
};

// Fills x[0..n) with a hash of the index mapped to [-1, 1): random-looking, never all zeros (a
// matrix product on zeros runs faster than on real data).
template <class T>
__global__ void fill_random(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 16; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = from_float<T>(float(h) * (2.0f / 4294967296.0f) - 1.0f);
  }
}

template <class T>
void fill(DeviceBuffer& b, int64_t n, uint32_t seed) {
  fill_random<T><<<1024, 256>>>(b.as<T>(), n, seed);
  FL_CUDA(cudaGetLastError());
}

cudaDataType cuda_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

template <class F>
Stats time_events(const TimeOptions& opt, F&& launch) {
  cudaEvent_t a, b;
  FL_CUDA(cudaEventCreate(&a));
  FL_CUDA(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int it = 0; it < opt.warmup + opt.reps; ++it) {
    gpu_lead_in();  // as the steps' launches (app/gpu.cu): the events time the GPU's work
    FL_CUDA(cudaEventRecord(a));
    launch(it);
    FL_CUDA(cudaGetLastError());
    FL_CUDA(cudaEventRecord(b));
    FL_CUDA(cudaEventSynchronize(b));
    float t = 0;
    FL_CUDA(cudaEventElapsedTime(&t, a, b));
    if (it >= opt.warmup) ms.push_back(t);
  }
  FL_CUDA(cudaEventDestroy(a));
  FL_CUDA(cudaEventDestroy(b));
  return summarize(ms);
}

// One row of P = softmax(S) per warp, S and P [rows][Nk] in storage type T, L fp32, causal bottom-right.
template <class T>
__global__ void softmax_rows(const T* S, T* P, float* L, int64_t rows, int64_t Nq, int64_t Nk, bool causal) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t i = row % Nq;
  const int64_t last = causal ? i + Nk - Nq + 1 : Nk;  // keys [0, last) visible (<= 0: none)
  const T* s = S + row * Nk;
  T* p = P + row * Nk;
  float m = -INFINITY;
  for (int64_t j = lane; j < last; j += 32) m = fmaxf(m, to_float(s[j]));
  for (int o = 16; o; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float l = 0;
  for (int64_t j = lane; j < last; j += 32) l += __expf(to_float(s[j]) - m);
  for (int o = 16; o; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  for (int64_t j = lane; j < Nk; j += 32) p[j] = from_float<T>(j < last ? __expf(to_float(s[j]) - m) / l : 0.f);
  if (lane == 0) L[row] = last > 0 ? m + logf(l) : INFINITY;
}

}  // namespace

GemmResult cublas_gemm_rate(DType t, int n, const TimeOptions& opt) {
  Handle h;
  const size_t e = size_t(dtype_bytes(t));
  DeviceBuffer A(e * n * n), B(e * n * n), C(e * n * n);
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    fill<T>(A, int64_t(n) * n, 1);
    fill<T>(B, int64_t(n) * n, 2);
  });
  const float one = 1, zero = 0;
  const cublasComputeType_t ct = t == DType::f32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F;
  Stats st = time_events(opt, [&](int) {
    FL_CUBLAS(cublasGemmEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A.get(), cuda_type(t), n, B.get(),
                           cuda_type(t), n, &zero, C.get(), cuda_type(t), n, ct, CUBLAS_GEMM_DEFAULT));
  });
  FL_CUDA(cudaDeviceSynchronize());
  return {2.0 * n * double(n) * n / (st.median_ms * 1e-3) / 1e12, st, n};
}

Stats cublas_attention_time(const Problem& p, const TimeOptions& opt, double* tol_used) {
  if (tol_used) *tol_used = NAN;
  const size_t e = size_t(dtype_bytes(p.dtype));
  const size_t sp_bytes = 2 * e * size_t(p.score_elems());
  size_t free_b = 0, total_b = 0;
  FL_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (sp_bytes > free_b)
    throw Error("cuBLAS standard attention needs " + std::to_string(sp_bytes) + " bytes for S and P; " +
                std::to_string(free_b) + " are free");
  Handle h;
  DeviceBuffer Q(e * p.q_elems()), K(e * p.kv_elems()), V(e * p.kv_elems()), O(e * p.q_elems()),
      L(4 * size_t(p.lse_elems())), S(e * size_t(p.score_elems())), P(e * size_t(p.score_elems()));
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    fill<T>(Q, p.q_elems(), 3);
    fill<T>(K, p.kv_elems(), 4);
    fill<T>(V, p.kv_elems(), 5);
  });
  // Pointer arrays, one GEMM per (b, h): query head h reads K/V head h / (H / H_kv).
  const int64_t BH = p.B * p.H;
  std::vector<const void*> hq(BH), hk(BH), hv(BH), hp(BH);
  std::vector<void*> hs(BH), ho(BH);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t hh = 0; hh < p.H; ++hh) {
      const int64_t x = b * p.H + hh;
      hq[x] = static_cast<char*>(Q.get()) + e * p.q_row(b, hh, 0);
      hk[x] = static_cast<char*>(K.get()) + e * p.kv_row(b, p.kv_head(hh), 0);
      hv[x] = static_cast<char*>(V.get()) + e * p.kv_row(b, p.kv_head(hh), 0);
      hs[x] = static_cast<char*>(S.get()) + e * size_t(x * p.Nq * p.Nk);
      hp[x] = static_cast<char*>(P.get()) + e * size_t(x * p.Nq * p.Nk);
      ho[x] = static_cast<char*>(O.get()) + e * p.q_row(b, hh, 0);
    }
  DeviceBuffer dq(8 * BH), dk(8 * BH), dv(8 * BH), ds(8 * BH), dp(8 * BH), dO(8 * BH);
  FL_CUDA(cudaMemcpy(dq.get(), hq.data(), 8 * BH, cudaMemcpyHostToDevice));
  FL_CUDA(cudaMemcpy(dk.get(), hk.data(), 8 * BH, cudaMemcpyHostToDevice));
  FL_CUDA(cudaMemcpy(dv.get(), hv.data(), 8 * BH, cudaMemcpyHostToDevice));
  FL_CUDA(cudaMemcpy(ds.get(), hs.data(), 8 * BH, cudaMemcpyHostToDevice));
  FL_CUDA(cudaMemcpy(dp.get(), hp.data(), 8 * BH, cudaMemcpyHostToDevice));
  FL_CUDA(cudaMemcpy(dO.get(), ho.data(), 8 * BH, cudaMemcpyHostToDevice));
  const float scale = float(p.softmax_scale()), one = 1, zero = 0;
  const cudaDataType ty = cuda_type(p.dtype);
  const int Nq = int(p.Nq), Nk = int(p.Nk), d = int(p.d);
  return time_events(opt, [&](int) {
    // Row-major S[Nq][Nk] = Q[Nq][d] Kᵀ is column-major Sᵀ[Nk][Nq] = K · Qᵀ: op(A) = Kᵀ-as-stored.
    FL_CUBLAS(cublasGemmBatchedEx(h.h, CUBLAS_OP_T, CUBLAS_OP_N, Nk, Nq, d, &scale, dk.as<const void*>(), ty, d,
                                  dq.as<const void*>(), ty, d, &zero, ds.as<void*>(), ty, Nk, int(BH),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      const int64_t rows = BH * p.Nq;
      softmax_rows<T><<<unsigned(ceil_div<int64_t>(rows, 8)), 256>>>(S.as<T>(), P.as<T>(), L.as<float>(), rows,
                                                                      p.Nq, p.Nk, p.causal);
      FL_CUDA(cudaGetLastError());
    });
    // Row-major O[Nq][d] = P[Nq][Nk] V[Nk][d] is column-major Oᵀ[d][Nq] = Vᵀ Pᵀ.
    FL_CUBLAS(cublasGemmBatchedEx(h.h, CUBLAS_OP_N, CUBLAS_OP_N, d, Nq, Nk, &one, dv.as<const void*>(), ty, d,
                                  dp.as<const void*>(), ty, Nk, &zero, dO.as<void*>(), ty, d, int(BH),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
}

}  // namespace fl::cli

/* flashladder — tests/capi_c.c: app/flashladder.h from C (C11, -Wall -Wextra -pedantic -Werror), linked
 * against libflashladder_capi.so. Three tests (CMakeLists.txt):
 *   capi.c_refusals  no GPU needed: an unknown step, a CPU step, a bad dtype, a null pointer and a bad
 *                    setter are refused with a message that names the problem; fl_reset_variants clears it.
 *   capi.c_forward   a GPU forward (bf16, B 1, H 2, H_kv 1, Nq 5, Nk 77, d 64, causal) of two steps on
 *                    memory this program owns, O and L poisoned with NaN first; O and L are computed
 *                    here in double from the same inputs (bottom-right causal) and compared. Without a GPU
 *                    it says "GPU test skipped" (ctest shows a skip), or fails under FLASHLADDER_REQUIRE_GPU=1.
 *   capi.installed   the refusals again, this file compiled against an installed prefix alone
 *                    (tests/capi_installed.cmake).
 * Inputs are multiples of 1/8 in [-1, 1]: exact in bf16, whose bits are a float's top 16. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashladder.h"  /* app/ in the build tree, <prefix>/include once installed */

static int failures = 0;

static void expect_refusal(int failed, const char* what, const char* needle) {
  const char* msg = fl_last_error();
  if (!failed) {
    printf("FAIL %s: accepted\n", what);
    ++failures;
  } else if (!strstr(msg, needle)) {
    printf("FAIL %s: the message \"%s\" does not say \"%s\"\n", what, msg, needle);
    ++failures;
  } else {
    printf("ok   %s: %s\n", what, msg);
  }
}

static int refusals(void) {
  char dummy[16];
  if (strcmp(fl_last_error(), "") != 0) {
    printf("FAIL fl_last_error before any call: \"%s\"\n", fl_last_error());
    ++failures;
  }
  expect_refusal(fl_workspace_bytes("no_such_step", 1, 2, 1, 5, 77, 64, 1, 0.0, 2, 0) == -1, "an unknown step",
                 "unknown step 'no_such_step'");
  expect_refusal(fl_forward("01_cpu_standard", 1, 2, 1, 5, 77, 64, 1, 0.0, 2, dummy, dummy, dummy, dummy,
                            (float*)dummy, NULL, NULL) == 1,
                 "a CPU step", "runs on the CPU");
  expect_refusal(fl_workspace_bytes("08a_tensor_cores", 1, 2, 1, 5, 77, 64, 1, 0.0, 7, 0) == -1, "dtype 7",
                 "dtype 7 is not 0 (fp32), 1 (fp16) or 2 (bf16)");
  expect_refusal(fl_forward("08a_tensor_cores", 1, 2, 1, 5, 77, 64, 1, 0.0, 2, NULL, dummy, dummy, dummy,
                            (float*)dummy, NULL, NULL) == 1,
                 "a null q", "q is a null pointer");
  fl_set_varlen(-1, NULL, NULL, NULL, NULL);
  expect_refusal(fl_workspace_bytes("08a_tensor_cores", 1, 2, 1, 5, 77, 64, 1, 0.0, 2, 0) == -1,
                 "fl_set_varlen with n = -1", "fl_set_varlen: n = -1 is not allowed");
  fl_reset_variants();
  if (fl_workspace_bytes("08a_tensor_cores", 1, 2, 1, 5, 77, 64, 1, 0.0, 2, 0) < 0) {
    printf("FAIL after fl_reset_variants: %s\n", fl_last_error());
    ++failures;
  } else {
    printf("ok   fl_reset_variants clears a refused setter\n");
  }
  printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}

enum { B = 1, H = 2, H_KV = 1, NQ = 5, NK = 77, D = 64 };

static uint16_t to_bf16(float x) {  /* exact for the inputs here (multiples of 1/8 in [-1, 1]) */
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static float input(uint32_t* state) {  /* a multiple of 1/8 in [-1, 1] */
  *state = *state * 1664525u + 1013904223u;
  return (float)((int)(*state >> 16) % 17 - 8) / 8.0f;
}

#define CUDA_OK(call)                                                                 \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      printf("FAIL %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

static int forward_of(const char* step) {
  static uint16_t q[B * H * NQ * D], k[B * H_KV * NK * D], v[B * H_KV * NK * D], o[B * H * NQ * D];
  static float lse[B * H * NQ];
  uint32_t state = 17;
  for (int i = 0; i < B * H * NQ * D; ++i) q[i] = to_bf16(input(&state));
  for (int i = 0; i < B * H_KV * NK * D; ++i) k[i] = to_bf16(input(&state));
  for (int i = 0; i < B * H_KV * NK * D; ++i) v[i] = to_bf16(input(&state));
  const long long ws_bytes = fl_workspace_bytes(step, B, H, H_KV, NQ, NK, D, 1, 0.0, 2, 0);
  if (ws_bytes < 0) {
    printf("FAIL %s: fl_workspace_bytes refused: %s\n", step, fl_last_error());
    return 1;
  }
  void *dq, *dk, *dv, *dO, *ws = NULL;
  float* dL;
  CUDA_OK(cudaMalloc(&dq, sizeof q));
  CUDA_OK(cudaMalloc(&dk, sizeof k));
  CUDA_OK(cudaMalloc(&dv, sizeof v));
  CUDA_OK(cudaMalloc(&dO, sizeof o));
  CUDA_OK(cudaMalloc((void**)&dL, sizeof lse));
  if (ws_bytes > 0) CUDA_OK(cudaMalloc(&ws, (size_t)ws_bytes));
  CUDA_OK(cudaMemcpy(dq, q, sizeof q, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dk, k, sizeof k, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dO, 0xff, sizeof o));   /* 0xffff: a bf16 NaN */
  CUDA_OK(cudaMemset(dL, 0xff, sizeof lse)); /* 0xffffffff: an fp32 NaN */
  if (fl_forward(step, B, H, H_KV, NQ, NK, D, 1, 0.0, 2, dq, dk, dv, dO, dL, ws, NULL) != 0) {
    printf("FAIL %s: fl_forward: %s\n", step, fl_last_error());
    return 1;
  }
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(o, dO, sizeof o, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lse, dL, sizeof lse, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(dq));
  CUDA_OK(cudaFree(dk));
  CUDA_OK(cudaFree(dv));
  CUDA_OK(cudaFree(dO));
  CUDA_OK(cudaFree(dL));
  CUDA_OK(cudaFree(ws));
  double worst_o = 0, worst_l = 0;
  int bad = 0;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < NQ; ++i) {
      /* L_i = log Σ_{j ≤ i + Nk − Nq} e^{τ q_i·k_j} and O_i = Σ_j e^{τ q_i·k_j − L_i} v_j in double
       * (bottom-right causal; one K/V head for both query heads). */
      const int last = i + NK - NQ;
      double m = -INFINITY, l = 0, s[NK];
      for (int j = 0; j <= last; ++j) {
        double dot = 0;
        for (int c = 0; c < D; ++c) dot += (double)from_bf16(q[(h * NQ + i) * D + c]) * from_bf16(k[j * D + c]);
        s[j] = dot / sqrt((double)D);
        if (s[j] > m) m = s[j];
      }
      for (int j = 0; j <= last; ++j) l += exp(s[j] - m);
      const double want_l = m + log(l), err_l = fabs(lse[h * NQ + i] - want_l);
      if (!(err_l <= 1e-3)) ++bad; /* NaN fails */
      if (!(err_l <= worst_l)) worst_l = err_l;
      for (int c = 0; c < D; ++c) {
        /* |v| <= 1: P rounded to bf16 before P·V (half an ulp, 2^-9 of each weight) and O stored in bf16
         * (2^-9 of |O| <= 1) keep the error under 4e-3; the bound leaves 2.5x that. */
        double want = 0;
        for (int j = 0; j <= last; ++j) want += exp(s[j] - m) * from_bf16(v[j * D + c]);
        const double err = fabs(from_bf16(o[(h * NQ + i) * D + c]) - want / l);
        if (!(err <= 1e-2)) ++bad; /* NaN fails */
        if (!(err <= worst_o)) worst_o = err;
      }
    }
  printf("%s %s: max |O - O_fp64| %.3g (bound 1e-2), max |L - L_fp64| %.3g (bound 1e-3)\n", bad ? "FAIL" : "ok  ",
         step, worst_o, worst_l);
  return bad ? 1 : 0;
}

static int forward(void) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    const char* why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    const char* require = getenv("FLASHLADDER_REQUIRE_GPU");
    if (require && strcmp(require, "") != 0 && strcmp(require, "0") != 0) {
      printf("FAIL FLASHLADDER_REQUIRE_GPU is set but there is no usable GPU: %s\n", why);
      return 1;
    }
    printf("GPU test skipped (set FLASHLADDER_REQUIRE_GPU=1 to make this a failure): %s\n", why);
    return 0;
  }
  const int bad = forward_of("08a_tensor_cores") + forward_of("10b_cluster_merge");
  printf("%s\n", bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "refusals") == 0) return refusals();
  if (argc == 2 && strcmp(argv[1], "forward") == 0) return forward();
  fprintf(stderr, "usage: %s refusals|forward (tests/capi_c.c says what each checks)\n", argv[0]);
  return 2;
}

/* flashladder — app/flashladder.h: the C entry points of libflashladder_capi.so (app/capi.cpp), for C and
 * C++ callers; Python's ctypes callers (scripts/compare_torch.py, compare_variants.py) declare the same
 * signatures. capi.cpp includes this file, so a definition that drifts from its declaration here does
 * not compile; tests/capi_c.c compiles it as C11 and calls it (ctest -R capi.c_).
 *
 * Any registered GPU step, on device memory the caller owns:
 *   fl_workspace_bytes(step, problem…, backward)             scratch the call needs (the caller allocates it)
 *   fl_forward(step, problem…, q, k, v, o, lse, ws, stream)  0 on success; otherwise 1, and fl_last_error()
 *   fl_backward(step, problem…, q, k, v, o, lse, dO, dq, dk, dv, ws, stream)
 * The problem is B, H, H_kv, Nq, Nk, d, causal, scale (<= 0: 1/sqrt(d)), dtype (0 fp32, 1 fp16, 2 bf16);
 * the layout is the ladder's (docs: Q, O [B][H][Nq][d], K, V [B][H_kv][Nk][d], lse [B][H][Nq] fp32).
 * Checks are the program's: a problem the step does not take is refused with a message before any
 * launch, as is a null pointer or a missing workspace. Launches are asynchronous on `stream` (a
 * cudaStream_t; NULL: the default stream); errors of the launch itself are reported.
 * Settings for the calls that follow on the same thread: fl_set_deterministic and the variants (issue
 * 21, docs/variants.md), which fl_reset_variants() clears. A setter's bad argument is refused by the
 * next call, naming the setter. */
#ifndef FLASHLADDER_H
#define FLASHLADDER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The message of this thread's last failed call ("" before any). */
const char* fl_last_error(void);

/** Problem::deterministic for later calls (0 or 1): the backward of a step that has a deterministic
 *  mode (09c) then adds dQ in a fixed order; other steps' backward refuse it. */
void fl_set_deterministic(int on);

/** Sliding window: keys further than left (right) from the diagonal are masked; -1 = unbounded. */
void fl_set_window(int64_t left, int64_t right);
/** Logit soft-capping c·tanh(x / c); 0 turns it off (FlashAttention's convention). */
void fl_set_softcap(double c);
/** ALiBi: mode 0 none, 1 one slope per query head (fp32 [H]), 2 per sequence and head ([B][H]);
 *  slopes where the step runs (device memory for GPU steps), owned by the caller. */
void fl_set_alibi(int mode, const float* slopes);
/** Variable length: n = B + 1 offsets of the packed queries and keys, read from the host arrays cu_q,
 *  cu_k (copied) and passed to the step as the device copies cu_q_dev, cu_k_dev (owned by the caller,
 *  holding the same values). n = 0 turns it off. B, Nq, Nk of later calls are then the number of
 *  sequences and the longest a sequence may be. */
void fl_set_varlen(int n, const int32_t* cu_q, const int32_t* cu_k, const int32_t* cu_q_dev, const int32_t* cu_k_dev);
/** Keys used per sequence (n = B values, host array copied, device copy passed to the step); n = 0: off. */
void fl_set_seqused_k(int n, const int32_t* used, const int32_t* used_dev);
/** Every variant off, and a refused setter's message forgotten. */
void fl_reset_variants(void);

/** Bytes of workspace the forward (backward != 0: the backward) of `step` needs for this problem; -1
 *  and fl_last_error() if the step or the problem is refused. */
long long fl_workspace_bytes(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d,
                             int causal, double scale, int dtype, int backward);

int fl_forward(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal,
               double scale, int dtype, const void* q, const void* k, const void* v, void* o, float* lse, void* ws,
               void* stream);

int fl_backward(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal,
                double scale, int dtype, const void* q, const void* k, const void* v, const void* o, const float* lse,
                const void* dO, void* dq, void* dk, void* dv, void* ws, void* stream);

/** A kernel that only reads: K and V ([heads][n][row_bytes] each) streamed through shared memory once,
 *  with about `blocks` thread blocks (app/read_stream.cu). compare_torch.py times it at every decode
 *  point beside the steps: the time any kernel of this shape needs for the call's bytes. */
int fl_read_stream(const void* k, const void* v, int64_t heads, int64_t n, int64_t row_bytes, int64_t blocks,
                   void* stream);

#ifdef __cplusplus
}
#endif

#endif /* FLASHLADDER_H */

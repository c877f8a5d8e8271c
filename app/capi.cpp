// flashladder — app/capi.cpp: C entry points so Python can call any registered step on tensors
// it owns (PyTorch's device pointers), for the comparison with scaled_dot_product_attention. What each
// entry point takes and does is said once, in app/flashladder.h (the declarations this file defines).
#include <cstring>
#include <string>
#include <vector>

#include "app/flashladder.h"
#include "app/runner.hpp"
#include "steps/ladder.hpp"

namespace {

thread_local std::string g_error;
thread_local bool g_deterministic = false;  // fl_set_deterministic: Problem::deterministic of later calls

// The variants of later calls on this thread (fl_set_window …). Host copies of the offsets make the
// Problem (its checks and sizes); the device pointers, owned by the caller, go to the step.
struct Variants {
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;  // 0: none (FlashAttention's convention); anything else is judged as given
  int alibi = 0;       // 0 none, 1 heads [H], 2 batch_heads [B][H]
  const float* slopes = nullptr;
  std::vector<int32_t> cu_q, cu_k, used_k;
  const int32_t* cu_q_dev = nullptr;
  const int32_t* cu_k_dev = nullptr;
  const int32_t* used_k_dev = nullptr;
  std::string refused;  // a setter's bad arguments (they return nothing): the next call refuses them
};
thread_local Variants g_var;

fl::Problem make(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal, double scale,
                 int dtype) {
  if (!g_var.refused.empty()) throw fl::Error(g_var.refused + " (fl_reset_variants() clears it)");
  fl::Problem p;
  p.B = B; p.H = H; p.H_kv = H_kv; p.Nq = Nq; p.Nk = Nk; p.d = d;
  p.causal = causal != 0;
  if (!(scale <= 0)) p.scale = scale;  // NaN is kept, and refused by the checks (as softcap's below)
  if (dtype < 0 || dtype > 2)
    throw fl::Error("dtype " + std::to_string(dtype) + " is not 0 (fp32), 1 (fp16) or 2 (bf16)");
  p.dtype = dtype == 0 ? fl::DType::f32 : dtype == 1 ? fl::DType::f16 : fl::DType::bf16;
  p.deterministic = g_deterministic;
  p.window_left = g_var.window_left;
  p.window_right = g_var.window_right;
  if (g_var.softcap != 0) p.softcap = g_var.softcap;  // NaN != 0: kept, and refused by the checks
  if (g_var.alibi < 0 || g_var.alibi > 2)
    throw fl::Error("fl_set_alibi: mode " + std::to_string(g_var.alibi) + " is not 0 (none), 1 (heads: slopes [H]) or "
                    "2 (batch_heads: slopes [B][H])");
  p.alibi = g_var.alibi == 0 ? fl::Alibi::none : g_var.alibi == 1 ? fl::Alibi::heads : fl::Alibi::batch_heads;
  if (p.alibi != fl::Alibi::none && !g_var.slopes)
    throw fl::Error("fl_set_alibi: ALiBi is on but its slopes pointer is null");
  p.cu_seqlens_q = g_var.cu_q;
  p.cu_seqlens_k = g_var.cu_k;
  p.seqused_k = g_var.used_k;
  if (p.varlen() && !(g_var.cu_q_dev && g_var.cu_k_dev))
    throw fl::Error("fl_set_varlen: the offsets' device copies (cu_q_dev, cu_k_dev) are null");
  if (!p.seqused_k.empty() && !g_var.used_k_dev) throw fl::Error("fl_set_seqused_k: its device copy (used_dev) is null");
  return p;
}

// The variants' pointers on a step's arguments.
template <class Args>
Args with_variants(Args a) {
  a.alibi_slopes = g_var.alibi ? g_var.slopes : nullptr;
  a.cu_seqlens_q = g_var.cu_q.empty() ? nullptr : g_var.cu_q_dev;
  a.cu_seqlens_k = g_var.cu_k.empty() ? nullptr : g_var.cu_k_dev;
  a.seqused_k = g_var.used_k.empty() ? nullptr : g_var.used_k_dev;
  return a;
}

// n values of the host array x (n = 0: none). A negative n, or a null x with n > 0, used to read as
// "off" and left the packed buffers to be read as padded ones: now the next call refuses it.
std::vector<int32_t> host_copy(const char* setter, const char* name, int n, const int32_t* x) {
  if (n < 0 || (n > 0 && !x)) {
    if (g_var.refused.empty())
      g_var.refused = std::string(setter) + ": " +
                      (n < 0 ? "n = " + std::to_string(n) + " is not allowed: it must be 0 (off) or the number of values"
                             : std::string("its host array ") + name + " is null with n = " + std::to_string(n));
    return {};
  }
  return n > 0 ? std::vector<int32_t>(x, x + n) : std::vector<int32_t>();
}

// Before a launch: every tensor the step reads or writes is named if its pointer is null (the kernel
// would fault, and a fault ends the CUDA context of the whole process).
void require_pointers(std::initializer_list<std::pair<const char*, const void*>> tensors) {
  for (auto [name, ptr] : tensors)
    if (!ptr) throw fl::Error(std::string(name) + " is a null pointer: it must be device memory of the problem's size");
}
void require_workspace(const void* ws, size_t bytes) {
  if (!ws && bytes > 0)
    throw fl::Error("ws is a null pointer, and this call needs " + std::to_string(bytes) +
                    " bytes of workspace (fl_workspace_bytes says how many)");
}

// Before a launch: without a device every launch fails in the runtime's own words ("CUDA driver
// version is insufficient ..." when no driver is installed); say it as the program does (common/cuda.cuh).
void require_device(const std::string& what) {
  static const std::string no_gpu = [] {
    std::string why;
    return fl::gpu_device(&why) ? std::string() : why;
  }();
  if (!no_gpu.empty()) throw fl::Error(what + " runs on the GPU: no GPU here: " + no_gpu);
}

// launch: the call runs the step (fl_forward, fl_backward), so a missing device is said before its limits,
// which ask the device (step 03 asks for its free memory).
const fl::Step& step_or_throw(const char* name, const fl::Problem& p, bool backward, bool launch = false) {
  const fl::Step* s = fl::find_step(name ? name : "");
  if (!s) throw fl::Error(std::string("unknown step '") + (name ? name : "") + "'");
  if (!s->gpu()) throw fl::Error("step " + s->folder + " runs on the CPU; this entry point takes device pointers");
  if (launch) require_device("step " + s->folder);
  std::string why = s->refusal(p);
  if (!why.empty()) throw fl::Error(why);
  if (backward && !s->has_backward()) throw fl::Error("step " + s->folder + " has no backward pass");
  if (backward && p.deterministic && !s->deterministic_backward)
    throw fl::Error("step " + s->folder + " has no deterministic backward; call fl_set_deterministic(0) first");
  return *s;
}

// Runs a step's own code, putting the step's name on its errors: steps do not name themselves.
template <class F>
void in_step(const fl::Step& s, F&& f) {
  try {
    f();
  } catch (const fl::Error& e) {
    throw fl::Error(s.named(e.what()));
  }
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 1;
  }
}

}  // namespace

namespace fl {
void read_stream(const void* k, const void* v, int64_t heads, int64_t n, int64_t row_bytes, int64_t blocks,
                 void* stream);  // app/read_stream.cu
}  // namespace fl

extern "C" {

const char* fl_last_error() { return g_error.c_str(); }

void fl_set_deterministic(int on) { g_deterministic = on != 0; }

void fl_set_window(int64_t left, int64_t right) {
  g_var.window_left = left;
  g_var.window_right = right;
}
void fl_set_softcap(double c) { g_var.softcap = c; }
void fl_set_alibi(int mode, const float* slopes) {
  g_var.alibi = mode;
  g_var.slopes = slopes;
}
void fl_set_varlen(int n, const int32_t* cu_q, const int32_t* cu_k, const int32_t* cu_q_dev, const int32_t* cu_k_dev) {
  g_var.cu_q = host_copy("fl_set_varlen", "cu_q", n, cu_q);
  g_var.cu_k = host_copy("fl_set_varlen", "cu_k", n, cu_k);
  g_var.cu_q_dev = cu_q_dev;
  g_var.cu_k_dev = cu_k_dev;
}
void fl_set_seqused_k(int n, const int32_t* used, const int32_t* used_dev) {
  g_var.used_k = host_copy("fl_set_seqused_k", "used", n, used);
  g_var.used_k_dev = used_dev;
}
void fl_reset_variants() { g_var = Variants{}; }

long long fl_workspace_bytes(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d,
                             int causal, double scale, int dtype, int backward) {
  long long out = -1;
  guarded([&] {
    fl::Problem p = make(B, H, H_kv, Nq, Nk, d, causal, scale, dtype);
    const fl::Step& s = step_or_throw(step, p, backward != 0);
    in_step(s, [&] { out = (long long)(backward ? s.impl->backward_workspace_bytes(p) : s.impl->workspace_bytes(p)); });
  });
  return out;
}

int fl_forward(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal,
               double scale, int dtype, const void* q, const void* k, const void* v, void* o, float* lse, void* ws,
               void* stream) {
  return guarded([&] {
    fl::Problem p = make(B, H, H_kv, Nq, Nk, d, causal, scale, dtype);
    require_pointers({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}});
    const fl::Step& s = step_or_throw(step, p, false, true);
    in_step(s, [&] {
      require_workspace(ws, s.impl->workspace_bytes(p));
      s.impl->forward(p, with_variants(fl::ForwardArgs{q, k, v, o, lse, ws, stream})); });
  });
}

int fl_read_stream(const void* k, const void* v, int64_t heads, int64_t n, int64_t row_bytes, int64_t blocks,
                   void* stream) {
  return guarded([&] {
    require_device("fl_read_stream");
    fl::read_stream(k, v, heads, n, row_bytes, blocks, stream);
  });
}

int fl_backward(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal,
                double scale, int dtype, const void* q, const void* k, const void* v, const void* o, const float* lse,
                const void* dO, void* dq, void* dk, void* dv, void* ws, void* stream) {
  return guarded([&] {
    fl::Problem p = make(B, H, H_kv, Nq, Nk, d, causal, scale, dtype);
    require_pointers({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}, {"dO", dO}, {"dq", dq}, {"dk", dk}, {"dv", dv}});
    const fl::Step& s = step_or_throw(step, p, true, true);
    in_step(s, [&] {
      require_workspace(ws, s.impl->backward_workspace_bytes(p));
      s.impl->backward(p, with_variants(fl::BackwardArgs{q, k, v, o, lse, dO, dq, dk, dv, ws, stream})); });
  });
}

}  // extern "C"

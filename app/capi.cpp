// flashladder — app/capi.cpp: C entry points so Python can call any registered step on tensors
// it owns (PyTorch's device pointers), for the comparison with scaled_dot_product_attention.
//
//   fl_workspace_bytes(step, problem…, backward)            scratch the call needs (caller allocates)
//   fl_forward(step, problem…, q, k, v, o, lse, ws, stream)  0 on success; otherwise 1 and a message
//   fl_backward(step, problem…, q, k, v, o, lse, dO, dq, dk, dv, ws, stream)
//   fl_set_deterministic(on)                                 the deterministic backward for later calls
// The problem is passed as B, H, H_kv, Nq, Nk, d, causal, scale (<= 0: default), dtype (0 fp32,
// 1 fp16, 2 bf16). Checks are the same as the program's: an unsupported problem is refused with a
// message before any launch. Launches are asynchronous on the given stream; errors of the launch
// itself are reported.
#include <cstring>
#include <string>

#include "steps/ladder.hpp"

namespace {

thread_local std::string g_error;
thread_local bool g_deterministic = false;  // fl_set_deterministic: Problem::deterministic of later calls

fl::Problem make(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal, double scale,
                 int dtype) {
  fl::Problem p;
  p.B = B; p.H = H; p.H_kv = H_kv; p.Nq = Nq; p.Nk = Nk; p.d = d;
  p.causal = causal != 0;
  if (scale > 0) p.scale = scale;
  p.dtype = dtype == 0 ? fl::DType::f32 : dtype == 1 ? fl::DType::f16 : fl::DType::bf16;
  p.deterministic = g_deterministic;
  return p;
}

const fl::Step& step_or_throw(const char* name, const fl::Problem& p, bool backward) {
  const fl::Step* s = fl::find_step(name ? name : "");
  if (!s) throw fl::Error(std::string("unknown step '") + (name ? name : "") + "'");
  if (!s->gpu()) throw fl::Error("step " + s->folder + " runs on the CPU; this entry point takes device pointers");
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

extern "C" {

const char* fl_last_error() { return g_error.c_str(); }

/// Problem::deterministic for the calls that follow on this thread (0 or 1): the backward of a step
/// that has a deterministic mode (09c) then adds dQ in a fixed order; other steps' backward refuse it.
void fl_set_deterministic(int on) { g_deterministic = on != 0; }

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
    const fl::Step& s = step_or_throw(step, p, false);
    in_step(s, [&] { s.impl->forward(p, {q, k, v, o, lse, ws, stream}); });
  });
}

int fl_backward(const char* step, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, int causal,
                double scale, int dtype, const void* q, const void* k, const void* v, const void* o, const float* lse,
                const void* dO, void* dq, void* dk, void* dv, void* ws, void* stream) {
  return guarded([&] {
    fl::Problem p = make(B, H, H_kv, Nq, Nk, d, causal, scale, dtype);
    const fl::Step& s = step_or_throw(step, p, true);
    in_step(s, [&] { s.impl->backward(p, {q, k, v, o, lse, dO, dq, dk, dv, ws, stream}); });
  });
}

}  // extern "C"

// flashladder — common/problem.hpp
//
// One attention problem, described once. Every size, stride and element count in the project is
// derived from this struct, so no count is ever typed by hand (llm.c's attention check covered 6% of
// a buffer because of one hand-typed count: see ../shared/design/style.md).
//
// Layout (PyTorch scaled_dot_product_attention's logical layout, all contiguous row-major):
//   Q, O  [B][H][Nq][d]        L (log-sum-exp, fp32)  [B][H][Nq]
//   K, V  [B][H_kv][Nk][d]     query head h reads K/V head h / (H / H_kv)   (MQA/GQA)
// Causal mask, aligned bottom-right (FlashAttention >= 2.1): query i sees key j iff j <= i + Nk - Nq.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace fl {

/// Every error the project reports to a user: the message names the problem and the limit.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Storage type of Q, K, V, O, dO, dQ, dK, dV. L is always fp32.
enum class DType { f32, f16, bf16 };

const char* dtype_name(DType t);                       // "fp32", "fp16", "bf16"
std::optional<DType> parse_dtype(const std::string& s);  // accepts fp32/f32/float, fp16/f16/half, bf16
int dtype_bytes(DType t);

struct Problem {
  int64_t B = 1;      // batch
  int64_t H = 1;      // query heads
  int64_t H_kv = 1;   // key/value heads; H % H_kv == 0
  int64_t Nq = 1;     // query length
  int64_t Nk = 1;     // key length
  int64_t d = 64;     // head dimension
  bool causal = false;
  std::optional<double> scale;  // softmax_scale; empty means the default 1/sqrt(d)
  DType dtype = DType::f16;
  // Backward steps that support it (09c) add dQ's contributions in a fixed order, so dQ, dK, dV are
  // bitwise the same from run to run; the others ignore it (their refusal says so where it matters).
  bool deterministic = false;

  double softmax_scale() const { return scale ? *scale : 1.0 / std::sqrt(double(d)); }
  int64_t group() const { return H / H_kv; }           // query heads per K/V head
  int64_t kv_head(int64_t h) const { return h / group(); }

  // Element counts.
  int64_t q_elems() const { return B * H * Nq * d; }     // Q, O, dO, dQ
  int64_t kv_elems() const { return B * H_kv * Nk * d; } // K, V, dK, dV
  int64_t lse_elems() const { return B * H * Nq; }       // L, D
  int64_t score_elems() const { return B * H * Nq * Nk; } // S or P, if materialised

  // Offsets of row starts.
  int64_t q_row(int64_t b, int64_t h, int64_t i) const { return ((b * H + h) * Nq + i) * d; }
  int64_t kv_row(int64_t b, int64_t hk, int64_t j) const { return ((b * H_kv + hk) * Nk + j) * d; }
  int64_t lse_at(int64_t b, int64_t h, int64_t i) const { return (b * H + h) * Nq + i; }

  /// Causal visibility, bottom-right aligned.
  bool visible(int64_t i, int64_t j) const { return !causal || j <= i + Nk - Nq; }

  /// Empty when the problem is well formed; otherwise a message naming the bad field and its limit.
  std::string invalid_reason() const;
  /// Throws fl::Error with invalid_reason() when the problem is malformed.
  void validate() const;
  /// "B=4 H=16 H_kv=16 Nq=4096 Nk=4096 d=128 causal=0 fp16 scale=0.0884"
  std::string describe() const;
};

/// FLOPs by the FlashAttention convention: forward 4·B·H·Nq·Nk·d, halved when causal; backward
/// 2.5× forward (5 matmuls instead of 2). With Nq != Nk and causal the count is still halved, as
/// FlashAttention's own benchmarks do; the count is a convention, not a census of multiply-adds.
double flops_forward(const Problem& p);
double flops_backward(const Problem& p);

}  // namespace fl

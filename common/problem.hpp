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
//
// The variants (issue 21; docs/variants.md), FlashAttention-2's, each one field here:
//   window (left, right)  query i sees key j iff diag − left <= j <= diag + right, diag = i + Nk − Nq
//                         (−1: unbounded on that side); intersected with causal (causal = (−1, 0))
//   softcap c             the logit τ·q·k becomes c·tanh(τ·q·k / c)
//   ALiBi                 the logit gains −slope_{b,h}·|diag − j|; slopes fp32 [H] or [B][H], passed
//                         with the tensors (Inputs::alibi_slopes, ForwardArgs::alibi_slopes)
//   variable length       B sequences packed along one token axis (cu_seqlens_q, cu_seqlens_k), see
//                         below; seqused_k: the keys each sequence actually uses (KV caches)
// With variable length (varlen() true) the layout is FlashAttention-2's packed one:
//   Q, O, dO, dQ  [total_q][H][d]      K, V, dK, dV  [total_k][H_kv][d]      L  [H][total_q]
// sequence b holds tokens cu_seqlens_q[b] .. cu_seqlens_q[b+1] − 1 (keys likewise), and Nq, Nk are the
// longest a sequence may be (FlashAttention's max_seqlen_q, max_seqlen_k). Per sequence, Nq and Nk in
// every rule above read seqlen_q(b) and seqlen_k(b). q_off/kv_off/lse_off give offsets in either layout;
// q_row/kv_row/lse_at are the non-varlen layout's, kept for the steps that refuse varlen.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

/// ALiBi slopes: none, one per query head (fp32 [H]) or one per sequence and head (fp32 [B][H]).
enum class Alibi { none, heads, batch_heads };
const char* alibi_name(Alibi a);                        // "none", "heads", "batch_heads"
std::optional<Alibi> parse_alibi(const std::string& s);  // the names above

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

  // --- The variants (issue 21). Every default is the plain problem. ---
  int64_t window_left = -1;   // sliding window: keys further left of the diagonal than this are masked; -1 = unbounded
  int64_t window_right = -1;  // keys further right of the diagonal than this are masked; -1 = unbounded
  std::optional<double> softcap;  // c > 0, finite: logits become c·tanh(τ·q·k / c)
  Alibi alibi = Alibi::none;      // slopes fp32 [H] (heads) or [B][H] (batch_heads), passed with the tensors
  // Variable length (packed): [B + 1] offsets each, empty when not varlen. Both or neither.
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;
  // [B] optional, varlen or not: sequence b attends to its first seqused_k[b] keys only (a KV cache
  // holding more rows than are filled); empty: every key of the sequence.
  std::vector<int32_t> seqused_k;

  double softmax_scale() const { return scale ? *scale : 1.0 / std::sqrt(double(d)); }
  int64_t group() const { return H / H_kv; }           // query heads per K/V head
  int64_t kv_head(int64_t h) const { return h / group(); }

  bool varlen() const { return !cu_seqlens_q.empty() || !cu_seqlens_k.empty(); }
  bool windowed() const { return window_left >= 0 || window_right >= 0; }
  /// True when any variant is on (window, softcap, ALiBi, varlen, seqused_k).
  bool has_variant() const;
  /// The variants in use, "" for none: "window=(256,0) softcap=30 alibi=heads varlen seqused_k".
  std::string variants_text() const;

  // Tokens of the whole batch: B·Nq and B·Nk, or the packed totals cu_seqlens_q[B], cu_seqlens_k[B].
  int64_t total_q() const { return cu_seqlens_q.empty() ? B * Nq : cu_seqlens_q.back(); }
  int64_t total_k() const { return cu_seqlens_k.empty() ? B * Nk : cu_seqlens_k.back(); }
  // Per sequence b: its queries, the key rows it holds, and the keys it attends to (seqused_k[b] when
  // given). Every rule of the mask and of ALiBi reads seqlen_q(b) and seqlen_k(b) as Nq and Nk.
  int64_t seqlen_q(int64_t b) const { return varlen() ? int64_t(cu_seqlens_q[b + 1]) - cu_seqlens_q[b] : Nq; }
  int64_t keys_stored(int64_t b) const { return varlen() ? int64_t(cu_seqlens_k[b + 1]) - cu_seqlens_k[b] : Nk; }
  int64_t seqlen_k(int64_t b) const { return seqused_k.empty() ? keys_stored(b) : int64_t(seqused_k[b]); }

  // Element counts, in either layout.
  int64_t q_elems() const { return total_q() * H * d; }     // Q, O, dO, dQ
  int64_t kv_elems() const { return total_k() * H_kv * d; } // K, V, dK, dV
  int64_t lse_elems() const { return total_q() * H; }       // L, D
  int64_t score_elems() const { return B * H * Nq * Nk; }   // S or P, if materialised ([B][H][Nq][Nk], padded when varlen)
  int64_t alibi_elems() const { return alibi == Alibi::none ? 0 : alibi == Alibi::heads ? H : B * H; }
  int64_t alibi_index(int64_t b, int64_t h) const { return alibi == Alibi::batch_heads ? b * H + h : h; }

  // Offsets of row starts, non-varlen layout ([B][H][Nq][d], [B][H_kv][Nk][d], [B][H][Nq]).
  int64_t q_row(int64_t b, int64_t h, int64_t i) const { return ((b * H + h) * Nq + i) * d; }
  int64_t kv_row(int64_t b, int64_t hk, int64_t j) const { return ((b * H_kv + hk) * Nk + j) * d; }
  int64_t lse_at(int64_t b, int64_t h, int64_t i) const { return (b * H + h) * Nq + i; }
  // Offsets in either layout: row i of query head h of sequence b, and so on. Consecutive rows of one
  // head are q_stride() / kv_stride() elements apart (d, or H·d / H_kv·d when packed); L's are 1 apart.
  int64_t q_off(int64_t b, int64_t h, int64_t i) const {
    return varlen() ? ((int64_t(cu_seqlens_q[b]) + i) * H + h) * d : q_row(b, h, i);
  }
  int64_t kv_off(int64_t b, int64_t hk, int64_t j) const {
    return varlen() ? ((int64_t(cu_seqlens_k[b]) + j) * H_kv + hk) * d : kv_row(b, hk, j);
  }
  int64_t lse_off(int64_t b, int64_t h, int64_t i) const {
    return varlen() ? h * total_q() + cu_seqlens_q[b] + i : lse_at(b, h, i);
  }
  int64_t q_stride() const { return varlen() ? H * d : d; }
  int64_t kv_stride() const { return varlen() ? H_kv * d : d; }
  // Shapes of the tensors: {B, H, Nq, d} or {total_q, H, d}; {B, H_kv, Nk, d} or {total_k, H_kv, d};
  // {B, H, Nq} or {H, total_q}.
  std::vector<int64_t> q_shape() const;
  std::vector<int64_t> kv_shape() const;
  std::vector<int64_t> lse_shape() const;

  /// Visibility of key j to query i with diagonal diag = i + Nk − Nq (FlashAttention's bottom-right
  /// alignment): causal, then the window, intersected. The distances diag − j and j − diag are
  /// compared with the window, not diag ∓ window with j: a window of 2^63 − 1 keys is unbounded, not an
  /// overflow that masked visible keys (it did, in the oracle and the CPU steps alike).
  bool visible_diag(int64_t diag, int64_t j) const {
    return (!causal || j <= diag) && (window_left < 0 || diag - j <= window_left) &&
           (window_right < 0 || j - diag <= window_right);
  }
  /// Visibility in a problem whose sequences all have Nq queries and Nk keys (no varlen, no seqused_k).
  bool visible(int64_t i, int64_t j) const { return visible_diag(i + Nk - Nq, j); }
  /// Visibility in sequence b: its own lengths, and only the keys it uses.
  bool visible(int64_t b, int64_t i, int64_t j) const {
    return j >= 0 && j < seqlen_k(b) && visible_diag(i + seqlen_k(b) - seqlen_q(b), j);
  }
  /// The ALiBi distance |i + Nk − Nq − j| in sequence b (the bias is −slope times it).
  int64_t alibi_distance(int64_t b, int64_t i, int64_t j) const {
    const int64_t t = i + seqlen_k(b) - seqlen_q(b) - j;
    return t < 0 ? -t : t;
  }
  /// cap(x) = c·tanh(x / c) with the softcap, x without.
  double cap(double x) const { return softcap ? *softcap * std::tanh(x / *softcap) : x; }

  /// Empty when the problem is well formed; otherwise a message naming the bad field and its limit.
  std::string invalid_reason() const;
  /// Throws fl::Error with invalid_reason() when the problem is malformed.
  void validate() const;
  /// "B=4 H=16 H_kv=16 Nq=4096 Nk=4096 d=128 causal=0 fp16 scale=0.0884", then variants_text().
  std::string describe() const;
  /// The (query, key) pairs that are visible, summed over the batch and one head: what a kernel that
  /// skips every masked block would compute at best.
  double visible_pairs() const;
};

/// FLOPs by the FlashAttention convention: forward 4·B·H·Nq·Nk·d, halved when causal; backward
/// 2.5× forward (5 matmuls instead of 2). With Nq != Nk and causal the count is still halved, as
/// FlashAttention's own benchmarks do; the count is a convention, not a census of multiply-adds.
/// Variants: with variable length or seqused_k the convention is applied per sequence (its own Nq,
/// Nk) and summed; with a window, 4·H·d per visible pair (visible_pairs()), since a window of w keys
/// costs ∝ w and the halved square would credit a kernel with work the window removed.
double flops_forward(const Problem& p);
double flops_backward(const Problem& p);

}  // namespace fl

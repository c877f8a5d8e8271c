// flashladder — steps/variants.cuh: the attention variants (issue 21) as the kernels of 08j and 09d take
// them. Plumbing only: what a variant MEANS (the mask's window, the logit's softcap and ALiBi bias) is
// written in those steps' kernels, where a reader diffs it against 08i and 09c.
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "steps/ladder.hpp"  // the Variant bits kSoftcap, kAlibi, kVarlen

namespace fl {

/// The problem's variants in the form a kernel reads. The window comes with causal folded in (causal
/// ∩ (left, right) is (left, 0)) and clamped to 2^30, so that row + diag ± left stays in 32 bits.
struct VariantArgs {
  int left = -1, right = -1;       // row q sees the keys [q + diag − left, q + diag + right]; −1 unbounded
  float softcap = 0.f;             // c (kSoftcap)
  const float* slopes = nullptr;   // ALiBi slopes, fp32 [H] or [B][H], device memory (kAlibi)
  int64_t slopes_b = 0;            // 0 for [H], H for [B][H]: the stride of b
  // Per-sequence lengths (08j's, 08k's and 09d's kVarlen bit), device memory, null where the problem has none:
  const int32_t* cu_q = nullptr;   // cu_seqlens_q [B + 1]: Q, O packed [total_q][H][d]
  const int32_t* cu_k = nullptr;   // cu_seqlens_k [B + 1]: K, V packed [total_k][H_kv][d]
  const int32_t* used_k = nullptr; // seqused_k [B]: the keys sequence b attends to
  int64_t total_q = 0;             // packed: the length of L's rows ([H][total_q])

  static VariantArgs of(const Problem& p, const float* alibi_slopes, const int32_t* cu_seqlens_q = nullptr,
                        const int32_t* cu_seqlens_k = nullptr, const int32_t* seqused_k = nullptr) {
    constexpr int64_t kMax = int64_t(1) << 30;
    VariantArgs v;
    v.left = p.window_left < 0 ? -1 : int(p.window_left < kMax ? p.window_left : kMax);
    v.right = p.window_right < 0 ? -1 : int(p.window_right < kMax ? p.window_right : kMax);
    if (p.causal) v.right = 0;
    v.softcap = p.softcap ? float(*p.softcap) : 0.f;
    v.slopes = alibi_slopes;
    v.slopes_b = p.alibi == Alibi::batch_heads ? p.H : 0;
    if (p.alibi != Alibi::none && !alibi_slopes) throw Error("ALiBi needs its slopes: the call passed none");
    if (p.varlen()) {
      if (!cu_seqlens_q || !cu_seqlens_k)
        throw Error("variable length needs cu_seqlens_q and cu_seqlens_k: the call passed none");
      v.cu_q = cu_seqlens_q;
      v.cu_k = cu_seqlens_k;
      v.total_q = p.total_q();
    }
    if (!p.seqused_k.empty()) {
      if (!seqused_k) throw Error("seqused_k is set in the problem but the call passed no seqused_k array");
      v.used_k = seqused_k;
    }
    return v;
  }
  /// The template bits of a variant kernel (ladder.hpp's Variant bits kSoftcap, kAlibi): a plain
  /// problem's kernel is instantiated without them, so it carries none of their instructions. The window
  /// is not among them: 08j, 08k and step 10 test its edges where 08i tests causal's, and 09d's launcher
  /// adds a kWindow bit of its own (its plain kernel is then 09c's, instruction for instruction).
  static int bits(const Problem& p) { return (p.softcap ? kSoftcap : 0) | (p.alibi != Alibi::none ? kAlibi : 0); }
  /// True when a kernel reads each sequence's lengths from device memory (variable length, seqused_k):
  /// 08j's, 08k's and 09d's template bit kVarlen, left out of bits() because their dispatches add it to each
  /// case of bits() (and 09d's kernels 1 and 3 take only p.varlen(): seqused_k keeps their layout).
  static bool per_sequence(const Problem& p) { return p.varlen() || !p.seqused_k.empty(); }
};

}  // namespace fl

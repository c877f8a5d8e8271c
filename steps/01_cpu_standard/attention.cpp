// flashladder — step 01: standard attention (the seeds' Algorithm 0) on the CPU with Eigen.
//
// The ladder's floor: the three lines of Algorithm 0, with the N×N matrices S and P written out in
// full. Everything later computes the same O and L without ever holding S or P whole.
//
//   S = scale · Q Kᵀ        [Nq][Nk]     (masked entries −∞)
//   P = softmax(S)          [Nq][Nk]     row-wise, with the row max m subtracted first (stable)
//   O = P V                 [Nq][d]
//   L = m + log ℓ           [Nq]         ℓ = rowsum(exp(S − m)); kept for the backward
//
// Extra memory: S and P of one head, 2·Nq·Nk floats — 512 MiB at Nq = Nk = 8192. That N² is what
// FlashAttention removes.
//
// The variants (docs/variants.md) change S and nothing else: the softcap and ALiBi's bias are one line
// each on S, the sliding window masks S as the causal mask does, and with variable length each
// sequence b is a problem of its own (its nq = seqlen_q(b) rows, its nk = seqlen_k(b) keys, rows
// q_stride() apart in the packed layout).
#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "steps/ladder.hpp"

namespace fl::s01 {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;  // rows of one head: d apart, or H·d packed
using OutRows = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;

size_t workspace_bytes(const Problem& p) {
  return 2 * size_t(p.Nq) * size_t(p.Nk) * sizeof(float);  // S and P, one head at a time
}

void forward(const Problem& p, const ForwardArgs& a) {
  const float inf = std::numeric_limits<float>::infinity();
  const float scale = float(p.softmax_scale());
  auto* ws = static_cast<float*>(a.workspace);
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t nq = p.seqlen_q(b), nk = p.seqlen_k(b);  // Nq and Nk, or sequence b's own lengths
    Eigen::Map<Mat> S(ws, nq, nk);                           // [nq][nk] scores
    Eigen::Map<Mat> P(ws + nq * nk, nq, nk);                 // [nq][nk] probabilities
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = p.kv_head(h);
      const auto* k = static_cast<const float*>(a.k);
      const auto* v = static_cast<const float*>(a.v);
      Rows Q(static_cast<const float*>(a.q) + p.q_off(b, h, 0), nq, p.d, Eigen::OuterStride<>(p.q_stride()));  // [nq][d]
      OutRows O(static_cast<float*>(a.o) + p.q_off(b, h, 0), nq, p.d, Eigen::OuterStride<>(p.q_stride()));   // [nq][d]
      float* L = a.lse + p.lse_off(b, h, 0);                                                                  // [nq]
      Rows K(k + p.kv_off(b, hk, 0), nk, p.d, Eigen::OuterStride<>(p.kv_stride()));  // [nk][d]
      Rows V(v + p.kv_off(b, hk, 0), nk, p.d, Eigen::OuterStride<>(p.kv_stride()));  // [nk][d]

      // 1. S = scale · Q Kᵀ, written out in full.
      S.noalias() = scale * (Q * K.transpose());
      // The variants' scores, FlashAttention-2's order: S = c·tanh(S / c), then S −= slope·|i + nk − nq − j|.
      if (p.softcap) S = float(*p.softcap) * (S / float(*p.softcap)).array().tanh().matrix();
      if (a.alibi_slopes)
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = 0; j < nk; ++j) S(i, j) -= a.alibi_slopes[p.alibi_index(b, h)] * float(p.alibi_distance(b, i, j));
      if (p.causal)
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = std::max<int64_t>(0, i + nk - nq + 1); j < nk; ++j) S(i, j) = -inf;
      if (p.windowed())  // the sliding window: keys outside [i + nk − nq − left, i + nk − nq + right]
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = 0; j < nk; ++j)
            if (!p.visible(b, i, j)) S(i, j) = -inf;

      // 2. P = softmax(S), row by row: m = rowmax(S), P = exp(S − m), ℓ = rowsum(P), P = diag(ℓ)⁻¹ P.
      // One row at a time (8 KiB at Nk = 2048), so the four passes over it hit the L1 cache and S
      // and P each cross memory once: done as four whole-matrix passes, step 01 ran at 32% of
      // Eigen's GEMM rate at N = 2048, d = 64 (2-core AMD EPYC, 2026-11-21), row by row 58%.
      for (int64_t i = 0; i < nq; ++i) {
        const float m = nk > 0 ? S.row(i).maxCoeff() : -inf;
        if (m == -inf) {  // the row sees no key: O = 0 and L = +∞ (so the backward's exp(S − L) is 0)
          P.row(i).setZero();
          L[i] = inf;
          continue;
        }
        P.row(i).array() = (S.row(i).array() - m).exp();
        const float l = P.row(i).sum();
        P.row(i) *= 1.0f / l;
        L[i] = m + std::log(l);
      }

      // 3. O = P V.
      O.noalias() = P * V;
    }
  }
}

extern const StepImpl impl = {workspace_bytes, forward, nullptr, nullptr, nullptr};

}  // namespace fl::s01

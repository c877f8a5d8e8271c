// flashladder — step 02: the online softmax on the CPU.
//
// One pass over the keys. The seeds' online-softmax derivation (FlashAttention-2 §2.3.1) splits a
// row of scores into blocks S^(1), S^(2), … and keeps three running quantities per query row:
//   m^(j) = max(m^(j−1), rowmax(S^(j)))                       running max
//   ℓ^(j) = e^{m^(j−1) − m^(j)} ℓ^(j−1) + rowsum(e^{S^(j) − m^(j)})   running sum
//   O^(j) = diag(ℓ^(j))⁻¹ (diag(ℓ^(j−1) e^{m^(j−1) − m^(j)}) O^(j−1) + e^{S^(j) − m^(j)} V^(j))
// O^(j) is the exact softmax-weighted average of the keys seen so far, so after the last block it is
// O — and no N×N matrix ever exists. Here the blocks are B_c keys wide, with all Nq query rows at
// once, so each block's scores are one Eigen matrix product. B_c = 1 would be the textbook per-key
// recurrence, each key a matrix-vector product instead of a share of a matrix product. The
// diag(ℓ^(j))⁻¹ rescale of O every block is the FA1 form; step 05 defers it to the end.
//
// Extra memory: one [Nq][B_c] score block and m, ℓ: O(N), not O(N²).
//
// The variants (docs/variants.md) change S_j and nothing else, exactly as in step 01: the softcap and
// ALiBi's bias are one line each, the sliding window masks as the causal mask does, and with variable
// length each sequence b is a problem of its own (nq = seqlen_q(b) rows, nk = seqlen_k(b) keys). The
// running m and ℓ need no change: a row whose window has not begun yet simply has nothing visible.
#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "steps/ladder.hpp"

namespace fl::s02 {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;  // rows of one head: d apart, or H·d packed
using OutRows = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;
using Vec = Eigen::VectorXf;

// 256 keys per block: the per-block rescale of O (Nq·d multiplies) is then 1/256 of the block's
// PV product (Nq·256·d multiply-adds), and the [Nq][B_c] block is still O(N).
constexpr int64_t B_c = 256;

size_t workspace_bytes(const Problem& p) {
  const int64_t bc = std::min(B_c, p.Nk);
  return (size_t(p.Nq) * size_t(bc) + 2 * size_t(p.Nq)) * sizeof(float);  // S_j, m, ℓ
}

void forward(const Problem& p, const ForwardArgs& a) {
  const float inf = std::numeric_limits<float>::infinity();
  const float scale = float(p.softmax_scale());
  const int64_t bc_max = std::min(B_c, p.Nk);
  auto* ws = static_cast<float*>(a.workspace);
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t nq = p.seqlen_q(b), nk = p.seqlen_k(b);  // Nq and Nk, or sequence b's own lengths
    Eigen::Map<Vec> m(ws + p.Nq * bc_max, nq);            // [nq] running max
    Eigen::Map<Vec> l(ws + p.Nq * bc_max + p.Nq, nq);     // [nq] running sum
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = p.kv_head(h);
      const auto* k = static_cast<const float*>(a.k);
      const auto* v = static_cast<const float*>(a.v);
      Rows Q(static_cast<const float*>(a.q) + p.q_off(b, h, 0), nq, p.d, Eigen::OuterStride<>(p.q_stride()));  // [nq][d]
      OutRows O(static_cast<float*>(a.o) + p.q_off(b, h, 0), nq, p.d, Eigen::OuterStride<>(p.q_stride()));   // [nq][d]
      float* L = a.lse + p.lse_off(b, h, 0);                                                                  // [nq]
      m.setConstant(-inf);
      l.setZero();
      O.setZero();
      for (int64_t j0 = 0; j0 < nk; j0 += B_c) {
        const int64_t bc = std::min(B_c, nk - j0);
        Rows K_j(k + p.kv_off(b, hk, j0), bc, p.d, Eigen::OuterStride<>(p.kv_stride()));  // [bc][d]
        Rows V_j(v + p.kv_off(b, hk, j0), bc, p.d, Eigen::OuterStride<>(p.kv_stride()));  // [bc][d]
        Eigen::Map<Mat> S_j(ws, nq, bc);                                                   // [nq][bc]
        S_j.noalias() = scale * (Q * K_j.transpose());
        // The variants' scores, FlashAttention-2's order: S = c·tanh(S / c), then S −= slope·|i + nk − nq − j|.
        if (p.softcap) S_j = float(*p.softcap) * (S_j / float(*p.softcap)).array().tanh().matrix();
        if (a.alibi_slopes)
          for (int64_t i = 0; i < nq; ++i)
            for (int64_t j = j0; j < j0 + bc; ++j)
              S_j(i, j - j0) -= a.alibi_slopes[p.alibi_index(b, h)] * float(p.alibi_distance(b, i, j));
        if (p.causal)
          for (int64_t i = 0; i < nq; ++i)
            for (int64_t j = std::max<int64_t>(j0, i + nk - nq + 1); j < j0 + bc; ++j) S_j(i, j - j0) = -inf;
        if (p.windowed())  // the sliding window: keys outside [i + nk − nq − left, i + nk − nq + right]
          for (int64_t i = 0; i < nq; ++i)
            for (int64_t j = j0; j < j0 + bc; ++j)
              if (!p.visible(b, i, j)) S_j(i, j - j0) = -inf;

        // LAB:BEGIN for each row i of this key block (FA2 §2.3.1): the new running max m^(j), the factor e^{m^(j−1) − m^(j)}, P̃_j = e^{S_j − m^(j)} in place of S_j, the new ℓ^(j), and O rescaled by ℓ^(j−1)e^{m^(j−1) − m^(j)}/ℓ^(j) with P̃_j weighted by 1/ℓ^(j); rows with nothing visible yet add nothing
        for (int64_t i = 0; i < nq; ++i) {
          const float m_new = std::max(m(i), S_j.row(i).maxCoeff());
          if (m_new == -inf) {  // nothing visible yet in this row: it adds nothing to O
            S_j.row(i).setZero();
            continue;
          }
          const float alpha = std::exp(m(i) - m_new);  // e^{m^(j−1) − m^(j)}; 0 when m^(j−1) = −∞
          S_j.row(i) = (S_j.row(i).array() - m_new).exp().matrix();  // P̃_j = e^{S_j − m^(j)}
          const float l_new = alpha * l(i) + S_j.row(i).sum();
          O.row(i) *= alpha * l(i) / l_new;                            // rescale what is there …
          S_j.row(i) /= l_new;                                         // … and weight the new block
          m(i) = m_new;
          l(i) = l_new;
        }
        // LAB:END
        O.noalias() += S_j * V_j;  // rows with nothing visible yet hold zeros in S_j
      }
      // LAB:BEGIN L = m + log ℓ for each row (the logsumexp of its scaled scores); +∞ for a row that saw no key
      for (int64_t i = 0; i < nq; ++i) L[i] = l(i) > 0 ? m(i) + std::log(l(i)) : inf;
      // LAB:END
    }
  }
}

extern const StepImpl impl = {workspace_bytes, forward, nullptr, nullptr, nullptr};

}  // namespace fl::s02

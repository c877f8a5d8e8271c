// flashladder — reference/oracle.hpp: the oracle every step is checked against.
//
// Standard attention (the seeds' Algorithm 0) in double with Eigen, on the exact rounded inputs the
// step saw. Conventions (../shared/design/ladder.md): scale·QKᵀ, causal aligned bottom-right, a row
// that sees no key has O = 0 and L = +inf, query head h reads K/V head h / (H / H_kv), and the
// gradients of a shared K/V head are summed over the query heads that read it.
#pragma once

#include <vector>

#include "common/tensor.hpp"

namespace fl::ref {

/// How the oracle cuts a (b, h) into blocks of query rows × key columns. It never holds more than one
/// rows × cols block of S (and P, dP, dS) per thread, so its memory is O(N) in the sequence length:
/// 131072-long problems are checkable on a CPU. Zero means automatic: one block (rows = Nq, cols = Nk)
/// when Nq·Nk <= 2^24 (4096²), which is the whole-matrix computation the oracle always did (bitwise the
/// same results; every shape in the test matrix is such a problem), else 256 × 2048 blocks. Tests set
/// small blocks to check that blocking changes the results only by rounding.
struct Blocking {
  int64_t rows = 0;
  int64_t cols = 0;
};
/// The block sizes actually used for p (never larger than Nq, Nk).
Blocking blocking_for(const Problem& p, Blocking asked = {});

struct Forward {
  std::vector<double> o;    // [B][H][Nq][d]
  std::vector<double> lse;  // [B][H][Nq]   L = m + log ℓ; +inf where the row sees no key
  // Filled only when asked for (want_intermediates), since they are O(N²):
  std::vector<double> s;    // [B][H][Nq][Nk] scaled scores, -inf where masked
  std::vector<double> p;    // [B][H][Nq][Nk] softmax(S), 0 where masked
  std::vector<double> m;    // [B][H][Nq]     row max of S (-inf for a fully masked row)
  std::vector<double> l;    // [B][H][Nq]     row sum of exp(S - m) (0 for a fully masked row)
};

struct Backward {
  std::vector<double> dq;  // [B][H][Nq][d]
  std::vector<double> dk;  // [B][H_kv][Nk][d]
  std::vector<double> dv;  // [B][H_kv][Nk][d]
  std::vector<double> D;   // [B][H][Nq]  D_i = rowsum(dO ∘ O)
};

/// O and L (and on request S, P, m, ℓ) in double.
/// want_intermediates needs the O(N²) S and P, so it always uses one block.
Forward forward(const Inputs& in, bool want_intermediates = false, Blocking blk = {});

/// dQ, dK, dV and D in double, from in.dO: dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D),
/// dQ = scale·dS K, dK = scale·dSᵀ Q (the seeds' backward derivation).
Backward backward(const Inputs& in, const Forward& f, Blocking blk = {});

/// The low-precision baseline of the tolerance rule: Algorithm 0 carried out at the storage type of
/// in.p.dtype — S and P rounded to it, fp32 accumulation, O rounded; L from the rounded S in fp32.
Outputs baseline_forward(const Inputs& in, Blocking blk = {});

/// The baseline's backward at the same precision: every product's result (dV, dP, dS, dQ, dK)
/// rounded to the storage type, fp32 accumulation, as autograd through a low-precision Algorithm 0 does.
Outputs baseline_backward(const Inputs& in, Blocking blk = {});

}  // namespace fl::ref

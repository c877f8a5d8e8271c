// flashladder — reference/oracle.cpp
//
// Every function works on one (b, h) at a time, cut into blocks of query rows × key columns
// (blocking_for). With one block (every problem with Nq·Nk <= 2^24) the code is the whole-matrix
// Algorithm 0 the oracle has always been, and gives bitwise the same results. With several blocks it
// holds one block of S (P, dP, dS) per thread, never Nq×Nk, so its memory is O(N): the price is
// that S is recomputed once per pass over the keys, and that sums over key blocks are added block
// by block (a rounding difference of a few ulps, which tests/test_oracle.cpp bounds).
#include "reference/oracle.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace fl::ref {
namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapF = Eigen::Map<const Mat<float>>;

constexpr double kInf = std::numeric_limits<double>::infinity();
// One block up to 2^24 entries of S per (b, h) (4096 × 4096: 128 MiB of doubles per matrix per
// thread, what the oracle always held for the headline problem, whose results therefore stay
// bitwise the same). Larger problems: 256 × 2048 blocks (4 MiB per matrix).
constexpr int64_t kWholeEntries = int64_t(1) << 24;
constexpr int64_t kRows = 256, kCols = 2048;

struct Range {
  int64_t lo, hi;
  int64_t n() const { return hi - lo; }
};

std::vector<Range> cut(int64_t n, int64_t block) {
  std::vector<Range> r;
  for (int64_t lo = 0; lo < n; lo += block) r.push_back({lo, std::min(n, lo + block)});
  return r;
}

// Rows [r.lo, r.hi) of a [.][N][d] float tensor at row offset `row0`, widened to double.
Mat<double> rows_of(const std::vector<float>& x, int64_t row0, Range r, int64_t d) {
  return MapF(x.data() + row0 + r.lo * d, r.n(), d).cast<double>();
}

double slope_of(const Inputs& in, int64_t b, int64_t h) {
  return in.p.alibi == Alibi::none ? 0.0 : double(in.alibi_slopes[size_t(in.p.alibi_index(b, h))]);
}

// The logits of query rows r × keys c of one (b, h), in double: S[i][j] = τ·q_i·k_j, then the variants
// in FlashAttention-2's order, the softcap first, then ALiBi's bias (docs/variants.md):
//   S_ij = cap(τ·q_i·k_j) − slope_{b,h}·|i + Nk − Nq − j|,   cap(x) = c·tanh(x / c),
// and −inf where masked (causal, window). With a softcap, *T (when asked) gets tanh(τ·q_i·k_j / c), whose
// 1 − T² is the softcap's derivative in the backward.
Mat<double> scores(const Inputs& in, int64_t b, int64_t h, Range r, Range c, Mat<double>* T = nullptr) {
  const Problem& p = in.p;
  Mat<double> Q = rows_of(in.q, p.q_row(b, h, 0), r, p.d);
  Mat<double> K = rows_of(in.k, p.kv_row(b, p.kv_head(h), 0), c, p.d);
  Mat<double> S = p.softmax_scale() * (Q * K.transpose());
  if (p.softcap) {
    const double cap = *p.softcap;
    if (T) T->resize(r.n(), c.n());
    for (int64_t i = 0; i < r.n(); ++i)
      for (int64_t j = 0; j < c.n(); ++j) {
        const double t = std::tanh(S(i, j) / cap);  // scalar std::tanh: the oracle wants libm's accuracy
        if (T) (*T)(i, j) = t;
        S(i, j) = cap * t;
      }
  }
  if (p.alibi != Alibi::none) {
    const double slope = slope_of(in, b, h);
    for (int64_t i = 0; i < r.n(); ++i)
      for (int64_t j = 0; j < c.n(); ++j) S(i, j) -= slope * double(p.alibi_distance(b, r.lo + i, c.lo + j));
  }
  if (p.causal || p.windowed())
    for (int64_t i = 0; i < r.n(); ++i)
      for (int64_t j = 0; j < c.n(); ++j)
        if (!p.visible(r.lo + i, c.lo + j)) S(i, j) = -kInf;
  return S;
}

// P = exp(S − L) of rows r × keys c, recomputed from L as the backward does: exactly 0 on masked
// entries and on rows with L = +inf. T as in scores().
Mat<double> probs_from_lse(const Inputs& in, const Forward& f, int64_t b, int64_t h, Range r, Range c,
                           Mat<double>* T = nullptr) {
  const Problem& p = in.p;
  Mat<double> P = scores(in, b, h, r, c, T);
  for (int64_t i = 0; i < r.n(); ++i) {
    const double L = f.lse[p.lse_at(b, h, r.lo + i)];
    for (int64_t j = 0; j < c.n(); ++j)
      P(i, j) = p.visible(r.lo + i, c.lo + j) && std::isfinite(L) ? std::exp(P(i, j) - L) : 0.0;
  }
  return P;
}

// dS = P ∘ (dP − D) is the gradient of the logits S; with a softcap the chain rule through
// S = c·tanh(x / c) multiplies it by 1 − tanh²(x / c) to give the gradient of x = τ·q·k. ALiBi's bias
// depends on no input: it passes dS through unchanged.
void through_softcap(const Problem& p, Mat<double>& dS, const Mat<double>& T) {
  if (p.softcap) dS.array() *= 1.0 - T.array().square();
}

}  // namespace

Blocking blocking_for(const Problem& p, Blocking asked) {
  if (asked.rows <= 0 && asked.cols <= 0) {
    if (p.Nk <= kWholeEntries / p.Nq) return {p.Nq, p.Nk};  // Nq·Nk <= 2^24, without overflowing int64
    return {std::min(p.Nq, kRows), std::min(p.Nk, kCols)};
  }
  return {asked.rows > 0 ? std::min(asked.rows, p.Nq) : p.Nq, asked.cols > 0 ? std::min(asked.cols, p.Nk) : p.Nk};
}

namespace {

// One problem whose sequences share Nq and Nk (no varlen, no seqused_k): the oracle proper.
Forward forward_one(const Inputs& in, bool want, Blocking asked) {
  const Problem& p = in.p;
  if (want) asked = {p.Nq, p.Nk};  // S and P are asked for whole
  const Blocking bk = blocking_for(p, asked);
  const std::vector<Range> rows = cut(p.Nq, bk.rows), cols = cut(p.Nk, bk.cols);
  const int64_t nr = int64_t(rows.size());
  Forward f;
  f.o.assign(size_t(p.q_elems()), 0.0);
  f.lse.assign(size_t(p.lse_elems()), 0.0);
  if (want) {
    f.s.assign(size_t(p.score_elems()), 0.0);
    f.p.assign(size_t(p.score_elems()), 0.0);
    f.m.assign(size_t(p.lse_elems()), 0.0);
    f.l.assign(size_t(p.lse_elems()), 0.0);
  }
  const int64_t tasks = p.B * p.H * nr;  // one task per (b, h, block of query rows): rows are independent
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / nr / p.H, h = t / nr % p.H;
    const Range r = rows[size_t(t % nr)];
    const int64_t kv0 = p.kv_row(b, p.kv_head(h), 0);
    Eigen::Map<Mat<double>> O(f.o.data() + p.q_row(b, h, r.lo), r.n(), p.d);
    if (cols.size() == 1) {
      // Every key in one block: P = softmax(S) row by row, then O = P V (Algorithm 0 as written).
      Mat<double> S = scores(in, b, h, r, cols[0]);  // [rows][Nk]
      Mat<double> V = rows_of(in.v, kv0, cols[0], p.d);
      Mat<double> P(r.n(), p.Nk);
      for (int64_t i = 0; i < r.n(); ++i) {
        const double m = S.row(i).maxCoeff();
        const int64_t li = p.lse_at(b, h, r.lo + i);
        if (m == -kInf) {  // the row sees no key: O = 0, L = +inf
          P.row(i).setZero();
          f.lse[li] = kInf;
          if (want) { f.m[li] = -kInf; f.l[li] = 0; }
          continue;
        }
        // Scalar exp with the mask explicit: Eigen's vectorised exp clamps −∞ to about −709 and
        // returns 1e-308 rather than 0, and the oracle must give masked entries exactly zero weight.
        for (int64_t j = 0; j < p.Nk; ++j) P(i, j) = p.visible(r.lo + i, j) ? std::exp(S(i, j) - m) : 0.0;
        const double l = P.row(i).sum();
        P.row(i) /= l;
        f.lse[li] = m + std::log(l);
        if (want) { f.m[li] = m; f.l[li] = l; }
      }
      O = P * V;
      if (want) {  // want implies one row block: r is every row
        const int64_t off = (b * p.H + h) * p.Nq * p.Nk;
        Eigen::Map<Mat<double>>(f.s.data() + off, p.Nq, p.Nk) = S;
        Eigen::Map<Mat<double>>(f.p.data() + off, p.Nq, p.Nk) = P;
      }
      continue;
    }
    // Several key blocks. Pass 1: the row max m over every key. Pass 2: E = exp(S − m) block by
    // block, ℓ = Σ rowsum(E), U = Σ E V_j. Then O = U / ℓ and L = m + log ℓ. m is exact (a max does
    // not round), so E is the very exp of the one-block path; only the sums are grouped differently.
    Eigen::VectorXd m = Eigen::VectorXd::Constant(r.n(), -kInf);
    for (const Range& c : cols) m = m.cwiseMax(scores(in, b, h, r, c).rowwise().maxCoeff());
    Eigen::VectorXd l = Eigen::VectorXd::Zero(r.n());
    Mat<double> U = Mat<double>::Zero(r.n(), p.d);
    for (const Range& c : cols) {
      Mat<double> E = scores(in, b, h, r, c);
      for (int64_t i = 0; i < r.n(); ++i)
        for (int64_t j = 0; j < c.n(); ++j)
          E(i, j) = m(i) != -kInf && p.visible(r.lo + i, c.lo + j) ? std::exp(E(i, j) - m(i)) : 0.0;
      l += E.rowwise().sum();
      U += E * rows_of(in.v, kv0, c, p.d);
    }
    for (int64_t i = 0; i < r.n(); ++i) {
      const int64_t li = p.lse_at(b, h, r.lo + i);
      if (m(i) == -kInf) {  // the row sees no key: O stays 0, L = +inf
        f.lse[li] = kInf;
        continue;
      }
      O.row(i) = U.row(i) / l(i);
      f.lse[li] = m(i) + std::log(l(i));
    }
  }
  return f;
}

Backward backward_one(const Inputs& in, const Forward& f, Blocking asked) {
  const Problem& p = in.p;
  const double scale = p.softmax_scale();
  const Blocking bk = blocking_for(p, asked);
  const std::vector<Range> rows = cut(p.Nq, bk.rows), cols = cut(p.Nk, bk.cols);
  const Range all_rows{0, p.Nq};
  Backward g;
  g.dq.assign(size_t(p.q_elems()), 0.0);
  g.dk.assign(size_t(p.kv_elems()), 0.0);
  g.dv.assign(size_t(p.kv_elems()), 0.0);
  g.D.assign(size_t(p.lse_elems()), 0.0);
  // D_i = rowsum(dO ∘ O), O(Nq·d) per head.
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const int64_t b = bh / p.H, h = bh % p.H;
    Mat<double> dO = rows_of(in.dO, p.q_row(b, h, 0), all_rows, p.d);
    Eigen::Map<const Mat<double>> O(f.o.data() + p.q_row(b, h, 0), p.Nq, p.d);
    Eigen::Map<Eigen::VectorXd>(g.D.data() + p.lse_at(b, h, 0), p.Nq) = (dO.array() * O.array()).rowwise().sum();
  }
  // dK_j, dV_j: one task per (K/V head, key block), which sums over the query heads that read it
  // and over every query block. With one key block the task also owns whole rows of dQ.
  const int64_t nc = int64_t(cols.size());
  const int64_t tasks = p.B * p.H_kv * nc;
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / nc / p.H_kv, hk = t / nc % p.H_kv;
    const Range c = cols[size_t(t % nc)];
    Mat<double> K = rows_of(in.k, p.kv_row(b, hk, 0), c, p.d);
    Mat<double> V = rows_of(in.v, p.kv_row(b, hk, 0), c, p.d);
    Mat<double> dK = Mat<double>::Zero(c.n(), p.d), dV = Mat<double>::Zero(c.n(), p.d);
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
      for (const Range& r : rows) {
        Mat<double> Q = rows_of(in.q, p.q_row(b, h, 0), r, p.d);
        Mat<double> dO = rows_of(in.dO, p.q_row(b, h, 0), r, p.d);
        Eigen::Map<const Eigen::VectorXd> D(g.D.data() + p.lse_at(b, h, r.lo), r.n());
        Mat<double> T;                                                         // tanh(x / c), softcap only
        Mat<double> P = probs_from_lse(in, f, b, h, r, c, &T);                 // [rows][keys]
        dV += P.transpose() * dO;
        Mat<double> dP = dO * V.transpose();                                   // [rows][keys]
        Mat<double> dS = (P.array() * (dP.colwise() - D).array()).matrix();    // [rows][keys]
        through_softcap(p, dS, T);
        if (nc == 1) Eigen::Map<Mat<double>>(g.dq.data() + p.q_row(b, h, r.lo), r.n(), p.d) = scale * (dS * K);
        dK += scale * (dS.transpose() * Q);
      }
    }
    Eigen::Map<Mat<double>>(g.dk.data() + p.kv_row(b, hk, c.lo), c.n(), p.d) = dK;
    Eigen::Map<Mat<double>>(g.dv.data() + p.kv_row(b, hk, c.lo), c.n(), p.d) = dV;
  }
  if (nc == 1) return g;
  // Several key blocks: dQ_i = scale · Σ_j dS_ij K_j, one task per (b, h, query block), P and dP
  // recomputed. Each task owns its rows of dQ, so the sum runs in key order with no atomics and the
  // result does not depend on the thread count.
  const int64_t nr = int64_t(rows.size());
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < p.B * p.H * nr; ++t) {
    const int64_t b = t / nr / p.H, h = t / nr % p.H;
    const Range r = rows[size_t(t % nr)];
    Mat<double> dO = rows_of(in.dO, p.q_row(b, h, 0), r, p.d);
    Eigen::Map<const Eigen::VectorXd> D(g.D.data() + p.lse_at(b, h, r.lo), r.n());
    Mat<double> dQ = Mat<double>::Zero(r.n(), p.d);
    for (const Range& c : cols) {
      Mat<double> K = rows_of(in.k, p.kv_row(b, p.kv_head(h), 0), c, p.d);
      Mat<double> V = rows_of(in.v, p.kv_row(b, p.kv_head(h), 0), c, p.d);
      Mat<double> T;
      Mat<double> P = probs_from_lse(in, f, b, h, r, c, &T);
      Mat<double> dP = dO * V.transpose();
      Mat<double> dS = (P.array() * (dP.colwise() - D).array()).matrix();
      through_softcap(p, dS, T);
      dQ += scale * (dS * K);
    }
    Eigen::Map<Mat<double>>(g.dq.data() + p.q_row(b, h, r.lo), r.n(), p.d) = dQ;
  }
  return g;
}

// Round every entry of a float matrix to the storage type, in place.
void round_mat(DType t, Mat<float>& X) {
  if (t == DType::f32) return;
  for (Eigen::Index n = 0; n < X.size(); ++n) X.data()[n] = round_to(t, X.data()[n]);
}

// The baseline's logits of rows r × keys c at the storage type, each operation's result stored as a
// low-precision Algorithm 0 stores it: S = τ·QKᵀ (fp32 accumulation) rounded; with a softcap
// S = c·tanh(S / c) rounded (T = tanh(S / c) in fp32, for the backward); with ALiBi
// S = S − slope·|i + Nk − Nq − j| rounded. Masked entries are left to the callers (visible()).
Mat<float> baseline_scores(const Inputs& in, int64_t b, int64_t h, Range r, Range c, Mat<float>* T = nullptr) {
  const Problem& p = in.p;
  MapF Q(in.q.data() + p.q_row(b, h, r.lo), r.n(), p.d);
  MapF K(in.k.data() + p.kv_row(b, p.kv_head(h), c.lo), c.n(), p.d);
  Mat<float> S = float(p.softmax_scale()) * (Q * K.transpose());
  round_mat(p.dtype, S);
  if (p.softcap) {
    // Eigen's (vectorised) tanh, as a plain fp32 implementation and steps 01–02 compute it: std::tanh
    // here was more exact than the steps, and a row that sees one key (baseline error ~0) failed
    // correct steps by ~2 ulp (check -N 1 --softcap 30 --steps 01,02: 8 of 30 seeds).
    const float cap = float(*p.softcap);
    const Mat<float> t = (S / cap).array().tanh().matrix();
    if (T) *T = t;
    S = cap * t;
    round_mat(p.dtype, S);
  }
  if (p.alibi != Alibi::none) {
    const float slope = float(slope_of(in, b, h));
    for (int64_t i = 0; i < r.n(); ++i)
      for (int64_t j = 0; j < c.n(); ++j) S(i, j) -= slope * float(p.alibi_distance(b, r.lo + i, c.lo + j));
    round_mat(p.dtype, S);
  }
  return S;
}

// Algorithm 0 at the storage type for query rows r of one (b, h), over key blocks `cols`: the row
// statistics m and ℓ (fp32, summed key by key in key order, so blocking does not change them) and
// the rounded P of any key block. With one key block S is computed once and kept.
struct BaselineRows {
  const Inputs& in;
  int64_t b, h;
  Range r;
  std::vector<float> m, l;
  Mat<float> S_whole;  // one key block: S, rounded
  bool whole = false;

  BaselineRows(const Inputs& in_, int64_t b_, int64_t h_, Range r_, const std::vector<Range>& cols)
      : in(in_), b(b_), h(h_), r(r_) {
    const float inf = std::numeric_limits<float>::infinity();
    whole = cols.size() == 1;
    m.assign(size_t(r.n()), -inf);
    l.assign(size_t(r.n()), 0.f);
    if (whole) S_whole = scores(cols[0]);
    for (const Range& c : cols) {
      const Mat<float> S = whole ? Mat<float>() : scores(c);
      const Mat<float>& Sc = whole ? S_whole : S;
      for (int64_t i = 0; i < r.n(); ++i)
        for (int64_t j = 0; j < c.n(); ++j)
          if (in.p.visible(r.lo + i, c.lo + j)) m[i] = std::max(m[i], Sc(i, j));
    }
    for (const Range& c : cols) {
      const Mat<float> S = whole ? Mat<float>() : scores(c);
      const Mat<float>& Sc = whole ? S_whole : S;
      for (int64_t i = 0; i < r.n(); ++i) {
        if (m[i] == -inf) continue;
        for (int64_t j = 0; j < c.n(); ++j) l[i] += in.p.visible(r.lo + i, c.lo + j) ? std::exp(Sc(i, j) - m[i]) : 0.f;
      }
    }
  }

  Mat<float> scores(Range c) const { return baseline_scores(in, b, h, r, c); }

  // P of keys c: exp(S − m) / ℓ, stored at the storage type; 0 where masked and on empty rows.
  Mat<float> probs(Range c) const {
    const float inf = std::numeric_limits<float>::infinity();
    const Mat<float> S = whole ? Mat<float>() : scores(c);
    const Mat<float>& Sc = whole ? S_whole : S;
    Mat<float> P(r.n(), c.n());
    for (int64_t i = 0; i < r.n(); ++i) {
      if (m[i] == -inf) { P.row(i).setZero(); continue; }
      for (int64_t j = 0; j < c.n(); ++j) P(i, j) = in.p.visible(r.lo + i, c.lo + j) ? std::exp(Sc(i, j) - m[i]) : 0.f;
      P.row(i) /= l[i];
    }
    round_mat(in.p.dtype, P);
    return P;
  }

  float lse(int64_t i) const {
    return m[i] == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::infinity()
                                                           : m[i] + std::log(l[i]);
  }
};

MapF kv_rows(const std::vector<float>& x, const Problem& p, int64_t b, int64_t hk, Range c) {
  return MapF(x.data() + p.kv_row(b, hk, c.lo), c.n(), p.d);
}
MapF q_rows(const std::vector<float>& x, const Problem& p, int64_t b, int64_t h, Range r) {
  return MapF(x.data() + p.q_row(b, h, r.lo), r.n(), p.d);
}

// dest = X for the first block of a sum, dest += X after: with one block the sum is the plain product.
template <class A, class B>
void accumulate(bool first, A& dest, const B& x) {
  if (first) dest = x;
  else dest += x;
}

Outputs baseline_forward_one(const Inputs& in, Blocking asked) {
  const Problem& p = in.p;
  const Blocking bk = blocking_for(p, asked);
  const std::vector<Range> rows = cut(p.Nq, bk.rows), cols = cut(p.Nk, bk.cols);
  const int64_t nr = int64_t(rows.size());
  Outputs out;
  out.o.assign(size_t(p.q_elems()), 0.f);
  out.lse.assign(size_t(p.lse_elems()), 0.f);
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < p.B * p.H * nr; ++t) {
    const int64_t b = t / nr / p.H, h = t / nr % p.H;
    const Range r = rows[size_t(t % nr)];
    const BaselineRows br(in, b, h, r, cols);
    Mat<float> O;
    for (size_t k = 0; k < cols.size(); ++k)  // fp32 accumulation over every key
      accumulate(k == 0, O, br.probs(cols[k]) * kv_rows(in.v, p, b, p.kv_head(h), cols[k]));
    round_mat(p.dtype, O);
    Eigen::Map<Mat<float>>(out.o.data() + p.q_row(b, h, r.lo), r.n(), p.d) = O;
    for (int64_t i = 0; i < r.n(); ++i) out.lse[p.lse_at(b, h, r.lo + i)] = br.lse(i);
  }
  return out;
}

Outputs baseline_backward_one(const Inputs& in, Blocking asked) {
  const Problem& p = in.p;
  const DType t = p.dtype;
  const float scale = float(p.softmax_scale());
  const Blocking bk = blocking_for(p, asked);
  const std::vector<Range> rows = cut(p.Nq, bk.rows), cols = cut(p.Nk, bk.cols);
  const int64_t nr = int64_t(rows.size()), nc = int64_t(cols.size());
  Outputs out;
  out.dq.assign(size_t(p.q_elems()), 0.f);
  out.dk.assign(size_t(p.kv_elems()), 0.f);
  out.dv.assign(size_t(p.kv_elems()), 0.f);
  const float inf = std::numeric_limits<float>::infinity();
  // Per query row: m and ℓ of the baseline's softmax, and D_i = rowsum(P ∘ dP) (the softmax
  // backward's row sum over every key, in fp32), before any block of dS can be formed.
  std::vector<float> M(size_t(p.lse_elems()), -inf), L(size_t(p.lse_elems()), 0.f), Dv(size_t(p.lse_elems()), 0.f);
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < p.B * p.H * nr; ++task) {
    const int64_t b = task / nr / p.H, h = task / nr % p.H;
    const Range r = rows[size_t(task % nr)];
    const BaselineRows br(in, b, h, r, cols);
    Eigen::VectorXf D;
    for (size_t k = 0; k < cols.size(); ++k) {
      Mat<float> dP = q_rows(in.dO, p, b, h, r) * kv_rows(in.v, p, b, p.kv_head(h), cols[k]).transpose();
      round_mat(t, dP);
      accumulate(k == 0, D, (br.probs(cols[k]).array() * dP.array()).rowwise().sum().matrix().eval());
    }
    for (int64_t i = 0; i < r.n(); ++i) {
      const int64_t li = p.lse_at(b, h, r.lo + i);
      M[li] = br.m[i];
      L[li] = br.l[i];
      Dv[li] = D(i);
    }
  }
  // The rounded P of rows r × keys c from the stored m and ℓ (what BaselineRows::probs gives); T as in
  // baseline_scores().
  auto probs = [&](int64_t b, int64_t h, Range r, Range c, Mat<float>* T = nullptr) {
    Mat<float> P = baseline_scores(in, b, h, r, c, T);
    for (int64_t i = 0; i < r.n(); ++i) {
      const int64_t li = p.lse_at(b, h, r.lo + i);
      if (M[li] == -inf) { P.row(i).setZero(); continue; }
      for (int64_t j = 0; j < c.n(); ++j) P(i, j) = p.visible(r.lo + i, c.lo + j) ? std::exp(P(i, j) - M[li]) : 0.f;
      P.row(i) /= L[li];
    }
    round_mat(t, P);
    return P;
  };
  // dS of rows r × keys c, rounded: P ∘ (dP − D), dP = dO Vᵀ rounded; with a softcap, then times
  // 1 − T², rounded again (the gradient of τ·q·k).
  auto dscores = [&](int64_t b, int64_t h, Range r, Range c, const Mat<float>& P, const Mat<float>& T) {
    Mat<float> dP = q_rows(in.dO, p, b, h, r) * kv_rows(in.v, p, b, p.kv_head(h), c).transpose();
    round_mat(t, dP);
    Eigen::Map<const Eigen::VectorXf> D(Dv.data() + p.lse_at(b, h, r.lo), r.n());
    Mat<float> dS = (P.array() * (dP.colwise() - D).array()).matrix();
    round_mat(t, dS);
    if (p.softcap) {
      dS.array() *= 1.0f - T.array().square();
      round_mat(t, dS);
    }
    return dS;
  };
  // dK_j, dV_j: one task per (K/V head, key block). Each query head's dK, dV is rounded to the
  // storage type (its own product's result) before the heads of a group are summed.
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < p.B * p.H_kv * nc; ++task) {
    const int64_t b = task / nc / p.H_kv, hk = task / nc % p.H_kv;
    const Range c = cols[size_t(task % nc)];
    Mat<float> dK = Mat<float>::Zero(c.n(), p.d), dV = Mat<float>::Zero(c.n(), p.d);
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
      Mat<float> dKh, dVh;
      for (size_t k = 0; k < rows.size(); ++k) {
        const Range r = rows[k];
        Mat<float> T;
        const Mat<float> P = probs(b, h, r, c, &T);
        const Mat<float> dS = dscores(b, h, r, c, P, T);
        // noalias: evaluated straight into the row-major result, as the one-block baseline always
        // was (a plain `=` goes through a temporary whose product rounds in another order).
        if (k == 0) {
          dVh.noalias() = P.transpose() * q_rows(in.dO, p, b, h, r);
          dKh.noalias() = scale * (dS.transpose() * q_rows(in.q, p, b, h, r));
        } else {
          dVh.noalias() += P.transpose() * q_rows(in.dO, p, b, h, r);
          dKh.noalias() += scale * (dS.transpose() * q_rows(in.q, p, b, h, r));
        }
        if (nc == 1) {  // one key block: this task also owns whole rows of dQ
          Mat<float> dQ = scale * (dS * kv_rows(in.k, p, b, hk, c));
          round_mat(t, dQ);
          Eigen::Map<Mat<float>>(out.dq.data() + p.q_row(b, h, r.lo), r.n(), p.d) = dQ;
        }
      }
      round_mat(t, dVh);
      round_mat(t, dKh);
      dK += dKh;
      dV += dVh;
    }
    round_mat(t, dK);
    round_mat(t, dV);
    Eigen::Map<Mat<float>>(out.dk.data() + p.kv_row(b, hk, c.lo), c.n(), p.d) = dK;
    Eigen::Map<Mat<float>>(out.dv.data() + p.kv_row(b, hk, c.lo), c.n(), p.d) = dV;
  }
  if (nc == 1) return out;
  // Several key blocks: dQ_i = scale · Σ_j dS_ij K_j in fp32, rounded once, one task per query block.
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < p.B * p.H * nr; ++task) {
    const int64_t b = task / nr / p.H, h = task / nr % p.H;
    const Range r = rows[size_t(task % nr)];
    Mat<float> dQ;
    for (size_t k = 0; k < cols.size(); ++k) {
      const Range c = cols[k];
      Mat<float> T;
      const Mat<float> P = probs(b, h, r, c, &T);
      const Mat<float> dS = dscores(b, h, r, c, P, T);
      accumulate(k == 0, dQ, scale * (dS * kv_rows(in.k, p, b, p.kv_head(h), c)));
    }
    round_mat(t, dQ);
    Eigen::Map<Mat<float>>(out.dq.data() + p.q_row(b, h, r.lo), r.n(), p.d) = dQ;
  }
  return out;
}


// --- Variable length and seqused_k: each sequence as a problem of its own -------------------------

bool per_sequence(const Problem& p) { return p.varlen() || !p.seqused_k.empty(); }

// Sequence b of a varlen or seqused_k problem as a problem of its own: B = 1, Nq = seqlen_q(b),
// Nk = seqlen_k(b) (the keys it uses), the plain layout, its row of [B][H] slopes. The caller has
// checked that both lengths are at least 1.
Inputs sequence(const Inputs& in, int64_t b, bool with_dO) {
  const Problem& p = in.p;
  Inputs s;
  s.p = p;
  s.p.B = 1;
  s.p.Nq = p.seqlen_q(b);
  s.p.Nk = p.seqlen_k(b);
  s.p.cu_seqlens_q.clear();
  s.p.cu_seqlens_k.clear();
  s.p.seqused_k.clear();
  s.seed = in.seed;
  s.opt = in.opt;
  if (p.alibi != Alibi::none) {
    s.p.alibi = Alibi::heads;
    for (int64_t h = 0; h < p.H; ++h) s.alibi_slopes.push_back(in.alibi_slopes[size_t(p.alibi_index(b, h))]);
  }
  const Problem& sp = s.p;
  auto gather = [&](const std::vector<float>& x, int64_t heads, int64_t n, bool q_side) {
    std::vector<float> y(size_t(heads * n * p.d));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t from = q_side ? p.q_off(b, h, i) : p.kv_off(b, h, i);
        const int64_t to = q_side ? sp.q_row(0, h, i) : sp.kv_row(0, h, i);
        std::copy(x.begin() + from, x.begin() + from + p.d, y.begin() + to);
      }
    return y;
  };
  s.q = gather(in.q, p.H, sp.Nq, true);
  s.k = gather(in.k, p.H_kv, sp.Nk, false);
  s.v = gather(in.v, p.H_kv, sp.Nk, false);
  if (with_dO) s.dO = gather(in.dO, p.H, sp.Nq, true);
  return s;
}

// Rows of sequence b's own tensors (plain layout of sp) copied to their places in the whole problem's.
template <class T, class U>
void scatter_q(std::vector<T>& to, const Problem& p, int64_t b, const std::vector<U>& from, const Problem& sp) {
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t i = 0; i < sp.Nq; ++i)
      std::copy(from.begin() + sp.q_row(0, h, i), from.begin() + sp.q_row(0, h, i) + p.d, to.begin() + p.q_off(b, h, i));
}
template <class T, class U>
void scatter_kv(std::vector<T>& to, const Problem& p, int64_t b, const std::vector<U>& from, const Problem& sp) {
  for (int64_t hk = 0; hk < p.H_kv; ++hk)
    for (int64_t j = 0; j < sp.Nk; ++j)
      std::copy(from.begin() + sp.kv_row(0, hk, j), from.begin() + sp.kv_row(0, hk, j) + p.d, to.begin() + p.kv_off(b, hk, j));
}
template <class T, class U>
void scatter_rows(std::vector<T>& to, const Problem& p, int64_t b, const std::vector<U>& from, const Problem& sp) {
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t i = 0; i < sp.Nq; ++i) to[size_t(p.lse_off(b, h, i))] = T(from[size_t(sp.lse_at(0, h, i))]);
}

// Refuses inputs that do not fit their problem, before any read: a malformed problem, slopes of the
// wrong shape, a tensor of the wrong size (the oracle would read past it).
void check_inputs(const Inputs& in, bool with_dO) {
  const Problem& p = in.p;
  p.validate();
  require_alibi_slopes(p, in.alibi_slopes);
  auto size = [&](const char* name, const std::vector<float>& x, int64_t want) {
    if (int64_t(x.size()) != want)
      throw Error(std::string("the oracle's input ") + name + " has " + std::to_string(x.size()) +
                  " values; the problem (" + p.describe() + ") needs " + std::to_string(want));
  };
  size("q", in.q, p.q_elems());
  size("k", in.k, p.kv_elems());
  size("v", in.v, p.kv_elems());
  if (with_dO) size("dO", in.dO, p.q_elems());
  // |scale·q·k| <= scale·d·max|q|·max|k|. Past double's range the logits overflow to ±inf: the softmax
  // then gives NaN, and a row whose logits all became −inf reads as one that sees no key (o = 0,
  // lse = +inf). Refused here, outside the parallel loops (an exception must not leave an omp region).
  auto amax = [](const std::vector<float>& x) {
    double m = 0;
    for (float v : x) m = std::max(m, double(std::fabs(v)));
    return m;
  };
  const double bound = p.softmax_scale() * double(p.d) * amax(in.q) * amax(in.k);
  if (!(bound <= std::numeric_limits<double>::max())) {
    std::ostringstream e;
    e << "the logits overflow double: scale·d·max|q|·max|k| = " << bound << " (scale = " << p.softmax_scale()
      << ") is more than " << std::numeric_limits<double>::max() << ", double's largest value; choose a smaller scale";
    throw Error(e.str());
  }
}

}  // namespace

Forward forward(const Inputs& in, bool want, Blocking asked) {
  check_inputs(in, false);
  const Problem& p = in.p;
  if (!per_sequence(p)) return forward_one(in, want, asked);
  Forward f;
  f.o.assign(size_t(p.q_elems()), 0.0);
  f.lse.assign(size_t(p.lse_elems()), kInf);  // a sequence without keys: every row sees none
  if (want) {  // [B][H][Nq][Nk] with Nq, Nk the longest sequences: padding holds S = −inf, P = 0
    f.s.assign(size_t(p.score_elems()), -kInf);
    f.p.assign(size_t(p.score_elems()), 0.0);
    f.m.assign(size_t(p.lse_elems()), -kInf);
    f.l.assign(size_t(p.lse_elems()), 0.0);
  }
  for (int64_t b = 0; b < p.B; ++b) {
    if (p.seqlen_q(b) == 0 || p.seqlen_k(b) == 0) continue;
    const Inputs s = sequence(in, b, false);
    const Forward fs = forward_one(s, want, asked);
    const Problem& sp = s.p;
    scatter_q(f.o, p, b, fs.o, sp);
    scatter_rows(f.lse, p, b, fs.lse, sp);
    if (!want) continue;
    scatter_rows(f.m, p, b, fs.m, sp);
    scatter_rows(f.l, p, b, fs.l, sp);
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < sp.Nq; ++i)
        for (int64_t j = 0; j < sp.Nk; ++j) {
          const size_t to = size_t(((b * p.H + h) * p.Nq + i) * p.Nk + j), from = size_t((h * sp.Nq + i) * sp.Nk + j);
          f.s[to] = fs.s[from];
          f.p[to] = fs.p[from];
        }
  }
  return f;
}

Backward backward(const Inputs& in, const Forward& f, Blocking asked) {
  check_inputs(in, true);
  const Problem& p = in.p;
  if (f.o.size() != size_t(p.q_elems()) || f.lse.size() != size_t(p.lse_elems()))
    throw Error("the oracle's backward needs the forward of the same problem (" + p.describe() + ")");
  if (!per_sequence(p)) return backward_one(in, f, asked);
  Backward g;
  g.dq.assign(size_t(p.q_elems()), 0.0);
  g.dk.assign(size_t(p.kv_elems()), 0.0);  // keys no query sees (past seqused_k) get no gradient
  g.dv.assign(size_t(p.kv_elems()), 0.0);
  g.D.assign(size_t(p.lse_elems()), 0.0);   // O = 0 where a sequence has no key, so D = 0 there
  for (int64_t b = 0; b < p.B; ++b) {
    if (p.seqlen_q(b) == 0 || p.seqlen_k(b) == 0) continue;
    const Inputs s = sequence(in, b, true);
    const Problem& sp = s.p;
    Forward fs;  // the sequence's own O and L, gathered
    fs.o.assign(size_t(sp.q_elems()), 0.0);
    fs.lse.assign(size_t(sp.lse_elems()), 0.0);
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < sp.Nq; ++i) {
        std::copy(f.o.begin() + p.q_off(b, h, i), f.o.begin() + p.q_off(b, h, i) + p.d, fs.o.begin() + sp.q_row(0, h, i));
        fs.lse[size_t(sp.lse_at(0, h, i))] = f.lse[size_t(p.lse_off(b, h, i))];
      }
    const Backward gs = backward_one(s, fs, asked);
    scatter_q(g.dq, p, b, gs.dq, sp);
    scatter_kv(g.dk, p, b, gs.dk, sp);
    scatter_kv(g.dv, p, b, gs.dv, sp);
    scatter_rows(g.D, p, b, gs.D, sp);
  }
  return g;
}

Outputs baseline_forward(const Inputs& in, Blocking asked) {
  check_inputs(in, false);
  const Problem& p = in.p;
  if (!per_sequence(p)) return baseline_forward_one(in, asked);
  Outputs out;
  out.o.assign(size_t(p.q_elems()), 0.f);
  out.lse.assign(size_t(p.lse_elems()), std::numeric_limits<float>::infinity());
  for (int64_t b = 0; b < p.B; ++b) {
    if (p.seqlen_q(b) == 0 || p.seqlen_k(b) == 0) continue;
    const Inputs s = sequence(in, b, false);
    const Outputs os = baseline_forward_one(s, asked);
    scatter_q(out.o, p, b, os.o, s.p);
    scatter_rows(out.lse, p, b, os.lse, s.p);
  }
  return out;
}

Outputs baseline_backward(const Inputs& in, Blocking asked) {
  check_inputs(in, true);
  const Problem& p = in.p;
  if (!per_sequence(p)) return baseline_backward_one(in, asked);
  Outputs out;
  out.dq.assign(size_t(p.q_elems()), 0.f);
  out.dk.assign(size_t(p.kv_elems()), 0.f);
  out.dv.assign(size_t(p.kv_elems()), 0.f);
  for (int64_t b = 0; b < p.B; ++b) {
    if (p.seqlen_q(b) == 0 || p.seqlen_k(b) == 0) continue;
    const Inputs s = sequence(in, b, true);
    const Outputs os = baseline_backward_one(s, asked);
    scatter_q(out.dq, p, b, os.dq, s.p);
    scatter_kv(out.dk, p, b, os.dk, s.p);
    scatter_kv(out.dv, p, b, os.dv, s.p);
  }
  return out;
}

}  // namespace fl::ref

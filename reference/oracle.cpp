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

// Scaled, masked scores of query rows r × keys c of one (b, h), in double: S[i][j] = scale·q_i·k_j,
// -inf where masked.
Mat<double> scores(const Inputs& in, int64_t b, int64_t h, Range r, Range c) {
  const Problem& p = in.p;
  Mat<double> Q = rows_of(in.q, p.q_row(b, h, 0), r, p.d);
  Mat<double> K = rows_of(in.k, p.kv_row(b, p.kv_head(h), 0), c, p.d);
  Mat<double> S = p.softmax_scale() * (Q * K.transpose());
  if (p.causal)
    for (int64_t i = 0; i < r.n(); ++i)
      for (int64_t j = 0; j < c.n(); ++j)
        if (!p.visible(r.lo + i, c.lo + j)) S(i, j) = -kInf;
  return S;
}

// P = exp(S − L) of rows r × keys c, recomputed from L as the backward does: exactly 0 on masked
// entries and on rows with L = +inf.
Mat<double> probs_from_lse(const Inputs& in, const Forward& f, int64_t b, int64_t h, Range r, Range c) {
  const Problem& p = in.p;
  Mat<double> P = scores(in, b, h, r, c);
  for (int64_t i = 0; i < r.n(); ++i) {
    const double L = f.lse[p.lse_at(b, h, r.lo + i)];
    for (int64_t j = 0; j < c.n(); ++j)
      P(i, j) = p.visible(r.lo + i, c.lo + j) && std::isfinite(L) ? std::exp(P(i, j) - L) : 0.0;
  }
  return P;
}

}  // namespace

Blocking blocking_for(const Problem& p, Blocking asked) {
  if (asked.rows <= 0 && asked.cols <= 0) {
    if (p.Nk <= kWholeEntries / p.Nq) return {p.Nq, p.Nk};  // Nq·Nk <= 2^24, without overflowing int64
    return {std::min(p.Nq, kRows), std::min(p.Nk, kCols)};
  }
  return {asked.rows > 0 ? std::min(asked.rows, p.Nq) : p.Nq, asked.cols > 0 ? std::min(asked.cols, p.Nk) : p.Nk};
}

Forward forward(const Inputs& in, bool want, Blocking asked) {
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

Backward backward(const Inputs& in, const Forward& f, Blocking asked) {
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
        Mat<double> P = probs_from_lse(in, f, b, h, r, c);                     // [rows][keys]
        dV += P.transpose() * dO;
        Mat<double> dP = dO * V.transpose();                                   // [rows][keys]
        Mat<double> dS = (P.array() * (dP.colwise() - D).array()).matrix();    // [rows][keys]
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
      Mat<double> P = probs_from_lse(in, f, b, h, r, c);
      Mat<double> dP = dO * V.transpose();
      Mat<double> dS = (P.array() * (dP.colwise() - D).array()).matrix();
      dQ += scale * (dS * K);
    }
    Eigen::Map<Mat<double>>(g.dq.data() + p.q_row(b, h, r.lo), r.n(), p.d) = dQ;
  }
  return g;
}

namespace {

// Round every entry of a float matrix to the storage type, in place.
void round_mat(DType t, Mat<float>& X) {
  if (t == DType::f32) return;
  for (Eigen::Index n = 0; n < X.size(); ++n) X.data()[n] = round_to(t, X.data()[n]);
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

  // S of keys c: fp32 accumulation, stored at the storage type.
  Mat<float> scores(Range c) const {
    const Problem& p = in.p;
    MapF Q(in.q.data() + p.q_row(b, h, r.lo), r.n(), p.d);
    MapF K(in.k.data() + p.kv_row(b, p.kv_head(h), c.lo), c.n(), p.d);
    Mat<float> S = float(p.softmax_scale()) * (Q * K.transpose());
    round_mat(p.dtype, S);
    return S;
  }

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

}  // namespace

Outputs baseline_forward(const Inputs& in, Blocking asked) {
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

Outputs baseline_backward(const Inputs& in, Blocking asked) {
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
  // The rounded P of rows r × keys c from the stored m and ℓ (what BaselineRows::probs gives).
  auto probs = [&](int64_t b, int64_t h, Range r, Range c) {
    MapF Q = q_rows(in.q, p, b, h, r);
    MapF K = kv_rows(in.k, p, b, p.kv_head(h), c);
    Mat<float> P = scale * (Q * K.transpose());
    round_mat(t, P);
    for (int64_t i = 0; i < r.n(); ++i) {
      const int64_t li = p.lse_at(b, h, r.lo + i);
      if (M[li] == -inf) { P.row(i).setZero(); continue; }
      for (int64_t j = 0; j < c.n(); ++j) P(i, j) = p.visible(r.lo + i, c.lo + j) ? std::exp(P(i, j) - M[li]) : 0.f;
      P.row(i) /= L[li];
    }
    round_mat(t, P);
    return P;
  };
  // dS of rows r × keys c, rounded: P ∘ (dP − D), dP = dO Vᵀ rounded.
  auto dscores = [&](int64_t b, int64_t h, Range r, Range c, const Mat<float>& P) {
    Mat<float> dP = q_rows(in.dO, p, b, h, r) * kv_rows(in.v, p, b, p.kv_head(h), c).transpose();
    round_mat(t, dP);
    Eigen::Map<const Eigen::VectorXf> D(Dv.data() + p.lse_at(b, h, r.lo), r.n());
    Mat<float> dS = (P.array() * (dP.colwise() - D).array()).matrix();
    round_mat(t, dS);
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
        const Mat<float> P = probs(b, h, r, c);
        const Mat<float> dS = dscores(b, h, r, c, P);
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
      const Mat<float> dS = dscores(b, h, r, c, probs(b, h, r, c));
      accumulate(k == 0, dQ, scale * (dS * kv_rows(in.k, p, b, p.kv_head(h), c)));
    }
    round_mat(t, dQ);
    Eigen::Map<Mat<float>>(out.dq.data() + p.q_row(b, h, r.lo), r.n(), p.d) = dQ;
  }
  return out;
}

}  // namespace fl::ref

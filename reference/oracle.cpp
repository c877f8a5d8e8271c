// flashladder — reference/oracle.cpp
#include "reference/oracle.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

namespace fl::ref {
namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapF = Eigen::Map<const Mat<float>>;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Scaled, masked scores of one (b, h) in double: S[i][j] = scale·q_i·k_j, -inf where masked.
Mat<double> scores(const Inputs& in, int64_t b, int64_t h) {
  const Problem& p = in.p;
  Mat<double> Q = MapF(in.q.data() + p.q_row(b, h, 0), p.Nq, p.d).cast<double>();
  Mat<double> K = MapF(in.k.data() + p.kv_row(b, p.kv_head(h), 0), p.Nk, p.d).cast<double>();
  Mat<double> S = p.softmax_scale() * (Q * K.transpose());
  if (p.causal)
    for (int64_t i = 0; i < p.Nq; ++i)
      for (int64_t j = 0; j < p.Nk; ++j)
        if (!p.visible(i, j)) S(i, j) = -kInf;
  return S;
}

}  // namespace

Forward forward(const Inputs& in, bool want) {
  const Problem& p = in.p;
  Forward f;
  f.o.assign(size_t(p.q_elems()), 0.0);
  f.lse.assign(size_t(p.lse_elems()), 0.0);
  if (want) {
    f.s.assign(size_t(p.score_elems()), 0.0);
    f.p.assign(size_t(p.score_elems()), 0.0);
    f.m.assign(size_t(p.lse_elems()), 0.0);
    f.l.assign(size_t(p.lse_elems()), 0.0);
  }
  const int64_t heads = p.B * p.H;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < heads; ++bh) {
    const int64_t b = bh / p.H, h = bh % p.H;
    Mat<double> S = scores(in, b, h);  // [Nq][Nk]
    Mat<double> V = MapF(in.v.data() + p.kv_row(b, p.kv_head(h), 0), p.Nk, p.d).cast<double>();
    Mat<double> P(p.Nq, p.Nk);  // [Nq][Nk]
    for (int64_t i = 0; i < p.Nq; ++i) {
      const double m = S.row(i).maxCoeff();
      const int64_t li = p.lse_at(b, h, i);
      if (m == -kInf) {  // the row sees no key: O = 0, L = +inf
        P.row(i).setZero();
        f.lse[li] = kInf;
        if (want) { f.m[li] = -kInf; f.l[li] = 0; }
        continue;
      }
      // Scalar exp with the mask explicit: Eigen's vectorised exp clamps −∞ to about −709 and
      // returns 1e-308 rather than 0, and the oracle must give masked entries exactly zero weight.
      for (int64_t j = 0; j < p.Nk; ++j) P(i, j) = p.visible(i, j) ? std::exp(S(i, j) - m) : 0.0;
      const double l = P.row(i).sum();
      P.row(i) /= l;
      f.lse[li] = m + std::log(l);
      if (want) { f.m[li] = m; f.l[li] = l; }
    }
    Eigen::Map<Mat<double>>(f.o.data() + p.q_row(b, h, 0), p.Nq, p.d) = P * V;
    if (want) {
      const int64_t off = (b * p.H + h) * p.Nq * p.Nk;
      Eigen::Map<Mat<double>>(f.s.data() + off, p.Nq, p.Nk) = S;
      Eigen::Map<Mat<double>>(f.p.data() + off, p.Nq, p.Nk) = P;
    }
  }
  return f;
}

Backward backward(const Inputs& in, const Forward& f) {
  const Problem& p = in.p;
  const double scale = p.softmax_scale();
  Backward g;
  g.dq.assign(size_t(p.q_elems()), 0.0);
  g.dk.assign(size_t(p.kv_elems()), 0.0);
  g.dv.assign(size_t(p.kv_elems()), 0.0);
  g.D.assign(size_t(p.lse_elems()), 0.0);
  const int64_t groups = p.B * p.H_kv;  // one task per K/V head: its dK, dV sum over its query heads
#pragma omp parallel for schedule(dynamic)
  for (int64_t bk = 0; bk < groups; ++bk) {
    const int64_t b = bk / p.H_kv, hk = bk % p.H_kv;
    Mat<double> K = MapF(in.k.data() + p.kv_row(b, hk, 0), p.Nk, p.d).cast<double>();
    Mat<double> V = MapF(in.v.data() + p.kv_row(b, hk, 0), p.Nk, p.d).cast<double>();
    Mat<double> dK = Mat<double>::Zero(p.Nk, p.d), dV = Mat<double>::Zero(p.Nk, p.d);
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
      Mat<double> Q = MapF(in.q.data() + p.q_row(b, h, 0), p.Nq, p.d).cast<double>();
      Mat<double> dO = MapF(in.dO.data() + p.q_row(b, h, 0), p.Nq, p.d).cast<double>();
      Eigen::Map<const Mat<double>> O(f.o.data() + p.q_row(b, h, 0), p.Nq, p.d);
      // P recomputed from S and L: P = exp(S - L), 0 on masked entries and fully masked rows.
      Mat<double> P = scores(in, b, h);
      for (int64_t i = 0; i < p.Nq; ++i) {
        const double L = f.lse[p.lse_at(b, h, i)];
        for (int64_t j = 0; j < p.Nk; ++j)  // masked entries and rows with L = +inf: exactly 0
          P(i, j) = p.visible(i, j) && std::isfinite(L) ? std::exp(P(i, j) - L) : 0.0;
      }
      Eigen::VectorXd D = (dO.array() * O.array()).rowwise().sum();  // [Nq]
      for (int64_t i = 0; i < p.Nq; ++i) g.D[p.lse_at(b, h, i)] = D(i);
      dV += P.transpose() * dO;
      Mat<double> dP = dO * V.transpose();                                       // [Nq][Nk]
      Mat<double> dS = (P.array() * (dP.colwise() - D).array()).matrix();         // [Nq][Nk]
      Eigen::Map<Mat<double>>(g.dq.data() + p.q_row(b, h, 0), p.Nq, p.d) = scale * (dS * K);
      dK += scale * (dS.transpose() * Q);
    }
    Eigen::Map<Mat<double>>(g.dk.data() + p.kv_row(b, hk, 0), p.Nk, p.d) = dK;
    Eigen::Map<Mat<double>>(g.dv.data() + p.kv_row(b, hk, 0), p.Nk, p.d) = dV;
  }
  return g;
}

namespace {

// Round every entry of a float matrix to the storage type, in place.
void round_mat(DType t, Mat<float>& X) {
  if (t == DType::f32) return;
  for (Eigen::Index n = 0; n < X.size(); ++n) X.data()[n] = round_to(t, X.data()[n]);
}

struct BaselineHead {
  Mat<float> P;  // [Nq][Nk] rounded
  Mat<float> O;  // [Nq][d]  rounded
  std::vector<float> L;
};

// Algorithm 0 at the storage type for one (b, h).
BaselineHead baseline_head(const Inputs& in, int64_t b, int64_t h) {
  const Problem& p = in.p;
  const DType t = p.dtype;
  const float inf = std::numeric_limits<float>::infinity();
  MapF Q(in.q.data() + p.q_row(b, h, 0), p.Nq, p.d);
  MapF K(in.k.data() + p.kv_row(b, p.kv_head(h), 0), p.Nk, p.d);
  MapF V(in.v.data() + p.kv_row(b, p.kv_head(h), 0), p.Nk, p.d);
  Mat<float> S = float(p.softmax_scale()) * (Q * K.transpose());  // fp32 accumulation
  round_mat(t, S);                                                 // S stored at the storage type
  BaselineHead r;
  r.P.resize(p.Nq, p.Nk);
  r.L.assign(size_t(p.Nq), 0.f);
  for (int64_t i = 0; i < p.Nq; ++i) {
    float m = -inf;
    for (int64_t j = 0; j < p.Nk; ++j)
      if (p.visible(i, j)) m = std::max(m, S(i, j));
    if (m == -inf) { r.P.row(i).setZero(); r.L[i] = inf; continue; }
    float l = 0;
    for (int64_t j = 0; j < p.Nk; ++j) {
      const float e = p.visible(i, j) ? std::exp(S(i, j) - m) : 0.f;
      r.P(i, j) = e;
      l += e;
    }
    r.P.row(i) /= l;
    r.L[i] = m + std::log(l);
  }
  round_mat(t, r.P);  // P stored at the storage type
  r.O = r.P * V;
  round_mat(t, r.O);
  return r;
}

}  // namespace

Outputs baseline_forward(const Inputs& in) {
  const Problem& p = in.p;
  Outputs out;
  out.o.assign(size_t(p.q_elems()), 0.f);
  out.lse.assign(size_t(p.lse_elems()), 0.f);
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const int64_t b = bh / p.H, h = bh % p.H;
    BaselineHead r = baseline_head(in, b, h);
    Eigen::Map<Mat<float>>(out.o.data() + p.q_row(b, h, 0), p.Nq, p.d) = r.O;
    for (int64_t i = 0; i < p.Nq; ++i) out.lse[p.lse_at(b, h, i)] = r.L[i];
  }
  return out;
}

Outputs baseline_backward(const Inputs& in) {
  const Problem& p = in.p;
  const DType t = p.dtype;
  const float scale = float(p.softmax_scale());
  Outputs out;
  out.dq.assign(size_t(p.q_elems()), 0.f);
  out.dk.assign(size_t(p.kv_elems()), 0.f);
  out.dv.assign(size_t(p.kv_elems()), 0.f);
#pragma omp parallel for schedule(dynamic)
  for (int64_t bk = 0; bk < p.B * p.H_kv; ++bk) {
    const int64_t b = bk / p.H_kv, hk = bk % p.H_kv;
    MapF K(in.k.data() + p.kv_row(b, hk, 0), p.Nk, p.d);
    MapF V(in.v.data() + p.kv_row(b, hk, 0), p.Nk, p.d);
    Mat<float> dK = Mat<float>::Zero(p.Nk, p.d), dV = Mat<float>::Zero(p.Nk, p.d);
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
      BaselineHead r = baseline_head(in, b, h);
      MapF Q(in.q.data() + p.q_row(b, h, 0), p.Nq, p.d);
      MapF dO(in.dO.data() + p.q_row(b, h, 0), p.Nq, p.d);
      Mat<float> dVh = r.P.transpose() * dO;
      round_mat(t, dVh);
      Mat<float> dP = dO * V.transpose();
      round_mat(t, dP);
      Eigen::VectorXf D = (r.P.array() * dP.array()).rowwise().sum();  // softmax backward's row sum
      Mat<float> dS = (r.P.array() * (dP.colwise() - D).array()).matrix();
      round_mat(t, dS);
      Mat<float> dQ = scale * (dS * K);
      round_mat(t, dQ);
      Mat<float> dKh = scale * (dS.transpose() * Q);
      round_mat(t, dKh);
      Eigen::Map<Mat<float>>(out.dq.data() + p.q_row(b, h, 0), p.Nq, p.d) = dQ;
      dK += dKh;
      dV += dVh;
    }
    round_mat(t, dK);
    round_mat(t, dV);
    Eigen::Map<Mat<float>>(out.dk.data() + p.kv_row(b, hk, 0), p.Nk, p.d) = dK;
    Eigen::Map<Mat<float>>(out.dv.data() + p.kv_row(b, hk, 0), p.Nk, p.d) = dV;
  }
  return out;
}

}  // namespace fl::ref

// flashladder — tests/test_oracle.cpp: the oracle checked against things other than itself.
//   forward  vs a plain triple loop in long double;
//   backward vs central finite differences of the oracle's own forward;
//   rows of P sum to 1; O unchanged when a constant is added to a row of scores;
//   fully masked rows give O = 0, L = +inf, zero gradients; GQA sums dK, dV over the group.
#include <gtest/gtest.h>

#include <cmath>

#include "common/compare.hpp"
#include "reference/oracle.hpp"

namespace fl {
namespace {

Problem small(int64_t Nq, int64_t Nk, bool causal, int64_t H = 4, int64_t H_kv = 2, int64_t d = 5) {
  Problem p;
  p.B = 2;
  p.H = H;
  p.H_kv = H_kv;
  p.Nq = Nq;
  p.Nk = Nk;
  p.d = d;
  p.causal = causal;
  p.dtype = DType::f32;
  return p;
}

// O and L by the definition, in long double, one entry at a time.
void long_double_forward(const Inputs& in, std::vector<long double>& O, std::vector<long double>& L) {
  const Problem& p = in.p;
  O.assign(size_t(p.q_elems()), 0);
  L.assign(size_t(p.lse_elems()), 0);
  const long double scale = 1.0L / std::sqrt((long double)p.d);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        std::vector<long double> s(size_t(p.Nk));
        long double m = -INFINITY;
        for (int64_t j = 0; j < p.Nk; ++j) {
          long double acc = 0;
          for (int64_t c = 0; c < p.d; ++c)
            acc += (long double)in.q[p.q_row(b, h, i) + c] * in.k[p.kv_row(b, p.kv_head(h), j) + c];
          s[j] = scale * acc;
          if (p.visible(i, j)) m = std::max(m, s[j]);
        }
        if (m == -INFINITY) {
          L[p.lse_at(b, h, i)] = INFINITY;
          continue;
        }
        long double l = 0;
        for (int64_t j = 0; j < p.Nk; ++j)
          if (p.visible(i, j)) l += std::exp(s[j] - m);
        L[p.lse_at(b, h, i)] = m + std::log(l);
        for (int64_t j = 0; j < p.Nk; ++j)
          if (p.visible(i, j))
            for (int64_t c = 0; c < p.d; ++c)
              O[p.q_row(b, h, i) + c] += std::exp(s[j] - m) / l * in.v[p.kv_row(b, p.kv_head(h), j) + c];
      }
}

struct Shape { int64_t Nq, Nk; bool causal; int64_t H, H_kv; };
// Printed in test names (gtest would otherwise dump the struct's bytes, padding included).
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "Nq" << s.Nq << "_Nk" << s.Nk << (s.causal ? "_causal" : "_full") << "_H" << s.H << "_Hkv" << s.H_kv;
}
class OracleShapes : public ::testing::TestWithParam<Shape> {};

// The forward against the long double loop, whole (as the oracle computes every test shape) or cut
// into blocks of 2 query rows × 3 keys (as it computes problems over 2^24 scores per head).
void forward_matches_long_double(const Shape& s, ref::Blocking blk) {
  Inputs in = make_inputs(small(s.Nq, s.Nk, s.causal, s.H, s.H_kv, 7), 11, {0.5, 3.0});
  ref::Forward f = ref::forward(in, false, blk);
  std::vector<long double> O, L;
  long_double_forward(in, O, L);
  for (size_t n = 0; n < O.size(); ++n) ASSERT_NEAR(f.o[n], double(O[n]), 1e-12) << "O at " << n;
  for (size_t n = 0; n < L.size(); ++n) {
    if (std::isinf(L[n])) {
      ASSERT_TRUE(std::isinf(f.lse[n]) && f.lse[n] > 0) << "L at " << n << " = " << f.lse[n];
    } else {
      ASSERT_NEAR(f.lse[n], double(L[n]), 1e-12) << "L at " << n;
    }
  }
}
TEST_P(OracleShapes, ForwardMatchesLongDoubleLoop) { forward_matches_long_double(GetParam(), {}); }
TEST_P(OracleShapes, BlockedForwardMatchesLongDoubleLoop) { forward_matches_long_double(GetParam(), {2, 3}); }

void backward_matches_finite_differences(const Shape& s, ref::Blocking blk) {
  Inputs in = make_inputs(small(s.Nq, s.Nk, s.causal, s.H, s.H_kv, 4), 12);
  ref::Forward f = ref::forward(in, false, blk);
  ref::Backward g = ref::backward(in, f, blk);
  // loss = Σ dO ∘ O, so ∂loss/∂x = the gradient the backward returns.
  auto loss = [&](const Inputs& x) {
    ref::Forward y = ref::forward(x);
    long double acc = 0;
    for (size_t n = 0; n < y.o.size(); ++n) acc += (long double)x.dO[n] * y.o[n];
    return acc;
  };
  // A power of two step: x ± h is exact in float for the |x| < 2^13 these inputs have.
  const float h = 1.0f / 1024;
  auto check = [&](std::vector<float> Inputs::*t, const std::vector<double>& grad, const char* name) {
    for (size_t n = 0; n < grad.size(); ++n) {
      Inputs a = in, b = in;
      (a.*t)[n] += h;
      (b.*t)[n] -= h;
      const double fd = double((loss(a) - loss(b)) / (2.0L * h));
      ASSERT_NEAR(grad[n], fd, 2e-5 * (1 + std::fabs(fd))) << name << " at " << n;
    }
  };
  check(&Inputs::q, g.dq, "dQ");
  check(&Inputs::k, g.dk, "dK");
  check(&Inputs::v, g.dv, "dV");
}
TEST_P(OracleShapes, BackwardMatchesFiniteDifferences) { backward_matches_finite_differences(GetParam(), {}); }
TEST_P(OracleShapes, BlockedBackwardMatchesFiniteDifferences) {
  backward_matches_finite_differences(GetParam(), {2, 3});
}

INSTANTIATE_TEST_SUITE_P(Shapes, OracleShapes,
                         ::testing::Values(Shape{5, 7, false, 4, 2}, Shape{5, 7, true, 4, 2}, Shape{7, 3, true, 2, 1},
                                           Shape{1, 9, false, 3, 3}, Shape{9, 1, true, 2, 2}, Shape{6, 6, true, 4, 1}));

TEST(Oracle, RowsOfPSumToOne) {
  Inputs in = make_inputs(small(13, 29, true), 3, {0.5, 5.0});
  ref::Forward f = ref::forward(in, true);
  const Problem& p = in.p;
  for (int64_t r = 0; r < p.B * p.H * p.Nq; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < p.Nk; ++j) sum += f.p[size_t(r * p.Nk + j)];
    ASSERT_NEAR(sum, 1.0, 1e-13) << "row " << r;
  }
}

TEST(Oracle, ShiftingARowOfScoresLeavesOUnchanged) {
  // Adding c to every score of row i is adding c/scale·k̄ … not expressible through Q alone in
  // general, so shift through the keys: K_j += u for all j adds scale·q_i·u to every score of row i.
  // fp16-valued inputs, so K_j + u below is exact in float and the shift is the only change.
  Problem sp = small(11, 17, false, 2, 2, 6);
  sp.dtype = DType::f16;
  Inputs in = make_inputs(sp, 4);
  ref::Forward f = ref::forward(in);
  Inputs shifted = in;
  const Problem& p = in.p;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = 0; j < p.Nk; ++j)
        for (int64_t c = 0; c < p.d; ++c) shifted.k[p.kv_row(b, hk, j) + c] += 0.75f * float(c + 1);
  ref::Forward g = ref::forward(shifted);
  for (size_t n = 0; n < f.o.size(); ++n) ASSERT_NEAR(f.o[n], g.o[n], 1e-12) << "O at " << n;
  // L does change, by exactly the shift of row i.
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        double shift = 0;
        for (int64_t c = 0; c < p.d; ++c) shift += double(in.q[p.q_row(b, h, i) + c]) * 0.75 * double(c + 1);
        shift *= p.softmax_scale();
        ASSERT_NEAR(g.lse[p.lse_at(b, h, i)] - f.lse[p.lse_at(b, h, i)], shift, 1e-9);
      }
}

TEST(Oracle, FullyMaskedRowsGiveZeroOutputInfiniteLseAndZeroGradients) {
  // Causal with Nq > Nk: rows i < Nq − Nk see no key.
  Inputs in = make_inputs(small(9, 4, true), 5);
  ref::Forward f = ref::forward(in);
  ref::Backward g = ref::backward(in, f);
  const Problem& p = in.p;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq - p.Nk; ++i) {
        EXPECT_TRUE(std::isinf(f.lse[p.lse_at(b, h, i)]) && f.lse[p.lse_at(b, h, i)] > 0);
        for (int64_t c = 0; c < p.d; ++c) {
          EXPECT_EQ(f.o[p.q_row(b, h, i) + c], 0.0);
          EXPECT_EQ(g.dq[p.q_row(b, h, i) + c], 0.0);
        }
      }
  for (double x : g.dq) ASSERT_TRUE(std::isfinite(x));
  for (double x : g.dk) ASSERT_TRUE(std::isfinite(x));
  for (double x : g.dv) ASSERT_TRUE(std::isfinite(x));
}

TEST(Oracle, GqaEqualsRepeatedKvHeads) {
  // H_kv = 1 must give what H_kv = H gives when every K/V head is a copy of the shared one.
  Inputs gqa = make_inputs(small(6, 8, true, 4, 1, 3), 6);
  Inputs mha = gqa;
  mha.p.H_kv = 4;
  const Problem& p = gqa.p;
  mha.k.clear();
  mha.v.clear();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < 4; ++h) {
      mha.k.insert(mha.k.end(), gqa.k.begin() + p.kv_row(b, 0, 0), gqa.k.begin() + p.kv_row(b, 0, p.Nk));
      mha.v.insert(mha.v.end(), gqa.v.begin() + p.kv_row(b, 0, 0), gqa.v.begin() + p.kv_row(b, 0, p.Nk));
    }
  ref::Forward a = ref::forward(gqa), b = ref::forward(mha);
  for (size_t n = 0; n < a.o.size(); ++n) ASSERT_NEAR(a.o[n], b.o[n], 1e-13);
  ref::Backward ga = ref::backward(gqa, a), gb = ref::backward(mha, b);
  for (int64_t bb = 0; bb < p.B; ++bb)
    for (int64_t j = 0; j < p.Nk; ++j)
      for (int64_t c = 0; c < p.d; ++c) {
        double sk = 0, sv = 0;
        for (int64_t h = 0; h < 4; ++h) {
          sk += gb.dk[mha.p.kv_row(bb, h, j) + c];
          sv += gb.dv[mha.p.kv_row(bb, h, j) + c];
        }
        ASSERT_NEAR(ga.dk[p.kv_row(bb, 0, j) + c], sk, 1e-12);
        ASSERT_NEAR(ga.dv[p.kv_row(bb, 0, j) + c], sv, 1e-12);
      }
}

TEST(Baseline, LowPrecisionBaselineHasTheExpectedErrorSize) {
  // fp16 storage: the baseline's O error is a few fp16 ulps, far from zero and far from O itself.
  Problem p = small(64, 64, false, 2, 2, 32);
  p.dtype = DType::f16;
  Inputs in = make_inputs(p, 7);
  ref::Forward f = ref::forward(in);
  Outputs base = ref::baseline_forward(in);
  double err = 0, mag = 0;
  for (size_t n = 0; n < f.o.size(); ++n) {
    ASSERT_TRUE(std::isfinite(base.o[n]) && std::isfinite(f.o[n])) << "O at " << n;  // std::max drops a NaN
    err = std::max(err, std::fabs(base.o[n] - f.o[n]));
    mag = std::max(mag, std::fabs(f.o[n]));
  }
  EXPECT_GT(err, 1e-5);
  EXPECT_LT(err, 0.02 * mag);
}

// Blocking (what lets the oracle check 131072-long problems in O(N) memory) changes the oracle only
// by the rounding of sums grouped block by block, and the baseline only by fp32 rounding: here
// blocks of 64 query rows × 100 keys against the whole matrix, on a ragged causal GQA problem.
TEST(Oracle, BlockingChangesOnlyRounding) {
  Problem p = small(300, 700, true, 4, 2, 8);
  p.dtype = DType::f16;
  const Inputs in = make_inputs(p, 3, {0.5, 3.0});
  const ref::Blocking blk{64, 100};
  ASSERT_EQ(ref::blocking_for(p, blk).rows, 64);
  const ref::Forward fw = ref::forward(in), fb = ref::forward(in, false, blk);
  const ref::Backward gw = ref::backward(in, fw), gb = ref::backward(in, fb, blk);
  // A few ulps of the tensor's largest entry: the sums over 700 keys are grouped in 7 blocks.
  auto near = [](const std::vector<double>& a, const std::vector<double>& b, const char* name) {
    ASSERT_EQ(a.size(), b.size());
    double mag = 1, diff = 0;
    for (size_t n = 0; n < a.size(); ++n) {
      if (std::isinf(a[n])) {
        ASSERT_EQ(a[n], b[n]) << name << " at " << n;
        continue;
      }
      // std::max(diff, NaN) returns diff: a NaN must fail here, entry by entry.
      ASSERT_FALSE(std::isnan(a[n]) || std::isnan(b[n])) << name << " at " << n << ": " << a[n] << " vs " << b[n];
      mag = std::max(mag, std::fabs(a[n]));
      diff = std::max(diff, std::fabs(a[n] - b[n]));
    }
    EXPECT_LE(diff, 1e-14 * mag) << name << ": blocked and whole differ by " << diff << " (max |x| " << mag << ")";
  };
  near(fw.o, fb.o, "O");
  near(fw.lse, fb.lse, "L");
  near(gw.dq, gb.dq, "dQ");
  near(gw.dk, gb.dk, "dK");
  near(gw.dv, gb.dv, "dV");
  near(gw.D, gb.D, "D");
  // The baseline gives the tolerance: blocked, it must give the same tolerance to within fp32 noise.
  const Outputs bw = ref::baseline_forward(in), bb = ref::baseline_forward(in, blk);
  const Outputs cw = ref::baseline_backward(in), cb = ref::baseline_backward(in, blk);
  auto same_tol = [&](const std::vector<double>& oracle, const std::vector<float>& x, const std::vector<float>& y,
                      DType t, const char* name) {
    const double a = tolerance_for(oracle, x, t).tol, b = tolerance_for(oracle, y, t).tol;
    EXPECT_GT(a, 0) << name;
    EXPECT_NEAR(a, b, 0.25 * a) << name << ": whole " << a << ", blocked " << b;
  };
  same_tol(fw.o, bw.o, bb.o, p.dtype, "O");
  same_tol(fw.lse, bw.lse, bb.lse, DType::f32, "L");
  same_tol(gw.dq, cw.dq, cb.dq, p.dtype, "dQ");
  same_tol(gw.dk, cw.dk, cb.dk, p.dtype, "dK");
  same_tol(gw.dv, cw.dv, cb.dv, p.dtype, "dV");
}

// Problems up to 2^24 scores per head are computed whole (bitwise what the oracle always gave);
// longer ones in blocks whose memory does not grow with N.
TEST(Oracle, DefaultBlocking) {
  Problem p = small(4096, 4096, false);
  EXPECT_EQ(ref::blocking_for(p).rows, 4096);
  EXPECT_EQ(ref::blocking_for(p).cols, 4096);
  p.Nq = p.Nk = 131072;
  EXPECT_EQ(ref::blocking_for(p).rows, 256);
  EXPECT_EQ(ref::blocking_for(p).cols, 2048);
  p.Nq = int64_t(1) << 21;
  p.Nk = 16;
  EXPECT_EQ(ref::blocking_for(p).rows, 256);
  EXPECT_EQ(ref::blocking_for(p).cols, 16);
  p.Nq = p.Nk = int64_t(1) << 33;  // Nq·Nk = 2^66 would overflow int64: still blocked, never "whole"
  EXPECT_EQ(ref::blocking_for(p).rows, 256);
  EXPECT_EQ(ref::blocking_for(p).cols, 2048);
}

}  // namespace
}  // namespace fl

// flashladder — tests/test_sampled_reference.cpp: the sampled oracle and baseline that the size tests
// (test_gpu_large.cpp) judge steps with are checked here, on the CPU, against the full oracle and the
// full baseline on shapes small enough for both, and the sampled check is shown to fail when it should.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "reference/sampled.hpp"
#include "steps/ladder.hpp"
#include "app/runner.hpp"

namespace fl::test {
namespace {

struct Shape {
  int64_t Nq, Nk;
  bool causal;
  DType t;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << "Nq=" << s.Nq << " Nk=" << s.Nk << (s.causal ? " causal " : " ") << dtype_name(s.t);
}

Problem problem(const Shape& s) {
  Problem p;
  p.B = 2; p.H = 4; p.H_kv = 2; p.Nq = s.Nq; p.Nk = s.Nk; p.d = 24; p.causal = s.causal; p.dtype = s.t;
  return p;
}

std::vector<RowId> all_rows(const Problem& p) {
  std::vector<RowId> r;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) r.push_back({b, h, i});
  return r;
}

std::vector<KeyId> all_keys(const Problem& p) {
  std::vector<KeyId> k;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = 0; j < p.Nk; ++j) k.push_back({b, hk, j});
  return k;
}

// The oracle half: the same numbers as reference/oracle.cpp up to double rounding.
void expect_same_oracle(const char* what, const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t n = 0; n < got.size(); ++n) {
    if (!std::isfinite(want[n])) {
      ASSERT_EQ(got[n], want[n]) << what << " entry " << n;
      continue;
    }
    ASSERT_LE(std::fabs(got[n] - want[n]), 1e-9 * (1 + std::fabs(want[n]))) << what << " entry " << n;
  }
}

// The baseline half: Algorithm 0 at the storage type, summed in another order than Eigen sums. Most
// entries are the very same number; the others differ by about one rounding of the storage type, which
// is far below the baseline's own error (else the tolerance would depend on which baseline was used).
void expect_same_baseline(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<double>& oracle) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t same = 0;
  double max_diff = 0, base_err = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    if (got[n] == want[n]) { ++same; continue; }
    ASSERT_TRUE(std::isfinite(got[n]) && std::isfinite(want[n])) << what << " entry " << n;
    max_diff = std::max(max_diff, double(std::fabs(got[n] - want[n])));
  }
  for (size_t n = 0; n < want.size(); ++n)
    if (std::isfinite(oracle[n])) base_err = std::max(base_err, std::fabs(double(want[n]) - oracle[n]));
  EXPECT_GE(double(same), 0.9 * double(got.size())) << what << ": only " << same << " of " << got.size()
                                                    << " entries equal the full baseline's";
  EXPECT_LE(max_diff, 0.5 * base_err + 1e-30) << what << ": the sampled baseline differs from the full one by "
                                             << max_diff << ", the baseline's own error is " << base_err;
}

class SampledReference : public ::testing::TestWithParam<Shape> {};

TEST_P(SampledReference, EqualsTheFullOracleAndBaselineOnEveryRow) {
  const Problem p = problem(GetParam());
  const Inputs in = make_inputs(p, 41);
  const Expected e = expected_for(in, true);
  const Sampled s = sampled_reference(in, all_rows(p), all_keys(p), true);
  // all_rows and all_keys list rows in memory order, so the sample is the whole tensor.
  expect_same_oracle("O", s.o, e.fwd.o);
  expect_same_oracle("L", s.lse, e.fwd.lse);
  expect_same_oracle("dQ", s.dq, e.bwd.dq);
  expect_same_oracle("dK", s.dk, e.bwd.dk);
  expect_same_oracle("dV", s.dv, e.bwd.dv);
  expect_same_baseline("O", s.base_o, e.base_fwd.o, e.fwd.o);
  expect_same_baseline("L", s.base_lse, e.base_fwd.lse, e.fwd.lse);
  expect_same_baseline("dQ", s.base_dq, e.base_bwd.dq, e.bwd.dq);
  expect_same_baseline("dK", s.base_dk, e.base_bwd.dk, e.bwd.dk);
  expect_same_baseline("dV", s.base_dv, e.base_bwd.dv, e.bwd.dv);
}

TEST_P(SampledReference, ASampleGivesTheSameNumbersAsTheWhole) {
  // Only some rows and keys: the forward-only path (the sampled rows alone, in blocks of their own)
  // and the backward path (every row of a K/V head whose key is sampled) must give each sampled
  // entry the value the whole gives. Blocks of other rows may make Eigen sum a row's q·k in another
  // order, so the baseline may differ by a rounding of the storage type, rarely.
  const Problem p = problem(GetParam());
  const Inputs in = make_inputs(p, 42);
  const Sampled whole = sampled_reference(in, all_rows(p), all_keys(p), true);
  const std::vector<RowId> rows = pick_rows(p, 7, 5);
  const std::vector<KeyId> keys = pick_keys(p, 7, 5);
  const double u = unit_roundoff(p.dtype);
  for (bool bwd : {false, true}) {
    const Sampled s = sampled_reference(in, rows, keys, bwd);
    auto same = [&](const char* what, double got, double want, bool baseline) {
      if (!std::isfinite(want)) {
        EXPECT_EQ(got, want) << what;
        return;
      }
      const double tol = baseline ? 4 * u * (1 + std::fabs(want)) : 1e-9 * (1 + std::fabs(want));
      EXPECT_LE(std::fabs(got - want), tol) << what << (bwd ? " (backward pass)" : " (forward pass)");
    };
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t w = size_t((rows[r].b * p.H + rows[r].h) * p.Nq + rows[r].i), d = size_t(p.d);
      same("L", s.lse[r], whole.lse[w], false);
      same("L baseline", s.base_lse[r], whole.base_lse[w], true);
      for (size_t c = 0; c < d; ++c) {
        same("O", s.o[r * d + c], whole.o[w * d + c], false);
        same("O baseline", s.base_o[r * d + c], whole.base_o[w * d + c], true);
        if (bwd) same("dQ", s.dq[r * d + c], whole.dq[w * d + c], false);
        if (bwd) same("dQ baseline", s.base_dq[r * d + c], whole.base_dq[w * d + c], true);
      }
    }
    if (!bwd) {
      EXPECT_TRUE(s.dk.empty() && s.keys.empty()) << "a forward-only sample has no key rows";
      continue;
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      const size_t w = size_t((keys[k].b * p.H_kv + keys[k].hk) * p.Nk + keys[k].j), d = size_t(p.d);
      for (size_t c = 0; c < d; ++c) {
        // dK, dV of a key: every row of the group in the same blocks as the whole: the same sums.
        EXPECT_EQ(s.dk[k * d + c], whole.dk[w * d + c]);
        EXPECT_EQ(s.dv[k * d + c], whole.dv[w * d + c]);
        EXPECT_EQ(s.base_dk[k * d + c], whole.base_dk[w * d + c]);
        EXPECT_EQ(s.base_dv[k * d + c], whole.base_dv[w * d + c]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SampledReference,
                         ::testing::Values(Shape{97, 130, true, DType::f16}, Shape{130, 97, true, DType::bf16},
                                           Shape{61, 200, false, DType::f16}, Shape{17, 1, false, DType::bf16}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return "Nq" + std::to_string(i.param.Nq) + "_Nk" + std::to_string(i.param.Nk) +
                                  (i.param.causal ? "_causal_" : "_full_") + dtype_name(i.param.t);
                         });

TEST(SampledReference, FastRoundingIsTheProjectsRounding) {
  // Every fp16 and bf16 rounding boundary region: random bit patterns over the whole float range
  // (NaN excluded), plus the values next to the largest finite ones, where rounding overflows to inf.
  std::mt19937 g(5);
  std::vector<float> xs = {0.f, -0.f, 65504.f, 65519.f, 65520.f, -65520.f, 1e-8f, 3e-8f, 6e-8f, 3.4e38f, -3.39e38f,
                           std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()};
  for (int n = 0; n < 2000000; ++n) {
    const uint32_t u = g();
    float x;
    std::memcpy(&x, &u, 4);
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (float x : xs) {
      const float a = round_storage(t, x), b = round_to(t, x);
      ASSERT_TRUE(a == b || (a != a && b != b)) << dtype_name(t) << " x=" << x << ": " << a << " vs " << b;
      ASSERT_EQ(std::signbit(a), std::signbit(b)) << dtype_name(t) << " x=" << x;
    }
}

TEST(SampledReference, PicksEdgesRandomAndListedRowsOnce) {
  Problem p;
  p.B = 2; p.H = 3; p.H_kv = 1; p.Nq = 1000; p.Nk = 7; p.d = 8;
  const std::vector<RowId> r = pick_rows(p, 3, 10, {4321, 5999, 6000, -1});
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i : {0, 1, 499, 500, 998, 999})
        EXPECT_NE(std::find_if(r.begin(), r.end(), [&](const RowId& x) { return x.b == b && x.h == h && x.i == i; }),
                  r.end()) << b << " " << h << " " << i;
  auto has_flat = [&](int64_t f) {
    return std::find_if(r.begin(), r.end(), [&](const RowId& x) { return (x.b * p.H + x.h) * p.Nq + x.i == f; }) !=
           r.end();
  };
  EXPECT_TRUE(has_flat(4321));
  EXPECT_TRUE(has_flat(5999));
  EXPECT_FALSE(has_flat(6000));  // out of range: dropped, not wrapped
  EXPECT_GE(r.size(), size_t(6 * 6 + 2));
  EXPECT_LE(r.size(), size_t(6 * 6 + 2 + 10));
  for (size_t n = 1; n < r.size(); ++n)
    EXPECT_LT((r[n - 1].b * p.H + r[n - 1].h) * p.Nq + r[n - 1].i, (r[n].b * p.H + r[n].h) * p.Nq + r[n].i);
  const std::vector<KeyId> k = pick_keys(p, 3, 2);
  for (const KeyId& x : k) EXPECT_TRUE(x.b < p.B && x.hk < p.H_kv && x.j < p.Nk);
  // Keys 0, 1, 2, 3, 5, 6 of both (b, h_kv) by rule (Nk/2 − 1 = 2, Nk/2 = 3, Nk − 2 = 5); key 4 only if drawn.
  EXPECT_GE(k.size(), size_t(12));
  EXPECT_LE(k.size(), size_t(14));
}

// The sampled check is the tolerance rule: a correct step passes, and it fails on a wrong value, a NaN
// or another problem's outputs, naming the entry.
TEST(SampledCheck, PassesACorrectStepAndFailsWrongOnes) {
  const Step* s = find_step("02");
  ASSERT_NE(s, nullptr);
  Problem p;
  p.B = 1; p.H = 4; p.H_kv = 2; p.Nq = 200; p.Nk = 150; p.d = 32; p.causal = true; p.dtype = DType::f32;
  const Inputs in = make_inputs(p, 43);
  const std::vector<RowId> rows = pick_rows(p, 1, 8);
  const Sampled ref = sampled_reference(in, rows, {}, false);
  Outputs got = run_step(*s, in);
  const Verdict ok = verify_sampled(in, got, ref, false);
  for (const Check& c : ok.checks) EXPECT_TRUE(c.pass) << c.summary();
  ASSERT_EQ(ok.checks.size(), 2u);

  Outputs bad = got;
  const RowId r = rows[3];
  bad.o[size_t(p.q_row(r.b, r.h, r.i) + 5)] += 0.01f;
  Verdict v = verify_sampled(in, bad, ref, false);
  EXPECT_FALSE(v.checks[0].pass);
  const std::string where = "(" + std::to_string(r.b) + ", " + std::to_string(r.h) + ", " + std::to_string(r.i) + ", 5)";
  EXPECT_NE(v.checks[0].first_bad.find(where), std::string::npos) << v.checks[0].first_bad;

  bad = got;
  bad.lse[size_t(p.lse_at(r.b, r.h, r.i))] = NAN;
  v = verify_sampled(in, bad, ref, false);
  EXPECT_FALSE(v.checks[1].pass);
  EXPECT_EQ(v.checks[1].nans, 1);

  const Outputs other = run_step(*s, make_inputs(p, 44));
  v = verify_sampled(in, other, ref, false);
  EXPECT_FALSE(v.checks[0].pass);
  EXPECT_FALSE(v.checks[1].pass);
}

}  // namespace
}  // namespace fl::test

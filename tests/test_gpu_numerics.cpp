// flashladder — tests/test_gpu_numerics.cpp: every step on inputs built to break a careless softmax
// (issue 8): scores up to ±10^4, every score of a row equal, one dominant key per row, values at the
// edge of fp16's range, rows that see no key. Each case is judged by the project's tolerance rule
// (verify), and on top of it: no NaN or Inf anywhere except L = +inf exactly on rows that see no key,
// where O = 0 and dQ = 0 exactly.
//
// The cases are built so that the oracle and the low-precision baseline can represent them, or else
// they would judge nothing: the CPU tests at the end (NumericsCase.*) check that claim, and each
// case's own property (the scores really reach 10^4, are really equal, ...), on this machine.
//
// Scores of 10^4 and the rule: Algorithm 0 at fp16 stores S rounded (an ulp of 8 at 10^4), which
// would move P by factors up to e^4 and make the baseline's error, hence the tolerance, as large as O
// itself. So the large-score cases use integer Q·K and power-of-two scales: every score is exactly
// representable in fp16, bf16 and fp32, the baseline stays exact up to rounding P and O, and the
// tolerance stays tight (a step that picks the wrong key, or blows up, fails by a mile).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "gpu_gate.hpp"
#include "app/numerics_cases.hpp"
#include "reference/verify.hpp"

namespace fl::test {
namespace {

// The cases and their builders: app/numerics_cases.hpp (shared with the lab kit).

// NaN when any entry is not finite, so that every comparison on the result fails.
double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) {
    if (!std::isfinite(v)) return std::numeric_limits<double>::quiet_NaN();
    m = std::max(m, std::fabs(v));
  }
  return m;
}

double largest_finite(DType t) {
  switch (t) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    case DType::f32: return double(std::numeric_limits<float>::max());
  }
  return 0;
}

// ---- Every step on every case ------------------------------------------------------------------
struct Param {
  const NumCase* c;
  const Step* s;
  DType t;
  int64_t d;
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const NumCase& c : numerics_cases())
    for (const Step& s : ladder()) {
      // GPU steps: d = 64 and their largest head dim; CPU steps (any d): 64 and 128.
      std::vector<int64_t> dims = {64, s.head_dims.empty() ? 128 : s.head_dims.back()};
      dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
      for (DType t : s.dtypes)
        for (int64_t d : dims) out.push_back({&c, &s, t, d});
    }
  return out;
}

void PrintTo(const Param& x, std::ostream* os) {
  *os << x.c->name << " " << x.s->folder << " d=" << x.d << " " << dtype_name(x.t);
}

class Extreme : public ::testing::TestWithParam<Param> {};

TEST_P(Extreme, FiniteAndWithinTheToleranceRule) {
  const Param& x = GetParam();
  const Step& s = *x.s;
  if (s.gpu()) FL_NEED_GPU();
  const Problem p0 = numerics_shape(*x.c, x.t, x.d);
  const std::string why = s.refusal(p0);
  ASSERT_TRUE(why.empty()) << "step " << s.folder << " refused " << p0.describe() << ": " << why;
  const Inputs in = x.c->build(p0, seed_of(*x.c));
  const Problem& p = in.p;  // the case may have set the scale
  const bool bwd = s.has_backward() && (p.dtype != DType::f16 || x.c->fp16_backward);
  if (s.has_backward() && !bwd)
    std::cout << "  [" << s.folder << "] " << x.c->name << ": backward not checked in fp16: its exact gradients "
              << "exceed fp16's range (see fp16_edge_q_and_v)\n";
  const Expected e = expected_for(in, bwd);
  const Outputs got = run_step(s, in, bwd);
  const Verdict v = verify(in, got, e, bwd);
  for (const Check& c : v.checks)
    EXPECT_TRUE(c.pass) << s.folder << " " << x.c->name << " " << p.describe() << " seed " << in.seed << "\n  "
                        << c.summary();
  std::cout << "  [" << s.folder << (bwd ? " fwd+bwd" : " fwd") << "] " << x.c->name << " " << p.describe()
            << "  tolerance used " << 100 * v.tol_used << "%\n";

  // Rows that see no key: O = 0, L = +inf, dQ = 0 exactly; every other value finite.
  const int64_t unseen = unseen_rows(p);
  int64_t bad = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const float L = got.lse[size_t(p.lse_at(b, h, i))];
        const bool none = i < unseen;
        if ((none ? !(std::isinf(L) && L > 0) : !std::isfinite(L)) && bad++ < 5)
          ADD_FAILURE() << s.folder << " L at (" << b << ", " << h << ", " << i << ") = " << L << (none ? " (sees no key)" : "");
        for (int64_t c = 0; c < p.d; ++c) {
          const size_t at = size_t(p.q_row(b, h, i) + c);
          const float o = got.o[at], dq = bwd ? got.dq[at] : 0.f;
          const bool ok = none ? (o == 0.f && dq == 0.f) : (std::isfinite(o) && std::isfinite(dq));
          if (!ok && bad++ < 5)
            ADD_FAILURE() << s.folder << " at (" << b << ", " << h << ", " << i << ", " << c << "): O = " << o
                          << (bwd ? ", dQ = " + std::to_string(dq) : "") << (none ? " on a row that sees no key" : "");
        }
      }
  EXPECT_EQ(bad, 0) << "entries of O, L or dQ that are not finite (or, on rows that see no key, not exactly "
                        "O = 0, dQ = 0, L = +inf)";
  if (bwd)
    for (const std::vector<float>* g : {&got.dk, &got.dv})
      EXPECT_TRUE(std::all_of(g->begin(), g->end(), [](float z) { return std::isfinite(z); }))
          << s.folder << ": dK or dV has a NaN or an Inf";
}

INSTANTIATE_TEST_SUITE_P(Numerics, Extreme, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return std::string(i.param.c->name) + "__" + i.param.s->folder + "_d" +
                                  std::to_string(i.param.d) + "_" + dtype_name(i.param.t);
                         });

// ---- The cases themselves (CPU): representable, and what they claim to be ----------------------
struct CaseParam {
  const NumCase* c;
  DType t;
  int64_t d;
};

void PrintTo(const CaseParam& x, std::ostream* os) { *os << x.c->name << " d=" << x.d << " " << dtype_name(x.t); }

class NumericsCase : public ::testing::TestWithParam<CaseParam> {};

TEST_P(NumericsCase, IsRepresentableAndIsWhatItSays) {
  const CaseParam& x = GetParam();
  const Inputs in = x.c->build(numerics_shape(*x.c, x.t, x.d), seed_of(*x.c));
  const Problem& p = in.p;
  const double top = largest_finite(p.dtype);
  for (const std::vector<float>* v : {&in.q, &in.k, &in.v, &in.dO})
    for (float z : *v) ASSERT_EQ(z, round_to(p.dtype, z)) << "an input is not in the storage type";
  const ref::Forward f = ref::forward(in, true);
  const ref::Backward g = ref::backward(in, f);
  const Outputs base = ref::baseline_forward(in), base_b = ref::baseline_backward(in);

  // The rule can judge only what the baseline computes: finite, except L = +inf on rows that see no key.
  const int64_t unseen = unseen_rows(p);
  for (int64_t n = 0; n < p.lse_elems(); ++n) {
    const bool none = n % p.Nq < unseen;
    ASSERT_EQ(std::isinf(f.lse[size_t(n)]), none) << "oracle L, row " << n;
    ASSERT_EQ(std::isinf(base.lse[size_t(n)]), none) << "baseline L, row " << n;
  }
  for (float z : base.o) ASSERT_TRUE(std::isfinite(z)) << "the baseline's O overflows";
  EXPECT_LE(max_abs(f.o), 0.95 * top);
  const bool bwd_ok = p.dtype != DType::f16 || x.c->fp16_backward;
  const double gq = max_abs(g.dq), gk = max_abs(g.dk), gv = max_abs(g.dv);
  const double grad = std::isnan(gq + gk + gv) ? gq + gk + gv : std::max({gq, gk, gv});  // std::max drops a later NaN
  if (bwd_ok) {
    for (const std::vector<float>* v : {&base_b.dq, &base_b.dk, &base_b.dv})
      for (float z : *v) ASSERT_TRUE(std::isfinite(z)) << "the baseline's gradient overflows";
    EXPECT_LE(grad, 0.5 * top) << "the exact gradients are too close to the storage type's range";
  } else {
    EXPECT_GT(grad, top) << "the case says its fp16 gradient is out of range, but the largest is " << grad;
  }

  // What each case claims.
  const std::string name = x.c->name;
  double max_s = 0, max_q = 0, max_v = 0;
  for (double s : f.s)
    if (std::isfinite(s)) max_s = std::max(max_s, std::fabs(s));
  for (float z : in.q) max_q = std::max(max_q, double(std::fabs(z)));
  for (float z : in.v) max_v = std::max(max_v, double(std::fabs(z)));
  if (name.rfind("scores_1e4", 0) == 0) {
    EXPECT_GT(max_s, 4e3);
    EXPECT_LE(max_s, 1.2e4);
    for (double s : f.s)  // every score exact in the storage type, so the baseline's S is exact
      if (std::isfinite(s)) ASSERT_EQ(double(round_to(p.dtype, float(s))), s) << "score " << s;
  }
  if (name == "all_scores_equal") {
    EXPECT_GT(max_s, 100.0);  // e^s alone would overflow fp32 (e^88.7)
    for (int64_t r = 0; r < p.B * p.H * p.Nq; ++r) {
      const double* row = f.s.data() + r * p.Nk;
      for (int64_t j = 0; j < p.Nk; ++j)
        if (std::isfinite(row[j])) ASSERT_EQ(row[j], row[0]) << "row " << r << " key " << j;
    }
  }
  if (name == "one_dominant_key")
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t i = 0; i < p.Nq; ++i) {
          const double P = f.p[size_t(((b * p.H + h) * p.Nq + i) * p.Nk + dominant_key(p, b, h, i))];
          ASSERT_GT(P, 0.99) << "row (" << b << ", " << h << ", " << i << ")";
          ASSERT_LT(P, 1.0) << "the tail should not vanish in double";
        }
  if (name == "fp16_edge_q_and_v") {
    EXPECT_GT(max_q, 5.5e4);
    EXPECT_GT(max_v, 5.5e4);
    EXPECT_LT(max_s, 1e3);
  }
  if (name == "fp16_edge_v_and_gradients") {
    EXPECT_GT(max_v, 5.5e4);
    double max_dp = 0;  // dP = dO Vᵀ, what a backward stores in the storage type
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t i = 0; i < p.Nq; ++i)
          for (int64_t j = 0; j < p.Nk; ++j) {
            double s = 0;
            for (int64_t c = 0; c < p.d; ++c)
              s += double(in.dO[size_t(p.q_row(b, h, i) + c)]) * in.v[size_t(p.kv_row(b, p.kv_head(h), j) + c)];
            max_dp = std::max(max_dp, std::fabs(s));
          }
    EXPECT_GT(max_dp, 1e4);
    EXPECT_LT(max_dp, 0.5 * 65504);
  }
  if (name == "fully_masked_rows") EXPECT_GE(unseen, 1);
}

std::vector<CaseParam> case_params() {
  std::vector<CaseParam> out;
  for (const NumCase& c : numerics_cases())
    for (DType t : {DType::f16, DType::bf16, DType::f32})
      for (int64_t d : {64, 128, 256}) out.push_back({&c, t, d});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, NumericsCase, ::testing::ValuesIn(case_params()),
                         [](const ::testing::TestParamInfo<CaseParam>& i) {
                           return std::string(i.param.c->name) + "_d" + std::to_string(i.param.d) + "_" +
                                  dtype_name(i.param.t);
                         });

}  // namespace
}  // namespace fl::test

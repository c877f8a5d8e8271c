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
#include "reference/verify.hpp"

namespace fl::test {
namespace {

constexpr uint64_t kSeed = 20261108;

// ---- Building inputs ------------------------------------------------------------------------------
// Raw 64-bit draws (std::mt19937_64's sequence is fixed by the standard; the distributions are not).
struct Draw {
  std::mt19937_64 g;
  explicit Draw(uint64_t seed) : g(seed) {}
  double uniform() { return (double(g() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
  float ternary() { return float(int(g() % 3) - 1); }                // −1, 0, 1: exact in every type
  float sign() { return g() & 1 ? 1.f : -1.f; }
};

float pow2_near(double x) { return std::ldexp(1.f, int(std::lround(std::log2(x)))); }
// 1/√d rounded to a power of two: products with it are exact, so integer scores stay integers.
float pow2_scale(int64_t d) { return 1.f / pow2_near(std::sqrt(double(d))); }

void fill_ternary(Draw& r, std::vector<float>& x, float factor) {
  for (float& e : x) e = factor * r.ternary();
}

// The largest |q·k| over visible (i, j) pairs, in double: what a scale must bring to 10^4.
double max_dot(const Inputs& in) {
  const Problem& p = in.p;
  double m = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i)
        for (int64_t j = 0; j < p.Nk; ++j) {
          if (!p.visible(i, j)) continue;
          double s = 0;
          for (int64_t c = 0; c < p.d; ++c)
            s += double(in.q[size_t(p.q_row(b, h, i) + c)]) * in.k[size_t(p.kv_row(b, p.kv_head(h), j) + c)];
          m = std::max(m, std::fabs(s));
        }
  return m;
}

// Scores up to 10^4 through the scale: Q, K ∈ {−1, 0, 1}, so q·k is an integer, and the scale is the
// power of two that brings max|q·k| into (5·10^3, 10^4]. V and dO stay Normal(0.5, 1).
Inputs scores_1e4_by_scale(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_ternary(r, in.q, 1.f);
  fill_ternary(r, in.k, 1.f);
  in.p.scale = std::ldexp(1.0, int(std::floor(std::log2(1e4 / max_dot(in)))));
  return in;
}

// Scores up to 10^4 through the inputs: K ∈ {−1, 0, 1}, Q ∈ 2^a·{−1, 0, 1} (2^a in the thousands,
// exact in fp16 and bf16), the scale a power of two near 1/√d.
Inputs scores_1e4_by_inputs(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_ternary(r, in.q, 1.f);
  fill_ternary(r, in.k, 1.f);
  in.p.scale = pow2_scale(p.d);
  const float a = std::ldexp(1.f, int(std::floor(std::log2(1e4 / (*in.p.scale * max_dot(in))))));
  for (float& x : in.q) x *= a;
  return in;
}

// Every score of a row equal: every key row of every head is the same k* ∈ {−1, 0, 1}^d, so P is
// uniform over the keys a row sees and O is their mean V. Q ∈ 128·{−1, 0, 1} puts the common score
// in the hundreds, where e^s alone overflows fp32: only the max subtraction gives e^0 = 1 per key.
Inputs all_scores_equal(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  std::vector<float> k_star(size_t(p.d));
  fill_ternary(r, k_star, 1.f);
  k_star[0] = 1.f;  // never the zero vector
  for (size_t n = 0; n < in.k.size(); ++n) in.k[n] = k_star[n % size_t(p.d)];
  fill_ternary(r, in.q, 128.f);
  in.p.scale = pow2_scale(p.d);
  return in;
}

// The key row i of head h is dominated by (non-causal, so every key is visible).
int64_t dominant_key(const Problem& p, int64_t b, int64_t h, int64_t i) { return (7 * i + 3 * h + 11 * b) % p.Nk; }

// One dominant key per row: K ∈ {−1, 0, 1}; q_i = k_{j(i)}·2^a, so the score of j(i) is c·|k_j|²
// (|k_j|² ≈ 2d/3) and every other is c·k_j·k_{j'} (|k_j·k_{j'}| ≲ 3√d), with c = 2^a·scale the power
// of two nearest 24/d: the dominant score is some 10 to 16 above the next at d = 64 … 256, so P at
// j(i) is above 0.99 and the rest is a tail of e^-10-sized weights that must not be lost (nor
// vanish: at a fixed c the gap would grow with d until the tail is below double's precision).
Inputs one_dominant_key(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_ternary(r, in.k, 1.f);
  const float scale = pow2_scale(p.d), a = pow2_near(24.0 / double(p.d)) / scale;
  in.p.scale = scale;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const int64_t j = dominant_key(p, b, h, i);
        for (int64_t c = 0; c < p.d; ++c)
          in.q[size_t(p.q_row(b, h, i) + c)] = a * in.k[size_t(p.kv_row(b, p.kv_head(h), j) + c)];
      }
  return in;
}

// ±[lo, hi] with a random sign, rounded to the storage type.
void fill_edge(Draw& r, std::vector<float>& x, double lo, double hi, DType t) {
  for (float& e : x) e = round_to(t, float(r.sign() * (lo + (hi - lo) * r.uniform())));
}

// The edge of fp16's range, forward: Q and V at ±[3·10^4, 6·10^4] (fp16's largest finite value is
// 65504; 6·10^4 leaves room for O, a convex combination of V rows, to round without overflowing), and
// K at 3·10^-4·Normal(0, 1) (normal and subnormal fp16 values), so the scores stay in the tens:
// q·k ≈ 10^2, products 10^1 each — everything fits fp32 accumulation with room, and so does an
// un-normalised accumulator Σ_j P̃_ij V_j (up to Nk·6·10^4 ≈ 1.5·10^7). The gradient does not
// fit fp16: dK = scale·dSᵀQ with Q at 6·10^4 reaches 10^6 and more, beyond what any fp16 output (or
// the fp16 baseline's) can hold, so this case checks the backward in bf16 only (NumericsCase.* checks
// that the fp16 gradient really is out of range).
Inputs fp16_edge_q_and_v(const Problem& p, uint64_t seed) {
  Problem p0 = p;
  Inputs in = make_inputs(p0, seed, InputOptions{0.0, 1.0});  // K, dO: Normal(0, 1)
  Draw r(seed);
  fill_edge(r, in.q, 3e4, 6e4, p.dtype);
  fill_edge(r, in.v, 3e4, 6e4, p.dtype);
  for (float& x : in.k) x = round_to(p.dtype, 3e-4f * x);
  return in;
}

// The edge of fp16's range, backward: V at ±[4·10^4, 6·10^4] and dO at 0.1/√d·Normal(0, 1), so that
// dP = dO Vᵀ reaches about 2·10^4 (fp16 holds 65504): the fp16 values a backward stores on the way
// (dP, dS) are near the top of the range without overflowing, and dQ, dK, dV stay representable.
Inputs fp16_edge_v_and_gradients(const Problem& p, uint64_t seed) {
  Inputs in = make_inputs(p, seed);
  Draw r(seed);
  fill_edge(r, in.v, 4e4, 6e4, p.dtype);
  for (float& x : in.dO) x = round_to(p.dtype, float(0.1 / std::sqrt(double(p.d))) * (x - 0.5f));
  return in;
}

// Plain inputs; the point is the shape: causal with Nq > Nk leaves the first Nq − Nk rows no key.
Inputs plain(const Problem& p, uint64_t seed) { return make_inputs(p, seed); }

struct NumCase {
  const char* name;
  int64_t Nq, Nk;
  bool causal;
  bool fp16_backward;  // false: the exact gradients exceed fp16's range (see the builder)
  Inputs (*build)(const Problem&, uint64_t);
};

const std::vector<NumCase>& cases() {
  static const std::vector<NumCase> c = {
      {"scores_1e4_by_scale", 150, 333, false, true, scores_1e4_by_scale},
      {"scores_1e4_by_inputs", 333, 150, true, true, scores_1e4_by_inputs},
      {"all_scores_equal", 200, 131, true, true, all_scores_equal},
      {"one_dominant_key", 160, 257, false, true, one_dominant_key},
      {"fp16_edge_q_and_v", 129, 250, true, false, fp16_edge_q_and_v},
      {"fp16_edge_v_and_gradients", 100, 257, false, true, fp16_edge_v_and_gradients},
      {"fully_masked_rows", 300, 70, true, true, plain},
  };
  return c;
}

Problem shape(const NumCase& c, DType t, int64_t d) {
  Problem p;
  p.B = 2; p.H = 4; p.H_kv = 2;  // GQA: two query heads per K/V head
  p.Nq = c.Nq; p.Nk = c.Nk; p.causal = c.causal; p.d = d; p.dtype = t;
  return p;
}

uint64_t seed_of(const NumCase& c) { return kSeed + uint64_t(&c - cases().data()); }

// The rows that see no key (causal, Nq > Nk: the first Nq − Nk).
int64_t unseen_rows(const Problem& p) { return p.causal ? std::max<int64_t>(0, p.Nq - p.Nk) : 0; }

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
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
  for (const NumCase& c : cases())
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
  const Problem p0 = shape(*x.c, x.t, x.d);
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
  const Inputs in = x.c->build(shape(*x.c, x.t, x.d), seed_of(*x.c));
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
  const double grad = std::max({max_abs(g.dq), max_abs(g.dk), max_abs(g.dv)});
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
  for (const NumCase& c : cases())
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

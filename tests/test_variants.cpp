// flashladder — tests/test_variants.cpp: the attention variants of issue 21 (docs/variants.md) on the CPU.
//   the problem: every malformed field refused with a message naming it; offsets, shapes, the mask;
//   the oracle: forward against the definition written out here in long double, backward against
//     central finite differences of its own forward, whole and in blocks, for every variant;
//   the reductions: window (−1, −1) and a window wider than the keys are the plain problem, (−1, 0)
//     is causal, a softcap of 1e6 is nearly none, zero slopes are no ALiBi, one packed sequence is the
//     plain problem, a packed batch is its sequences, seqused_k is a shorter key sequence;
//   the baseline, the inputs, the steps that run the variants (01, 02) and the refusal of those that don't.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "app/runner.hpp"
#include "common/compare.hpp"
#include "reference/oracle.hpp"
#include "reference/verify.hpp"
#include "steps/ladder.hpp"

namespace fl {
namespace {

constexpr double kInf = INFINITY;

Problem base() {
  Problem p;
  p.B = 2; p.H = 4; p.H_kv = 2; p.Nq = 5; p.Nk = 7; p.d = 4;
  p.dtype = DType::f32;
  return p;
}

// --- The problem ----------------------------------------------------------------------------------

void expect_refused(const Problem& p, const std::string& words) {
  const std::string why = p.invalid_reason();
  EXPECT_NE(why.find(words), std::string::npos) << "wanted: " << words << "\nmessage was: " << why;
  EXPECT_THROW(p.validate(), Error);
  Inputs dummy;
  dummy.p = p;
  try {
    run_step(*find_step("01"), dummy);  // refused before touching the (empty) data
    ADD_FAILURE() << "step 01 ran " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

Problem packed(std::vector<int32_t> cu_q, std::vector<int32_t> cu_k, int64_t Nq, int64_t Nk) {
  Problem p = base();
  p.B = int64_t(cu_q.size()) - 1;
  p.Nq = Nq;
  p.Nk = Nk;
  p.cu_seqlens_q = std::move(cu_q);
  p.cu_seqlens_k = std::move(cu_k);
  return p;
}

TEST(VariantProblem, EveryBadFieldIsRefusedByName) {
  Problem p = base();
  p.window_left = -2;
  expect_refused(p, "window_left = -2 is not allowed: it must be -1 (unbounded) or a number of keys >= 0");
  p = base();
  p.window_right = -7;
  expect_refused(p, "window_right = -7 is not allowed");
  p.window_right = std::numeric_limits<int64_t>::max();
  expect_refused(p, "window_right = 9223372036854775807 is more than 2^40 keys, the limit: -1 is the unbounded window");
  for (double c : {0.0, -3.0}) {
    p = base();
    p.softcap = c;
    expect_refused(p, "softcap = " + std::string(c == 0 ? "0" : "-3") + " is not allowed: it must be finite and > 0");
  }
  p = base();
  p.softcap = NAN;
  expect_refused(p, "softcap = nan is not allowed");
  p = base();
  p.softcap = INFINITY;
  expect_refused(p, "softcap = inf is not allowed");
  // Offsets.
  p = base();
  p.cu_seqlens_q = {0, 2, 5};
  expect_refused(p, "cu_seqlens_q is given without cu_seqlens_k: a variable-length problem needs both");
  p = base();
  p.cu_seqlens_k = {0, 2, 5};
  expect_refused(p, "cu_seqlens_k is given without cu_seqlens_q");
  p = packed({0, 2, 5}, {0, 3, 7}, 5, 7);
  EXPECT_EQ(p.invalid_reason(), "");
  p = packed({0, 2, 5}, {0, 3, 7}, 5, 7);
  p.B = 3;
  expect_refused(p, "cu_seqlens_q has 3 entries; it must have B + 1 = 4");
  p = packed({1, 2, 5}, {0, 3, 7}, 5, 7);
  expect_refused(p, "cu_seqlens_q[0] = 1 is not allowed: the offsets must start at 0");
  p = packed({0, 2, 5}, {0, 4, 3}, 5, 7);
  expect_refused(p, "cu_seqlens_k[2] = 3 is less than cu_seqlens_k[1] = 4: the offsets must not decrease");
  p = packed({0, 6, 7}, {0, 3, 7}, 5, 7);
  expect_refused(p, "sequence 0 has 6 queries (cu_seqlens_q[1] - cu_seqlens_q[0]), more than Nq = 5");
  p = packed({0, 2, 5}, {0, 1, 9}, 5, 7);
  expect_refused(p, "sequence 1 has 8 keys (cu_seqlens_k[2] - cu_seqlens_k[1]), more than Nk = 7");
  p = packed({0, 0, 0}, {0, 3, 7}, 5, 7);
  expect_refused(p, "cu_seqlens_q[B] = 0: the batch holds no queries");
  // seqused_k, packed and not.
  p = base();
  p.seqused_k = {3};
  expect_refused(p, "seqused_k has 1 entries; it must have B = 2");
  p = base();
  p.seqused_k = {3, 8};
  expect_refused(p, "seqused_k[1] = 8 is more than the 7 keys sequence 1 holds (Nk)");
  p = base();
  p.seqused_k = {-1, 2};
  expect_refused(p, "seqused_k[0] = -1 is not allowed: it must be >= 0");
  p = packed({0, 2, 5}, {0, 3, 7}, 5, 7);
  p.seqused_k = {4, 2};
  expect_refused(p, "seqused_k[0] = 4 is more than the 3 keys sequence 0 holds (cu_seqlens_k)");
  // The packed totals count against the 2^40 elements of one tensor.
  p = packed({0, 1 << 30, INT32_MAX}, {0, 3, 7}, 1 << 30, 7);
  p.H = 1 << 10;
  p.H_kv = 1;
  expect_refused(p, "the limit is 2^40");
}

TEST(VariantProblem, SlopesOfTheWrongShapeAreRefused) {
  Problem p = base();
  p.alibi = Alibi::heads;
  EXPECT_EQ(alibi_slopes_reason(p, std::vector<float>(4, 0.5f)), "");
  EXPECT_NE(alibi_slopes_reason(p, std::vector<float>(8, 0.5f))
                .find("alibi_slopes has 8 values; the problem needs 4: [H] = [4] for alibi=heads"),
            std::string::npos);
  p.alibi = Alibi::batch_heads;
  EXPECT_NE(alibi_slopes_reason(p, std::vector<float>(4, 0.5f))
                .find("alibi_slopes has 4 values; the problem needs 8: [B][H] = [2][4] for alibi=batch_heads"),
            std::string::npos);
  std::vector<float> s(8, 0.5f);
  s[3] = NAN;
  EXPECT_NE(alibi_slopes_reason(p, s).find("alibi_slopes[3] = nan is not allowed: slopes must be finite"), std::string::npos);
  p.alibi = Alibi::none;
  EXPECT_NE(alibi_slopes_reason(p, {1.f}).find("alibi_slopes has 1 values; the problem needs 0: none (the problem has no ALiBi)"),
            std::string::npos);
  // Every consumer refuses them: the oracle, the baseline, the runner.
  p.alibi = Alibi::heads;
  Inputs in = make_inputs(p, 3);
  in.alibi_slopes.pop_back();
  EXPECT_THROW(ref::forward(in), Error);
  EXPECT_THROW(ref::baseline_forward(in), Error);
  try {
    run_step(*find_step("01"), in);
    ADD_FAILURE() << "step 01 ran with 3 slopes for 4 heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alibi_slopes has 3 values; the problem needs 4"), std::string::npos) << e.what();
  }
  // A tensor of the wrong size is refused too (the oracle would read past it).
  in = make_inputs(p, 3);
  in.k.resize(in.k.size() - 1);
  try {
    ref::forward(in);
    ADD_FAILURE() << "the oracle read a short k";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the oracle's input k has 111 values; the problem"), std::string::npos) << e.what();
  }
}

TEST(VariantProblem, OffsetsShapesAndTheMask) {
  Problem p = packed({0, 2, 5}, {0, 3, 7}, 4, 5);
  p.H = 3;
  p.H_kv = 1;
  p.d = 2;
  EXPECT_TRUE(p.varlen());
  EXPECT_EQ(p.total_q(), 5);
  EXPECT_EQ(p.total_k(), 7);
  EXPECT_EQ(p.q_elems(), 5 * 3 * 2);
  EXPECT_EQ(p.kv_elems(), 7 * 1 * 2);
  EXPECT_EQ(p.lse_elems(), 3 * 5);
  EXPECT_EQ(p.q_off(1, 2, 1), ((2 + 1) * 3 + 2) * 2);  // token 3, head 2
  EXPECT_EQ(p.kv_off(1, 0, 2), (3 + 2) * 2);
  EXPECT_EQ(p.lse_off(1, 2, 1), 2 * 5 + 3);
  EXPECT_EQ(p.q_stride(), 6);
  EXPECT_EQ(p.kv_stride(), 2);
  EXPECT_EQ(p.q_shape(), (std::vector<int64_t>{5, 3, 2}));
  EXPECT_EQ(p.kv_shape(), (std::vector<int64_t>{7, 1, 2}));
  EXPECT_EQ(p.lse_shape(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(p.seqlen_q(1), 3);
  EXPECT_EQ(p.seqlen_k(1), 4);
  p.seqused_k = {1, 2};
  EXPECT_EQ(p.keys_stored(1), 4);
  EXPECT_EQ(p.seqlen_k(1), 2);
  // Sequence 1: 3 queries, 2 keys used: diag = i − 1; causal sees j <= i − 1, and never j >= 2.
  p.causal = true;
  EXPECT_FALSE(p.visible(1, 0, 0));
  EXPECT_TRUE(p.visible(1, 1, 0));
  EXPECT_FALSE(p.visible(1, 1, 1));
  EXPECT_TRUE(p.visible(1, 2, 1));
  EXPECT_FALSE(p.visible(1, 2, 2));  // past seqused_k
  EXPECT_EQ(p.alibi_distance(1, 0, 1), 2);
  EXPECT_EQ(p.variants_text(), "varlen seqused_k");
  // Plain layout: the old names and the new agree.
  Problem q = base();
  q.window_left = 1;
  q.window_right = 0;
  EXPECT_EQ(q.q_off(1, 3, 4), q.q_row(1, 3, 4));
  EXPECT_EQ(q.kv_off(1, 1, 6), q.kv_row(1, 1, 6));
  EXPECT_EQ(q.lse_off(1, 3, 4), q.lse_at(1, 3, 4));
  EXPECT_EQ(q.q_shape(), (std::vector<int64_t>{2, 4, 5, 4}));
  // Window (1, 0), Nq = 5, Nk = 7: diag = i + 2, query i sees keys i + 1 and i + 2.
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(q.visible(i, j), j == i + 1 || j == i + 2) << i << "," << j;
  EXPECT_DOUBLE_EQ(q.visible_pairs(), 2.0 * 5 * 2);
  EXPECT_DOUBLE_EQ(flops_forward(q), 4.0 * 4 * 4 * 20);  // 4·H·d per visible pair
  q.softcap = 30;
  q.alibi = Alibi::heads;
  EXPECT_EQ(q.variants_text(), "window=(1,0) softcap=30 alibi=heads");
  EXPECT_NE(q.describe().find("fp32 scale=0.5 window=(1,0) softcap=30 alibi=heads"), std::string::npos) << q.describe();
  EXPECT_TRUE(q.has_variant());
  EXPECT_FALSE(base().has_variant());
  EXPECT_EQ(base().variants_text(), "");
  // Varlen FLOPs: the convention per sequence, summed (sequence lengths 2·3 + 3·4 = 18 pairs).
  Problem r = packed({0, 2, 5}, {0, 3, 7}, 4, 5);
  EXPECT_DOUBLE_EQ(flops_forward(r), 4.0 * r.H * r.d * 18);
}

// --- The oracle against the definition ------------------------------------------------------------

// O and L by the definition of docs/variants.md, in long double, one entry at a time, every index
// written out here rather than taken from Problem's helpers.
void definition(const Inputs& in, std::vector<long double>& O, std::vector<long double>& L) {
  const Problem& p = in.p;
  const bool packed = !p.cu_seqlens_q.empty();
  O.assign(size_t(p.q_elems()), 0);
  L.assign(size_t(p.lse_elems()), 0);
  const int64_t total_q = packed ? p.cu_seqlens_q.back() : p.B * p.Nq;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t q0 = packed ? p.cu_seqlens_q[b] : 0, k0 = packed ? p.cu_seqlens_k[b] : 0;
    const int64_t nq = packed ? p.cu_seqlens_q[b + 1] - q0 : p.Nq;
    const int64_t nk = p.seqused_k.empty() ? (packed ? p.cu_seqlens_k[b + 1] - k0 : p.Nk) : p.seqused_k[b];
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t hk = h / (p.H / p.H_kv);
      const long double slope = p.alibi == Alibi::none ? 0 : in.alibi_slopes[p.alibi == Alibi::heads ? h : b * p.H + h];
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t qi = packed ? ((q0 + i) * p.H + h) * p.d : ((b * p.H + h) * p.Nq + i) * p.d;
        const int64_t li = packed ? h * total_q + q0 + i : (b * p.H + h) * p.Nq + i;
        const int64_t diag = i + nk - nq;
        std::vector<long double> s(size_t(nk), 0);
        std::vector<bool> vis(static_cast<size_t>(nk), false);
        long double m = -INFINITY;
        for (int64_t j = 0; j < nk; ++j) {
          const int64_t kj = packed ? ((k0 + j) * p.H_kv + hk) * p.d : ((b * p.H_kv + hk) * p.Nk + j) * p.d;
          long double x = 0;
          for (int64_t c = 0; c < p.d; ++c) x += (long double)in.q[qi + c] * in.k[kj + c];
          x *= 1.0L / std::sqrt((long double)p.d);
          if (p.softcap) x = *p.softcap * std::tanh(x / *p.softcap);
          s[j] = x - slope * std::fabs((long double)(diag - j));
          vis[j] = (!p.causal || j <= diag) && (p.window_left < 0 || j >= diag - p.window_left) &&
                   (p.window_right < 0 || j <= diag + p.window_right);
          if (vis[j]) m = std::max(m, s[j]);
        }
        if (m == -INFINITY) {
          L[li] = INFINITY;
          continue;
        }
        long double l = 0;
        for (int64_t j = 0; j < nk; ++j)
          if (vis[j]) l += std::exp(s[j] - m);
        L[li] = m + std::log(l);
        for (int64_t j = 0; j < nk; ++j) {
          if (!vis[j]) continue;
          const int64_t kj = packed ? ((k0 + j) * p.H_kv + hk) * p.d : ((b * p.H_kv + hk) * p.Nk + j) * p.d;
          for (int64_t c = 0; c < p.d; ++c) O[qi + c] += std::exp(s[j] - m) / l * in.v[kj + c];
        }
      }
    }
  }
}

struct Case {
  std::string name;
  std::function<void(Problem&)> set;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Small problems (finite differences on every input): B = 2, H = 4, H_kv = 2, Nq = 5, Nk = 7, d = 4,
// or 3 packed sequences of 4, 0 and 7 queries against 6, 7 and 1 keys.
void varlen3(Problem& p) {
  p.B = 3;
  p.Nq = 7;
  p.Nk = 7;
  p.cu_seqlens_q = {0, 4, 4, 11};
  p.cu_seqlens_k = {0, 6, 13, 14};
}
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"window_left", [](Problem& p) { p.window_left = 2; }},
      {"window_right", [](Problem& p) { p.window_right = 1; }},
      {"window_both", [](Problem& p) { p.window_left = 3; p.window_right = 0; }},
      {"window_causal", [](Problem& p) { p.window_left = 1; p.window_right = 3; p.causal = true; }},
      {"window_blind_rows", [](Problem& p) { p.Nq = 9; p.Nk = 4; p.window_left = 1; p.window_right = 0; }},
      {"softcap", [](Problem& p) { p.softcap = 1.5; }},
      {"softcap_causal", [](Problem& p) { p.softcap = 0.75; p.causal = true; }},
      {"alibi_heads", [](Problem& p) { p.alibi = Alibi::heads; }},
      {"alibi_batch_heads_causal", [](Problem& p) { p.alibi = Alibi::batch_heads; p.causal = true; }},
      {"seqused", [](Problem& p) { p.seqused_k = {3, 0}; p.causal = true; }},
      {"varlen", [](Problem& p) { varlen3(p); }},
      {"varlen_causal_seqused", [](Problem& p) { varlen3(p); p.causal = true; p.seqused_k = {5, 2, 1}; }},
      {"everything", [](Problem& p) {
         varlen3(p);
         p.causal = true;
         p.window_left = 2;
         p.window_right = 1;
         p.softcap = 2;
         p.alibi = Alibi::batch_heads;
       }},
  };
  return c;
}

Inputs inputs_for(const Case& c, uint64_t seed, double q_scale = 2.0) {
  Problem p = base();
  c.set(p);
  return make_inputs(p, seed, {0.5, q_scale});
}

class OracleVariants : public ::testing::TestWithParam<Case> {};

void forward_matches_definition(const Case& c, ref::Blocking blk) {
  const Inputs in = inputs_for(c, 21);
  ASSERT_EQ(in.p.invalid_reason(), "");
  const ref::Forward f = ref::forward(in, false, blk);
  std::vector<long double> O, L;
  definition(in, O, L);
  ASSERT_EQ(f.o.size(), O.size());
  ASSERT_EQ(f.lse.size(), L.size());
  int64_t blind = 0;
  for (size_t n = 0; n < O.size(); ++n) ASSERT_NEAR(f.o[n], double(O[n]), 1e-12) << "O at " << n;
  for (size_t n = 0; n < L.size(); ++n) {
    if (std::isinf(L[n])) {
      ++blind;
      ASSERT_EQ(f.lse[n], kInf) << "L at " << n;
    } else {
      ASSERT_NEAR(f.lse[n], double(L[n]), 1e-12) << "L at " << n;
    }
  }
  if (c.name == "window_blind_rows") EXPECT_EQ(blind, 2 * 4 * 5);  // rows i < 5 see no key, in every (b, h)
}
TEST_P(OracleVariants, ForwardMatchesTheDefinition) { forward_matches_definition(GetParam(), {}); }
TEST_P(OracleVariants, BlockedForwardMatchesTheDefinition) { forward_matches_definition(GetParam(), {2, 3}); }

void backward_matches_finite_differences(const Case& c, ref::Blocking blk) {
  const Inputs in = inputs_for(c, 22);
  const ref::Forward f = ref::forward(in, false, blk);
  const ref::Backward g = ref::backward(in, f, blk);
  // loss = Σ dO ∘ O, so ∂loss/∂x is the gradient the backward returns.
  auto loss = [&](const Inputs& x) {
    const ref::Forward y = ref::forward(x);
    long double acc = 0;
    for (size_t n = 0; n < y.o.size(); ++n) acc += (long double)x.dO[n] * y.o[n];
    return acc;
  };
  const float h = 1.0f / 1024;  // x ± h is exact in float for these inputs
  auto check = [&](std::vector<float> Inputs::*t, const std::vector<double>& grad, const char* name) {
    ASSERT_EQ(grad.size(), (in.*t).size()) << name;
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
  for (double x : g.dq) ASSERT_TRUE(std::isfinite(x));
}
TEST_P(OracleVariants, BackwardMatchesFiniteDifferences) { backward_matches_finite_differences(GetParam(), {}); }
TEST_P(OracleVariants, BlockedBackwardMatchesFiniteDifferences) { backward_matches_finite_differences(GetParam(), {2, 3}); }

// The CPU steps run every variant; each passes the tolerance rule on it (fp32 storage).
TEST_P(OracleVariants, CpuStepsPassTheRule) {
  const Inputs in = inputs_for(GetParam(), 23, 3.0);
  const Expected e = expected_for(in, false);
  for (const char* name : {"01", "02"}) {
    const Step& s = *find_step(name);
    ASSERT_EQ(s.refusal(in.p), "") << name;
    const Verdict v = verify(in, run_step(s, in), e, false);
    EXPECT_TRUE(v.pass) << name << ": " << v.checks[0].summary() << " | " << v.checks[1].summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Each, OracleVariants, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// --- Reductions -----------------------------------------------------------------------------------

void expect_same(const std::vector<double>& a, const std::vector<double>& b, const char* name, double rel = 0) {
  ASSERT_EQ(a.size(), b.size()) << name;
  double mag = 1;
  for (double x : b)
    if (std::isfinite(x)) mag = std::max(mag, std::fabs(x));
  for (size_t n = 0; n < a.size(); ++n) {
    if (rel == 0 || !std::isfinite(b[n])) {
      ASSERT_EQ(a[n], b[n]) << name << " at " << n;  // bitwise (a NaN fails: NaN != NaN)
    } else {
      ASSERT_LE(std::fabs(a[n] - b[n]), rel * mag) << name << " at " << n;
    }
  }
}

struct Both {
  ref::Forward f;
  ref::Backward g;
};
Both run(const Inputs& in) {
  Both r;
  r.f = ref::forward(in);
  r.g = ref::backward(in, r.f);
  return r;
}
void expect_same(const Both& a, const Both& b, double rel = 0) {
  expect_same(a.f.o, b.f.o, "O", rel);
  expect_same(a.f.lse, b.f.lse, "L", rel);
  expect_same(a.g.dq, b.g.dq, "dQ", rel);
  expect_same(a.g.dk, b.g.dk, "dK", rel);
  expect_same(a.g.dv, b.g.dv, "dV", rel);
}

Inputs plain_inputs(bool causal = false) {
  Problem p = base();
  p.Nq = 9;
  p.Nk = 13;
  p.causal = causal;
  return make_inputs(p, 31, {0.5, 2.0});
}

TEST(VariantReductions, WindowsThatMaskNothingAreThePlainProblem) {
  const Inputs in = plain_inputs();
  const Both plain = run(in);
  // The largest window allowed too (2^40 keys; above it is refused, EveryBadFieldIsRefusedByName): a
  // window of 2^63 − 1 keys used to overflow diag ± window and mask visible keys in the oracle and the
  // CPU steps alike, so the check passed them.
  const int64_t most = int64_t(1) << 40;
  for (auto [l, r] : {std::pair<int64_t, int64_t>{-1, -1}, {13 + 9, 13}, {-1, 13}, {30, -1}, {most, most},
                      {most, -1}, {-1, most}}) {
    Inputs w = in;
    w.p.window_left = l;
    w.p.window_right = r;
    expect_same(run(w), plain);
    EXPECT_EQ(w.p.visible_pairs(), double(w.p.B) * 9 * 13) << l << ", " << r;
  }
}

TEST(VariantReductions, WindowMinusOneZeroIsCausal) {
  const Inputs causal = plain_inputs(true);
  Inputs w = plain_inputs(false);
  w.p.window_left = -1;
  w.p.window_right = 0;
  ASSERT_EQ(w.q, causal.q);
  expect_same(run(w), run(causal));
  // And causal intersects a window: causal with (3, 5) is (3, 0) without causal.
  Inputs a = causal, b = w;
  a.p.window_left = 3;
  a.p.window_right = 5;
  b.p.window_left = 3;
  expect_same(run(a), run(b));
}

TEST(VariantReductions, ALargeSoftcapIsNearlyNone) {
  const Inputs in = plain_inputs(true);
  Inputs c = in;
  c.p.softcap = 1e6;  // c·tanh(x / c) = x − x³/(3c²) + …: |x| < 20 here, so 1e-9 relative and less
  expect_same(run(c), run(in), 1e-9);
  c.p.softcap = 2.0;  // and a small one changes the answer: the test can fail
  EXPECT_GT(std::fabs(ref::forward(c).o[0] - ref::forward(in).o[0]), 1e-3);
}

TEST(VariantReductions, ZeroSlopesAreNoAlibi) {
  const Inputs in = plain_inputs(true);
  Inputs a = in;
  a.p.alibi = Alibi::heads;
  a.alibi_slopes.assign(size_t(a.p.H), 0.f);
  expect_same(run(a), run(in));
  a.p.alibi = Alibi::batch_heads;
  a.alibi_slopes.assign(size_t(a.p.B * a.p.H), 0.f);
  expect_same(run(a), run(in));
  // [B][H] slopes whose rows repeat the [H] slopes are the [H] slopes.
  Inputs h = in, bh = in;
  h.p.alibi = Alibi::heads;
  h.alibi_slopes = alibi_slopes_for(h.p.H);
  bh.p.alibi = Alibi::batch_heads;
  bh.alibi_slopes = h.alibi_slopes;
  bh.alibi_slopes.insert(bh.alibi_slopes.end(), h.alibi_slopes.begin(), h.alibi_slopes.end());
  expect_same(run(bh), run(h));
  EXPECT_GT(std::fabs(ref::forward(h).lse[1] - ref::forward(in).lse[1]), 1e-3);  // the slopes do something
}

// The packed layout of a plain [B][H][N][d] tensor: [B·N][H][d].
std::vector<float> pack_rows(const std::vector<float>& x, int64_t B, int64_t H, int64_t N, int64_t d) {
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < d; ++c) y[((b * N + i) * H + h) * d + c] = x[((b * H + h) * N + i) * d + c];
  return y;
}
std::vector<double> unpack_rows(const std::vector<double>& y, int64_t B, int64_t H, int64_t N, int64_t d) {
  std::vector<double> x(y.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < d; ++c) x[((b * H + h) * N + i) * d + c] = y[((b * N + i) * H + h) * d + c];
  return x;
}
// L: packed [H][B·N], plain [B][H][N].
std::vector<double> unpack_lse(const std::vector<double>& y, int64_t B, int64_t H, int64_t N) {
  std::vector<double> x(y.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i) x[(b * H + h) * N + i] = y[h * B * N + b * N + i];
  return x;
}

// Sequences of equal lengths packed: the same numbers as the [B][H][N][d] problem, bitwise (each
// sequence is computed as a problem of its own, which is what the plain problem's (b, h) are too).
TEST(VariantReductions, PackedEqualSequencesAreThePlainProblem) {
  for (bool causal : {false, true}) {
    const Inputs in = plain_inputs(causal);
    const Problem& p = in.p;
    Inputs v = in;
    v.p.cu_seqlens_q = {0, int32_t(p.Nq), int32_t(2 * p.Nq)};
    v.p.cu_seqlens_k = {0, int32_t(p.Nk), int32_t(2 * p.Nk)};
    v.q = pack_rows(in.q, p.B, p.H, p.Nq, p.d);
    v.dO = pack_rows(in.dO, p.B, p.H, p.Nq, p.d);
    v.k = pack_rows(in.k, p.B, p.H_kv, p.Nk, p.d);
    v.v = pack_rows(in.v, p.B, p.H_kv, p.Nk, p.d);
    const Both a = run(v), b = run(in);
    expect_same(unpack_rows(a.f.o, p.B, p.H, p.Nq, p.d), b.f.o, "O");
    expect_same(unpack_lse(a.f.lse, p.B, p.H, p.Nq), b.f.lse, "L");
    expect_same(unpack_rows(a.g.dq, p.B, p.H, p.Nq, p.d), b.g.dq, "dQ");
    expect_same(unpack_rows(a.g.dk, p.B, p.H_kv, p.Nk, p.d), b.g.dk, "dK");
    expect_same(unpack_rows(a.g.dv, p.B, p.H_kv, p.Nk, p.d), b.g.dv, "dV");
    // One sequence alone is a B = 1 problem.
    Inputs one = v, plain1 = in;
    one.p.B = plain1.p.B = 1;
    one.p.cu_seqlens_q.pop_back();
    one.p.cu_seqlens_k.pop_back();
    for (auto* x : {&one.q, &one.dO}) x->resize(size_t(p.Nq * p.H * p.d));
    for (auto* x : {&one.k, &one.v}) x->resize(size_t(p.Nk * p.H_kv * p.d));
    for (auto* x : {&plain1.q, &plain1.dO}) x->resize(size_t(p.Nq * p.H * p.d));
    for (auto* x : {&plain1.k, &plain1.v}) x->resize(size_t(p.Nk * p.H_kv * p.d));
    const Both c = run(one), d = run(plain1);
    expect_same(unpack_rows(c.f.o, 1, p.H, p.Nq, p.d), d.f.o, "O of one sequence");
    expect_same(unpack_rows(c.g.dk, 1, p.H_kv, p.Nk, p.d), d.g.dk, "dK of one sequence");
  }
}

// Sequences of different lengths: each one's rows are the plain problem of its own lengths, and the
// rows of K, V past seqused_k get no gradient.
TEST(VariantReductions, APackedBatchIsItsSequences) {
  Problem p = base();
  varlen3(p);
  p.causal = true;
  p.seqused_k = {5, 7, 1};
  p.alibi = Alibi::batch_heads;
  p.softcap = 3;
  const Inputs in = make_inputs(p, 41, {0.5, 2.0});
  const Both all = run(in);
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t nq = p.seqlen_q(b), nk = p.seqlen_k(b);
    if (nq == 0) continue;
    Inputs s;
    s.p = base();
    s.p.B = 1;
    s.p.Nq = nq;
    s.p.Nk = nk;
    s.p.causal = true;
    s.p.softcap = 3;
    s.p.alibi = Alibi::heads;
    for (int64_t h = 0; h < p.H; ++h) s.alibi_slopes.push_back(in.alibi_slopes[size_t(b * p.H + h)]);
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t c = 0; c < p.d; ++c) {
          s.q.push_back(in.q[p.q_off(b, h, i) + c]);
          s.dO.push_back(in.dO[p.q_off(b, h, i) + c]);
        }
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t c = 0; c < p.d; ++c) {
          s.k.push_back(in.k[p.kv_off(b, hk, j) + c]);
          s.v.push_back(in.v[p.kv_off(b, hk, j) + c]);
        }
    const Both one = run(s);
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < nq; ++i) {
        ASSERT_EQ(all.f.lse[p.lse_off(b, h, i)], one.f.lse[s.p.lse_at(0, h, i)]) << b << "," << h << "," << i;
        for (int64_t c = 0; c < p.d; ++c) {
          ASSERT_EQ(all.f.o[p.q_off(b, h, i) + c], one.f.o[s.p.q_row(0, h, i) + c]);
          ASSERT_EQ(all.g.dq[p.q_off(b, h, i) + c], one.g.dq[s.p.q_row(0, h, i) + c]);
        }
      }
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = 0; j < p.keys_stored(b); ++j)
        for (int64_t c = 0; c < p.d; ++c) {
          const double want_k = j < nk ? one.g.dk[s.p.kv_row(0, hk, j) + c] : 0.0;
          const double want_v = j < nk ? one.g.dv[s.p.kv_row(0, hk, j) + c] : 0.0;
          ASSERT_EQ(all.g.dk[p.kv_off(b, hk, j) + c], want_k) << b << "," << hk << "," << j;
          ASSERT_EQ(all.g.dv[p.kv_off(b, hk, j) + c], want_v) << b << "," << hk << "," << j;
        }
  }
}

TEST(VariantReductions, SequsedKIsAShorterKeySequence) {
  const Inputs in = plain_inputs(true);
  Inputs u = in;
  u.p.seqused_k = {13, 6};
  const Both a = run(u), full = run(in);
  const Problem& p = in.p;
  // Sequence 0 uses every key: its rows are the plain problem's.
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t i = 0; i < p.Nq; ++i) ASSERT_EQ(a.f.lse[p.lse_at(0, h, i)], full.f.lse[p.lse_at(0, h, i)]);
  // Sequence 1 uses 6 of 13 keys (aligned bottom-right on those 6): keys 6.. get no gradient.
  for (int64_t hk = 0; hk < p.H_kv; ++hk)
    for (int64_t j = 6; j < p.Nk; ++j)
      for (int64_t c = 0; c < p.d; ++c) {
        ASSERT_EQ(a.g.dk[p.kv_row(1, hk, j) + c], 0.0);
        ASSERT_EQ(a.g.dv[p.kv_row(1, hk, j) + c], 0.0);
      }
  // Rows i < Nq − 6 = 3 of sequence 1 see no key (causal on 6 keys).
  for (int64_t h = 0; h < p.H; ++h) {
    EXPECT_EQ(a.f.lse[p.lse_at(1, h, 2)], kInf);
    EXPECT_TRUE(std::isfinite(a.f.lse[p.lse_at(1, h, 3)]));
  }
  // A sequence with no key at all: O = 0, L = +inf, no gradient anywhere in it.
  u.p.seqused_k = {13, 0};
  const Both z = run(u);
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t i = 0; i < p.Nq; ++i) {
      ASSERT_EQ(z.f.lse[p.lse_at(1, h, i)], kInf);
      for (int64_t c = 0; c < p.d; ++c) {
        ASSERT_EQ(z.f.o[p.q_row(1, h, i) + c], 0.0);
        ASSERT_EQ(z.g.dq[p.q_row(1, h, i) + c], 0.0);
      }
    }
}

TEST(VariantReductions, WindowedRowsThatSeeNoKeyFollowTheMaskedRowConvention) {
  Problem p = base();
  p.Nq = 9;
  p.Nk = 4;
  p.window_left = 0;
  p.window_right = 0;  // diag = i − 5: rows 5..8 see their diagonal key, rows 0..4 none
  const Inputs in = make_inputs(p, 5);
  const Both r = run(in);
  const Outputs base_f = ref::baseline_forward(in), base_b = ref::baseline_backward(in);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const bool blind = i < 5;
        EXPECT_EQ(std::isinf(r.f.lse[p.lse_at(b, h, i)]), blind);
        EXPECT_EQ(std::isinf(base_f.lse[p.lse_at(b, h, i)]), blind);
        for (int64_t c = 0; c < p.d; ++c) {
          if (blind) {
            EXPECT_EQ(r.f.o[p.q_row(b, h, i) + c], 0.0);
            EXPECT_EQ(r.g.dq[p.q_row(b, h, i) + c], 0.0);
          } else {  // one visible key: O is its V row
            EXPECT_NEAR(r.f.o[p.q_row(b, h, i) + c], in.v[p.kv_row(b, p.kv_head(h), i - 5) + c], 1e-15);
          }
        }
      }
  for (const auto* g : {&r.g.dq, &r.g.dk, &r.g.dv})
    for (double x : *g) ASSERT_TRUE(std::isfinite(x));
  for (float x : base_b.dq) ASSERT_TRUE(std::isfinite(x));
}

// --- The baseline, blocking, the inputs -----------------------------------------------------------

TEST(VariantBaseline, HasTheExpectedErrorSizeAndPacksLikeTheOracle) {
  Problem p = base();
  varlen3(p);
  p.Nq = p.Nk = 40;
  p.cu_seqlens_q = {0, 33, 33, 73};
  p.cu_seqlens_k = {0, 40, 71, 72};
  p.d = 32;
  p.dtype = DType::f16;
  p.causal = true;
  p.window_left = 9;
  p.softcap = 5;
  p.alibi = Alibi::heads;
  const Inputs in = make_inputs(p, 7, {0.5, 3.0});
  const Expected e = expected_for(in, true);
  for (auto [name, oracle, base, t] :
       {std::tuple{"O", &e.fwd.o, &e.base_fwd.o, p.dtype}, std::tuple{"dQ", &e.bwd.dq, &e.base_bwd.dq, p.dtype},
        std::tuple{"dK", &e.bwd.dk, &e.base_bwd.dk, p.dtype}, std::tuple{"dV", &e.bwd.dv, &e.base_bwd.dv, p.dtype}}) {
    double err = 0, mag = 0;
    ASSERT_EQ(oracle->size(), base->size()) << name;
    for (size_t n = 0; n < oracle->size(); ++n) {
      ASSERT_TRUE(std::isfinite((*base)[n]) && std::isfinite((*oracle)[n])) << name << " at " << n;  // std::max drops a NaN
      err = std::max(err, std::fabs((*base)[n] - (*oracle)[n]));
      mag = std::max(mag, std::fabs((*oracle)[n]));
    }
    EXPECT_GT(err, 1e-6 * mag) << name;  // a real fp16 error, not zero
    EXPECT_LT(err, 0.03 * mag) << name;  // and not garbage
  }
  // The oracle's own outputs, rounded to fp16, pass the rule: the tolerance is usable.
  Outputs o;
  for (double x : e.fwd.o) o.o.push_back(round_to(DType::f16, float(x)));
  for (double x : e.fwd.lse) o.lse.push_back(float(x));
  for (double x : e.bwd.dq) o.dq.push_back(round_to(DType::f16, float(x)));
  for (double x : e.bwd.dk) o.dk.push_back(round_to(DType::f16, float(x)));
  for (double x : e.bwd.dv) o.dv.push_back(round_to(DType::f16, float(x)));
  Verdict v = verify(in, o, e, true);
  EXPECT_TRUE(v.pass);
  // And a NaN in them fails, naming its packed index (token, head, column).
  o.o[p.q_off(2, 1, 3) + 2] = NAN;
  v = verify(in, o, e, true);
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.checks[0].first_bad.find("(36, 1, 2) step=nan"), std::string::npos) << v.checks[0].first_bad;
}

TEST(VariantBaseline, BlockingChangesOnlyRounding) {
  Problem p = base();
  p.Nq = 70;
  p.Nk = 150;
  p.d = 8;
  p.dtype = DType::f16;
  p.causal = true;
  p.window_left = 40;
  p.window_right = 10;
  p.softcap = 4;
  p.alibi = Alibi::batch_heads;
  const Inputs in = make_inputs(p, 3, {0.5, 3.0});
  const ref::Blocking blk{16, 32};
  const Both w = run(in);
  Both b;
  b.f = ref::forward(in, false, blk);
  b.g = ref::backward(in, b.f, blk);
  expect_same(b, w, 1e-14);
  const Outputs bw = ref::baseline_backward(in), bb = ref::baseline_backward(in, blk);
  const double a = tolerance_for(w.g.dq, bw.dq, p.dtype).tol, c = tolerance_for(w.g.dq, bb.dq, p.dtype).tol;
  EXPECT_NEAR(a, c, 0.25 * a);
}

TEST(VariantInputs, TheTensorsAreThePlainProblemsAndTheSlopesThePapers) {
  Problem p = base();
  const Inputs plain = make_inputs(p, 9);
  p.window_left = 3;
  p.softcap = 7;
  p.alibi = Alibi::heads;
  const Inputs v = make_inputs(p, 9);
  EXPECT_EQ(v.q, plain.q);
  EXPECT_EQ(v.k, plain.k);
  EXPECT_EQ(v.v, plain.v);
  EXPECT_EQ(v.dO, plain.dO);
  EXPECT_TRUE(plain.alibi_slopes.empty());
  EXPECT_EQ(v.alibi_slopes, (std::vector<float>{0.25f, 0.0625f, 0.015625f, 0.00390625f}));  // 2^(−8i/4)
  // 8 heads: 2^-1 … 2^-8; 12 heads: those, then every other slope of 16 heads: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  std::vector<float> s8 = alibi_slopes_for(8), s12 = alibi_slopes_for(12);
  ASSERT_EQ(s12.size(), 12u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(s8[size_t(i)], std::ldexp(1.0f, -(i + 1)));
    EXPECT_EQ(s12[size_t(i)], s8[size_t(i)]);
  }
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(s12[size_t(8 + i)], float(std::exp2(-0.5 - i)));
  // [B][H]: seeded (the same seed, the same slopes), per sequence different, within [1/2, 2) of the paper's.
  p.alibi = Alibi::batch_heads;
  const Inputs a = make_inputs(p, 9), b = make_inputs(p, 9), c = make_inputs(p, 10);
  ASSERT_EQ(a.alibi_slopes.size(), size_t(p.B * p.H));
  EXPECT_EQ(a.alibi_slopes, b.alibi_slopes);
  EXPECT_NE(a.alibi_slopes, c.alibi_slopes);
  EXPECT_EQ(a.q, plain.q);
  const std::vector<float> geo = alibi_slopes_for(p.H);
  for (int64_t bb = 0; bb < p.B; ++bb)
    for (int64_t h = 0; h < p.H; ++h) {
      const float x = a.alibi_slopes[size_t(bb * p.H + h)];
      EXPECT_GE(x, 0.5f * geo[size_t(h)]);
      EXPECT_LT(x, 2.0f * geo[size_t(h)]);
    }
  EXPECT_NE(a.alibi_slopes[0], a.alibi_slopes[size_t(p.H)]);
  // Varlen: tensors of the packed totals.
  Problem q = packed({0, 2, 5}, {0, 3, 7}, 5, 7);
  const Inputs pk = make_inputs(q, 9);
  EXPECT_EQ(pk.q.size(), size_t(5 * q.H * q.d));
  EXPECT_EQ(pk.k.size(), size_t(7 * q.H_kv * q.d));
}

// --- Steps that do not run a variant refuse it, naming the steps that do ----------------------------

TEST(VariantSteps, ThoseWithoutTheBitRefuseNamingThoseWith) {
  struct V {
    unsigned bit;
    std::function<void(Problem&)> set;
    std::string words;
  };
  const std::vector<V> vs = {
      {kWindow, [](Problem& p) { p.window_left = 128; p.window_right = 0; }, "does not support sliding window (window_left=128, window_right=0)"},
      {kSoftcap, [](Problem& p) { p.softcap = 30; }, "does not support softcap (softcap=30)"},
      {kAlibi, [](Problem& p) { p.alibi = Alibi::batch_heads; }, "does not support ALiBi (alibi=batch_heads)"},
      {kVarlen, [](Problem& p) { p.cu_seqlens_q = {0, 100, 128}; p.cu_seqlens_k = {0, 128, 256}; }, "does not support variable length (cu_seqlens_q, cu_seqlens_k: 2 packed sequences)"},
      {kSeqused, [](Problem& p) { p.seqused_k = {100, 28}; }, "does not support per-sequence key lengths (seqused_k)"},
  };
  int refused = 0;
  for (const V& v : vs) {
    std::string who;
    for (const Step& s : ladder())
      if (s.variants & v.bit) who += (who.empty() ? "" : ", ") + s.folder;
    ASSERT_NE(who.find("01_cpu_standard, 02_cpu_online_softmax"), std::string::npos);
    for (const Step& s : ladder()) {
      Problem p;
      p.B = 2; p.H = 4; p.H_kv = 4; p.Nq = p.Nk = 128; p.d = 64;
      p.dtype = s.dtypes.front();
      v.set(p);
      const std::string why = s.refusal(p);
      if (s.variants & v.bit) {
        EXPECT_EQ(why.find("does not support"), std::string::npos) << s.folder << ": " << why;
        continue;
      }
      ++refused;
      EXPECT_EQ(why, "step " + s.folder + ": " + v.words + "; the steps that do: " + who) << s.folder;
      EXPECT_EQ(s.why_not(p), v.words + "; the steps that do: " + who) << s.folder;
    }
  }
  EXPECT_GT(refused, 0);  // at least one step refuses something: the check ran
  // The problem's own faults come first: an invalid variant is refused as such by every step.
  Problem bad = base();
  bad.window_right = -4;
  EXPECT_NE(find_step("02")->refusal(bad).find("invalid problem: window_right = -4"), std::string::npos);
}

}  // namespace
}  // namespace fl

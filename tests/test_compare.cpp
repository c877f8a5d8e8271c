// flashladder — tests/test_compare.cpp: the comparison cannot be fooled.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/compare.hpp"
#include "common/tensor.hpp"
#include "app/timing.hpp"

namespace fl {
namespace {

const std::vector<int64_t> dims = {1, 2, 2, 2};  // 8 entries
const float nan = std::numeric_limits<float>::quiet_NaN();
const float inf = std::numeric_limits<float>::infinity();

std::vector<double> ref8() { return {1, 2, 3, 4, 5, 6, 7, 8}; }
std::vector<float> base8() { return {1.01f, 2, 3, 4, 5, 6, 7, 8}; }  // baseline error 0.01 → tol ≈ 0.02

TEST(Compare, ExactPasses) {
  Check c = compare("O", {1, 2, 3, 4, 5, 6, 7, 8}, ref8(), base8(), dims, DType::f16, 1);
  EXPECT_TRUE(c.pass) << c.summary();
  EXPECT_EQ(c.max_err, 0);
}

TEST(Compare, WithinTwiceBaselinePassesBeyondFails) {
  Check ok = compare("O", {1.015f, 2, 3, 4, 5, 6, 7, 8}, ref8(), base8(), dims, DType::f32, 1);
  EXPECT_TRUE(ok.pass) << ok.summary();
  EXPECT_GT(ok.frac, 0.5);
  Check bad = compare("O", {1, 2, 3, 4, 5, 6, 7, 8.05f}, ref8(), base8(), dims, DType::f32, 9);
  EXPECT_FALSE(bad.pass);
  EXPECT_NE(bad.first_bad.find("(0, 1, 1, 1)"), std::string::npos) << bad.first_bad;  // names the index
  EXPECT_NE(bad.first_bad.find("seed 9"), std::string::npos) << bad.first_bad;       // and the seed
}

TEST(Compare, NaNAlwaysFails) {
  for (int n = 0; n < 8; ++n) {
    std::vector<float> got = {1, 2, 3, 4, 5, 6, 7, 8};
    got[n] = nan;
    Check c = compare("O", got, ref8(), base8(), dims, DType::f16, 1);
    EXPECT_FALSE(c.pass) << "NaN at " << n << " passed";
    EXPECT_EQ(c.nonfinite, 1);
    EXPECT_TRUE(std::isinf(c.frac)) << "NaN at " << n << ": " << c.summary();  // not the finite entries' share
  }
  // All NaN used to report 0% of the tolerance used (the share of no finite entry): a gate on it passed.
  Check all = compare("O", std::vector<float>(8, nan), ref8(), base8(), dims, DType::f16, 1);
  EXPECT_FALSE(all.pass);
  EXPECT_TRUE(std::isinf(all.frac) && all.frac > 0) << all.summary();
  EXPECT_TRUE(std::isinf(compare("L", {-inf, 1}, {inf, 1}, {inf, 1.001f}, {1, 1, 2}, DType::f32, 1).frac));
}

TEST(Compare, PoisonedOutputFails) {
  Check c = compare("O", poisoned(8), ref8(), base8(), dims, DType::bf16, 1);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.bad, 8);
}

TEST(Compare, InfinityMustMatchTheOracle) {
  std::vector<double> r = {inf, 1};
  std::vector<float> b = {inf, 1.001f};
  EXPECT_TRUE(compare("L", {inf, 1}, r, b, {1, 1, 2}, DType::f32, 1).pass);
  EXPECT_FALSE(compare("L", {1e30f, 1}, r, b, {1, 1, 2}, DType::f32, 1).pass);
  EXPECT_FALSE(compare("L", {-inf, 1}, r, b, {1, 1, 2}, DType::f32, 1).pass);
  EXPECT_FALSE(compare("L", {nan, 1}, r, b, {1, 1, 2}, DType::f32, 1).pass);
  EXPECT_FALSE(compare("L", {inf, inf}, r, b, {1, 1, 2}, DType::f32, 1).pass);  // inf where the oracle is finite
}

TEST(Compare, SizeMismatchFails) {
  Check c = compare("O", {1, 2, 3}, ref8(), base8(), dims, DType::f16, 1);
  EXPECT_FALSE(c.pass);
  EXPECT_NE(c.first_bad.find("size mismatch"), std::string::npos);
}

TEST(Compare, ZeroBaselineErrorStillLeavesAFloor) {
  Check c = compare("O", {1, 2, 3, 4, 5, 6, 7, 8}, ref8(), {1, 2, 3, 4, 5, 6, 7, 8}, dims, DType::f16, 1);
  EXPECT_GT(c.tol, 0);
  EXPECT_TRUE(c.pass);
}

TEST(Rounding, Fp16AndBf16RoundToNearestEven) {
  EXPECT_EQ(round_to(DType::f16, 1.0f + 1.0f / 4096), 1.0f);         // below half an ulp (2^-11)
  EXPECT_EQ(round_to(DType::f16, 1.0f + 3.0f / 2048), 1.0f + 1.0f / 512);  // 1.5 ulp → even (2 ulp)
  EXPECT_EQ(round_to(DType::bf16, 1.0f + 1.0f / 256), 1.0f);          // tie → even
  EXPECT_TRUE(std::isinf(round_to(DType::f16, 70000.f)));
  std::vector<float> x = {0.1f, -2.5f, 3.14159f};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<float> r = x;
    round_all(t, r);
    EXPECT_EQ(unpack(t, pack(t, r).data(), 3), r) << dtype_name(t);
  }
}

TEST(Inputs, SeededAndNonZeroMean) {
  Problem p;
  p.Nq = p.Nk = 64;
  p.dtype = DType::f16;
  Inputs a = make_inputs(p, 42), b = make_inputs(p, 42), c = make_inputs(p, 43);
  EXPECT_EQ(a.q, b.q);
  EXPECT_NE(a.q, c.q);
  double mean = 0;
  for (float x : a.v) mean += x;
  mean /= double(a.v.size());
  EXPECT_NEAR(mean, 0.5, 0.1);
  for (float x : a.q) EXPECT_EQ(x, round_to(DType::f16, x));  // already representable
}

TEST(Timing, MedianMinP90) {
  Stats s = summarize({5, 1, 4, 2, 3, 6, 7, 8, 9, 10});
  EXPECT_EQ(s.min_ms, 1);
  EXPECT_EQ(s.median_ms, 5.5);
  EXPECT_EQ(s.p90_ms, 9);
  EXPECT_EQ(s.reps, 10);
}

}  // namespace
}  // namespace fl

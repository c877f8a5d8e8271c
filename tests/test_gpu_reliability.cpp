// flashladder — tests/test_gpu_reliability.cpp: properties every GPU step must have beyond matching
// the oracle on the ragged matrix (issue 8): bitwise-deterministic forwards, exact zeros and +inf on
// rows that see no key, the smallest problem, grids past 65535 blocks, clear errors on impossible
// requests. Each test runs over every GPU step of the list.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu_gate.hpp"
#include "reference/verify.hpp"

namespace fl::test {
namespace {

std::vector<const Step*> gpu_steps() {
  std::vector<const Step*> out;
  for (const Step& s : ladder())
    if (s.gpu()) out.push_back(&s);
  return out;
}

class GpuStep : public ::testing::TestWithParam<const Step*> {};

Problem shape(const Step& s, int64_t Nq, int64_t Nk, bool causal, int64_t B = 2, int64_t H = 4, int64_t H_kv = 2) {
  Problem p;
  p.B = B; p.H = H; p.H_kv = H_kv; p.Nq = Nq; p.Nk = Nk; p.causal = causal;
  p.d = s.head_dims.empty() ? 64 : s.head_dims.back();  // the largest head dim: the most registers
  p.dtype = s.dtypes.front();
  return p;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(GpuStep, ForwardIsBitwiseDeterministic) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  Inputs in = make_inputs(shape(s, 300, 257, true), 31);
  Outputs a = run_step(s, in), b = run_step(s, in);
  EXPECT_TRUE(bitwise_equal(a.o, b.o)) << s.folder << ": O differs between two runs on the same inputs";
  EXPECT_TRUE(bitwise_equal(a.lse, b.lse)) << s.folder << ": L differs between two runs on the same inputs";
}

TEST_P(GpuStep, RowsThatSeeNoKeyGiveExactZerosAndInfiniteL) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  const Problem p = shape(s, 200, 70, true);  // causal, Nq > Nk: rows i < 130 see no key
  Inputs in = make_inputs(p, 32);
  Outputs o = run_step(s, in, s.has_backward());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq - p.Nk; ++i) {
        const float L = o.lse[p.lse_at(b, h, i)];
        ASSERT_TRUE(std::isinf(L) && L > 0) << s.folder << " L at (" << b << ", " << h << ", " << i << ") = " << L;
        for (int64_t c = 0; c < p.d; ++c) {
          ASSERT_EQ(o.o[p.q_row(b, h, i) + c], 0.0f) << s.folder << " O at (" << b << ", " << h << ", " << i << ")";
          if (s.has_backward())
            ASSERT_EQ(o.dq[p.q_row(b, h, i) + c], 0.0f) << s.folder << " dQ at (" << b << ", " << h << ", " << i << ")";
        }
      }
  for (float x : o.o) ASSERT_TRUE(std::isfinite(x));
  for (float x : o.dk) ASSERT_TRUE(std::isfinite(x));
  for (float x : o.dv) ASSERT_TRUE(std::isfinite(x));
}

TEST_P(GpuStep, SmallestProblemAndManyHeads) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  // Nq = Nk = 1, and B·H = 70000 > 65535, so no grid dimension may be limited to 65535 blocks.
  for (Problem p : {shape(s, 1, 1, false, 1, 1, 1), shape(s, 1, 1, true, 7, 10000, 10000)}) {
    Inputs in = make_inputs(p, 33);
    Expected e = expected_for(in, s.has_backward());
    Verdict v = verify(in, run_step(s, in, s.has_backward()), e, s.has_backward());
    for (const Check& c : v.checks) EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << "\n  " << c.summary();
  }
}

TEST_P(GpuStep, ImpossibleRequestsAreRefusedWithTheReason) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  Problem p = shape(s, 64, 64, false);
  p.d = 7;
  try {
    Inputs in = make_inputs(p, 34);
    run_step(s, in);
    FAIL() << s.folder << " accepted d = 7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not support head dim d = 7"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, GpuStep, ::testing::ValuesIn(gpu_steps()),
                         [](const ::testing::TestParamInfo<const Step*>& i) { return i.param->folder; });

TEST(GpuMemory, ARequestLargerThanTheDeviceNamesTheBytes) {
  FL_NEED_GPU();
  const Step* s = find_step("03");
  Problem p;
  p.B = 1; p.H = 16; p.H_kv = 16; p.Nq = p.Nk = 65536; p.d = 128; p.dtype = DType::f16;
  const std::string why = s->refusal(p);  // S and P: 2·16·65536²·4 bytes = 512 GiB
  EXPECT_NE(why.find("bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("549755813888"), std::string::npos) << why;
}

}  // namespace
}  // namespace fl::test

// flashladder — tests/test_gpu_reliability.cpp: properties every GPU step must have beyond matching
// the oracle on the ragged matrix (issue 8): bitwise-deterministic forwards, exact zeros and +inf on
// rows that see no key, the smallest problem, grids past 65535 blocks, clear errors on impossible
// requests (a head dim it lacks, more memory than the device has). Each of those runs over every GPU
// step of the list. Then the backward's determinism (issue 5): dK, dV bitwise, dQ within the
// reordering of its fp32 atomic sums. Numerics: test_gpu_numerics.cpp; sizes: test_gpu_large.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <utility>

#include "app/cases.hpp"  // PrintTo(const Step*): test names show the step, not an address
#include "gpu_gate.hpp"
#include "reference/verify.hpp"

namespace fl::test {
namespace {

std::vector<const Step*> gpu_steps(bool backward_only = false) {
  std::vector<const Step*> out;
  for (const Step& s : ladder())
    if (s.gpu() && (!backward_only || s.backward)) out.push_back(&s);
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

// The deterministic mode's promise: `runs` backward runs of one problem give bitwise identical dQ, dK, dV,
// and the first is the oracle's answer (so identical wrong answers, or NaN every time, still fail).
void expect_runs_identical(const Step& s, const Inputs& in, int64_t d, int runs) {
  const Outputs first = run_step(s, in, true);
  const Verdict v = verify(in, first, expected_for(in, true), true);
  ASSERT_EQ(v.checks.size(), 5u);
  for (const Check& c : v.checks) EXPECT_TRUE(c.pass) << s.folder << " d = " << d << ": " << c.summary();
  int differ = 0;
  for (int r = 1; r < runs && differ < 3; ++r) {
    const Outputs o = run_step(s, in, true);
    const bool same = bitwise_equal(first.dq, o.dq) && bitwise_equal(first.dk, o.dk) && bitwise_equal(first.dv, o.dv);
    if (!same) ADD_FAILURE() << s.folder << " d = " << d << ": run " << r << " differs from run 0", ++differ;
  }
}

TEST_P(GpuStep, ForwardIsBitwiseDeterministic) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  Inputs in = make_inputs(shape(s, 300, 257, true), 31);
  Outputs a = run_step(s, in), b = run_step(s, in);
  // Identical NaN (the poison, never written) is bitwise equal too: the first run must be the oracle's answer.
  const Verdict v = verify(in, a, expected_for(in, false), false);
  for (const Check& c : v.checks) EXPECT_TRUE(c.pass) << s.folder << ": " << c.summary();
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

// A request larger than the device's memory is an error that names the step and the bytes, never a
// crash, for every GPU step, forward and backward. The problem is valid for every step's limits():
// B·H = 4096 heads of Nq = 2^20 rows at d = 128 (Nk = 16 keeps step 03's tile grid under 2^31 blocks)
// make Q alone 2^39 fp16 elements, 1 TiB. Step 03 refuses it in limits() (its S and P would need
// 2^39 bytes); the others fail in cudaMalloc, which app/gpu.cu reports with the step, the phase,
// the tensor and the bytes. The inputs are left empty: nothing is uploaded before the allocations
// fail, and host vectors of 2^39 floats could not exist anyway.
Problem too_large_for_any_device() {
  Problem p;
  p.B = 1; p.H = p.H_kv = 4096; p.Nq = int64_t(1) << 20; p.Nk = 16; p.d = 128; p.dtype = DType::f16;
  return p;
}

TEST_P(GpuStep, ARequestLargerThanTheDeviceFailsNamingTheBytes) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  Inputs in;
  in.p = too_large_for_any_device();
  const double q_bytes = 2.0 * double(in.p.q_elems());
  std::string why;
  const auto dev = gpu_device(&why);
  ASSERT_TRUE(dev) << why;
  if (double(dev->total_mem) >= q_bytes)
    GTEST_SKIP() << "this device has " << dev->total_mem << " bytes; the test needs one smaller than " << q_bytes;
  for (bool backward : {false, true}) {
    if (backward && !s.has_backward()) continue;
    try {
      run_step(s, in, backward);
      ADD_FAILURE() << s.folder << " ran a problem whose Q alone is " << q_bytes << " bytes";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("bytes"), std::string::npos) << msg;
      EXPECT_NE(msg.find("step " + s.number), std::string::npos) << "the message does not name the step: " << msg;
      // The number of bytes itself: Q's (cudaMalloc) or step 03's S and P (its limits()).
      EXPECT_TRUE(msg.find("1099511627776") != std::string::npos || msg.find("549755813888") != std::string::npos)
          << msg;
      std::cout << "  [" << s.folder << (backward ? " bwd" : " fwd") << "] " << msg << "\n";
    }
  }
  // The device is still usable afterwards: an allocation failure must not poison the context.
  Inputs small = make_inputs(shape(s, 17, 33, true), 35);
  Verdict v = verify(small, run_step(s, small, s.has_backward()), expected_for(small, s.has_backward()), s.has_backward());
  EXPECT_TRUE(v.pass) << s.folder << " fails a small problem after the refused one";
}

// The test above means something only if no step refuses that problem in limits() for a reason
// other than memory (a grid or index limit would be refused before any cudaMalloc). Checked here
// without a GPU for the steps whose limits() need no device; step 03's asks the device for its free
// memory, so its grid limits are checked by the GPU test itself (its message must name the bytes).
TEST(GpuMemory, TheTooLargeProblemPassesEveryStepsOtherLimits) {
  const Problem p = too_large_for_any_device();
  ASSERT_EQ(p.invalid_reason(), "");
  int checked = 0;
  for (const Step& s : ladder()) {
    if (!s.gpu() || !s.impl || s.number == "03") continue;
    EXPECT_EQ(s.refusal(p), "") << s.folder;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no GPU step is in this build (no nvcc)";
}

INSTANTIATE_TEST_SUITE_P(Steps, GpuStep, ::testing::ValuesIn(gpu_steps()),
                         [](const ::testing::TestParamInfo<const Step*>& i) { return i.param->folder; });

// Tile choices that depend on the problem's size. The ragged matrix stays below 2100 query rows, and
// some steps pick their tile by the length: 08k runs two consumer warpgroups (B_r = 128) at d = 64
// with a causal mask up to Nq = 2048 and three (B_r = 192) past it. Every GPU step with d = 64, causal
// (bottom-right, Nk = Nq + 100), on both sides of that line, forward, against the oracle.
class TileChoice : public ::testing::TestWithParam<const Step*> {};

TEST_P(TileChoice, CausalD64OnBothSidesOf2048Rows) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  for (int64_t Nq : {2048, 2049}) {
    Problem p;
    p.B = 1; p.H = 2; p.H_kv = 1; p.Nq = Nq; p.Nk = Nq + 100; p.d = 64; p.causal = true;
    p.dtype = s.dtypes.front();
    // One oracle per shape for every step (fp64, ~2 GFLOP each).
    static std::map<std::pair<int64_t, int>, std::pair<Inputs, Expected>> cache;
    const auto key = std::make_pair(Nq, int(p.dtype));
    if (!cache.count(key)) {
      Inputs in = make_inputs(p, 2048);
      Expected e = expected_for(in, false);
      cache.emplace(key, std::make_pair(std::move(in), std::move(e)));
    }
    const auto& [in, e] = cache.at(key);
    const Verdict v = verify(in, run_step(s, in, false), e, false);
    for (const Check& c : v.checks) EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << "\n  " << c.summary();
  }
}

std::vector<const Step*> d64_steps() {
  std::vector<const Step*> out;
  for (const Step* s : gpu_steps())
    if (s->supports_d(64)) out.push_back(s);
  return out;
}
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TileChoice);
INSTANTIATE_TEST_SUITE_P(Steps, TileChoice, ::testing::ValuesIn(d64_steps()),
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

// ---- The backward's determinism (issue 5) -----------------------------------------------------
//
// Steps 09 and 09b sum dQ_i over the K/V column blocks j with atomicAdd into an fp32 buffer, in whatever order
// the blocks finish; everything else (D, every dK_j, dV_j, the forward) is computed by one block each
// in a fixed order. So, over repeated runs on the same inputs:
//   O, L, dK, dV      bitwise identical;
//   dQ                equal up to the order of the fp32 sums. For n terms p_1..p_n added in any order,
//                     |fl(sum) − sum| ≤ (n − 1)·u·Σ|p_b| (u = 2^-24, first order), so two orders differ
//                     by at most 2(n − 1)·u·Σ|p_b|, and the final rounding to the storage type adds at
//                     most one ulp of the result. The test bounds Σ|p_b| by A_ic = Σ_j |dS_ij|·|K_jc|
//                     from the oracle (every product term in absolute value), with a factor 2 for the
//                     step's own rounded dS, and checks, element by element,
//                         |dQ_a − dQ_b| ≤ ulp_T(max(|dQ_a|, |dQ_b|)) + scale · 4(n − 1) · 2^-24 · A_ic,
//                     n = the number of column blocks that add into a row (⌈Nk/128⌉, 128 keys a block).
// And every run passes the tolerance rule.
double ulp_of(DType t, double x) {
  const int mant = t == DType::f16 ? 10 : t == DType::bf16 ? 7 : 23;
  const int emin = t == DType::f16 ? -14 : -126;  // the smallest normal exponent: subnormals below
  x = std::fabs(x);
  const int e = x > 0 ? std::max(int(std::floor(std::log2(x))), emin) : emin;
  return std::ldexp(1.0, e - mant);
}

class BackwardDeterminism : public ::testing::TestWithParam<const Step*> {};

TEST_P(BackwardDeterminism, DkDvBitwiseAndDqWithinTheOrderOfItsSums) {
  FL_NEED_GPU();
  const Step* s = GetParam();
  ASSERT_TRUE(s && s->has_backward()) << (s ? s->folder : "?") << " declares a backward but this build has none";
  Problem p;
  p.B = 2; p.H = 6; p.H_kv = 2; p.Nq = 300; p.Nk = 1025; p.d = 64; p.causal = false; p.dtype = DType::f16;
  const Inputs in = make_inputs(p, 36);
  const Expected e = expected_for(in, true);
  // A_ic = Σ_j |dS_ij| |K_jc| from the oracle's P (exact) and dP = dO Vᵀ, D.
  const ref::Forward f = ref::forward(in, true);
  std::vector<double> A(size_t(p.q_elems()), 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const double D = e.bwd.D[size_t(p.lse_at(b, h, i))];
        for (int64_t j = 0; j < p.Nk; ++j) {
          const double P = f.p[size_t(((b * p.H + h) * p.Nq + i) * p.Nk + j)];
          double dP = 0;
          for (int64_t c = 0; c < p.d; ++c)
            dP += double(in.dO[size_t(p.q_row(b, h, i) + c)]) * in.v[size_t(p.kv_row(b, p.kv_head(h), j) + c)];
          const double dS = std::fabs(P * (dP - D));
          for (int64_t c = 0; c < p.d; ++c)
            A[size_t(p.q_row(b, h, i) + c)] += dS * std::fabs(in.k[size_t(p.kv_row(b, p.kv_head(h), j) + c)]);
        }
      }
  const double n = double((p.Nk + 127) / 128), scale = p.softmax_scale();
  const int kRuns = 5;
  std::vector<Outputs> runs;
  for (int r = 0; r < kRuns; ++r) {
    runs.push_back(run_step(*s, in, true));
    const Verdict v = verify(in, runs.back(), e, true);
    for (const Check& c : v.checks) EXPECT_TRUE(c.pass) << "run " << r << ": " << c.summary();
  }
  int64_t differ = 0;
  double worst = 0, max_dq = 0;  // the largest |dQ_a − dQ_b| as a fraction of its bound
  for (int r = 1; r < kRuns; ++r) {
    const Outputs &a = runs[0], &b = runs[size_t(r)];
    EXPECT_TRUE(bitwise_equal(a.o, b.o)) << "O differs between run 0 and run " << r;
    EXPECT_TRUE(bitwise_equal(a.lse, b.lse)) << "L differs between run 0 and run " << r;
    EXPECT_TRUE(bitwise_equal(a.dk, b.dk)) << "dK differs between run 0 and run " << r;
    EXPECT_TRUE(bitwise_equal(a.dv, b.dv)) << "dV differs between run 0 and run " << r;
    ASSERT_EQ(a.dq.size(), b.dq.size());
    for (size_t k = 0; k < a.dq.size(); ++k) {
      const double x = a.dq[k], y = b.dq[k];
      max_dq = std::max(max_dq, std::fabs(x));
      const double bound = ulp_of(p.dtype, std::max(std::fabs(x), std::fabs(y))) +
                           scale * 4 * (n - 1) * 0x1p-24 * A[k];
      const double diff = std::fabs(x - y);
      if (!(diff <= bound)) {  // NaN fails too
        if (differ < 5)
          ADD_FAILURE() << "dQ element " << k << ": run 0 " << x << ", run " << r << " " << y << ", bound " << bound;
        ++differ;
      }
      if (x != y) worst = std::max(worst, diff / bound);
    }
  }
  EXPECT_EQ(differ, 0) << "dQ elements beyond the bound of a reordered fp32 sum";
  std::cout << "  [" << s->folder << "] dQ over " << kRuns << " runs: largest difference " << 100 * worst
            << "% of its bound (max |dQ| " << max_dq << ", n = " << n << " column blocks per row)\n";
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackwardDeterminism);
INSTANTIATE_TEST_SUITE_P(Steps, BackwardDeterminism, ::testing::ValuesIn(gpu_steps(true)),
                         [](const ::testing::TestParamInfo<const Step*>& i) { return i.param->folder; });

// The deterministic mode (issue 16, as FlashAttention's own race test): 250 backward runs of one
// problem — causal, GQA, Nq ≠ Nk, N ≥ 4096 — give bitwise identical dQ, dK, dV, and the first passes
// the tolerance rule. Every run uploads, poisons, launches and downloads anew (run_step).
class DeterministicBackward : public ::testing::TestWithParam<const Step*> {};

TEST_P(DeterministicBackward, TwoHundredFiftyRunsBitwiseIdentical) {
  FL_NEED_GPU();
  const Step* s = GetParam();
  for (int64_t d : {int64_t(64), int64_t(128)}) {
    if (!s->supports_d(d)) continue;
    Problem p;
    p.B = 1; p.H = 4; p.H_kv = 2; p.Nq = 4096; p.Nk = 4500; p.d = d; p.causal = true; p.dtype = DType::f16;
    p.deterministic = true;
    const std::string why = s->refusal(p);
    ASSERT_TRUE(why.empty()) << why;
    const Inputs in = make_inputs(p, 16);
    expect_runs_identical(*s, in, d, 250);
  }
}

// With a left window edge the column blocks that meet a Q block start at j_lo(i) > 0, so the turn order
// of the deterministic mode is j − j_lo(i) (09d): a wrong j_lo waits for a turn that never comes (the
// test then hangs until ctest's timeout) or adds in another order (runs differ). Non-causal window
// (300, 40), Nq ≠ Nk, GQA; 20 runs bitwise identical, and each the oracle's answer.
TEST_P(DeterministicBackward, WindowedRunsBitwiseIdentical) {
  FL_NEED_GPU();
  const Step* s = GetParam();
  if (!(s->variants & kWindow)) GTEST_SKIP() << s->folder << " does not list the window";
  for (int64_t d : {int64_t(64), int64_t(128)}) {
    if (!s->supports_d(d)) continue;
    Problem p;
    p.B = 1; p.H = 4; p.H_kv = 2; p.Nq = 1500; p.Nk = 2100; p.d = d; p.dtype = DType::f16;
    p.window_left = 300; p.window_right = 40;
    p.deterministic = true;
    const std::string why = s->refusal(p);
    ASSERT_TRUE(why.empty()) << why;
    const Inputs in = make_inputs(p, 17);
    expect_runs_identical(*s, in, d, 20);
  }
}

// Packed sequences (09d): the turn counters are the packed workspace's, one per (head, Q block of a
// sequence), and the turns at a Q block are counted from j_lo(i) of its own sequence; blocks of keys no
// query sees (past seqused_k) leave without a turn. Three sequences with a window, one of them with fewer
// used keys than it holds (those rows NaN); 20 runs bitwise identical, and each the oracle's answer.
TEST_P(DeterministicBackward, VarlenRunsBitwiseIdentical) {
  FL_NEED_GPU();
  const Step* s = GetParam();
  if ((s->variants & (kVarlen | kSeqused)) != unsigned(kVarlen | kSeqused))
    GTEST_SKIP() << s->folder << " does not list variable length and seqused_k";
  for (int64_t d : {int64_t(64), int64_t(128)}) {
    if (!s->supports_d(d)) continue;
    Problem p;
    p.B = 3; p.H = 4; p.H_kv = 2; p.Nq = 1300; p.Nk = 2100; p.d = d; p.dtype = DType::bf16;
    p.cu_seqlens_q = {0, 700, 2000, 2257};  // 700, 1300, 257 queries
    p.cu_seqlens_k = {0, 900, 3000, 3300};  // 900, 2100, 300 keys held
    p.seqused_k = {900, 1700, 300};
    p.window_left = 300; p.window_right = 40;
    p.deterministic = true;
    const std::string why = s->refusal(p);
    ASSERT_TRUE(why.empty()) << why;
    Inputs in = make_inputs(p, 18);
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = p.seqlen_k(1); j < p.keys_stored(1); ++j)
        for (int64_t c = 0; c < p.d; ++c)
          in.k[size_t(p.kv_off(1, hk, j) + c)] = in.v[size_t(p.kv_off(1, hk, j) + c)] =
              std::numeric_limits<float>::quiet_NaN();
    expect_runs_identical(*s, in, d, 20);
  }
}

std::vector<const Step*> deterministic_steps() {
  std::vector<const Step*> out;
  for (const Step* s : gpu_steps(true))
    if (s->deterministic_backward) out.push_back(s);
  return out;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeterministicBackward);
INSTANTIATE_TEST_SUITE_P(Steps, DeterministicBackward, ::testing::ValuesIn(deterministic_steps()),
                         [](const ::testing::TestParamInfo<const Step*>& i) { return i.param->folder; });

}  // namespace
}  // namespace fl::test

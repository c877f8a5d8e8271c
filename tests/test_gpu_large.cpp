// flashladder — tests/test_gpu_large.cpp: the GPU steps at sizes where the classic bugs live (issue 8):
// a 32-bit element offset that wraps past 2^31, a grid dimension capped at 65535 blocks, a sequence
// too long for a per-head loop, an fp32 accumulator that drifts over 131072 keys. The full fp64
// oracle cannot follow there (S at 131072² is 128 GiB of doubles per head), so every output is judged
// by the tolerance rule on sampled rows (reference/sampled.hpp: the oracle and the baseline
// computed exactly, for those rows only), and checked for finiteness everywhere: outputs are poisoned
// with NaN before the launch, so a tile the kernel never wrote shows up wherever it is.
//
// Suites and their ctest labels (tests/CMakeLists.txt):
//   LongSequence          label size   forward, Nq = Nk = 131072 (32768 for steps 03–05, which run one
//                                      thread block per head, or materialise S), B = 1, H = 2, H_kv = 1,
//                                      d = 64; non-causal fp16 and causal bf16.
//   Issue3Long            label size   B 1, H 16, N 65536, d 128 forward: 03 refuses naming bytes, 04 on
//                                      run it in O(N) extra memory, checked on sampled rows
//   LongSequenceBackward  label size   step 09's backward at 32768, causal, H = 1: sampled dQ rows and
//     (N32768)                         sampled dK, dV key rows (those need every row's L and D: a full
//                                      O(N²·d) CPU pass, about 10 s on two cores).
//   LongSequenceBackward  label large  the same at 131072 (the CPU pass: ~20 s on 16 cores, minutes on 2).
//     (N131072)
//   Over2To31Elements     label large  Q and O of 2^31 + 33·2^10 elements (forward of every GPU step),
//                                      and K, V of more than 2^31 elements (step 09's backward). Tens of
//                                      GiB of host memory each: the large tests hold a RESOURCE_LOCK so
//                                      that they run one at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "app/cases.hpp"  // PrintTo(const Step*): test names show the step, not an address
#include "gpu_gate.hpp"
#include "reference/sampled.hpp"

namespace fl::test {
namespace {

std::vector<const Step*> gpu_steps(bool backward_only = false) {
  std::vector<const Step*> out;
  for (const Step& s : ladder())
    if (s.gpu() && (!backward_only || s.backward)) out.push_back(&s);
  return out;
}

std::string step_name(const ::testing::TestParamInfo<const Step*>& i) { return i.param->folder; }

// A refusal must say which limit: the step, and a number (a byte count, a power of two, a length).
void expect_names_a_limit(const Step& s, const std::string& why) {
  EXPECT_NE(why.find("step"), std::string::npos) << s.folder << "'s refusal does not name the step: " << why;
  EXPECT_NE(why.find_first_of("0123456789"), std::string::npos) << s.folder << "'s refusal names no limit: " << why;
}

// Every value finite, except L = +inf exactly where the oracle says the row sees no key (none here
// unless causal with Nq > Nk). Counts are reported, not every entry.
void expect_all_finite(const char* what, const std::vector<float>& x, const Step& s) {
  int64_t bad = 0, first = -1;
  for (size_t n = 0; n < x.size(); ++n)
    if (!std::isfinite(x[n])) {
      if (first < 0) first = int64_t(n);
      ++bad;
    }
  EXPECT_EQ(bad, 0) << s.folder << ": " << bad << " entries of " << what << " are NaN or Inf (poison left unwritten, "
                    << "or an overflow); the first at flat index " << first;
}

void expect_pass(const Verdict& v, const Step& s, const Problem& p, uint64_t seed) {
  ASSERT_FALSE(v.checks.empty());
  for (const Check& c : v.checks)
    EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << " seed " << seed << " (sampled rows)\n  " << c.summary();
  std::cout << "  [" << s.folder << "] " << p.describe() << "  tolerance used " << 100 * v.tol_used
            << "% (sampled rows)\n";
}

// ---- Long sequences ---------------------------------------------------------------------------
int64_t long_n(const Step& s) {
  // Steps 04 and 05 run one thread block per (batch, head): two blocks here, so their time grows as
  // N²·d on two SMs; 03 materialises S and P (2·H·N² fp32: 17 GB at 32768, 275 GB at 131072).
  return s.number == "03" || s.number == "04" || s.number == "05" ? 32768 : 131072;
}

class LongSequence : public ::testing::TestWithParam<const Step*> {};

void long_forward(const Step& s, bool causal, DType t) {
  Problem p;
  p.B = 1; p.H = 2; p.H_kv = 1; p.Nq = p.Nk = long_n(s); p.d = 64; p.causal = causal; p.dtype = t;
  const std::string why = s.refusal(p);
  if (!why.empty()) {
    expect_names_a_limit(s, why);
    GTEST_SKIP() << "refused by the step, as it may be: " << why;
  }
  const uint64_t seed = 131 + uint64_t(causal);
  const Inputs in = make_inputs(p, seed);
  const Sampled ref = sampled_reference(in, pick_rows(p, seed, 24), {}, false);
  const Outputs got = run_step(s, in);
  expect_pass(verify_sampled(in, got, ref, false), s, p, seed);
  expect_all_finite("O", got.o, s);
  expect_all_finite("L", got.lse, s);  // Nq = Nk: every row sees at least key 0
}

TEST_P(LongSequence, ForwardFp16MatchesOracleOnSampledRows) {
  FL_NEED_GPU();
  long_forward(*GetParam(), false, DType::f16);
}

TEST_P(LongSequence, CausalForwardBf16MatchesOracleOnSampledRows) {
  FL_NEED_GPU();
  long_forward(*GetParam(), true, DType::bf16);
}

INSTANTIATE_TEST_SUITE_P(Gpu, LongSequence, ::testing::ValuesIn(gpu_steps()), step_name);

// Issue 3's long problem, B = 1, H = 16, Nq = Nk = 65536, d = 128 (fp16): step 03 refuses it, naming the
// bytes S and P would take (2·16·65536²·4 = 512 GiB); every later step runs it in O(N) extra memory
// (at most (d + 2) floats per query row: step 04's O, m, ℓ) and matches the oracle on sampled rows.
// Steps 04 and 05 have 16 thread blocks for 132 SMs here: some 15 s each on an H200.
class Issue3Long : public ::testing::TestWithParam<const Step*> {};

TEST_P(Issue3Long, N65536H16D128InLinearMemory) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  Problem p;
  p.B = 1; p.H = 16; p.H_kv = 16; p.Nq = p.Nk = 65536; p.d = 128; p.dtype = DType::f16;
  const std::string why = s.refusal(p);
  if (s.number == "03") {
    EXPECT_NE(why.find("549755813888"), std::string::npos) << "step 03 should refuse naming S and P's bytes: " << why;
    return;
  }
  ASSERT_EQ(why, "") << s.folder << " refuses issue 3's long problem";
  const size_t linear = size_t(p.d + 2) * size_t(p.B * p.H * p.Nq) * sizeof(float);
  EXPECT_LE(s.impl->workspace_bytes(p), linear) << s.folder << ": extra memory is not O(N)";
  const uint64_t seed = 65536;
  const Inputs in = make_inputs(p, seed);
  const Sampled ref = sampled_reference(in, pick_rows(p, seed, 24), {}, false);
  const Outputs got = run_step(s, in);
  expect_pass(verify_sampled(in, got, ref, false), s, p, seed);
  expect_all_finite("O", got.o, s);
  expect_all_finite("L", got.lse, s);
  std::cout << "  [" << s.folder << "] extra memory " << s.impl->workspace_bytes(p) << " bytes (S alone: "
            << size_t(p.B * p.H * p.Nq) * size_t(p.Nk) * sizeof(float) << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Gpu, Issue3Long, ::testing::ValuesIn(gpu_steps()), step_name);

// The backward at length N: dQ at sampled query rows, dK and dV at sampled key rows (each a sum over
// every query row that sees the key, so the reference makes one full pass). Causal halves that pass.
void long_backward(const Step& s, int64_t N) {
  ASSERT_TRUE(s.has_backward()) << s.folder << " declares a backward but this build has none";
  Problem p;
  p.B = 1; p.H = 1; p.H_kv = 1; p.Nq = p.Nk = N; p.d = 64; p.causal = true; p.dtype = DType::f16;
  const std::string why = s.refusal(p);
  if (!why.empty()) {
    expect_names_a_limit(s, why);
    GTEST_SKIP() << "refused by the step, as it may be: " << why;
  }
  const uint64_t seed = 137;
  const Inputs in = make_inputs(p, seed);
  const Sampled ref = sampled_reference(in, pick_rows(p, seed, 24), pick_keys(p, seed, 24), true);
  const Outputs got = run_step(s, in, true);
  expect_pass(verify_sampled(in, got, ref, true), s, p, seed);
  expect_all_finite("O", got.o, s);
  expect_all_finite("dQ", got.dq, s);
  expect_all_finite("dK", got.dk, s);
  expect_all_finite("dV", got.dv, s);
}

class LongSequenceBackward : public ::testing::TestWithParam<const Step*> {};

TEST_P(LongSequenceBackward, N32768MatchesOracleOnSampledRows) {
  FL_NEED_GPU();
  long_backward(*GetParam(), 32768);
}

TEST_P(LongSequenceBackward, N131072MatchesOracleOnSampledRows) {
  FL_NEED_GPU();
  long_backward(*GetParam(), 131072);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LongSequenceBackward);
INSTANTIATE_TEST_SUITE_P(Gpu, LongSequenceBackward, ::testing::ValuesIn(gpu_steps(true)), step_name);

// ---- More than 2^31 elements in one tensor ---------------------------------------------------------
//
// Inputs here are uniform on [mean − √3, mean + √3] (variance 1, mean 0.5 as make_inputs'), from a
// counter-based hash of (seed, tensor, index), filled in parallel and rounded to the storage type:
// make_inputs' Box–Muller draws would take minutes for 2^32 values. Each row differs from every other,
// so a row read from the wrong place (an offset that wrapped) gives a wrong answer.
uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<float> hashed(int64_t n, uint64_t seed, uint64_t tensor, DType t) {
  std::vector<float> x(static_cast<size_t>(n));
  const uint64_t key = mix(seed * 8 + tensor);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    const double u = double(mix(key ^ uint64_t(k)) >> 11) * 0x1p-53;  // [0, 1)
    x[size_t(k)] = round_storage(t, float(0.5 + 3.4641016151377544 * (u - 0.5)));
  }
  return x;
}

Inputs hashed_inputs(const Problem& p, uint64_t seed, bool backward) {
  p.validate();
  Inputs in;
  in.p = p;
  in.seed = seed;
  in.q = hashed(p.q_elems(), seed, 0, p.dtype);
  in.k = hashed(p.kv_elems(), seed, 1, p.dtype);
  in.v = hashed(p.kv_elems(), seed, 2, p.dtype);
  if (backward) in.dO = hashed(p.q_elems(), seed, 3, p.dtype);  // the forward never reads dO
  return in;
}

constexpr int64_t k2To31 = int64_t(1) << 31;

class Over2To31Elements : public ::testing::TestWithParam<const Step*> {};

// Q and O [1][16][2^21 + 33][64]: 2^31 + 33 792 elements (4 GiB of fp16 each). K, V are small (MQA-ish,
// H_kv = 2). The sampled rows include the ones around element 2^31 (row 2^25) and around byte 2^31 of
// fp16 (row 2^24), and the last row, whose bytes end past 2^32.
TEST_P(Over2To31Elements, ForwardWithQAndOPast2To31) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  Problem p;
  p.B = 1; p.H = 16; p.H_kv = 2; p.Nq = (int64_t(1) << 21) + 33; p.Nk = 77; p.d = 64; p.dtype = DType::f16;
  ASSERT_GT(p.q_elems(), k2To31);
  const std::string why = s.refusal(p);
  if (!why.empty()) {
    expect_names_a_limit(s, why);
    GTEST_SKIP() << "refused by the step, as it may be: " << why;
  }
  const uint64_t seed = 231;
  const Inputs in = hashed_inputs(p, seed, false);
  const int64_t r31 = k2To31 / p.d, r30 = r31 / 2, last = p.B * p.H * p.Nq - 1;
  const std::vector<RowId> rows =
      pick_rows(p, seed, 48, {r31 - 2, r31 - 1, r31, r31 + 1, r30 - 1, r30, r30 + 1, last - 1, last});
  const Sampled ref = sampled_reference(in, rows, {}, false);
  const Outputs got = run_step(s, in);
  expect_pass(verify_sampled(in, got, ref, false), s, p, seed);
  expect_all_finite("O", got.o, s);
  expect_all_finite("L", got.lse, s);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Over2To31Elements, ::testing::ValuesIn(gpu_steps()), step_name);

// K, V, dK, dV [1][512][65600][64]: 2^31 + 2 097 152 elements each; 1024 query heads (GQA, 2 per K/V
// head) of 17 rows, causal. The sampled key rows include those around element 2^31 (K/V head 511),
// plus the first, middle and last keys of K/V heads 0, 255 and 511; every query row of the K/V heads
// that hold a sampled key enters their dK, dV, so the reference's pass covers those heads whole.
class Over2To31ElementsBackward : public ::testing::TestWithParam<const Step*> {};

TEST_P(Over2To31ElementsBackward, BackwardWithKVAndTheirGradientsPast2To31) {
  FL_NEED_GPU();
  const Step& s = *GetParam();
  ASSERT_TRUE(s.has_backward());
  Problem p;
  p.B = 1; p.H = 1024; p.H_kv = 512; p.Nq = 17; p.Nk = 65600; p.d = 64; p.causal = true; p.dtype = DType::f16;
  ASSERT_GT(p.kv_elems(), k2To31);
  const std::string why = s.refusal(p);
  if (!why.empty()) {
    expect_names_a_limit(s, why);
    GTEST_SKIP() << "refused by the step, as it may be: " << why;
  }
  const uint64_t seed = 232;
  const Inputs in = hashed_inputs(p, seed, true);
  std::vector<KeyId> keys;
  for (int64_t hk : {0, 255, 511})
    for (int64_t j : {int64_t(0), int64_t(1), p.Nk / 2, p.Nk - 2, p.Nk - 1}) keys.push_back({0, hk, j});
  for (int64_t f : {k2To31 / p.d - 1, k2To31 / p.d, k2To31 / p.d + 1})
    keys.push_back({0, f / p.Nk, f % p.Nk});
  std::sort(keys.begin(), keys.end(), [](const KeyId& a, const KeyId& b) { return a.hk != b.hk ? a.hk < b.hk : a.j < b.j; });
  keys.erase(std::unique(keys.begin(), keys.end(), [](const KeyId& a, const KeyId& b) { return a.hk == b.hk && a.j == b.j; }),
             keys.end());
  std::vector<RowId> rows;
  for (int64_t h : {0, 1, 510, 511, 1022, 1023})
    for (int64_t i : {0, 8, 16}) rows.push_back({0, h, i});
  const Sampled ref = sampled_reference(in, rows, keys, true);
  const Outputs got = run_step(s, in, true);
  expect_pass(verify_sampled(in, got, ref, true), s, p, seed);
  expect_all_finite("O", got.o, s);
  expect_all_finite("L", got.lse, s);
  expect_all_finite("dQ", got.dq, s);
  expect_all_finite("dK", got.dk, s);
  expect_all_finite("dV", got.dv, s);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Over2To31ElementsBackward);
INSTANTIATE_TEST_SUITE_P(Gpu, Over2To31ElementsBackward, ::testing::ValuesIn(gpu_steps(true)), step_name);

}  // namespace
}  // namespace fl::test

// flashladder — tests/test_gpu_variants.cpp: the attention variants (issue 21) on the GPU steps that
// list them (Step::variants: 08j and 08k forward, 09d backward), crossed with ragged shapes: Nq ≠ Nk both ways,
// sizes that are no multiple of any tile, GQA and MQA, rows that see no key (a window left of every
// key, causal with Nq > Nk), d 64, 128 and 256 (the backward's 64 and 128), fp16 and bf16. Each case is
// judged by the tolerance rule against the fp64 oracle (which computes the variants itself), forward
// and, where the step has one, backward; outputs are poisoned before each launch, so an element a
// kernel skipped is NaN and fails. A step that lists a variant must not refuse these cases; every other
// GPU step must refuse them with the reason (never run them silently as the plain problem).
// Variable length and seqused_k (suite Varlen, at the end) have their own cases: sequences of their own
// lengths packed along one token axis, judged per sequence by the oracle, forward and (09d) backward;
// the key rows past seqused_k hold NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "app/runner.hpp"
#include "app/cases.hpp"  // PrintTo(const Step*)
#include "gpu_gate.hpp"
#include "reference/verify.hpp"

namespace fl::test {
namespace {

struct Shape {
  const char* name;
  int64_t B, H, H_kv, Nq, Nk, d;
  DType t;
};
struct VariantCase {
  const char* name;
  bool causal;
  int64_t left, right;  // −1 unbounded
  double softcap;       // 0: none
  Alibi alibi;
  double q_scale;       // 1, or 8 for logits a softcap saturates
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"gqa2_nq97_nk1025_d64", 2, 4, 2, 97, 1025, 64, DType::f16},
      {"mqa_nq1000_nk300_d128", 1, 3, 1, 1000, 300, 128, DType::bf16},
      {"mha_nq513_nk2100_d128", 1, 2, 2, 513, 2100, 128, DType::f16},
      {"gqa3_nq200_nk777_d256", 1, 6, 2, 200, 777, 256, DType::bf16},
  };
  return s;
}

const std::vector<VariantCase>& variants() {
  static const std::vector<VariantCase> v = {
      {"window_128_0", false, 128, 0, 0, Alibi::none, 1},
      {"window_70_33", false, 70, 33, 0, Alibi::none, 1},
      {"window_none_16", false, -1, 16, 0, Alibi::none, 1},
      {"window_300_none", false, 300, -1, 0, Alibi::none, 1},
      {"causal_window_200_50", true, 200, 50, 0, Alibi::none, 1},
      {"window_0_0", false, 0, 0, 0, Alibi::none, 1},
      {"softcap_30", false, -1, -1, 30, Alibi::none, 1},
      {"softcap_5_causal_large_logits", true, -1, -1, 5, Alibi::none, 8},
      {"alibi_heads", false, -1, -1, 0, Alibi::heads, 1},
      {"alibi_batch_heads_causal", true, -1, -1, 0, Alibi::batch_heads, 1},
      {"all_window_256_0_softcap_20_alibi", false, 256, 0, 20, Alibi::heads, 1},
  };
  return v;
}

Problem problem_of(const Shape& s, const VariantCase& v) {
  Problem p;
  p.B = s.B; p.H = s.H; p.H_kv = s.H_kv; p.Nq = s.Nq; p.Nk = s.Nk; p.d = s.d; p.dtype = s.t;
  p.causal = v.causal;
  p.window_left = v.left;
  p.window_right = v.right;
  if (v.softcap > 0) p.softcap = v.softcap;
  p.alibi = v.alibi;
  return p;
}

struct Param {
  const Shape* shape;
  const VariantCase* v;
  const Step* s;
};
void PrintTo(const Param& x, std::ostream* os) { *os << x.v->name << " " << x.shape->name << " " << x.s->folder; }

std::vector<Param> params() {
  std::vector<Param> out;
  for (const Shape& sh : shapes())
    for (const VariantCase& v : variants())
      for (const Step& s : ladder()) {
        const Problem p = problem_of(sh, v);
        if (s.gpu() && s.supports_d(p.d) && s.supports_dtype(p.dtype) && (variants_of(p) & ~s.variants) == 0)
          out.push_back({&sh, &v, &s});
      }
  return out;
}

class Variants : public ::testing::TestWithParam<Param> {};

TEST_P(Variants, MatchesOracle) {
  FL_NEED_GPU();
  const Param& x = GetParam();
  const Step& s = *x.s;
  const Problem p = problem_of(*x.shape, *x.v);
  ASSERT_EQ(s.refusal(p), "") << s.folder << " lists the variants of " << p.describe() << " but refuses it";
  InputOptions opt;
  opt.q_scale = x.v->q_scale;
  const uint64_t seed = 21000 + uint64_t(x.v - variants().data()) * 16 + uint64_t(x.shape - shapes().data());
  const Inputs in = make_inputs(p, seed, opt);
  const bool bwd = s.has_backward();
  const Outputs got = run_step(s, in, bwd);
  const Verdict v = verify(in, got, expected_for(in, bwd), bwd);
  ASSERT_EQ(v.checks.size(), bwd ? 5u : 2u);
  for (const Check& c : v.checks)
    EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << " seed " << seed << "\n  " << c.summary();
  std::cout << "  [" << s.folder << "] " << x.v->name << " " << x.shape->name << "  tolerance used "
            << 100 * v.tol_used << "%\n";
}

INSTANTIATE_TEST_SUITE_P(Gpu, Variants, ::testing::ValuesIn(params()), [](const ::testing::TestParamInfo<Param>& i) {
  return std::string(i.param.v->name) + "__" + i.param.shape->name + "__" + i.param.s->folder;
});

// The matrix above is not empty in a build with the GPU steps: a variant no step lists would
// otherwise pass by running nothing.
TEST(Variants, SomeStepRunsEachVariant) {
  for (const VariantCase& v : variants()) {
    int steps = 0;
    for (const Step& s : ladder())
      if (s.gpu() && s.impl && (variants_of(problem_of(shapes()[0], v)) & ~s.variants) == 0) ++steps;
    if (!find_step("08a") || !find_step("08a")->impl) GTEST_SKIP() << "no GPU steps in this build (no nvcc)";
    EXPECT_GT(steps, 0) << "no GPU step supports " << v.name;
  }
}

// Every GPU step that does not list a variant refuses it, naming the variant and the steps that have it.
TEST(Variants, OtherStepsRefuseThemWithTheReason) {
  const Problem p = problem_of(shapes()[0], variants()[0]);  // a window
  int checked = 0;
  for (const Step& s : ladder()) {
    if (!s.gpu() || !s.impl || (s.variants & kWindow)) continue;
    if (!s.supports_d(p.d) || !s.supports_dtype(p.dtype)) continue;
    const std::string why = s.refusal(p);
    EXPECT_NE(why.find("window"), std::string::npos) << s.folder << ": " << why;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no GPU step without the window is in this build (no nvcc): nothing checked";
}

// ---- Variable length (packed sequences) and seqused_k --------------------------------------------
// Each case lists its sequences' lengths; Nq and Nk are the longest (FlashAttention's max_seqlen_q/k).
// The lengths are ragged against every tile (B_r 192 at d = 64, 128 otherwise; B_c 128, 176 or 64):
// one-row sequences, sequences with no query or no key, sequences that end one row into a block, so
// that a TMA box reaches into the next sequence's rows (which must be masked, or not stored).
struct VarlenCase {
  const char* name;
  int64_t H, H_kv, d;
  DType t;
  std::vector<int32_t> q_lens, k_lens;  // per sequence: its queries and the key rows it holds
  std::vector<int32_t> used_k;          // seqused_k, or empty (every key held)
  bool packed;                          // false: seqused_k alone, on the [B][H][N][d] layout (lens all equal)
  bool causal;
  int64_t left, right;                  // window, −1 unbounded
  double softcap;                       // 0: none
  Alibi alibi;
};

const std::vector<VarlenCase>& varlen_cases() {
  static const std::vector<VarlenCase> v = {
      {"varlen_3seq_d128", 4, 4, 128, DType::f16, {1, 97, 300}, {5, 1025, 200}, {}, true, false, -1, -1, 0, Alibi::none},
      {"varlen_3seq_causal_gqa_d64", 6, 2, 64, DType::bf16, {1, 97, 300}, {5, 1025, 200}, {}, true, true, -1, -1, 0,
       Alibi::none},
      {"varlen_3seq_causal_mqa_d128", 3, 1, 128, DType::bf16, {1, 97, 300}, {5, 1025, 200}, {}, true, true, -1, -1, 0,
       Alibi::none},
      {"varlen_3seq_window_64_16_d128", 4, 2, 128, DType::f16, {1, 97, 300}, {5, 1025, 200}, {}, true, false, 64, 16,
       0, Alibi::none},
      {"varlen_3seq_seqused_causal_d64", 4, 2, 64, DType::f16, {1, 97, 300}, {5, 1025, 200}, {3, 700, 0}, true, true,
       -1, -1, 0, Alibi::none},
      {"varlen_3seq_seqused_d256", 2, 1, 256, DType::bf16, {1, 97, 300}, {5, 1025, 200}, {5, 1, 129}, true, false, -1,
       -1, 0, Alibi::none},
      {"varlen_empty_seqs_softcap_alibi_d128", 4, 2, 128, DType::f16, {0, 130, 1, 257}, {7, 0, 300, 256}, {}, true,
       false, -1, -1, 20, Alibi::batch_heads},
      {"varlen_8seq_block_edges_window_alibi_d64", 2, 2, 64, DType::bf16, {192, 193, 64, 0, 385, 17, 128, 1},
       {200, 177, 176, 3, 500, 1, 129, 2000}, {}, true, true, 100, 0, 0, Alibi::heads},
      {"varlen_8seq_block_edges_d256", 3, 3, 256, DType::f16, {192, 193, 64, 0, 385, 17, 128, 1},
       {200, 177, 176, 3, 500, 1, 129, 2000}, {}, true, false, -1, -1, 0, Alibi::none},
      {"seqused_3seq_d128", 4, 2, 128, DType::f16, {97, 97, 97}, {1025, 1025, 1025}, {1025, 500, 1}, false, false, -1,
       -1, 0, Alibi::none},
      {"seqused_3seq_causal_window_softcap_d64", 2, 1, 64, DType::bf16, {300, 300, 300}, {777, 777, 777},
       {0, 299, 700}, false, true, 200, 0, 30, Alibi::none},
  };
  return v;
}

Problem problem_of(const VarlenCase& c) {
  Problem p;
  p.B = int64_t(c.q_lens.size());
  p.H = c.H; p.H_kv = c.H_kv; p.d = c.d; p.dtype = c.t;
  p.causal = c.causal;
  p.window_left = c.left;
  p.window_right = c.right;
  if (c.softcap > 0) p.softcap = c.softcap;
  p.alibi = c.alibi;
  p.Nq = p.Nk = 1;
  for (int32_t n : c.q_lens) p.Nq = std::max<int64_t>(p.Nq, n);
  for (int32_t n : c.k_lens) p.Nk = std::max<int64_t>(p.Nk, n);
  if (c.packed) {
    p.cu_seqlens_q = {0};
    p.cu_seqlens_k = {0};
    for (size_t b = 0; b < c.q_lens.size(); ++b) {
      p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + c.q_lens[b]);
      p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + c.k_lens[b]);
    }
  }
  p.seqused_k = c.used_k;
  return p;
}

struct VarlenParam {
  const VarlenCase* c;
  const Step* s;
  std::string grid;  // "" = the step's own grid; otherwise FLASHLADDER_PERSISTENT_GRID (08k only)
};
void PrintTo(const VarlenParam& x, std::ostream* os) {
  *os << x.c->name << " " << x.s->folder << (x.grid.empty() ? "" : " FLASHLADDER_PERSISTENT_GRID=" + x.grid);
}

// Sets FLASHLADDER_PERSISTENT_GRID for one test and restores it after ("" = unset).
class GridEnv {
 public:
  explicit GridEnv(const std::string& value) {
    if (const char* e = std::getenv(kName)) old_ = e, had_ = true;
    if (value.empty()) unsetenv(kName);
    else setenv(kName, value.c_str(), 1);
  }
  ~GridEnv() {
    if (had_) setenv(kName, old_.c_str(), 1);
    else unsetenv(kName);
  }
  GridEnv(const GridEnv&) = delete;
  GridEnv& operator=(const GridEnv&) = delete;

 private:
  static constexpr const char* kName = "FLASHLADDER_PERSISTENT_GRID";
  std::string old_;
  bool had_ = false;
};

std::vector<VarlenParam> varlen_params() {
  std::vector<VarlenParam> out;
  for (const VarlenCase& c : varlen_cases())
    for (const Step& s : ladder()) {
      const Problem p = problem_of(c);
      if (!s.gpu() || !s.supports_d(p.d) || !s.supports_dtype(p.dtype) || (variants_of(p) & ~s.variants) != 0) continue;
      out.push_back({&c, &s, ""});
      // The persistent step again with 1 and 3 blocks: these cases have fewer tiles than SMs, so with its
      // own grid each block takes one tile and the walk across tiles (an empty tile skipped by the
      // producer and the consumers alike, tail_V's parity carried over) would go untested.
      if (s.number == "08k")
        for (const char* g : {"1", "3"}) out.push_back({&c, &s, g});
    }
  return out;
}

class Varlen : public ::testing::TestWithParam<VarlenParam> {};

TEST_P(Varlen, MatchesOracle) {
  FL_NEED_GPU();
  const VarlenParam& x = GetParam();
  const Step& s = *x.s;
  const Problem p = problem_of(*x.c);
  const GridEnv env(x.grid);
  ASSERT_EQ(p.invalid_reason(), "") << x.c->name;
  ASSERT_EQ(s.refusal(p), "") << s.folder << " lists the variants of " << p.describe() << " but refuses it";
  const uint64_t seed = 21500 + uint64_t(x.c - varlen_cases().data());
  Inputs in = make_inputs(p, seed);
  // A KV cache's rows past seqused_k[b] hold anything: NaN here. The oracle never reads them; a kernel
  // that multiplies one into a product (even by P = 0: 0 · NaN = NaN) fails. In the backward, dQ_i =
  // dS_ij K_j and dP_ij = dO_i V_jᵀ read K_j and V_j whole; those keys' dK, dV must come out 0.
  for (int64_t b = 0; b < p.B && !p.seqused_k.empty(); ++b)
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = p.seqlen_k(b); j < p.keys_stored(b); ++j)
        for (int64_t c = 0; c < p.d; ++c) {
          in.k[size_t(p.kv_off(b, hk, j) + c)] = std::numeric_limits<float>::quiet_NaN();
          in.v[size_t(p.kv_off(b, hk, j) + c)] = std::numeric_limits<float>::quiet_NaN();
        }
  const bool bwd = s.has_backward();
  const Outputs got = run_step(s, in, bwd);
  const Verdict v = verify(in, got, expected_for(in, bwd), bwd);
  ASSERT_EQ(v.checks.size(), bwd ? 5u : 2u);
  for (const Check& c : v.checks)
    EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << " seed " << seed
                        << (x.grid.empty() ? "" : " FLASHLADDER_PERSISTENT_GRID=" + x.grid) << "\n  " << c.summary();
  std::cout << "  [" << s.folder << (x.grid.empty() ? "" : " G=" + x.grid) << "] " << x.c->name << "  tolerance used "
            << 100 * v.tol_used << "%\n";
}

INSTANTIATE_TEST_SUITE_P(Gpu, Varlen, ::testing::ValuesIn(varlen_params()),
                         [](const ::testing::TestParamInfo<VarlenParam>& i) {
                           return std::string(i.param.c->name) + "__" + i.param.s->folder +
                                  (i.param.grid.empty() ? "" : "_G" + i.param.grid);
                         });

// The cases are well formed, and some GPU step runs them (08j, 08k, and 09d's, 09e's and 09f's backward), in a build
// with the GPU steps.
TEST(Varlen, CasesAreValidAndSomeStepRunsThem) {
  for (const VarlenCase& c : varlen_cases()) {
    const Problem p = problem_of(c);
    EXPECT_EQ(p.invalid_reason(), "") << c.name;
    EXPECT_NE(variants_of(p) & (kVarlen | kSeqused), 0u) << c.name;
  }
  if (!find_step("08a") || !find_step("08a")->impl) GTEST_SKIP() << "no GPU steps in this build (no nvcc)";
  for (const VarlenCase& c : varlen_cases()) {
    int steps = 0;
    for (const Step& s : ladder())
      if (s.gpu() && s.impl && (variants_of(problem_of(c)) & ~s.variants) == 0) ++steps;
    EXPECT_GT(steps, 0) << "no GPU step supports " << c.name;
  }
}

// The last rungs list them (08j and 08k forward, 09d, 09e and 09f forward and backward); every other GPU step refuses
// variable length and seqused_k with the reason (step 10 lists seqused_k alone).
TEST(Varlen, OtherStepsRefuseItWithTheReason) {
  for (const VarlenCase& c : varlen_cases()) {
    const Problem p = problem_of(c);
    for (const Step& s : ladder()) {
      if (!s.gpu() || !s.impl || (variants_of(p) & ~s.variants) == 0) continue;
      if (!s.supports_d(p.d) || !s.supports_dtype(p.dtype)) continue;
      const std::string why = s.refusal(p);
      EXPECT_NE(why, "") << s.folder << " runs " << c.name << " without listing its variants";
      EXPECT_TRUE(why.find("variable length") != std::string::npos || why.find("seqused_k") != std::string::npos ||
                  why.find("window") != std::string::npos || why.find("softcap") != std::string::npos ||
                  why.find("ALiBi") != std::string::npos)
          << s.folder << ": " << why;
    }
  }
  for (const char* number : {"08j", "08k", "09d", "09e", "09f"}) {
    const Step* s = find_step(number);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->variants & (kVarlen | kSeqused), unsigned(kVarlen | kSeqused)) << s->folder;
  }
  const Step* plain = find_step("09c");
  ASSERT_NE(plain, nullptr);
  EXPECT_NE(plain->refusal(problem_of(varlen_cases()[0])).find("variable length"), std::string::npos);
}

}  // namespace
}  // namespace fl::test

// flashladder — tests/test_gpu_decode.cpp: decode-shaped problems (issue 17): a few query rows (Nq 1–16,
// speculative decoding) against a long KV cache (Nk up to 131072), GQA/MQA groups H/H_kv ∈ {1, 4, 8,
// 32}, causal (bottom-right: the last query row sees every key) and not, fp16 and bf16, d 64 and 128.
// Every GPU step runs them (they are ordinary problems), judged by the tolerance rule against the full
// oracle up to Nk = 8192 and on sampled rows beyond (reference/sampled.hpp); outputs are
// poisoned before the launch, so any element left unwritten is NaN and fails.
//
// Step 10 (split-KV) runs each case again with the number of splits forced through FLASHLADDER_SPLITS
// (1: no merge kernel; 3: uneven chunks; 200, clamped to one split per 16 keys: splits that see no
// key of a row, or no key tile of a row tile at all, must drop out of the merge without a NaN).
// Then its own properties: the heuristic splits the small decode grids and leaves large grids whole,
// the workspace it reports is the partials' size, and a bad FLASHLADDER_SPLITS is refused with the
// reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>

#include "app/cases.hpp"  // PrintTo(const Step*)
#include "gpu_gate.hpp"
#include "reference/verify.hpp"
#include "reference/sampled.hpp"

namespace fl::test {
namespace {

struct DecodeCase {
  const char* name;
  int64_t B, H, H_kv, Nq, Nk, d;
  bool causal;
  DType t;
  double q_scale;  // 20: large logits
};

// Full oracle up to Nk = 8192; sampled rows past it (kSampledFrom).
constexpr int64_t kSampledFrom = 16384;

const std::vector<DecodeCase>& decode_cases() {
  static const std::vector<DecodeCase> c = {
      {"gqa4_nq1_nk1024", 1, 32, 8, 1, 1024, 128, false, DType::f16, 1.0},
      {"mha_nq1_nk4099_causal", 3, 32, 32, 1, 4099, 128, true, DType::bf16, 1.0},
      {"gqa8_nq4_nk2053_causal", 2, 32, 4, 4, 2053, 64, true, DType::f16, 1.0},
      {"gqa4_nq16_nk1000_causal", 2, 8, 2, 16, 1000, 128, true, DType::bf16, 1.0},
      {"gqa4_nq5_nk3_causal_rows_without_keys", 1, 4, 1, 5, 3, 64, true, DType::f16, 1.0},
      {"mqa32_nq1_nk777", 2, 32, 1, 1, 777, 64, false, DType::bf16, 1.0},
      {"mha_nq3_nk2500_causal_large_logits", 1, 8, 8, 3, 2500, 128, true, DType::f16, 20.0},
      {"gqa4_nq2_nk8192", 4, 16, 4, 2, 8192, 128, false, DType::f16, 1.0},
      // Not decode, but what the split path must survive: row tiles that see fewer key tiles than
      // there are splits (whole splits empty for a tile), and tiles whose rows see no key at all.
      {"mha_nq40_nk50_causal_empty_splits", 2, 4, 4, 40, 50, 64, true, DType::bf16, 1.0},
      {"gqa2_nq37_nk20_causal_tiles_without_keys", 1, 4, 2, 37, 20, 128, true, DType::f16, 1.0},
      {"gqa8_nq16_nk131072_causal", 1, 8, 1, 16, 131072, 128, true, DType::f16, 1.0},
      {"gqa4_nq1_nk131072", 1, 32, 8, 1, 131072, 128, false, DType::bf16, 1.0},
      {"mha_nq7_nk65536_causal", 1, 4, 4, 7, 65536, 64, true, DType::bf16, 1.0},
  };
  return c;
}

Problem problem_of(const DecodeCase& c) {
  Problem p;
  p.B = c.B; p.H = c.H; p.H_kv = c.H_kv; p.Nq = c.Nq; p.Nk = c.Nk; p.d = c.d; p.causal = c.causal; p.dtype = c.t;
  return p;
}

uint64_t seed_of(const DecodeCase& c) { return 17000 + uint64_t(&c - decode_cases().data()); }

// Sets FLASHLADDER_SPLITS for the lifetime of the object and restores what was there before.
class SplitsEnv {
 public:
  explicit SplitsEnv(const std::string& value) {
    if (const char* e = std::getenv("FLASHLADDER_SPLITS")) old_ = e, had_ = true;
    if (value.empty()) unsetenv("FLASHLADDER_SPLITS");
    else setenv("FLASHLADDER_SPLITS", value.c_str(), 1);
  }
  ~SplitsEnv() {
    if (had_) setenv("FLASHLADDER_SPLITS", old_.c_str(), 1);
    else unsetenv("FLASHLADDER_SPLITS");
  }
  SplitsEnv(const SplitsEnv&) = delete;
  SplitsEnv& operator=(const SplitsEnv&) = delete;

 private:
  std::string old_;
  bool had_ = false;
};

struct Param {
  const DecodeCase* c;
  const Step* s;
  std::string splits;  // "" = the step's own choice; otherwise FLASHLADDER_SPLITS (step 10 only)
};

void PrintTo(const Param& x, std::ostream* os) {
  *os << x.c->name << " " << x.s->folder << (x.splits.empty() ? "" : " FLASHLADDER_SPLITS=" + x.splits);
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const DecodeCase& c : decode_cases())
    for (const Step& s : ladder()) {
      if (!s.gpu() || !s.supports_d(c.d) || !s.supports_dtype(c.t)) continue;
      out.push_back({&c, &s, ""});
      if (s.number == "10")
        for (const char* n : {"1", "3", "200"}) out.push_back({&c, &s, n});
    }
  return out;
}

// Rows that see no key (causal, Nq > Nk: the first Nq − Nk query rows of every head).
bool sees_no_key(const Problem& p, int64_t i) { return p.causal && i < p.Nq - p.Nk; }

class Decode : public ::testing::TestWithParam<Param> {};

TEST_P(Decode, MatchesOracle) {
  FL_NEED_GPU();
  const Param& x = GetParam();
  const Step& s = *x.s;
  const SplitsEnv env(x.splits);
  const Problem p = problem_of(*x.c);
  const std::string why = s.refusal(p);
  ASSERT_EQ(why, "") << s.folder << " refuses the decode shape " << p.describe();
  InputOptions opt;
  opt.q_scale = x.c->q_scale;
  const uint64_t seed = seed_of(*x.c);
  const Inputs in = make_inputs(p, seed, opt);
  const Outputs got = run_step(s, in);
  Verdict v;
  if (p.Nk < kSampledFrom) {
    v = verify(in, got, expected_for(in, false), false);
  } else {
    const Sampled ref = sampled_reference(in, pick_rows(p, seed, 24), {}, false);
    v = verify_sampled(in, got, ref, false);
  }
  ASSERT_FALSE(v.checks.empty());
  for (const Check& c : v.checks)
    EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << " seed " << seed
                        << (x.splits.empty() ? "" : " FLASHLADDER_SPLITS=" + x.splits) << "\n  " << c.summary();
  std::cout << "  [" << s.folder << (x.splits.empty() ? "" : " S=" + x.splits) << "] " << x.c->name << " "
            << p.describe() << "  workspace " << s.impl->workspace_bytes(p) << " bytes  tolerance used "
            << 100 * v.tol_used << "%" << (p.Nk < kSampledFrom ? "" : " (sampled rows)") << "\n";
  // Everywhere (not only on the sampled rows): finite, except exactly O = 0, L = +inf where a row
  // sees no key.
  int64_t bad = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const bool none = sees_no_key(p, i);
        const float L = got.lse[size_t(p.lse_at(b, h, i))];
        if ((none ? !(std::isinf(L) && L > 0) : !std::isfinite(L)) && bad++ < 5)
          ADD_FAILURE() << s.folder << " L at (" << b << ", " << h << ", " << i << ") = " << L;
        for (int64_t c = 0; c < p.d; ++c) {
          const float o = got.o[size_t(p.q_row(b, h, i) + c)];
          if ((none ? o != 0.f : !std::isfinite(o)) && bad++ < 5)
            ADD_FAILURE() << s.folder << " O at (" << b << ", " << h << ", " << i << ", " << c << ") = " << o;
        }
      }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Decode, ::testing::ValuesIn(params()), [](const ::testing::TestParamInfo<Param>& i) {
  return std::string(i.param.c->name) + "__" + i.param.s->folder + (i.param.splits.empty() ? "" : "_S" + i.param.splits);
});

// ---- Step 10's own properties ---------------------------------------------------------------------
const Step* step10() {
  const Step* s = find_step("10");
  return s && s->impl ? s : nullptr;
}

Problem decode_problem(int64_t B, int64_t H_kv, int64_t Nq, int64_t Nk) {
  Problem p;
  p.B = B; p.H = 32; p.H_kv = H_kv; p.Nq = Nq; p.Nk = Nk; p.d = 128; p.dtype = DType::f16;
  return p;
}

// The workspace is exactly the partials: S × [B·H·Nq] rows of d + 1 floats (O_s and L_s), and none
// with one split (the split kernel then writes O and L itself).
TEST(SplitKv, WorkspaceIsThePartialsOfTheSplitsAsked) {
  const Step* s = step10();
  if (!s) GTEST_SKIP() << "step 10 is not in this build (no nvcc)";
  const Problem p = decode_problem(2, 8, 3, 5000);
  {
    const SplitsEnv env("5");
    EXPECT_EQ(s->impl->workspace_bytes(p), size_t(5) * size_t(p.lse_elems()) * size_t(p.d + 1) * 4);
  }
  {
    const SplitsEnv env("1");
    EXPECT_EQ(s->impl->workspace_bytes(p), 0u);
  }
  {  // more splits than tiles of 16 keys: clamped to ⌈5000/16⌉ = 313, then to 256
    const SplitsEnv env("100000");
    EXPECT_EQ(s->impl->workspace_bytes(p), size_t(256) * size_t(p.lse_elems()) * size_t(p.d + 1) * 4);
  }
}

TEST(SplitKv, ABadSplitsVariableIsRefusedWithTheReason) {
  const Step* s = step10();
  if (!s) GTEST_SKIP() << "step 10 is not in this build (no nvcc)";
  for (const char* bad : {"abc", "0", "-3", "4x"}) {
    const SplitsEnv env(bad);
    const std::string why = s->refusal(decode_problem(1, 8, 1, 4096));
    EXPECT_NE(why.find("FLASHLADDER_SPLITS"), std::string::npos) << bad << ": " << why;
    EXPECT_NE(why.find(bad), std::string::npos) << why;
  }
}

// The heuristic on this GPU: the decode grids (B·H_kv = 8 to 128 blocks for 100+ SMs) are
// split, a grid of several waves (B = 64, H_kv = 32: 2048 blocks) and issue 3's prefill problem are not.
TEST(SplitKv, TheHeuristicSplitsSmallDecodeGridsOnly) {
  FL_NEED_GPU();
  const Step* s = step10();
  ASSERT_TRUE(s) << "step 10 is not in this CUDA build";
  const SplitsEnv env("");
  std::string why;
  const auto dev = gpu_device(&why);
  ASSERT_TRUE(dev) << why;
  if (dev->sm_count < 64) GTEST_SKIP() << "the expectations below assume a GPU of 64 SMs or more";
  for (auto [B, H_kv, Nq, Nk] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 8, 1, 32768}, {16, 8, 1, 32768},
                                 {1, 32, 4, 131072}, {16, 8, 4, 8192}}) {
    const Problem p = decode_problem(B, H_kv, Nq, Nk);
    const size_t ws = s->impl->workspace_bytes(p);
    EXPECT_GT(ws, 0u) << p.describe() << ": not split";
    const size_t per_split = size_t(p.lse_elems()) * size_t(p.d + 1) * 4;
    std::cout << "  " << p.describe() << ": S = " << ws / per_split << " on " << dev->sm_count << " SMs\n";
  }
  EXPECT_EQ(s->impl->workspace_bytes(decode_problem(64, 32, 1, 32768)), 0u);
  Problem prefill;
  prefill.B = 1; prefill.H = prefill.H_kv = 16; prefill.Nq = prefill.Nk = 65536; prefill.d = 128;
  EXPECT_EQ(s->impl->workspace_bytes(prefill), 0u);
}

}  // namespace
}  // namespace fl::test

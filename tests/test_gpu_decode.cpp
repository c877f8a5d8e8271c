// flashladder — tests/test_gpu_decode.cpp: decode-shaped problems (issue 17): a few query rows (Nq 1–16,
// speculative decoding) against a long KV cache (Nk up to 131072), GQA/MQA groups H/H_kv ∈ {1, 4, 8,
// 32}, causal (bottom-right: the last query row sees every key) and not, fp16 and bf16, d 64 and 128.
// Every GPU step runs them (they are ordinary problems), judged by the tolerance rule against the full
// oracle up to Nk = 8192 and on sampled rows beyond (reference/sampled.hpp); outputs are
// poisoned before the launch, so any element left unwritten is NaN and fails.
//
// Step 10 (split-KV) runs each case again with the number of splits forced through FLASHLADDER_SPLITS
// (1: no merge kernel; 3: uneven chunks; 200, clamped to one split per 16 keys: splits that see no
// key of a row, or no key tile of a row tile at all, must drop out of the merge without a NaN), and
// so does 10b (its merge in a cluster of S blocks: 1, 3, 16, and 200 clamped to 16).
// Then its own properties: the heuristic splits the small decode grids and leaves large grids whole,
// the workspace it reports is the partials' size, and a bad FLASHLADDER_SPLITS is refused with the
// reason.
//
// Last, the variants a decode batch has (issue 21), on the GPU steps that list them (step 10, 08j, 08k,
// 09d): caches filled to different lengths (seqused_k, down to no key at all), the sliding
// window (w, 0) with causal and without, a window larger than the cache, both edges, GQA up to 8, each
// with step 10's forced splits too. The cache rows past seqused_k[b] hold NaN, so a kernel that reads
// one into a product fails; and the splits are counted from the keys visited, not from Nk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>
#include <tuple>

#include "app/cases.hpp"  // PrintTo(const Step*)
#include "gpu_gate.hpp"
#include "reference/verify.hpp"
#include "reference/sampled.hpp"

// Step 10's tile rule, read directly where a grid is unsplit (no workspace to read it from); weak: a
// build without nvcc has no step 10, and the test that reads it then skips.
namespace fl::s10 {
int m_tiles(const Problem& p) __attribute__((weak));
}

namespace fl::test {
namespace {

struct DecodeCase {
  const char* name;
  int64_t B, H, H_kv, Nq, Nk, d;
  bool causal;
  DType t;
  double q_scale;  // 20: large logits
  // Only this step, at its own splits: a case that exists for one step's kernel and whose full oracle
  // is too long to pay on every step (B 50 × 32 heads × 4 rows × 8195 keys: 43 s per step on 2 threads).
  const char* only = nullptr;
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
      // Groups of 64 rows or more, where steps 10 and 10b take tiles of 32 rows (their m_tiles): MQA
      // at d 64 in bf16 (128 rows, 4 tiles), and 72 rows whose last tile has 8, with Nq = 6 rows per
      // head crossing the tiles' edges under the causal mask.
      {"mqa32_nq4_nk32768_tiles_of_32_rows", 1, 32, 1, 4, 32768, 64, false, DType::bf16, 1.0},
      {"gqa12_nq6_nk65536_causal_ragged_32_row_tiles", 1, 12, 1, 6, 65536, 128, true, DType::f16, 1.0},
      // And unsplit: 60 × 2 = 120 tiles of 32 rows are at least 90% of 132 SMs (an H100's or H200's), no split.
      {"gqa4_nq16_b60_causal_unsplit_32_row_tiles", 60, 4, 1, 16, 1000, 128, true, DType::f16, 1.0},
      // 512 unsplit tiles of 16 rows at d 128, three or more per SM: step 10 runs one block per SM, and so
      // does 10b on an H200 (on an H100 10b does from 8192 keys a tile: one_per_sm).
      {"mha_nq1_b16_nk300_one_block_per_sm", 16, 32, 32, 1, 300, 128, false, DType::bf16, 1.0},
      // 32 tiles of 16 rows at B 1 in 10b's clusters of 3 (an H200 schedules no 32 clusters of 4), 2732
      // keys per split: on a memory of 4 TB/s or more (an H200) 10b's ring a stage deeper (deep_clusters).
      {"mha_nq1_nk8195_causal_deep_cluster_ring", 1, 32, 32, 1, 8195, 128, true, DType::bf16, 1.0},
      // 8 tiles of 16 rows (4 query heads × Nq 4) at B 1: on an H100 in clusters of 9 (910 keys per split,
      // 72 blocks of 4 warps); on an H200 in clusters of 8 (1024 keys per split: no GPC holds two clusters
      // of 9, two_to_a_gpc) in blocks of 8 warps (eight_warps).
      {"gqa4_nq4_nk8195_causal_eight_warp_clusters", 1, 32, 8, 4, 8195, 128, true, DType::f16, 1.0},
      // 400 unsplit tiles of 16 rows at d 128 (one block per SM), the last wave 4 blocks of 132: on a
      // memory of 4 TB/s or more (an H200) 10b's blocks of 8 warps (eight_warps with S = 1); on an H100
      // 10b's rings with V ahead of K (v_ahead), swapped.
      {"mha_nq1_b25_nk8195_causal_eight_warp_last_wave", 25, 16, 16, 1, 8195, 128, true, DType::bf16, 1.0},
      // 8 tiles of 4 rows (4 query heads × Nq 1): 10b's product transposed (swapped: keys on the MMA's
      // 16-row side), on an H200 in clusters of 8 of 8 warps (2052 keys per split), on an H100 of 9 of 4.
      {"gqa4_nq1_nk16411_causal_swapped_eight_warp_clusters", 1, 32, 8, 1, 16411, 128, true, DType::bf16, 1.0},
      // 400 unsplit tiles of 16 rows (4 query heads × Nq 4, not swapped), the last wave 4 blocks: on an
      // H200 blocks of 8 warps that release each slot early (the kernel's kEarly), as the clusters of
      // gqa4_nq4_nk8195_causal_eight_warp_clusters do; on an H100 rings with V ahead of K (v_ahead), not
      // swapped. Last, so that the cases above keep their seeds.
      {"gqa4_nq4_b50_nk8195_causal_eight_warp_last_wave", 50, 32, 8, 4, 8195, 128, true, DType::f16, 1.0,
       "10b_cluster_merge"},
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

// The splits each case runs with again, forced: step 10's (1, 3, 200, clamped to a split per 16
// keys) and 10b's (1, 3, 16: its largest cluster, and 200, clamped to it).
std::vector<const char*> forced_splits(const Step& s) {
  if (s.number == "10") return {"1", "3", "200"};
  if (s.number == "10b") return {"1", "3", "16", "200"};
  return {};
}

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
      if (c.only && s.folder != c.only) continue;
      out.push_back({&c, &s, ""});
      if (!c.only)
        for (const char* n : forced_splits(s)) out.push_back({&c, &s, n});
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

// The GPU the split heuristic's tests are written for: 64 to 142 SMs (beyond, 16 splits of 512 keys no
// longer reach 90% of them). Sets *sms, or *skip with the reason where the GPU is outside that range;
// fails the test without a device.
void heuristic_gpu(int* sms, std::string* skip) {
  std::string why;
  const auto dev = gpu_device(&why);
  ASSERT_TRUE(dev) << why;
  *sms = dev->sm_count;
  if (*sms < 64 || *sms > 142)
    *skip = "the expectations below assume a GPU of 64 to 142 SMs (this one has " + std::to_string(*sms) +
            "): beyond, 16 splits of 512 keys no longer reach 90% of the SMs";
}

// In a test body: declares `int sms` (this GPU's SMs) and skips the test with heuristic_gpu()'s reason
// where the GPU is outside the range its expectations assume.
#define FL_HEURISTIC_GPU(sms)                              \
  int sms = 0;                                             \
  {                                                        \
    std::string skip_;                                     \
    ASSERT_NO_FATAL_FAILURE(heuristic_gpu(&sms, &skip_));  \
    if (!skip_.empty()) GTEST_SKIP() << skip_;             \
  }

// The heuristic on this GPU: grids of fewer blocks than 90% of the SMs (B·H_kv = 8 or 32) are split into
// just enough for that; grids of 128 blocks or more (run 46: unsplit was fastest) and issue 3's prefill
// problem are not.
TEST(SplitKv, TheHeuristicSplitsSmallDecodeGridsOnly) {
  FL_NEED_GPU();
  const Step* s = step10();
  ASSERT_TRUE(s) << "step 10 is not in this CUDA build";
  const SplitsEnv env("");
  FL_HEURISTIC_GPU(sms);
  // Split: grids below 90% of one block per SM get the smallest S that reaches it, or the most that
  // still fit one block per SM where that is more (the keys allow it here: at least 8192 keys, 16
  // splits of 512). On 132 SMs: 16 for 8 blocks (the 90% rule alone: 15), 4 for 32.
  for (auto [B, H_kv, Nq, Nk] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 8, 1, 32768}, {1, 8, 4, 8192},
                                 {1, 32, 4, 131072}, {1, 32, 1, 8192}}) {
    const Problem p = decode_problem(B, H_kv, Nq, Nk);
    const size_t ws = s->impl->workspace_bytes(p);
    EXPECT_GT(ws, 0u) << p.describe() << ": not split";
    const size_t per_split = size_t(p.lse_elems()) * size_t(p.d + 1) * 4;
    const int64_t S = int64_t(ws / per_split), blocks = B * H_kv;  // T_r = 1: G·Nq ≤ 16 rows
    const int64_t reach = int64_t(std::ceil(0.9 * sms / double(blocks))), fill = sms / blocks;
    EXPECT_GE(double(S * blocks), 0.9 * sms) << p.describe() << ": S = " << S;
    EXPECT_EQ(S, std::max(reach, fill)) << p.describe() << ": S = " << S << ", not the most of one wave ("
                                        << fill << ") or the least that reaches 90% (" << reach << ")";
    std::cout << "  " << p.describe() << ": S = " << S << " on " << sms << " SMs\n";
  }
  // Whole: a grid of at least 90% of one block per SM (run 46: S = 1 was fastest at 128 blocks).
  for (auto [B, H_kv, Nq, Nk] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{16, 8, 1, 32768}, {16, 8, 4, 8192},
                                 {64, 32, 1, 32768}})
    EXPECT_EQ(s->impl->workspace_bytes(decode_problem(B, H_kv, Nq, Nk)), 0u) << decode_problem(B, H_kv, Nq, Nk).describe();
  Problem prefill;
  prefill.B = 1; prefill.H = prefill.H_kv = 16; prefill.Nq = prefill.Nk = 65536; prefill.d = 128;
  EXPECT_EQ(s->impl->workspace_bytes(prefill), 0u);
}

// Tiles of 32 rows (m_tiles) and two blocks per SM from d rows (blocks_wanted), runs 116 and 120: a
// group of 64 packed rows or more gets ⌈M/32⌉ row tiles and the splits that bring them to the blocks
// wanted (90% of one block per SM; of two from M ≥ d) or, where more fit that wave (run 140), as
// many as fit; none where the tiles alone reach it (B 16). A group
// of 32 rows (MQA at Nq 1) keeps 16-row tiles, and so does one whose 32-row grid the 512-key floor would
// halve (B 1, Nq 4, Nk 8192: 16 splits of 4 tiles against 16 of 8). At d = 64 the 64 rows of B 16,
// H_kv 4, Nq 8 want two blocks per SM (2 splits of 128 tiles), at d = 128 one (unsplit). S is read from the workspace (S =
// bytes / partial; none: 1), so the test sees what the launch does.
TEST(SplitKv, LargeGroupsTakeTilesOf32RowsAndTwoBlocksPerSm) {
  FL_NEED_GPU();
  const Step* s = step10();
  ASSERT_TRUE(s && fl::s10::m_tiles) << "step 10 is not in this CUDA build";
  const SplitsEnv env("");
  FL_HEURISTIC_GPU(sms);
  for (auto [B, H_kv, Nq, Nk, rows, d] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{1, 1, 4, 131072, 32, 128},
        {1, 1, 16, 131072, 32, 128}, {1, 2, 4, 131072, 32, 128}, {4, 1, 16, 32768, 32, 128}, {16, 1, 16, 8192, 32, 128},
        {16, 4, 8, 8192, 32, 128}, {16, 4, 8, 8192, 32, 64}, {1, 1, 1, 131072, 16, 128}, {1, 1, 4, 8192, 16, 128},
        {1, 8, 4, 131072, 16, 128}}) {
    Problem p = decode_problem(B, H_kv, Nq, Nk);
    p.d = d;  // at d = 64 a group of 64 rows already wants two blocks per SM
    const int64_t M = p.group() * Nq, tiles = B * H_kv * ((M + rows - 1) / rows);
    EXPECT_EQ(16 * fl::s10::m_tiles(p), rows) << p.describe();
    const size_t per_split = size_t(p.lse_elems()) * size_t(p.d + 1) * 4;
    const int64_t S = std::max<int64_t>(1, int64_t(s->impl->workspace_bytes(p) / per_split));
    const int64_t slots = (M >= p.d ? 2 : 1) * int64_t(sms);
    const double wanted = 0.9 * double(slots);
    const int64_t floor_cap = Nk / 512;  // splits of at least 32·16 keys
    if (double(tiles) >= wanted) {
      EXPECT_EQ(S, 1) << p.describe() << ": " << tiles << " tiles of " << rows << " rows need no split";
    } else {
      const int64_t reach = int64_t(std::ceil(wanted / double(tiles))), fill = slots / tiles;
      EXPECT_EQ(S, std::min(floor_cap, std::max(reach, fill)))
          << p.describe() << ": S = " << S << ", not the most of one wave (" << fill << ") or the least that reaches "
          << wanted << " blocks (" << reach << "), at most the 512-key floor's " << floor_cap;
    }
    std::cout << "  " << p.describe() << ": tiles of " << rows << " rows, S = " << S << " (" << S * tiles
              << " blocks, " << wanted << " wanted)\n";
  }
}

// ---- The variants of a decode batch (issue 21) ------------------------------------------------------
struct VariantDecodeCase {
  const char* name;
  int64_t B, H, H_kv, Nq, Nk, d;
  bool causal;
  int64_t left, right;          // the window; −1 unbounded
  std::vector<int32_t> used;    // seqused_k, one per sequence; empty: every sequence uses all Nk keys
  DType t;
};

const std::vector<VariantDecodeCase>& variant_cases() {
  static const std::vector<VariantDecodeCase> c = {
      // Caches of different fill: all of it, 17 keys, part, none (that sequence's rows see no key).
      {"gqa8_nq1_seqused_full_17_1500_0", 4, 32, 4, 1, 4100, 128, true, -1, -1, {4100, 17, 1500, 0}, DType::f16},
      // Nq = 4 on a cache of 2 keys: its first two rows see none (bottom-right, per sequence).
      {"gqa8_nq4_seqused_causal_rows_without_keys", 3, 16, 2, 4, 3000, 64, true, -1, -1, {3000, 2, 1025}, DType::bf16},
      {"gqa8_nq4_seqused_not_causal", 2, 16, 2, 4, 2500, 128, false, -1, -1, {77, 2500}, DType::f16},
      // The sliding window (w, 0): causal, and the same window without causal.
      {"gqa8_nq1_causal_window_256_0_seqused", 3, 32, 4, 1, 8192, 128, true, 256, 0, {8192, 300, 5000}, DType::bf16},
      {"gqa8_nq4_window_2000_0_seqused", 2, 16, 2, 4, 8192, 128, false, 2000, 0, {8192, 3001}, DType::f16},
      {"gqa8_nq4_causal_window_2000_0_seqused", 2, 16, 2, 4, 8192, 64, true, 2000, 0, {3001, 8192}, DType::bf16},
      // A window larger than the cache (every key of the sequence is in it).
      {"mqa8_nq1_causal_window_5000_larger_than_cache", 3, 8, 1, 1, 2000, 64, true, 5000, 0, {2000, 100, 1}, DType::f16},
      // Both edges, a left edge only, a window of one key; Nq = 3 with G = 8 wraps row tiles across heads.
      {"mha_nq3_window_100_8_seqused", 2, 4, 4, 3, 1000, 64, false, 100, 8, {1000, 50}, DType::bf16},
      {"gqa8_nq3_window_64_none_seqused", 2, 16, 2, 3, 2048, 128, false, 64, -1, {2048, 700}, DType::f16},
      {"gqa4_nq4_window_0_0_seqused", 2, 8, 2, 4, 500, 64, false, 0, 0, {500, 3}, DType::f16},
      // Speculative decoding: 16 rows, four row tiles per K/V head, one cache shorter than Nq + the window.
      {"gqa4_nq16_causal_window_500_0_seqused", 2, 8, 2, 16, 6000, 128, true, 500, 0, {6000, 20}, DType::bf16},
      // A window alone (no seqused_k): the forward steps with a window run it too.
      {"gqa8_nq1_window_1024_0", 2, 32, 4, 1, 8192, 128, false, 1024, 0, {}, DType::f16},
      // 400 unsplit tiles of one row whose longest cache has 8195 keys: on an H100 10b's rings with V ahead
      // of K (v_ahead counts the keys visited, the longest cache's), where the short caches give a warp
      // 0, 1, 2 or 3 tiles of 16 keys (4 warps deal them in turn) — fewer than V's lead of 2 — and NaN
      // rows past each cache that a copy of V running past n_k would put into O. Last: the seeds above stay.
      {"mha_nq1_b25_causal_short_caches_v_ahead", 25, 16, 16, 1, 8195, 128, true, -1, -1,
       {8195, 0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257, 1000, 8192},
       DType::bf16},
  };
  return c;
}

Problem problem_of(const VariantDecodeCase& c) {
  Problem p;
  p.B = c.B; p.H = c.H; p.H_kv = c.H_kv; p.Nq = c.Nq; p.Nk = c.Nk; p.d = c.d; p.causal = c.causal; p.dtype = c.t;
  p.window_left = c.left;
  p.window_right = c.right;
  p.seqused_k = c.used;
  return p;
}

struct VariantParam {
  const VariantDecodeCase* c;
  const Step* s;
  std::string splits;  // as Param::splits
};

void PrintTo(const VariantParam& x, std::ostream* os) {
  *os << x.c->name << " " << x.s->folder << (x.splits.empty() ? "" : " FLASHLADDER_SPLITS=" + x.splits);
}

std::vector<VariantParam> variant_params() {
  std::vector<VariantParam> out;
  for (const VariantDecodeCase& c : variant_cases())
    for (const Step& s : ladder()) {
      const Problem p = problem_of(c);
      if (!s.gpu() || !s.supports_d(c.d) || !s.supports_dtype(c.t) || (variants_of(p) & ~s.variants) != 0) continue;
      out.push_back({&c, &s, ""});
      for (const char* n : forced_splits(s)) out.push_back({&c, &s, n});
    }
  return out;
}

class DecodeVariants : public ::testing::TestWithParam<VariantParam> {};

TEST_P(DecodeVariants, MatchesOracle) {
  FL_NEED_GPU();
  const VariantParam& x = GetParam();
  const Step& s = *x.s;
  const SplitsEnv env(x.splits);
  const Problem p = problem_of(*x.c);
  ASSERT_EQ(s.refusal(p), "") << s.folder << " lists the variants of " << p.describe() << " but refuses it";
  const uint64_t seed = 17100 + uint64_t(x.c - variant_cases().data());
  Inputs in = make_inputs(p, seed);
  // The cache rows a sequence does not use hold NaN (an unfilled cache holds anything): the oracle
  // never reads them, and a kernel that multiplies one into O (even by P = 0) makes O NaN and fails.
  for (int64_t b = 0; b < p.B && !p.seqused_k.empty(); ++b)
    for (int64_t hk = 0; hk < p.H_kv; ++hk)
      for (int64_t j = p.seqlen_k(b); j < p.Nk; ++j)
        for (int64_t c = 0; c < p.d; ++c) {
          in.k[size_t(p.kv_row(b, hk, j) + c)] = std::numeric_limits<float>::quiet_NaN();
          in.v[size_t(p.kv_row(b, hk, j) + c)] = std::numeric_limits<float>::quiet_NaN();
        }
  const Outputs got = run_step(s, in);
  const Verdict v = verify(in, got, expected_for(in, false), false);
  ASSERT_EQ(v.checks.size(), 2u);
  for (const Check& c : v.checks)
    EXPECT_TRUE(c.pass) << s.folder << " " << p.describe() << " seed " << seed
                        << (x.splits.empty() ? "" : " FLASHLADDER_SPLITS=" + x.splits) << "\n  " << c.summary();
  std::cout << "  [" << s.folder << (x.splits.empty() ? "" : " S=" + x.splits) << "] " << x.c->name << " "
            << p.describe() << "  workspace " << s.impl->workspace_bytes(p) << " bytes  tolerance used "
            << 100 * v.tol_used << "%\n";
}

INSTANTIATE_TEST_SUITE_P(Gpu, DecodeVariants, ::testing::ValuesIn(variant_params()),
                         [](const ::testing::TestParamInfo<VariantParam>& i) {
                           return std::string(i.param.c->name) + "__" + i.param.s->folder +
                                  (i.param.splits.empty() ? "" : "_S" + i.param.splits);
                         });

// Step 10 lists the window and seqused_k, so every case above runs on it (none is skipped silently);
// the GPU steps that do not list seqused_k refuse it, naming the variant and step 10.
TEST(SplitKv, RunsTheDecodeVariantsAndOthersRefuseSeqused) {
  const Step* s = step10();
  if (!s) GTEST_SKIP() << "step 10 is not in this build (no nvcc)";
  for (const VariantDecodeCase& c : variant_cases()) EXPECT_EQ(s->why_not(problem_of(c)), "") << c.name;
  const Problem p = problem_of(variant_cases()[0]);
  for (const Step& o : ladder()) {
    if (!o.gpu() || (o.variants & kSeqused) || !o.supports_d(p.d) || !o.supports_dtype(p.dtype)) continue;
    const std::string why = o.why_not(p);
    EXPECT_NE(why.find("seqused_k"), std::string::npos) << o.folder << ": " << why;
    EXPECT_NE(why.find("10_split_kv"), std::string::npos) << o.folder << ": " << why;
  }
}

// The splits divide the keys a row tile visits, not the cache: FLASHLADDER_SPLITS is clamped to one
// split per 16 of them. A window of 100 keys at Nq = 1 visits 101 (7 splits); caches used up to 50
// keys, 4; a window larger than caches of at most 40 keys, 3; caches with no key, 1 (no workspace).
TEST(SplitKv, TheSplitsCountTheKeysVisited) {
  const Step* s = step10();
  if (!s) GTEST_SKIP() << "step 10 is not in this build (no nvcc)";
  const SplitsEnv env("100000");
  Problem p = decode_problem(3, 8, 1, 5000);
  const size_t per_split = size_t(p.lse_elems()) * size_t(p.d + 1) * 4;
  EXPECT_EQ(s->impl->workspace_bytes(p), 256 * per_split);  // the plain problem: 313 tiles, clamped to 256
  p.window_left = 100;
  p.window_right = 0;
  EXPECT_EQ(s->impl->workspace_bytes(p), 7 * per_split);
  p.window_left = p.window_right = -1;
  p.seqused_k = {50, 3, 0};
  EXPECT_EQ(s->impl->workspace_bytes(p), 4 * per_split);
  p.seqused_k = {40, 2, 1};
  p.window_left = 100000;
  p.window_right = 0;
  EXPECT_EQ(s->impl->workspace_bytes(p), 3 * per_split);
  p.seqused_k = {0, 0, 0};
  EXPECT_EQ(s->impl->workspace_bytes(p), 0u);
}

// The heuristic reads the keys visited too: a window of 4096 keys in a cache of 131072 gets at most
// the splits 4097 keys allow (16 at the 256-key floor), one of 256 keys none, where the whole cache
// gets a full wave's worth (16 on 132 SMs).
TEST(SplitKv, TheHeuristicSplitsAWindowByItsOwnKeys) {
  FL_NEED_GPU();
  const Step* s = step10();
  ASSERT_TRUE(s) << "step 10 is not in this CUDA build";
  const SplitsEnv env("");
  Problem p = decode_problem(1, 8, 1, 131072);
  const size_t per_split = size_t(p.lse_elems()) * size_t(p.d + 1) * 4;
  const size_t whole = s->impl->workspace_bytes(p) / per_split;
  p.window_left = 4096;
  p.window_right = 0;
  const size_t windowed = s->impl->workspace_bytes(p) / per_split;
  std::cout << "  " << p.describe() << ": S = " << windowed << " (the whole cache: " << whole << ")\n";
  EXPECT_LE(windowed, 16u);
  EXPECT_LE(windowed, whole);
  p.window_left = 256;
  EXPECT_EQ(s->impl->workspace_bytes(p), 0u) << p.describe();
}

// ---- Step 10b: the same splits, merged inside a cluster ----------------------------------------------
}  // namespace
}  // namespace fl::test

// 10b's heuristic, read directly (its workspace is always 0, so the splits cannot be read from it);
// weak: a build without nvcc has no 10b, and the test then skips.
namespace fl::s10b {
int splits(const Problem& p) __attribute__((weak));
int clusters_at_once(int64_t d, int size) __attribute__((weak));
bool uses_step10(const Problem& p) __attribute__((weak));
int64_t blocks_for_memory(int64_t d) __attribute__((weak));
bool eight_warps(const Problem& p, int64_t S) __attribute__((weak));
bool swapped(const Problem& p, int64_t S) __attribute__((weak));
bool one_per_sm(const Problem& p) __attribute__((weak));
bool v_ahead(const Problem& p) __attribute__((weak));
int m_tiles(const Problem& p) __attribute__((weak));
int64_t row_tiles(const Problem& p) __attribute__((weak));
}
namespace fl::s10 {
int splits_for(const Problem& p, int R) __attribute__((weak));  // step 10's S with row tiles of 16R rows
bool one_per_sm(const Problem& p) __attribute__((weak));
}

namespace fl::test {
namespace {

const Step* step10b() {
  const Step* s = find_step("10b");
  return s && s->impl && fl::s10b::splits && fl::s10b::clusters_at_once && fl::s10b::uses_step10 &&
                 fl::s10b::blocks_for_memory && fl::s10b::eight_warps && fl::s10b::m_tiles && fl::s10b::row_tiles && fl::s10::splits_for
             ? s
             : nullptr;
}

// No workspace at any S where the cluster merge runs: the partials live in shared memory. And a bad
// FLASHLADDER_SPLITS is refused by 10b as by 10 (the knob is theirs both), with a device or without.
TEST(ClusterMerge, NeedsNoWorkspaceAndRefusesABadSplitsVariable) {
  const Step* s = step10b();
  if (!s) GTEST_SKIP() << "step 10b is not in this build (no nvcc)";
  for (const char* n : {"", "1", "5", "100000"}) {
    const SplitsEnv env(n);
    // 9 clusters of 455 keys per split at most: 10b's own clusters on any GPU (uses_step10 needs > 512)
    EXPECT_EQ(s->impl->workspace_bytes(decode_problem(1, 8, 1, 4096)), 0u) << "FLASHLADDER_SPLITS=" << n;
  }
  const SplitsEnv env("4x");
  const std::string why = s->refusal(decode_problem(1, 8, 1, 4096));
  EXPECT_NE(why.find("FLASHLADDER_SPLITS"), std::string::npos) << why;
  EXPECT_NE(why.find("4x"), std::string::npos) << why;
}

// On the GPU: at most step 10's S with the same tiles (16 or 32 rows, m_tiles) and at most one cluster
// (16 on a GPU that schedules clusters of 16; fewer where the clusters would not all be resident at
// once), at least 8 where step 10 splits as much and there are at most 8 clusters (8 of the portable 8
// blocks fit any Hopper GPU; 16 of them need not: 15 fit an H100); unsplit where step 10 is; a forced S
// is clamped to the cluster too.
TEST(ClusterMerge, SplitsAreStep10sUpToOneCluster) {
  FL_NEED_GPU();
  const Step* s10 = step10();
  ASSERT_TRUE(s10 && step10b()) << "steps 10 and 10b are not in this CUDA build";
  int most = 0;  // the largest cluster: what a forced 200 splits is clamped to (16, or 8 where 16 does not fit)
  {
    const SplitsEnv forced("200");
    most = fl::s10b::splits(decode_problem(1, 8, 1, 32768));
    std::cout << "  the largest cluster of 10b's blocks on this GPU: " << most << "\n";
    EXPECT_TRUE(most == 16 || most == 8) << most;
  }
  // How many clusters of each size the device runs at once (a cluster lives in one GPC): never more
  // for a larger size, and at least one of every size up to the largest.
  std::cout << "  clusters of 10b's split blocks resident at once, by size:";
  for (int size = 1; size <= 16; ++size) {
    const int n = fl::s10b::clusters_at_once(128, size);
    std::cout << " " << size << ":" << n;
    if (size <= most) EXPECT_GE(n, 1) << "size " << size;
    if (size > 1) EXPECT_LE(n, fl::s10b::clusters_at_once(128, size - 1)) << "size " << size;
  }
  std::cout << "\n";
  const SplitsEnv env("");
  for (auto [B, H_kv, Nq, Nk] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 8, 1, 32768}, {1, 8, 4, 8192},
                                 {1, 32, 4, 131072}, {1, 32, 1, 8192}, {1, 2, 1, 65536}, {1, 1, 16, 8192},
                                 {16, 8, 1, 32768}, {64, 32, 1, 1024}}) {
    const Problem p = decode_problem(B, H_kv, Nq, Nk);
    const int R = fl::s10b::m_tiles(p);
    EXPECT_TRUE(R == 1 || R == 2) << p.describe() << ": " << R;
    const int64_t S10 = fl::s10::splits_for(p, R);
    const int S = fl::s10b::splits(p);
    EXPECT_GE(S, 1);
    EXPECT_LE(S, std::min<int64_t>(S10, most)) << p.describe();
    const int64_t tiles = B * H_kv * fl::s10b::row_tiles(p);  // clusters: one per row tile of a K/V head
    EXPECT_EQ(fl::s10b::row_tiles(p), (p.group() * Nq + 16 * R - 1) / (16 * R)) << p.describe();
    if (S10 >= 8 && tiles <= 8) EXPECT_GE(S, 8) << p.describe() << ": 8 clusters of the portable 8 blocks fit any Hopper GPU";
    if (S10 == 1) EXPECT_EQ(S, 1) << p.describe();
    if (S > 1) EXPECT_GE(fl::s10b::clusters_at_once(128, S), tiles) << p.describe() << ": every cluster resident at once";
    std::cout << "  " << p.describe() << ": 10b S = " << S << " with tiles of " << 16 * R << " rows (10: " << S10 << ")"
              << (fl::s10b::uses_step10(p) ? ", runs step 10's kernels" : "") << "\n";
  }
  // Where 10b's clusters cannot read as fast as the memory and step 10 has more blocks, on a read of over
  // 512 keys per split, 10b runs step 10's kernels, with step 10's workspace. The blocks the memory
  // needs come from its peak rate: 62 on an H100 (3.35 TB/s), 89 on an H200 (run 128).
  // B 1, H_kv 1, Nq 1 (2 tiles of 16 rows, S = 16 against step 10's 60) at Nk 32768 and 131072, not at 8192
  // (512 keys per split); H_kv 1, Nq 4 (8 row tiles of 16 reading one K/V head, S = 9; at 32768, 4 tiles of
  // 32, S = 16) at 8192 and 32768, not at 4096. Reads of 8192 keys per split or more always: H_kv 4 at
  // 131072 (S = 16), H_kv 8 at 131072 (S = 9; 8 on an H200, two_to_a_gpc), H_kv 32 at 32768 (S = 3). And
  // where it depends on the memory (`blocks`: 10b's blocks, step 10's iff the memory needs more): H_kv 4, Nq
  // 1 at 32768 (64 blocks, 2048 keys per split) and H_kv 8, Nq 1 and 4 at 32768 (72 blocks, 3641 keys):
  // 10b's own clusters on an H100, step 10's on an H200; H_kv 32, Nq 4 at 8192 (96 blocks): 10b's on both.
  // Never when FLASHLADDER_SPLITS asks for a number. Except (`eight`) where 10b's own clusters run in blocks
  // of 8 warps on an H200 (eight_warps): H_kv 8 at Nq 1 and 4, Nk 32768, and Nq 4, Nk 8192, whose 8 tiles an
  // H200 splits into clusters of 8 (64 blocks; two_to_a_gpc keeps two clusters of 9 out of one GPC), each
  // reading under 8192 keys — at Nk 131072 (16384 keys per split) step 10's kernels there; not H_kv 4 (64
  // blocks in clusters of 16); never on an H100 (its clusters of 9: 72 blocks of 4 warps).
  const Step* s10b = step10b();
  const int64_t needed = fl::s10b::blocks_for_memory(128);
  std::string not_checked;  // checks this GPU cannot judge: a skip, not a pass
  std::cout << "  blocks that keep up with this GPU's memory (10b's line for its own clusters): " << needed << "\n";
  EXPECT_GE(needed, 1);
  for (auto [H_kv, Nq, Nk, runs10, blocks, eight] :
       {std::tuple<int64_t, int64_t, int64_t, bool, int64_t, bool>{1, 1, 131072, true, 0, false},
        {1, 1, 32768, true, 0, false}, {1, 1, 8192, false, 0, false}, {1, 4, 32768, true, 0, false},
        {1, 4, 8192, true, 0, false}, {1, 4, 4096, false, 0, false}, {2, 1, 131072, true, 0, false},
        {8, 1, 131072, true, 0, false}, {8, 4, 131072, true, 0, false}, {8, 1, 32768, false, 72, true},
        {8, 4, 32768, false, 72, true}, {8, 4, 8192, false, 72, true}, {4, 1, 131072, true, 0, false},
        {4, 1, 32768, false, 64, false}, {32, 1, 32768, true, 0, false}, {32, 4, 8192, false, 96, false}}) {
    const Problem p = decode_problem(1, H_kv, Nq, Nk);
    if (most != 16) {  // the S above are those of a GPU that schedules clusters of 16 (H100, H200)
      std::cout << "  " << p.describe() << ": which kernels run not checked (largest cluster " << most << ", not 16)\n";
      not_checked = "which kernels run (largest cluster " + std::to_string(most) + ", not 16)";
      continue;
    }
    const bool eight_here = fl::s10b::eight_warps(p, fl::s10b::splits(p));
    if (needed == 89) EXPECT_EQ(eight_here, eight) << p.describe() << ": blocks of 8 warps on an H200";
    if (needed == 62) EXPECT_FALSE(eight_here) << p.describe() << ": blocks of 8 warps on an H100";
    if (needed != 89 && needed != 62) {
      std::cout << "  " << p.describe() << ": where blocks of 8 warps run not checked (memory needs " << needed
                << " blocks: neither an H100's 62 nor an H200's 89); here " << (eight_here ? "8" : "4") << " warps\n";
      not_checked = "where blocks of 8 warps run (memory needs " + std::to_string(needed) + " blocks)";
    }
    const bool expected = (blocks > 0 ? needed > blocks : runs10) && !eight_here;
    EXPECT_EQ(fl::s10b::uses_step10(p), expected) << p.describe() << " (memory needs " << needed << " blocks)";
    if (expected) {
      EXPECT_EQ(s10b->impl->workspace_bytes(p), s10->impl->workspace_bytes(p)) << p.describe();
      EXPECT_GT(s10b->impl->workspace_bytes(p), 0u) << p.describe();
    } else {
      EXPECT_EQ(s10b->impl->workspace_bytes(p), 0u) << p.describe();
    }
  }
  const Problem mqa = decode_problem(1, 1, 1, 131072);
  const SplitsEnv forced("4");
  EXPECT_FALSE(fl::s10b::uses_step10(mqa)) << mqa.describe() << " with FLASHLADDER_SPLITS=4";
  EXPECT_EQ(s10b->impl->workspace_bytes(mqa), 0u) << mqa.describe() << " with FLASHLADDER_SPLITS=4";
  if (!not_checked.empty()) GTEST_SKIP() << "not checked on this GPU: " << not_checked;
}

// On the GPU: on an H200 no GPC holds two of 10b's clusters of more than 8 blocks (two_to_a_gpc): at B 1,
// H_kv 8 (8 tiles of 16 rows) the residency rule's S = 9 would put two clusters of 9 in one GPC (7 GPCs
// hold a cluster of 16), which streams 12-18% slower on some H200s (runs 210-226), so S = 8 there, in
// blocks of 8 warps below 8192 keys per split (Nk 32768: 4096) and step 10's kernels from 8192 on
// (Nk 131072). A forced S = 9 stays 9 (the benchmark's A/B); an H100 keeps its clusters of 9; H_kv 4 (4
// clusters of 16, one per GPC) and H_kv 32 (32 clusters of 3) are not held.
TEST(ClusterMerge, NoGpcHoldsTwoClustersOfNineOnAnH200) {
  FL_NEED_GPU();
  ASSERT_TRUE(step10b()) << "step 10b is not in this CUDA build";
  const SplitsEnv env("");
  const int64_t needed = fl::s10b::blocks_for_memory(128);
  const bool h200_like = needed == 89 && fl::s10b::clusters_at_once(128, 16) == 7 && fl::s10b::clusters_at_once(128, 9) >= 8;
  const bool h100_like = needed == 62 && fl::s10b::clusters_at_once(128, 16) == 7 && fl::s10b::clusters_at_once(128, 9) >= 8;
  if (!h200_like && !h100_like)
    GTEST_SKIP() << "neither an H200 nor an H100 (memory needs " << needed << " blocks; clusters of 16 resident: "
                 << fl::s10b::clusters_at_once(128, 16) << ")";
  for (auto [Nq, Nk] : {std::pair<int64_t, int64_t>{1, 32768}, {4, 32768}, {4, 8192}, {1, 131072}}) {
    const Problem p = decode_problem(1, 8, Nq, Nk);
    ASSERT_EQ(fl::s10b::row_tiles(p), 1) << p.describe();
    const int S = fl::s10b::splits(p);
    EXPECT_EQ(S, h200_like ? 8 : 9) << p.describe();
    if (h200_like) {
      EXPECT_EQ(fl::s10b::eight_warps(p, S), Nk / S < 8192) << p.describe();
      EXPECT_EQ(fl::s10b::uses_step10(p), Nk / S >= 8192) << p.describe();
    }
    std::cout << "  " << p.describe() << ": S = " << S << (fl::s10b::uses_step10(p) ? ", step 10's kernels" : "")
              << (fl::s10b::eight_warps(p, S) ? ", blocks of 8 warps" : "") << "\n";
  }
  EXPECT_EQ(fl::s10b::splits(decode_problem(1, 4, 1, 32768)), 16);  // 4 clusters of 16: one per GPC
  EXPECT_EQ(fl::s10b::splits(decode_problem(1, 32, 1, 8192)), 3);
  const SplitsEnv forced("9");
  EXPECT_EQ(fl::s10b::splits(decode_problem(1, 8, 1, 32768)), 9) << "with FLASHLADDER_SPLITS=9";
  EXPECT_FALSE(fl::s10b::uses_step10(decode_problem(1, 8, 1, 131072))) << "with FLASHLADDER_SPLITS=9";
}

// On the GPU: steps 10 and 10b ask for one block per SM exactly where the grid is unsplit, of 16-row
// tiles, at d = 128, with at least three blocks per SM: B 16 and 64 at H_kv 32 and B 64 at H_kv 8 (512
// and 2048 tiles), not B 16 at H_kv 8 (128 tiles), not a split grid (B 1), not d = 64, not 32-row tiles,
// not with FLASHLADDER_SPLITS asking for splits. On an H100 10b's reads of fewer than 8192 keys a tile
// share an SM (B 64, H_kv 32, Nk 1024, run 292); step 10's, and an H200's, do not.
TEST(SplitKv, ManyUnsplitTilesOf16RowsRunOneBlockPerSm) {
  FL_NEED_GPU();
  ASSERT_TRUE(step10() && step10b() && fl::s10::one_per_sm && fl::s10b::one_per_sm)
      << "steps 10 and 10b are not in this CUDA build";
  FL_HEURISTIC_GPU(sms);  // 128 tiles unsplit needs at most 142 SMs
  const SplitsEnv env("");
  auto with_d = [](Problem p, int64_t d) { p.d = d; return p; };
  for (auto [p, tiles] : {std::pair<Problem, int64_t>{decode_problem(16, 32, 1, 8192), 512},
                          {decode_problem(64, 32, 4, 8192), 2048}, {decode_problem(64, 8, 1, 131072), 512},
                          {decode_problem(16, 8, 1, 8192), 128}}) {
    const bool expected = tiles >= 3 * int64_t(sms);
    EXPECT_EQ(fl::s10::one_per_sm(p), expected) << p.describe() << ": " << tiles << " tiles on " << sms << " SMs";
    EXPECT_EQ(fl::s10b::one_per_sm(p), expected) << p.describe() << ": " << tiles << " tiles on " << sms << " SMs";
    std::cout << "  " << p.describe() << ": " << tiles << " tiles on " << sms << " SMs, "
              << (expected ? "one block per SM" : "two blocks per SM") << "\n";
  }
  for (const Problem& p : {decode_problem(1, 8, 1, 32768), with_d(decode_problem(16, 32, 1, 8192), 64),
                           decode_problem(16, 1, 16, 8192)}) {
    EXPECT_FALSE(fl::s10::one_per_sm(p)) << p.describe();
    EXPECT_FALSE(fl::s10b::one_per_sm(p)) << p.describe();
  }
  const Problem short_reads = decode_problem(64, 32, 1, 1024);  // 2048 tiles of 1024 keys
  EXPECT_EQ(fl::s10::one_per_sm(short_reads), 2048 >= 3 * int64_t(sms)) << short_reads.describe();
  const int64_t needed = fl::s10b::blocks_for_memory(128);
  if (needed == 62) EXPECT_FALSE(fl::s10b::one_per_sm(short_reads)) << short_reads.describe() << " on an H100";
  if (needed == 89) EXPECT_TRUE(fl::s10b::one_per_sm(short_reads)) << short_reads.describe() << " on an H200";
  const SplitsEnv forced("2");
  EXPECT_FALSE(fl::s10::one_per_sm(decode_problem(16, 32, 1, 8192))) << "with FLASHLADDER_SPLITS=2";
  EXPECT_FALSE(fl::s10b::one_per_sm(decode_problem(16, 32, 1, 8192))) << "with FLASHLADDER_SPLITS=2";
}

// On the GPU: 10b runs an unsplit grid in blocks of 8 warps where it is one block per SM (three waves or
// more) and its last wave is at most 0.6 full, on a memory of 4 TB/s or more, with 8192 keys or more:
// on an H200 (132 SMs; its memory needs 89 blocks of 4 warps) at H_kv 32, Nq 1, Nk 8192 B 34 (1088
// tiles, the last wave 0.24 full), B 35 (0.48) and B 64 (2048 tiles, 0.52), and Nq 4 at B 64, Nk 32768;
// not B 33 (full), B 36 (0.73), B 37 (0.97), B 16 (512 tiles, 0.88), nor B 64 at Nk 4096 (fewer keys
// than measured) or at d 64, nor with FLASHLADDER_SPLITS asking for splits. Never on an H100.
TEST(ClusterMerge, UnsplitGridsWithAMostlyEmptyLastWaveRunEightWarps) {
  FL_NEED_GPU();
  ASSERT_TRUE(step10b() && fl::s10b::one_per_sm) << "step 10b is not in this CUDA build";
  FL_HEURISTIC_GPU(sms);
  const SplitsEnv env("");
  const int64_t needed = fl::s10b::blocks_for_memory(128);
  bool judged = true;  // false: this GPU is neither an H200 nor an H100, and the 8-warp rule went unchecked
  auto with_d = [](Problem p, int64_t d) { p.d = d; return p; };
  for (auto [p, eight] : {std::pair<Problem, bool>{decode_problem(34, 32, 1, 8192), true},
                          {decode_problem(35, 32, 1, 8192), true}, {decode_problem(64, 32, 1, 8192), true},
                          {decode_problem(64, 32, 4, 32768), true}, {decode_problem(50, 8, 4, 8192), true},
                          {decode_problem(33, 32, 1, 8192), false},
                          {decode_problem(36, 32, 1, 8192), false}, {decode_problem(37, 32, 1, 8192), false},
                          {decode_problem(16, 32, 1, 8192), false}, {decode_problem(64, 32, 1, 4096), false},
                          {with_d(decode_problem(64, 32, 1, 8192), 64), false}}) {
    ASSERT_EQ(fl::s10b::splits(p), 1) << p.describe();
    const bool here = fl::s10b::eight_warps(p, 1);
    const int64_t tiles = p.B * p.H_kv * fl::s10b::row_tiles(p);
    if (sms == 132 && needed == 89) {
      EXPECT_EQ(here, eight) << p.describe() << ": " << tiles << " tiles on an H200's 132 SMs";
    } else if (needed == 62) {
      EXPECT_FALSE(here) << p.describe() << ": blocks of 8 warps on an H100";
    } else {
      std::cout << "  " << p.describe() << ": not checked (" << sms << " SMs, memory needs " << needed
                << " blocks: neither an H200 nor an H100); here " << (here ? "8" : "4") << " warps\n";
      judged = false;
    }
    if (here) EXPECT_TRUE(fl::s10b::one_per_sm(p)) << p.describe();
    EXPECT_FALSE(fl::s10b::uses_step10(p)) << p.describe();
  }
  const SplitsEnv forced("2");
  const Problem p = decode_problem(64, 32, 1, 8192);
  EXPECT_FALSE(fl::s10b::eight_warps(p, fl::s10b::splits(p))) << p.describe() << " with FLASHLADDER_SPLITS=2";
  if (!judged) GTEST_SKIP() << "where blocks of 8 warps run: not checked on this GPU (" << sms << " SMs, memory needs "
                            << needed << " blocks)";
}

// On the GPU: 10b copies V_j two warp tiles ahead of K_j (v_ahead()) where an H100 runs an unsplit grid
// one block per SM (one_per_sm) that reads 8192 keys or more a tile: B 16 and 64 at H_kv 32, B 64 at
// H_kv 8, Nq 1 and 4, Nk 8192 to 131072, and the three decode cases above that take those kernels (B 25,
// 16 K/V heads, Nq 1, 8195 keys: swapped; the same with short caches; B 50, H_kv 8, Nq 4: 16 rows, not
// swapped). Not at Nk 4096,
// nor B 16 at H_kv 8 (128 tiles: blocks share an SM), nor a split grid (B 1), nor d 64, nor a window of
// 4096 keys in a cache of 32768 (keys visited, not held), nor with FLASHLADDER_SPLITS asking for splits;
// and never on an H200, whose unsplit grids copy after the wait (step 10's deep_memory).
TEST(ClusterMerge, LongUnsplitReadsOnAnH100CopyVAheadOfK) {
  FL_NEED_GPU();
  ASSERT_TRUE(step10b() && fl::s10b::one_per_sm && fl::s10b::v_ahead) << "step 10b is not in this CUDA build";
  FL_HEURISTIC_GPU(sms);
  const SplitsEnv env("");
  const int64_t needed = fl::s10b::blocks_for_memory(128);
  const bool h100 = sms == 132 && needed == 62, h200 = sms == 132 && needed == 89;
  auto with_d = [](Problem p, int64_t d) { p.d = d; return p; };
  auto windowed = [](Problem p) { p.window_left = 4096; p.window_right = 0; return p; };
  auto decode_case = [](const char* name) {
    for (const DecodeCase& c : decode_cases())
      if (std::string(c.name) == name) return problem_of(c);
    ADD_FAILURE() << "no decode case " << name;
    return Problem{};
  };
  auto variant_case = [](const char* name) {
    for (const VariantDecodeCase& c : variant_cases())
      if (std::string(c.name) == name) return problem_of(c);
    ADD_FAILURE() << "no decode variant case " << name;
    return Problem{};
  };
  for (auto [p, ahead] : {std::pair<Problem, bool>{decode_problem(16, 32, 1, 8192), true},
                          {decode_problem(16, 32, 4, 131072), true}, {decode_problem(64, 32, 4, 32768), true},
                          {decode_problem(64, 8, 1, 131072), true}, {decode_problem(64, 8, 4, 8192), true},
                          {decode_case("mha_nq1_b25_nk8195_causal_eight_warp_last_wave"), true},
                          {decode_case("gqa4_nq4_b50_nk8195_causal_eight_warp_last_wave"), true},
                          {variant_case("mha_nq1_b25_causal_short_caches_v_ahead"), true},
                          {decode_problem(64, 32, 1, 4096), false}, {decode_problem(16, 8, 1, 8192), false},
                          {decode_problem(1, 32, 1, 131072), false}, {with_d(decode_problem(64, 32, 1, 8192), 64), false},
                          {windowed(decode_problem(64, 32, 1, 32768)), false}}) {
    const bool here = fl::s10b::v_ahead(p);
    if (h100) {
      EXPECT_EQ(here, ahead) << p.describe() << " on an H100";
    } else if (h200) {
      EXPECT_FALSE(here) << p.describe() << ": V ahead of K on an H200";
    } else {
      std::cout << "  " << p.describe() << ": not checked (" << sms << " SMs, memory needs " << needed
                << " blocks: neither an H200 nor an H100); here " << (here ? "V ahead" : "in step") << "\n";
    }
    if (here) EXPECT_TRUE(fl::s10b::one_per_sm(p) && fl::s10b::splits(p) == 1) << p.describe();
  }
  const SplitsEnv forced("2");
  EXPECT_FALSE(fl::s10b::v_ahead(decode_problem(16, 32, 1, 8192))) << "with FLASHLADDER_SPLITS=2";
  if (!h100 && !h200)
    GTEST_SKIP() << "where V is copied ahead of K: not checked on this GPU (" << sms << " SMs, memory needs "
                 << needed << " blocks)";
}

// On the GPU: 10b transposes its product (keys on the MMA's 16-row side, swapped()) exactly where a
// K/V head's packed rows are 8 or fewer in one 16-row tile: decoding with 4 or 8 query heads per K/V
// head at Nq 1, 4 at Nq 2, one at Nq 7; split or not. Not 16 rows (4 heads × Nq 4), not where the tiles
// have 32 rows, and not in deep_clusters()' ring (B 1, H_kv 32, Nq 1, Nk 8192: 4-warp clusters of 3 on a
// memory of 4 TB/s or more, where it was slower in run 245); on an H100 that problem is swapped.
TEST(ClusterMerge, TilesOfAtMostEightRowsAreSwapped) {
  FL_NEED_GPU();
  ASSERT_TRUE(step10b() && fl::s10b::swapped) << "step 10b is not in this CUDA build";
  const SplitsEnv env("");
  auto with_d = [](Problem p, int64_t d) { p.d = d; return p; };
  auto swapped = [](const Problem& p) { return fl::s10b::swapped(p, fl::s10b::splits(p)); };
  // More than 8 packed rows: never, on any GPU.
  for (const Problem& p : {decode_problem(1, 8, 4, 32768), decode_problem(1, 8, 3, 8192), decode_problem(16, 8, 4, 8192),
                           decode_problem(1, 1, 1, 8192)})
    EXPECT_FALSE(swapped(p)) << p.describe() << " (" << p.group() * p.Nq << " packed rows a K/V head)";
  // 8 or fewer: always, except in deep_clusters()' ring, whose reach depends on the GPU's memory and clusters;
  // judged on an H200 (its memory needs 89 blocks) and an H100 (62).
  const int64_t needed = fl::s10b::blocks_for_memory(128);
  if (needed != 89 && needed != 62)
    GTEST_SKIP() << "tiles of 8 rows or fewer not judged: the memory needs " << needed
                 << " blocks, neither an H200's 89 nor an H100's 62";
  for (const Problem& p : {decode_problem(1, 8, 1, 32768), decode_problem(1, 8, 1, 8192), decode_problem(16, 8, 1, 32768),
                           decode_problem(64, 32, 1, 8192), decode_problem(1, 4, 1, 8192), decode_problem(1, 16, 2, 8192),
                           decode_problem(1, 32, 7, 4096), with_d(decode_problem(1, 8, 1, 32768), 64)})
    EXPECT_TRUE(swapped(p)) << p.describe() << " (" << p.group() * p.Nq << " packed rows a K/V head)";
  const Problem deep = decode_problem(1, 32, 1, 8192);  // one row a K/V head
  if (needed == 89) EXPECT_FALSE(swapped(deep)) << deep.describe() << ": deep_clusters' ring on an H200";
  if (needed == 62) EXPECT_TRUE(swapped(deep)) << deep.describe() << " on an H100";
  const SplitsEnv forced("16");  // 512 keys a split: no deeper ring, so swapped on any GPU
  EXPECT_TRUE(swapped(deep)) << deep.describe() << " with FLASHLADDER_SPLITS=16";
}

}  // namespace
}  // namespace fl::test

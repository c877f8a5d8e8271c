// flashladder — tests/test_ring_plan.cpp: step 11's plan (steps/11_ring_attention/plan.hpp) on the CPU:
// over all ranks and ring steps, every (query, key) position pair that the causal mask lets through is
// computed exactly once and no masked pair is; zigzag balances the causal work and contiguous does not;
// a sequence that does not split is refused with the limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "steps/11_ring_attention/plan.hpp"

namespace fl::ring {
namespace {

Problem prob(int64_t N, bool causal) {
  Problem p;
  p.B = 1; p.H = 2; p.H_kv = 1; p.Nq = p.Nk = N; p.d = 64; p.causal = causal;
  return p;
}

// Marks every (i, j) a pair covers (full: all; diagonal: j <= i within the chunk) and counts.
void expect_exact_cover(const Plan& P) {
  const int64_t N = P.p.Nq;
  std::vector<int> seen(size_t(N * N), 0);
  std::vector<int64_t> owner(size_t(N), -1);
  for (int r = 0; r < P.G; ++r)
    for (int i = 0; i < P.slots(); ++i) {
      const int c = P.chunk_of(r, i);
      for (int64_t x = 0; x < P.len[size_t(c)]; ++x) {
        ASSERT_EQ(owner[size_t(P.start[size_t(c)] + x)], -1) << "position held twice";
        owner[size_t(P.start[size_t(c)] + x)] = r;
      }
    }
  for (int64_t x = 0; x < N; ++x) ASSERT_GE(owner[size_t(x)], 0) << "position " << x << " held by no rank";
  for (int r = 0; r < P.G; ++r)
    for (int s = 0; s < P.G; ++s)
      for (const Pair& x : P.pairs(r, s)) {
        EXPECT_EQ(x.q_chunk, P.chunk_of(r, x.q_slot));
        EXPECT_EQ(x.k_chunk, P.chunk_of(P.origin(r, s), x.k_slot));
        const Problem pp = P.pair_problem(x);
        EXPECT_EQ(pp.causal, x.kind == Kind::diagonal);
        if (x.kind == Kind::diagonal) {
          EXPECT_EQ(pp.Nq, pp.Nk);
        }
        const int64_t q0 = P.start[size_t(x.q_chunk)], k0 = P.start[size_t(x.k_chunk)];
        for (int64_t a = 0; a < pp.Nq; ++a)
          for (int64_t b = 0; b < pp.Nk; ++b)
            if (pp.visible(a, b)) ++seen[size_t((q0 + a) * N + k0 + b)];
      }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j)
      ASSERT_EQ(seen[size_t(i * N + j)], P.p.visible(i, j) ? 1 : 0)
          << "query " << i << ", key " << j << " on " << P.G << " ranks, " << layout_name(P.layout);
}

TEST(RingPlan, EveryVisiblePairExactlyOnce) {
  for (Layout l : {Layout::contiguous, Layout::zigzag})
    for (int G : {1, 2, 3, 4, 8})
      for (int64_t N : {16, 17, 97, 130})
        for (bool causal : {false, true}) {
          Plan P;
          ASSERT_EQ(make_plan(prob(N, causal), G, l, &P), "");
          expect_exact_cover(P);
        }
}

TEST(RingPlan, ChunksSplitTheSequenceNearlyEvenly) {
  Plan P;
  ASSERT_EQ(make_plan(prob(1001, true), 2, Layout::zigzag, &P), "");
  EXPECT_EQ(P.len, (std::vector<int64_t>{251, 250, 250, 250}));
  EXPECT_EQ(P.start, (std::vector<int64_t>{0, 251, 501, 751}));
  EXPECT_EQ(P.chunk_of(0, 1), 3);
  EXPECT_EQ(P.chunk_of(1, 1), 2);
  EXPECT_EQ(P.q_elems(0), 2 * (251 + 250) * 64);
  EXPECT_EQ(P.kv_elems(1), 1 * (250 + 250) * 64);
  EXPECT_EQ(P.kv_slot_offset(0, 1), 251 * 64);
  EXPECT_EQ(P.lse_slot_offset(0, 1), 512);  // B·H·251 = 502 floats, padded to a multiple of 32
  EXPECT_EQ(P.lse_elems(0), 512 + 512);
}

TEST(RingPlan, ZigzagBalancesCausalWorkContiguousDoesNot) {
  for (int G : {2, 4, 8}) {
    for (Layout l : {Layout::contiguous, Layout::zigzag}) {
      Plan P;
      ASSERT_EQ(make_plan(prob(4096, true), G, l, &P), "");
      std::vector<double> total(size_t(G), 0);
      for (int r = 0; r < G; ++r)
        for (int s = 0; s < G; ++s) total[size_t(r)] += P.work(r, s);
      const double lo = *std::min_element(total.begin(), total.end()), hi = *std::max_element(total.begin(), total.end());
      if (l == Layout::zigzag) {
        EXPECT_EQ(lo, hi) << G << " ranks";
      } else {
        EXPECT_NEAR(hi / lo, 2.0 * G - 1, 1e-9) << G << " ranks: rank G−1 does 2G−1 times rank 0's work";
      }
      // Zigzag: every step but the first costs every rank the same (two full chunk pairs).
      if (l == Layout::zigzag) {
        for (int s = 1; s < G; ++s)
          for (int r = 0; r < G; ++r) EXPECT_EQ(P.work(r, s), P.work(0, s));
      }
    }
  }
}

TEST(RingPlan, RefusesWhatDoesNotSplit) {
  Plan P;
  std::string why = make_plan(prob(3, true), 2, Layout::zigzag, &P);
  EXPECT_NE(why.find("does not split"), std::string::npos) << why;
  EXPECT_NE(why.find("at least 2·G = 4"), std::string::npos) << why;
  EXPECT_EQ(make_plan(prob(4, true), 2, Layout::zigzag, &P), "");
  EXPECT_EQ(make_plan(prob(2, true), 2, Layout::contiguous, &P), "");
  Problem p = prob(64, false);
  p.Nk = 65;
  why = make_plan(p, 2, Layout::contiguous, &P);
  EXPECT_NE(why.find("needs Nq = Nk"), std::string::npos) << why;
  why = make_plan(prob(64, false), 0, Layout::contiguous, &P);
  EXPECT_NE(why.find("at least 1"), std::string::npos) << why;
}

}  // namespace
}  // namespace fl::ring

// flashladder — tests/test_ring_plan.cpp: step 11's plan (steps/11_ring_attention/plan.hpp) on the CPU:
// over all ranks and ring steps (and over the backward's phases), every (query, key) position pair that
// the causal mask lets through is computed exactly once and no masked pair is; the backward's order
// ("own keys last") brings every dK, dV contribution to its owner exactly once; zigzag balances the causal work and contiguous does not;
// a sequence that does not split is refused with the limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "steps/11_ring_attention/plan.hpp"

namespace fl::ring {
namespace {

Problem prob(int64_t N, bool causal) {
  Problem p;
  p.B = 1; p.H = 2; p.H_kv = 1; p.Nq = p.Nk = N; p.d = 64; p.causal = causal;
  return p;
}

// A pair as computed by a rank with the K, V of an origin.
struct Done {
  int r, origin;
  Pair x;
};
std::vector<Done> forward_order(const Plan& P) {
  std::vector<Done> out;
  for (int r = 0; r < P.G; ++r)
    for (int s = 0; s < P.G; ++s)
      for (const Pair& x : P.pairs(r, s)) out.push_back({r, P.origin(r, s), x});
  return out;
}
std::vector<Done> backward_order(const Plan& P) {
  std::vector<Done> out;
  for (int r = 0; r < P.G; ++r)
    for (const Phase& ph : P.backward_phases(r))
      for (const Pair& x : ph.pairs) out.push_back({r, ph.origin, x});
  return out;
}

// The position of key row b of origin o's K (its slots' rows one after the other, in every head).
int64_t key_position(const Plan& P, int o, int64_t b) {
  for (int j = 0; j < P.slots(); ++j) {
    const int c = P.chunk_of(o, j);
    if (b < P.len[size_t(c)]) return P.start[size_t(c)] + b;
    b -= P.len[size_t(c)];
  }
  return -1;
}

// Marks every (i, j) a pair covers (the step's own visibility on the keys it uses) and counts.
void expect_exact_cover(const Plan& P, const std::vector<Done>& done) {
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
  for (const Done& at : done) {
    const Pair& x = at.x;
    EXPECT_EQ(x.q_chunk, P.chunk_of(at.r, x.q_slot));
    EXPECT_EQ(x.origin, at.origin);
    ASSERT_GE(x.k_slots, 1);
    ASSERT_LE(x.k_slots, P.slots());
    const Problem pp = P.pair_problem(x);
    const int64_t used = P.pair_keys(x);
    EXPECT_EQ(pp.Nq, P.len[size_t(x.q_chunk)]);
    EXPECT_EQ(pp.Nk, P.kv_rows(x.origin));  // the K, V tensor in hand, whole
    // seqused_k exactly when the pair uses fewer rows than the tensor holds, and then = those rows.
    if (used < pp.Nk) {
      EXPECT_EQ(pp.seqused_k, std::vector<int32_t>(size_t(pp.B), int32_t(used)));
    } else {
      EXPECT_TRUE(pp.seqused_k.empty());
    }
    EXPECT_EQ(pp.invalid_reason(), "");
    EXPECT_EQ(pp.causal, x.kind == Kind::causal);
    // The step's bottom-right mask is "key ≤ query" only when the last key slot is the query chunk.
    if (x.kind == Kind::causal) {
      EXPECT_EQ(P.chunk_of(x.origin, x.k_slots - 1), x.q_chunk);
    }
    Problem used_only = pp;  // the keys the step reads: the first `used` rows
    used_only.Nk = used;
    used_only.seqused_k.clear();
    const int64_t q0 = P.start[size_t(x.q_chunk)];
    for (int64_t a = 0; a < pp.Nq; ++a)
      for (int64_t b = 0; b < used; ++b)
        if (used_only.visible(a, b)) ++seen[size_t((q0 + a) * N + key_position(P, x.origin, b))];
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
          expect_exact_cover(P, forward_order(P));
          expect_exact_cover(P, backward_order(P));
        }
}

// The backward's phases ("own keys last", plan.hpp), simulated on the CPU for every rank at once: the
// phases run in lockstep (transfer k beside compute k, as ring.cu's events order them), and each sum of
// dK, dV is followed as the list of pairs (rank, query chunk, key chunk) added into it. Checked: the
// phases of a rank are the own pairs split into A and B plus the ring steps 1 … G − 1; every send meets
// the receive of the next rank (same origin); a rank sends only the K|V it holds and a sum it finished
// at an earlier phase; a received buffer holds nothing still needed; and at the end every rank's dK, dV
// hold each pair with one of its key chunks exactly once, and no sum is left anywhere else.
void expect_backward_schedule(const Plan& P) {
  const int G = P.G;
  const std::string where = std::to_string(G) + " ranks, " + layout_name(P.layout) + ", N " + std::to_string(P.p.Nq) +
                            (P.p.causal ? " causal" : "");
  std::vector<std::vector<Phase>> ph(static_cast<size_t>(G));
  for (int r = 0; r < G; ++r) ph[size_t(r)] = P.backward_phases(r);
  const size_t K = G == 1 ? 1 : size_t(G) + 1;
  for (int r = 0; r < G; ++r) {
    ASSERT_EQ(ph[size_t(r)].size(), K) << where;
    if (G == 1) {
      EXPECT_EQ(ph[0][0].dkv, DkvRole::local);
      EXPECT_FALSE(ph[0][0].moves());
      EXPECT_EQ(ph[0][0].pairs.size(), P.pairs(0, 0).size());
      continue;
    }
    const std::vector<Phase>& x = ph[size_t(r)];
    // A and B: the own pairs, split by own_part_a, in their order; at most one pair in each (ring.cu
    // keeps one partial for A and adds one of B's at the end).
    std::vector<Pair> a, b;
    for (const Pair& p : P.pairs(r, 0)) (P.own_part_a(p) ? a : b).push_back(p);
    ASSERT_EQ(x[0].pairs.size(), a.size()) << where;
    ASSERT_EQ(x[size_t(G)].pairs.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(x[0].pairs[i].q_slot, a[i].q_slot);
    for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(x[size_t(G)].pairs[i].q_slot, b[i].q_slot);
    for (size_t k : {size_t(0), size_t(G)}) {
      EXPECT_LE(x[k].pairs.size(), 1u) << where << ", rank " << r;
      EXPECT_EQ(x[k].origin, r);
    }
    EXPECT_EQ(x[0].dkv, DkvRole::keep);
    EXPECT_EQ(x[size_t(G)].dkv, DkvRole::finish);
    for (int s = 1; s < G; ++s) {
      EXPECT_EQ(x[size_t(s)].origin, P.origin(r, s));
      EXPECT_EQ(x[size_t(s)].pairs.size(), P.pairs(r, s).size());
      EXPECT_EQ(x[size_t(s)].dkv, s == 1 ? DkvRole::start : DkvRole::add);
    }
    // Causal zigzag: A is chunk r's diagonal (the first key slot), B chunk 2G−1−r on both key slots
    // (all of chunk r, then its own diagonal).
    if (P.p.causal && P.layout == Layout::zigzag) {
      ASSERT_EQ(a.size(), 1u);
      ASSERT_EQ(b.size(), 1u);
      EXPECT_TRUE(a[0].kind == Kind::causal && a[0].k_slots == 1 && a[0].q_slot == 0);
      EXPECT_TRUE(b[0].kind == Kind::causal && b[0].k_slots == 2 && b[0].q_slot == 1);
    }
    if (P.layout == Layout::contiguous) {
      EXPECT_TRUE(a.empty());
    }
  }
  using Sum = std::vector<std::array<int, 3>>;  // (rank, query chunk, key slots used) of each pair added
  struct Held {
    int origin = -1;  // −1: the buffer holds nothing still needed
    Sum sum;
    int done_at = -1;  // the phase whose compute finished it
  };
  std::vector<std::array<Held, 2>> buf(static_cast<size_t>(G));  // each rank's two dK|dV buffers
  std::vector<Sum> kept(static_cast<size_t>(G)), final_sum(static_cast<size_t>(G));
  std::vector<bool> finished(size_t(G), false);
  // The K|V of each rank's two travel buffers (ring.cu: phase k ≥ 1 reads travel[k mod 2], and the
  // transfer beside phase k receives into the other one, which phase k − 1 read; −1: empty).
  std::vector<std::array<int, 2>> travel(static_cast<size_t>(G), {-1, -1});
  std::vector<int> in(size_t(G), -1);  // the buffer a sum arrived in at this phase (−1: none)
  for (size_t k = 0; k < K; ++k) {
    // Transfers k: every send of rank r meets the receive of r + 1.
    std::vector<Held> sent(static_cast<size_t>(G));
    std::vector<int> kv_sent(size_t(G), -1);
    for (int r = 0; r < G; ++r) {
      const Phase& x = ph[size_t(r)][k];
      const Phase& y = ph[size_t((r + 1) % G)][k];
      EXPECT_EQ(x.kv_send, y.kv_recv) << where << ", phase " << k << ", rank " << r << " → " << (r + 1) % G;
      EXPECT_EQ(x.dkv_send, y.dkv_recv) << where << ", phase " << k << ", rank " << r << " → " << (r + 1) % G;
      if (x.kv_send >= 0) {
        const int held = x.origin == r ? r : travel[size_t(r)][k % 2];  // the K|V that phase k computes with
        EXPECT_EQ(x.kv_send, held) << where << ": rank " << r << " sends a K|V it does not hold";
        kv_sent[size_t(r)] = x.kv_send;
      }
      if (x.dkv_send >= 0) {
        ASSERT_GE(k, 1u);
        Held& h = buf[size_t(r)][size_t(Phase::dkv_buffer(int(k) - 1))];
        ASSERT_EQ(h.origin, x.dkv_send) << where << ", phase " << k << ": rank " << r << " sends a sum it does not hold";
        ASSERT_LT(h.done_at, int(k)) << where;  // finished by an earlier compute (transfer k waits for k − 1)
        sent[size_t(r)] = h;
        h = Held{};
      }
    }
    for (int r = 0; r < G; ++r) {
      const int from = (r + G - 1) % G;
      const Phase& x = ph[size_t(r)][k];
      in[size_t(r)] = -1;
      if (x.kv_recv >= 0) travel[size_t(r)][(k + 1) % 2] = kv_sent[size_t(from)];
      if (x.dkv_recv >= 0) {
        Held& h = buf[size_t(r)][size_t(Phase::dkv_buffer(int(k)))];
        ASSERT_EQ(h.origin, -1) << where << ", phase " << k << ": rank " << r << " receives over a sum still needed";
        h = sent[size_t(from)];
        h.done_at = -1;
        in[size_t(r)] = Phase::dkv_buffer(int(k));
      }
    }
    // Computes k.
    for (int r = 0; r < G; ++r) {
      const Phase& x = ph[size_t(r)][k];
      if (x.origin != r) {  // a travelling K|V: it arrived at the previous phase's transfer
        ASSERT_GE(k, 1u);
        EXPECT_EQ(ph[size_t(r)][k - 1].kv_recv, x.origin) << where;
        EXPECT_EQ(travel[size_t(r)][k % 2], x.origin) << where;
      }
      Sum mine;
      for (const Pair& p : x.pairs) {
        EXPECT_EQ(p.origin, x.origin);
        mine.push_back({r, p.q_chunk, p.k_slots});
      }
      switch (x.dkv) {
        case DkvRole::local:
          final_sum[size_t(r)] = mine;
          finished[size_t(r)] = true;
          break;
        case DkvRole::keep:
          kept[size_t(r)] = mine;
          break;
        case DkvRole::start: {
          Held& h = buf[size_t(r)][size_t(Phase::dkv_buffer(int(k)))];
          ASSERT_EQ(h.origin, -1) << where << ": rank " << r << " starts a sum over one still needed";
          ASSERT_EQ(x.dkv_recv, -1) << where;
          h = Held{x.origin, mine, int(k)};
          break;
        }
        case DkvRole::add: {
          ASSERT_EQ(in[size_t(r)], Phase::dkv_buffer(int(k))) << where << ": rank " << r << ", phase " << k;
          Held& h = buf[size_t(r)][size_t(in[size_t(r)])];
          ASSERT_EQ(h.origin, x.origin) << where;
          h.sum.insert(h.sum.end(), mine.begin(), mine.end());
          h.done_at = int(k);
          break;
        }
        case DkvRole::finish: {
          ASSERT_EQ(in[size_t(r)], Phase::dkv_buffer(int(k))) << where;
          Held& h = buf[size_t(r)][size_t(in[size_t(r)])];
          ASSERT_EQ(h.origin, r) << where << ": rank " << r << " receives another rank's sum as its own";
          final_sum[size_t(r)] = h.sum;
          final_sum[size_t(r)].insert(final_sum[size_t(r)].end(), kept[size_t(r)].begin(), kept[size_t(r)].end());
          final_sum[size_t(r)].insert(final_sum[size_t(r)].end(), mine.begin(), mine.end());
          finished[size_t(r)] = true;
          h = Held{};
          break;
        }
      }
    }
  }
  // Every rank's dK, dV: each pair on its keys, from whichever rank computed it, once.
  const std::vector<Done> all = backward_order(P);
  for (int r = 0; r < G; ++r) {
    EXPECT_TRUE(finished[size_t(r)]) << where << ": rank " << r << " never finished its dK, dV";
    Sum want;
    for (const Done& d : all)
      if (d.origin == r) want.push_back({d.r, d.x.q_chunk, d.x.k_slots});
    Sum got = final_sum[size_t(r)];
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << where << ": rank " << r << "'s dK, dV";
    for (const Held& h : buf[size_t(r)]) EXPECT_EQ(h.origin, -1) << where << ": a sum left behind on rank " << r;
  }
}

TEST(RingPlan, BackwardOwnKeysLastBringsEverySumHomeOnce) {
  for (Layout l : {Layout::contiguous, Layout::zigzag})
    for (int G : {1, 2, 3, 4, 5, 8})
      for (int64_t N : {16, 17, 97, 130})
        for (bool causal : {false, true}) {
          Plan P;
          ASSERT_EQ(make_plan(prob(N, causal), G, l, &P), "");
          expect_backward_schedule(P);
        }
}

TEST(RingPlan, BackwardPhasesOnTwoRanks) {
  // Zigzag, causal, G = 2, rank 0 (chunks 0 and 3, keys in rows 0–250 and 251–500 of each head):
  // A = chunk 0 on the first key slot (its diagonal) beside the first K|V; step 1 = chunk 3 on both of
  // rank 1's slots (chunks 1 and 2, all visible) starts the sum of rank 1's keys and moves nothing (no
  // K|V is left to move, no sum to receive); B = chunk 3 on both own slots (chunk 0, then its
  // diagonal) beside the final hop (rank 1's sum out, rank 0's in). Three launches where pairing chunk
  // by chunk gave five.
  Plan P;
  ASSERT_EQ(make_plan(prob(1001, true), 2, Layout::zigzag, &P), "");
  const std::vector<Phase> x = P.backward_phases(0);
  ASSERT_EQ(x.size(), 3u);
  ASSERT_EQ(x[0].pairs.size(), 1u);
  EXPECT_EQ(x[0].pairs[0].q_chunk, 0);
  EXPECT_EQ(x[0].pairs[0].k_slots, 1);
  EXPECT_EQ(x[0].pairs[0].kind, Kind::causal);
  EXPECT_EQ(P.pair_problem(x[0].pairs[0]).seqused_k, std::vector<int32_t>{251});
  EXPECT_EQ(P.pair_problem(x[0].pairs[0]).Nk, 501);
  EXPECT_EQ(Plan::moves_text(x[0]), "K|V");
  ASSERT_EQ(x[1].pairs.size(), 1u);
  EXPECT_EQ(x[1].pairs[0].q_chunk, 3);
  EXPECT_EQ(x[1].pairs[0].k_slots, 2);
  EXPECT_EQ(x[1].pairs[0].kind, Kind::full);
  EXPECT_FALSE(x[1].moves());
  EXPECT_EQ(Plan::moves_text(x[1]), "");
  ASSERT_EQ(x[2].pairs.size(), 1u);
  EXPECT_EQ(x[2].pairs[0].q_chunk, 3);
  EXPECT_EQ(x[2].pairs[0].k_slots, 2);
  EXPECT_EQ(x[2].pairs[0].kind, Kind::causal);
  EXPECT_TRUE(P.pair_problem(x[2].pairs[0]).seqused_k.empty());
  EXPECT_EQ(x[2].dkv_send, 1);
  EXPECT_EQ(x[2].dkv_recv, 0);
  EXPECT_EQ(Plan::moves_text(x[2]), "dK|dV to its owner");
  // Rank 1 (chunks 1 and 2) at step 1 holds rank 0's keys (chunks 0 and 3): both query chunks see all
  // of chunk 0 and none of chunk 3, two pairs on the first key slot.
  const std::vector<Pair> r1 = P.pairs(1, 1);
  ASSERT_EQ(r1.size(), 2u);
  for (const Pair& y : r1) {
    EXPECT_EQ(y.k_slots, 1);
    EXPECT_EQ(y.kind, Kind::full);
  }
  EXPECT_EQ(P.backward_phase_label(0), "own keys, part A");
  EXPECT_EQ(P.backward_phase_label(1), "1");
  EXPECT_EQ(P.backward_phase_label(2), "own keys, part B");
  // Contiguous: the one own pair is B; A is empty and its K|V transfer has nothing beside it.
  ASSERT_EQ(make_plan(prob(1001, false), 2, Layout::contiguous, &P), "");
  const std::vector<Phase> c = P.backward_phases(1);
  EXPECT_TRUE(c[0].pairs.empty());
  EXPECT_EQ(c[2].pairs.size(), 1u);
  // G = 4: step 1 moves K|V only, steps 2 and 3 dK|dV (step 3: no K|V left to move).
  ASSERT_EQ(make_plan(prob(1001, true), 4, Layout::zigzag, &P), "");
  const std::vector<Phase> g4 = P.backward_phases(2);
  EXPECT_EQ(Plan::moves_text(g4[1]), "K|V");
  EXPECT_EQ(Plan::moves_text(g4[2]), "K|V, dK|dV");
  EXPECT_EQ(Plan::moves_text(g4[3]), "dK|dV");
  EXPECT_EQ(Plan::moves_text(g4[4]), "dK|dV to its owner");
  // A ring of one: the local step, one phase.
  ASSERT_EQ(make_plan(prob(1001, true), 1, Layout::contiguous, &P), "");
  ASSERT_EQ(P.backward_phases(0).size(), 1u);
  EXPECT_EQ(P.backward_phase_label(0), "0");
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
  EXPECT_EQ(P.kv_rows(0), 251 + 250);
  EXPECT_EQ(P.kv_row(0, 1), 251);  // rank 0's K: [B][H_kv][501][d], chunk 3 from row 251 of each head
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

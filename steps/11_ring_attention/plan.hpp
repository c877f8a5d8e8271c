// flashladder — steps/11_ring_attention/plan.hpp: who holds which part of the sequence, and which
// (query chunk, key chunk) pairs each rank computes at each ring step. Pure host arithmetic (no CUDA,
// no NCCL), so the CPU tests check it everywhere and the page's balance table comes from it.
//
// The sequence (Nq = Nk = N: ring attention splits one sequence of queries and keys) is cut into C
// chunks of nearly equal length: the first N mod C chunks hold ⌈N/C⌉ positions, the rest ⌊N/C⌋, so
// any N ≥ C splits and no chunk is padded or masked. A rank holds
//   contiguous  C = G       chunk r
//   zigzag      C = 2G      chunks r and 2G − 1 − r (one from each end: the causal work balances)
// in "slots", slot 0 the earlier chunk. Its queries are stored slot after slot, each a contiguous
// [B][H][len][d] tensor; its keys and values as one [B][H_kv][len_0 + len_1][d] tensor, the rows of
// slot 0 then those of slot 1 in every head: the rank's keys in position order.
//
// Ring step s (0 … G − 1): rank r holds the K, V of origin rank o = (r − s) mod G. With causal, a key
// chunk before a query chunk is all visible, the same chunk is the diagonal, a later one hidden. As the
// key slots are in position order, the keys a query slot sees are always the first k_slots slots of
// the K, V in hand (none, the first, or both), and the diagonal, if there, is the last of them. So each
// (query slot, K, V in hand) is one problem for a ladder step, a "pair": Nq = len(query chunk), the K, V
// tensor with Nk = its rows, seqused_k = the rows of the first k_slots slots when that is fewer (the
// step reads no row past it), and the step's bottom-right causal mask exactly when the diagonal is
// among them: with Nk_used − Nq keys before the query chunk, "key ≤ query" in positions. Zigzag's own
// keys at step 0, for example, are two pairs: slot 0 on the first slot (its diagonal) and slot 1 on
// both (all of chunk r, then its diagonal), where pairing chunks one by one gave three launches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace fl::ring {

enum class Layout { contiguous, zigzag };
const char* layout_name(Layout l);

enum class Kind { full, causal };  // pairs that see no key are not listed

struct Pair {
  int q_slot;   // this rank's query slot
  int q_chunk;  // its chunk
  int origin;   // whose K, V
  int k_slots;  // the keys used: the first k_slots slots of origin's K, V (1 or 2)
  Kind kind;    // causal: the last of them is the query chunk itself (the step's bottom-right mask)
};

// The backward's order on a rank, "own keys last" (Plan::backward_phases; ring.cu's Rank::backward
// follows it, tests/test_ring_plan.cpp simulates it on the CPU). dQ stays on its rank; dK, dV travel
// the ring as fp32 sums. A ring of one is one phase that moves nothing. For G > 1, G + 1 phases:
//
//   phase 0      own keys, part A: the own pair of query slot 0 (zigzag; contiguous: none), beside
//                the first K|V transfer (own K|V to r + 1, origin r − 1's from r − 1). Its dK, dV
//                partial waits for the end. With causal it is chunk r's diagonal.
//   phase s      ring step s = 1 … G − 1: the pairs with origin r − s's K, V (Plan::pairs(r, s)), beside
//                the next K|V (s < G − 1) and the dK|dV sums (s ≥ 2: the one this rank finished at s − 1
//                to r + 1, origin r − s's from r − 1). Step 1 starts the sum of origin r − 1 from its
//                partials: rank o + 1 is the first after o to hold o's keys, so no sum for o exists
//                before it, and nothing is received. The sum of o travels o + 1 → … → o + G − 1.
//   phase G      own keys, part B: the other own pair (zigzag: query slot 1, with causal chunk
//                2G−1−r on all of chunk r and its own diagonal; contiguous: the one own pair), beside
//                the final hop: the sum finished at step G − 1 (origin r + 1) goes to its owner, this
//                rank's own arrives from r − 1. Then dK, dV = that sum + the partials of A and B,
//                rounded once.
//
// Why B is the larger part when the own pairs do not split (contiguous: one pair): the hop beside A
// moves K|V in the storage type, 2 tensors × 2 bytes = 4 bytes per element of the rank's K; the hop
// beside B moves the dK|dV sums in fp32, 2 × 4 = 8 bytes per element: at N = 32768, H 16, d 128 on 2
// GPUs 134 MB against 268 MB (runs 39–40 measured 0.695 ms for that K|V and 0.932–1.037 ms for that final
// hop, non-causal contiguous). A part with no pairs leaves its hop unhidden, so it is the smaller hop.
enum class DkvRole {
  local,   // a ring of one: the pairs' dK, dV are this rank's dK, dV
  keep,    // own keys, part A: the partials wait (at most one per key slot) for the end
  start,   // step 1: the partials start the sum of the phase's origin (a key slot without a pair: zeros)
  add,     // step s ≥ 2: the partials are added to the sum of the phase's origin that arrived beside
  finish,  // own keys, part B: this rank's sum arrives beside; it + A's and B's partials → dK, dV
};

struct Phase {
  int origin = 0;            // whose K, V the pairs use, and whose dK, dV they produce
  std::vector<Pair> pairs;   // in the order they are computed
  DkvRole dkv = DkvRole::local;
  // The transfer beside the phase (one NCCL group on the transfer stream, started once the previous
  // phase's compute is done; −1: that part is not moved):
  int kv_send = -1, kv_recv = -1;    // origin of the K|V sent to r + 1, received from r − 1
  int dkv_send = -1, dkv_recv = -1;  // origin of the dK|dV sum sent to r + 1, received from r − 1
  bool moves() const { return kv_send >= 0 || kv_recv >= 0 || dkv_send >= 0 || dkv_recv >= 0; }
  /// The sums live in two buffers: the one a phase starts, adds to or receives is buffer phase mod 2;
  /// a phase sends the one of the phase before.
  static int dkv_buffer(int phase) { return phase % 2; }
};

struct Plan {
  Problem p;   // the whole problem: Nq = Nk = N
  int G = 1;   // ranks
  Layout layout = Layout::contiguous;
  int chunks = 1;                 // C
  std::vector<int64_t> start;     // [C] first position of each chunk
  std::vector<int64_t> len;       // [C] its length

  int slots() const { return layout == Layout::zigzag ? 2 : 1; }
  /// The chunk held in slot i by rank r.
  int chunk_of(int r, int slot) const { return slot == 0 ? r : 2 * G - 1 - r; }
  int origin(int r, int s) const { return ((r - s) % G + G) % G; }  // whose K, V rank r holds at step s

  /// The problem of one pair (seqused_k set when it uses fewer rows than origin's K holds).
  Problem pair_problem(const Pair& x) const;
  /// The keys a pair uses: rows 0 … used − 1 of every head of its origin's K, V.
  int64_t pair_keys(const Pair& x) const;
  /// The pairs rank r computes at ring step s, in the order it computes them (at most one per slot).
  std::vector<Pair> pairs(int r, int s) const;

  // Element offsets of slot i inside a rank's query buffers (slots stored one after the other).
  int64_t q_slot_offset(int r, int slot) const;    // in Q, O, dO, dQ
  int64_t lse_slot_offset(int r, int slot) const;  // in L (each slot 128-byte aligned: padded)
  int64_t q_elems(int r) const;                    // the rank's share of Q
  int64_t lse_elems(int r) const;                  // with the padding
  // A rank's K (V the same): [B][H_kv][kv_rows(r)][d], slot i at row kv_row(r, i) of every head.
  int64_t kv_rows(int r) const;                    // its positions: len of its chunks, summed
  int64_t kv_row(int r, int slot) const;           // the first row of slot i in a head
  int64_t kv_elems(int r) const;                   // the rank's share of K (V the same)
  int64_t max_chunk() const;                       // the longest chunk

  /// The backward's phases on rank r (see Phase above): 1 for G = 1, else G + 1.
  std::vector<Phase> backward_phases(int r) const;
  /// Whether an own pair belongs to part A of the backward (else part B): zigzag's query slot 0.
  bool own_part_a(const Pair& x) const { return slots() == 2 && x.q_slot == 0; }
  /// The name of backward phase k in tables ("own keys, part A", "1", …, "own keys, part B"; "0" for
  /// G = 1) and what its transfer moves ("K|V", "K|V, dK|dV", "dK|dV", "dK|dV to its owner", "").
  std::string backward_phase_label(int k) const;
  static std::string moves_text(const Phase& x);

  /// Work of a rank at a step in units of (positions²)·B·H·d·4 FLOPs: a pair counts len_q · keys
  /// used, less len_q²/2 when causal (the diagonal's half that the causal step skips).
  double work(int r, int s) const;
};

/// "" and the plan, or the reason the sequence does not split (names the limit).
std::string make_plan(const Problem& p, int G, Layout layout, Plan* out);

}  // namespace fl::ring

// flashladder — steps/11_ring_attention/plan.hpp: who holds which part of the sequence, and which
// (query chunk, key chunk) pairs each rank computes at each ring step. Pure host arithmetic (no CUDA,
// no NCCL), so the CPU tests check it everywhere and the page's balance table comes from it.
//
// The sequence (Nq = Nk = N: ring attention splits one sequence of queries and keys) is cut into C
// chunks of nearly equal length: the first N mod C chunks hold ⌈N/C⌉ positions, the rest ⌊N/C⌋, so
// any N ≥ C splits and no chunk is padded or masked. A rank holds
//   contiguous  C = G       chunk r
//   zigzag      C = 2G      chunks r and 2G − 1 − r (one from each end: the causal work balances)
// and stores its chunks one after the other ("slots"), each a contiguous [B][H][len][d] tensor (K, V:
// [B][H_kv][len][d]), so that every (query chunk, key chunk) pair is an ordinary problem for a
// ladder step with Nq = len(q chunk), Nk = len(k chunk).
//
// Ring step s (0 … G − 1): rank r holds the K, V slots of origin rank o = (r − s) mod G. With causal,
// a pair whose key chunk lies before its query chunk is all visible (full: the step runs without the
// mask), the same chunk is the diagonal (the step's bottom-right mask with Nq = Nk is exactly
// "key position ≤ query position"), and a later key chunk is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace fl::ring {

enum class Layout { contiguous, zigzag };
const char* layout_name(Layout l);

enum class Kind { full, diagonal };  // skipped pairs are not listed

struct Pair {
  int q_slot, k_slot;  // slots of this rank's Q and of the K, V in hand
  int q_chunk, k_chunk;
  Kind kind;
};

// The backward's order on a rank, "own keys last" (Plan::backward_phases; ring.cu's Rank::backward
// follows it, tests/test_ring_plan.cpp simulates it on the CPU). dQ stays on its rank; dK, dV travel
// the ring as fp32 sums. A ring of one is one phase that moves nothing. For G > 1, G + 1 phases:
//
//   phase 0      own keys, part A: the own pairs (this rank's K, V) with q_slot = k_slot, beside the
//                first K|V transfer (own K|V to r + 1, origin r − 1's from r − 1). Their dK, dV
//                partials wait, one per key slot, for the end. Zigzag: (r, r) and (2G−1−r, 2G−1−r),
//                with causal exactly the two diagonals; contiguous: none.
//   phase s      ring step s = 1 … G − 1: the pairs with origin r − s's K, V (Plan::pairs(r, s)), beside
//                the next K|V (s < G − 1) and the dK|dV sums (s ≥ 2: the one this rank finished at s − 1
//                to r + 1, origin r − s's from r − 1). Step 1 starts the sum of origin r − 1 from its
//                partials: rank o + 1 is the first after o to hold o's keys, so no sum for o exists
//                before it, and nothing is received. The sum of o travels o + 1 → … → o + G − 1.
//   phase G      own keys, part B: the other own pairs (zigzag: q_slot ≠ k_slot, with causal the one
//                full pair (2G−1−r, r); contiguous: the one own pair), beside the final hop: the sum
//                finished at step G − 1 (origin r + 1) goes to its owner, this rank's own arrives from
//                r − 1. Then dK, dV = that sum + the partials of A and B, rounded once.
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

  /// The problem of one pair: the step's own causal mask only on the diagonal.
  Problem pair_problem(const Pair& x) const;
  /// The pairs rank r computes at ring step s, in the order it computes them.
  std::vector<Pair> pairs(int r, int s) const;

  // Element offsets of slot i inside a rank's buffers (slots stored one after the other).
  int64_t q_slot_offset(int r, int slot) const;    // in Q, O, dO, dQ
  int64_t lse_slot_offset(int r, int slot) const;  // in L (each slot 128-byte aligned: padded)
  int64_t kv_slot_offset(int r, int slot) const;   // in K (and in V, which follows K in a K|V buffer)
  int64_t q_elems(int r) const;                    // the rank's share of Q
  int64_t lse_elems(int r) const;                  // with the padding
  int64_t kv_elems(int r) const;                   // the rank's share of K (V the same)
  int64_t max_chunk() const;                       // the longest chunk

  /// The backward's phases on rank r (see Phase above): 1 for G = 1, else G + 1.
  std::vector<Phase> backward_phases(int r) const;
  /// Whether an own pair belongs to part A of the backward (else part B): q_slot = k_slot of zigzag.
  bool own_part_a(const Pair& x) const { return slots() == 2 && x.q_slot == x.k_slot; }
  /// The name of backward phase k in tables ("own keys, part A", "1", …, "own keys, part B"; "0" for
  /// G = 1) and what its transfer moves ("K|V", "K|V, dK|dV", "dK|dV", "dK|dV to its owner", "").
  std::string backward_phase_label(int k) const;
  static std::string moves_text(const Phase& x);

  /// Work of a rank at a step in units of (positions²)·B·H·d·4 FLOPs: a full pair counts
  /// len_q·len_k, a diagonal one len·len/2 (what the causal step does).
  double work(int r, int s) const;
};

/// "" and the plan, or the reason the sequence does not split (names the limit).
std::string make_plan(const Problem& p, int G, Layout layout, Plan* out);

}  // namespace fl::ring

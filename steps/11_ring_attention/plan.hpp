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

  /// Work of a rank at a step in units of (positions²)·B·H·d·4 FLOPs: a full pair counts
  /// len_q·len_k, a diagonal one len·len/2 (what the causal step does).
  double work(int r, int s) const;
};

/// "" and the plan, or the reason the sequence does not split (names the limit).
std::string make_plan(const Problem& p, int G, Layout layout, Plan* out);

}  // namespace fl::ring

// flashladder — reference/sampled.hpp: the oracle and the tolerance rule's baseline at chosen
// rows only, for problems too large for the full fp64 oracle (N = 131072: S alone would be 128 GiB
// of doubles per head; more than 2^31 elements in one tensor).
//
// What it computes is exactly what reference/oracle.cpp computes, restricted to the rows asked for:
//   oracle    standard attention in double on the rounded inputs (O, L, dQ at query rows; dK, dV at
//             key rows), D_i = Σ_j P_ij dP_ij (= rowsum(dO ∘ O), the same number in exact arithmetic);
//   baseline  Algorithm 0 at the storage type: S rounded, softmax in fp32 with the row's final max,
//             P rounded, fp32 sums, O rounded; its backward rounds dV, dP, dS, dQ, dK per query head as
//             ref::baseline_backward does and sums the query heads of a K/V head in fp32.
// The baseline's sums run in another order than Eigen's, so an entry can differ from
// ref::baseline_* by a rounding of the storage type; both are Algorithm 0 at that precision, which
// is all the rule asks of a baseline. tests/test_sampled_reference.cpp checks both halves against the full
// oracle and baseline on shapes small enough for them.
//
// A query row's O, L and dQ need only that row (O(Nk·d) work). A key row's dK, dV are sums over
// every query row that sees it, and each term needs that row's L and D, so asking for any key row of a
// K/V head runs the full O(Nq·Nk·d) pass over the query heads of its group (blocked, one pass, each
// row's S and dP held in memory once): the price of checking dK, dV exactly at 131072² (tens of
// CPU-seconds per head with 16 threads).
//
// The rule is then applied to the sampled entries (verify_sampled): tol = 2·max|baseline − oracle|
// + floor over the same sampled entries the step is judged on; NaN fails, as in compare().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/verify.hpp"

namespace fl {

struct RowId {  // a query row: Q, O, dO, dQ, L at (b, h, i)
  int64_t b, h, i;
};
struct KeyId {  // a key row: K, V, dK, dV at (b, h_kv, j)
  int64_t b, hk, j;
};

/// Sampled rows of the oracle (double) and the baseline (storage type). o, dq: [rows][d]; lse:
/// [rows]; dk, dv: [keys][d]. Backward fields are empty unless asked for.
struct Sampled {
  std::vector<RowId> rows;
  std::vector<KeyId> keys;
  std::vector<double> o, lse, dq, dk, dv;
  std::vector<float> base_o, base_lse, base_dq, base_dk, base_dv;
};

/// The oracle and the baseline at `rows` (O, L; dQ too with backward) and `keys` (dK, dV, backward
/// only). Uses in.dO only with backward. OpenMP-parallel over key chunks and rows.
Sampled sampled_reference(const Inputs& in, const std::vector<RowId>& rows, const std::vector<KeyId>& keys,
                          bool backward);

/// x rounded to the storage type: the same value as fl::round_to (a test checks it), inlined and
/// branch-light, since the 131072² pass rounds some 10^10 values.
float round_storage(DType t, float x);

/// Query rows to check: for every (b, h), rows 0, 1, Nq/2 − 1, Nq/2, Nq − 2, Nq − 1; then `random`
/// rows drawn (seeded) over all B·H·Nq rows; then the flat rows (b·H + h)·Nq + i listed in `flat`
/// (e.g. the rows around element 2^31). Sorted, without repeats, all in range.
std::vector<RowId> pick_rows(const Problem& p, uint64_t seed, int random, const std::vector<int64_t>& flat = {});
/// Key rows, the same way over B·H_kv·Nk.
std::vector<KeyId> pick_keys(const Problem& p, uint64_t seed, int random, const std::vector<int64_t>& flat = {});

/// A step's outputs judged at the sampled rows by the tolerance rule (common/compare.hpp), tensor by
/// tensor; a failure names the first bad (b, h, i, c) or (b, h_kv, j, c) and the seed.
Verdict verify_sampled(const Inputs& in, const Outputs& got, const Sampled& s, bool backward);

}  // namespace fl

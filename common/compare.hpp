// flashladder — common/compare.hpp: the tolerance rule, NaN-proof.
//
// A step passes a tensor when every entry satisfies !(|step − oracle| > tol) written the safe way,
// err <= tol, so NaN (which compares false with everything) always fails; every value must be finite
// except where the oracle itself is infinite (L = +inf on a row that sees no key), and there the step
// must give the same infinity.
//   tol = 2 · max|baseline − oracle| + floor
// where baseline is Algorithm 0 at the step's precision (FlashAttention-2's own test rule) and floor is
// half an ulp of the storage type at the tensor's largest magnitude, so a baseline that happens to be
// exact does not leave a zero tolerance.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace fl {

struct Check {
  std::string tensor;        // "O", "L", "dQ", ...
  double max_err = 0;        // max |step − oracle| over finite entries
  double baseline_err = 0;   // max |baseline − oracle|
  double tol = 0;
  double frac = 0;           // max_err / tol: how much of the tolerance was used; inf where a non-finite entry failed
  int64_t bad = 0;           // entries that failed (NaN, Inf, or over tol)
  int64_t nonfinite = 0;     // NaN or Inf entries where the oracle was finite
  int64_t nans = 0;          // NaN entries of the step (each one fails)
  int64_t infs = 0;          // ±Inf entries of the step where the oracle was finite (each one fails)
  std::string first_bad;     // "(b, h, i, j) step=… oracle=…" of the first failing entry
  bool pass = false;
  std::string summary() const;  // one line
};

/// dims: the tensor's shape, 3 ([B][H][N]) or 4 ([B][H][N][d]) entries, for naming the first bad index.
/// storage: the type whose half-ulp gives the floor (fp32 for L).
Check compare(const std::string& name, const std::vector<float>& step, const std::vector<double>& oracle,
              const std::vector<float>& baseline, const std::vector<int64_t>& dims, DType storage,
              uint64_t seed);

/// The tolerance of the rule for one tensor: tol = 2 · baseline_err + floor, floor = unit roundoff of
/// the storage type × max(1, max|oracle|). compare() uses exactly this; the golden files' manifest
/// records it, so an implementation checked from files meets the same numbers.
struct Tolerance {
  double baseline_err = 0;  // max |baseline − oracle| over entries where the oracle is finite
  double floor = 0;
  double tol = 0;
};
Tolerance tolerance_for(const std::vector<double>& oracle, const std::vector<float>& baseline, DType storage);

/// compare() with a ready tolerance (from a manifest) and a step held in double, so a candidate
/// written in f8 is not rounded before it is judged. Same NaN-proof rule; a non-finite or negative
/// tol fails every entry.
Check compare_with_tol(const std::string& name, const std::vector<double>& step, const std::vector<double>& oracle,
                       const Tolerance& tol, const std::vector<int64_t>& dims, uint64_t seed);

/// The unit roundoff of a storage type: 2^-24, 2^-11, 2^-8.
double unit_roundoff(DType t);

}  // namespace fl

// flashladder — reference/verify.hpp: a step's outputs against the oracle, by the tolerance rule.
#pragma once

#include <vector>

#include "common/compare.hpp"
#include "reference/oracle.hpp"

namespace fl {

/// The oracle's answers and the baseline's errors for one set of inputs, computed once and shared
/// by every step checked on those inputs (the tests check several steps per case).
struct Expected {
  ref::Forward fwd;
  ref::Backward bwd;       // empty unless made with backward = true
  Outputs base_fwd;        // Algorithm 0 at the storage type
  Outputs base_bwd;        // its backward at the storage type (backward only)
};

Expected expected_for(const Inputs& in, bool backward);

/// Throws fl::Error when the baseline gives a tensor no finite tolerance (scores that overflow the
/// storage type, e.g. --scale 1e38): no step can be judged on such a problem, so it is refused as
/// input, not blamed on the step.
void require_finite_baseline(const Inputs& in, const Expected& e, bool backward);

struct Verdict {
  std::vector<Check> checks;  // O, L (and dQ, dK, dV)
  bool pass = false;
  double tol_used = 0;        // the largest fraction of the tolerance used by any tensor
};

/// Compares a step's outputs with the oracle, tensor by tensor.
Verdict verify(const Inputs& in, const Outputs& got, const Expected& e, bool backward);

}  // namespace fl

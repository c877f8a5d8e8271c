// flashladder — reference/verify.cpp
#include "reference/verify.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace fl {

Expected expected_for(const Inputs& in, bool backward) {
  Expected e;
  e.fwd = ref::forward(in);
  e.base_fwd = ref::baseline_forward(in);
  if (backward) {
    e.bwd = ref::backward(in, e.fwd);
    e.base_bwd = ref::baseline_backward(in);
  }
  return e;
}

void require_finite_baseline(const Inputs& in, const Expected& e, bool backward) {
  const Problem& p = in.p;
  struct T { const char* name; const std::vector<double>* oracle; const std::vector<float>* base; DType t; };
  std::vector<T> ts = {{"O", &e.fwd.o, &e.base_fwd.o, p.dtype}, {"L", &e.fwd.lse, &e.base_fwd.lse, DType::f32}};
  if (backward)
    for (T t : {T{"dQ", &e.bwd.dq, &e.base_bwd.dq, p.dtype}, T{"dK", &e.bwd.dk, &e.base_bwd.dk, p.dtype},
                T{"dV", &e.bwd.dv, &e.base_bwd.dv, p.dtype}})
      ts.push_back(t);
  for (const T& t : ts) {
    const Tolerance tol = tolerance_for(*t.oracle, *t.base, t.t);
    if (!std::isfinite(tol.tol))
      throw Error("no tolerance can be given for " + p.describe() + " (seed " + std::to_string(in.seed) + "): the " +
                  dtype_name(p.dtype) + " baseline's " + t.name + " is not finite (its scaled scores overflow " +
                  "the storage type); choose a smaller --scale or smaller inputs");
  }
}

Verdict verify(const Inputs& in, const Outputs& got, const Expected& e, bool backward) {
  const Problem& p = in.p;
  // [B][H][Nq][d] …, or the packed [total_q][H][d] … of a varlen problem: a failure names its index there.
  const std::vector<int64_t> q_dims = p.q_shape(), kv_dims = p.kv_shape(), l_dims = p.lse_shape();
  Verdict v;
  v.checks.push_back(compare("O", got.o, e.fwd.o, e.base_fwd.o, q_dims, p.dtype, in.seed));
  v.checks.push_back(compare("L", got.lse, e.fwd.lse, e.base_fwd.lse, l_dims, DType::f32, in.seed));
  if (backward) {
    v.checks.push_back(compare("dQ", got.dq, e.bwd.dq, e.base_bwd.dq, q_dims, p.dtype, in.seed));
    v.checks.push_back(compare("dK", got.dk, e.bwd.dk, e.base_bwd.dk, kv_dims, p.dtype, in.seed));
    v.checks.push_back(compare("dV", got.dv, e.bwd.dv, e.base_bwd.dv, kv_dims, p.dtype, in.seed));
  }
  v.pass = true;
  for (const Check& c : v.checks) {
    v.pass = v.pass && c.pass;
    v.tol_used = std::max(v.tol_used, c.frac);
  }
  return v;
}

}  // namespace fl

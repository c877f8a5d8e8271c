// flashladder — common/compare.cpp
#include "common/compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fl {

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
  }
  return 0;
}

namespace {
std::string index_of(int64_t n, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (size_t k = dims.size(); k-- > 0;) {
    idx[k] = n % dims[k];
    n /= dims[k];
  }
  std::ostringstream s;
  s << "(";
  for (size_t k = 0; k < idx.size(); ++k) s << (k ? ", " : "") << idx[k];
  s << ")";
  return s.str();
}
}  // namespace

Check compare(const std::string& name, const std::vector<float>& step, const std::vector<double>& oracle,
              const std::vector<float>& baseline, const std::vector<int64_t>& dims, DType storage,
              uint64_t seed) {
  Check c;
  c.tensor = name;
  int64_t expect = 1;
  for (int64_t x : dims) expect *= x;
  if (int64_t(step.size()) != expect || int64_t(oracle.size()) != expect ||
      int64_t(baseline.size()) != expect) {
    std::ostringstream s;
    s << "size mismatch: step " << step.size() << ", oracle " << oracle.size() << ", baseline "
      << baseline.size() << ", shape wants " << expect;
    c.first_bad = s.str();
    c.bad = 1;
    c.frac = INFINITY;
    return c;
  }
  double max_ref = 0;
  for (int64_t n = 0; n < expect; ++n) {
    const double r = oracle[n];
    if (std::isfinite(r)) {
      max_ref = std::max(max_ref, std::fabs(r));
      const double e = std::fabs(double(baseline[n]) - r);
      c.baseline_err = std::isfinite(e) ? std::max(c.baseline_err, e) : INFINITY;
    }
  }
  const double floor = unit_roundoff(storage) * std::max(1.0, max_ref);
  c.tol = 2 * c.baseline_err + floor;
  for (int64_t n = 0; n < expect; ++n) {
    const double r = oracle[n], s = step[n];
    bool ok;
    if (!std::isfinite(r)) {
      ok = (s == r);  // +inf must meet +inf; NaN never equals anything
    } else if (!std::isfinite(s)) {
      ok = false;
      ++c.nonfinite;
    } else {
      const double e = std::fabs(s - r);
      c.max_err = std::max(c.max_err, e);
      ok = e <= c.tol;
    }
    if (!ok) {
      if (c.bad++ == 0) {
        std::ostringstream m;
        m.precision(9);
        m << index_of(n, dims) << " step=" << s << " oracle=" << r << " (seed " << seed << ")";
        c.first_bad = m.str();
      }
    }
  }
  c.frac = c.tol > 0 ? c.max_err / c.tol : (c.max_err == 0 ? 0 : INFINITY);
  c.pass = c.bad == 0 && c.tol >= 0 && std::isfinite(c.tol);
  return c;
}

std::string Check::summary() const {
  std::ostringstream s;
  s.precision(3);
  s << tensor << ": " << (pass ? "pass" : "FAIL") << " max_err=" << max_err << " tol=" << tol
    << " (2x baseline " << baseline_err << " + floor) used=" << 100 * frac << "%";
  if (!pass) s << " bad=" << bad << " nonfinite=" << nonfinite << " first " << first_bad;
  return s.str();
}

}  // namespace fl

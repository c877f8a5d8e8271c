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

Tolerance tolerance_for(const std::vector<double>& oracle, const std::vector<float>& baseline, DType storage) {
  Tolerance t;
  double max_ref = 0;
  const size_t n = std::min(oracle.size(), baseline.size());
  for (size_t i = 0; i < n; ++i) {
    const double r = oracle[i];
    if (std::isfinite(r)) {
      max_ref = std::max(max_ref, std::fabs(r));
      const double e = std::fabs(double(baseline[i]) - r);
      t.baseline_err = std::isfinite(e) ? std::max(t.baseline_err, e) : INFINITY;
    }
  }
  t.floor = unit_roundoff(storage) * std::max(1.0, max_ref);
  t.tol = 2 * t.baseline_err + t.floor;
  return t;
}

namespace {

// Every entry against c.tol, written so that NaN fails: ok only when err <= tol is true.
template <class T>
void judge(Check& c, const std::vector<T>& step, const std::vector<double>& oracle, const std::vector<int64_t>& dims,
           uint64_t seed) {
  const int64_t n_all = int64_t(oracle.size());
  bool unbounded = false;  // an entry failed by a non-finite value: no finite share of the tolerance says it
  for (int64_t n = 0; n < n_all; ++n) {
    const double r = oracle[n], s = step[n];
    bool ok;
    if (std::isnan(s)) ++c.nans;
    if (!std::isfinite(r)) {
      ok = (s == r);  // +inf must meet +inf; NaN never equals anything
      unbounded |= !ok;
    } else if (!std::isfinite(s)) {
      unbounded = true;
      ok = false;
      ++c.nonfinite;
      if (std::isinf(s)) ++c.infs;
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
  // A NaN output used to report the share of its finite entries (0% when all were NaN), and a gate on
  // tol_used (the records', Python's Report.tol_used) passed it.
  c.frac = unbounded ? INFINITY : c.tol > 0 ? c.max_err / c.tol : (c.max_err == 0 ? 0 : INFINITY);
  c.pass = c.bad == 0 && c.tol >= 0 && std::isfinite(c.tol);
}

// False (and c marked failed) when a size differs from what the shape wants.
bool sizes_agree(Check& c, size_t step, size_t oracle, size_t baseline, const std::vector<int64_t>& dims) {
  int64_t expect = 1;
  for (int64_t x : dims) expect *= x;
  if (int64_t(step) == expect && int64_t(oracle) == expect && int64_t(baseline) == expect) return true;
  std::ostringstream s;
  s << "size mismatch: step " << step << ", oracle " << oracle << ", baseline " << baseline << ", shape wants "
    << expect;
  c.first_bad = s.str();
  c.bad = 1;
  c.frac = INFINITY;
  return false;
}

}  // namespace

Check compare(const std::string& name, const std::vector<float>& step, const std::vector<double>& oracle,
              const std::vector<float>& baseline, const std::vector<int64_t>& dims, DType storage,
              uint64_t seed) {
  Check c;
  c.tensor = name;
  if (!sizes_agree(c, step.size(), oracle.size(), baseline.size(), dims)) return c;
  const Tolerance t = tolerance_for(oracle, baseline, storage);
  c.baseline_err = t.baseline_err;
  c.tol = t.tol;
  judge(c, step, oracle, dims, seed);
  return c;
}

Check compare_with_tol(const std::string& name, const std::vector<double>& step, const std::vector<double>& oracle,
                       const Tolerance& tol, const std::vector<int64_t>& dims, uint64_t seed) {
  Check c;
  c.tensor = name;
  if (!sizes_agree(c, step.size(), oracle.size(), oracle.size(), dims)) return c;
  c.baseline_err = tol.baseline_err;
  c.tol = std::isfinite(tol.tol) && tol.tol >= 0 ? tol.tol : NAN;  // NaN: every entry fails below
  judge(c, step, oracle, dims, seed);
  if (std::isnan(c.tol)) c.first_bad = "the tolerance " + std::to_string(tol.tol) + " is not a finite number >= 0";
  return c;
}

std::string Check::summary() const {
  std::ostringstream s;
  s.precision(3);
  s << tensor << ": " << (pass ? "pass" : "FAIL") << " max_err=" << max_err << " tol=" << tol
    << " (2x baseline " << baseline_err << " + floor) used=" << 100 * frac << "%";
  if (!pass) s << " bad=" << bad << " nonfinite=" << nonfinite << " (nan=" << nans << " inf=" << infs << ") first " << first_bad;
  return s.str();
}

}  // namespace fl

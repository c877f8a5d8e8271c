// flashladder — app/lab_suite.cpp: the main of an exercise's program (`flashladder lab check`).
//
// An exercise folder links its one source (the student's attention.cpp/.cu, defining fl::sNN::impl)
// before libflashladder_lab.a, which holds this file and the rest of the core; see app/lab_cmd.cpp.
// This program runs that step's part of the suite: the ragged shape matrix of app/cases.hpp (the
// very cases, seeds and problems tests/test_ladder.cpp gives the step) and the numerics cases of
// app/numerics_cases.hpp (as tests/test_gpu_numerics.cpp runs them), each through run_step (outputs
// poisoned with NaN, every launch checked) and verify (the tolerance rule against the fp64 oracle),
// forward, and backward for a backward step. It prints, for every failing shape, the tensor, the
// first bad (b, h, i, j), the fraction of the tolerance used and the NaN count, and then what the
// failing shapes have in common (only causal ones, only long key sequences, …), which usually names
// the mistake.
//
//   lab_suite STEP       exit 0: every shape passes; 1: some failed; 77: a GPU step on a machine
//                        without a GPU ("needs a GPU"; 1 instead under FLASHLADDER_REQUIRE_GPU=1).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <set>
#include <string>

#include "app/runner.hpp"
#include "reference/verify.hpp"
#include "steps/ladder.hpp"
#include "app/cases.hpp"
#include "app/numerics_cases.hpp"

namespace {

using namespace fl;
using fl::test::Case;

constexpr uint64_t kSeed = 20260521;  // tests/test_ladder.cpp's: the same inputs as the ladder's tests

struct Result {
  Case c;
  Problem p;
  bool pass = false;
  std::string error;          // the step threw (a refused shape, a failed launch)
  std::vector<Check> checks;  // O, L (and dQ, dK, dV)
  double tol_used = 0;
  std::string numerics;       // the numerics case's name; empty for a shape of the ragged matrix
};

std::string shape(const Result& r) {
  std::ostringstream s;
  s << "Nq=" << r.p.Nq << " Nk=" << r.p.Nk << (r.p.causal ? " causal" : " full") << " H=" << r.p.H
    << " H_kv=" << r.p.H_kv << " d=" << r.p.d << " " << dtype_name(r.p.dtype)
    << (r.c.q_scale != 1.0 ? " large-logit (Q x 20)" : "");
  if (!r.numerics.empty()) s << " numerics case " << r.numerics;
  return s.str();
}

bool failed(const Result& r, const std::string& tensor) {
  for (const Check& c : r.checks)
    if (c.tensor == tensor && !c.pass) return true;
  return false;
}

// What the failing shapes share that the passing ones do not: each line names a likely mistake.
std::vector<std::string> diagnose(const std::vector<Result>& rs, bool backward) {
  std::vector<std::string> out;
  std::vector<const Result*> bad, good;
  for (const Result& r : rs) (r.pass ? good : bad).push_back(&r);
  if (bad.empty()) return out;
  auto all_bad = [&](auto pred) { return std::all_of(bad.begin(), bad.end(), [&](const Result* r) { return pred(*r); }); };
  auto any_good = [&](auto pred) { return std::any_of(good.begin(), good.end(), [&](const Result* r) { return pred(*r); }); };

  int64_t nans = 0;
  std::set<std::string> nan_tensors;
  for (const Result* r : bad)
    for (const Check& c : r->checks)
      if (c.nans > 0) nans += c.nans, nan_tensors.insert(c.tensor);
  if (nans > 0) {
    std::string t;
    for (const std::string& x : nan_tensors) t += (t.empty() ? "" : ", ") + x;
    out.push_back("NaN found (" + std::to_string(nans) + " entries, in " + t +
                  "): the outputs are filled with NaN before your code runs, so a NaN is an element your code never "
                  "wrote, or a NaN made inside (exp(-inf - (-inf)) on a row that has seen no key yet, 0/0).");
  }
  if (good.empty()) {
    out.push_back("every shape fails, short and long, causal or not: the core of the idea is missing or wrong, not an "
                  "edge case; try the smallest failing shape first.");
  }
  if (!good.empty() && all_bad([](const Result& r) { return r.p.causal; })) {
    if (all_bad([](const Result& r) { return r.p.Nq != r.p.Nk; }) && any_good([](const Result& r) { return r.p.causal; }))
      out.push_back("only causal shapes with Nq != Nk fail: the mask is aligned bottom-right, query i sees key j iff "
                    "j <= i + Nk - Nq (not j <= i).");
    else
      out.push_back("only causal shapes fail, every non-causal one passes: look at the causal mask (query i sees key j "
                    "iff j <= i + Nk - Nq) and at which key blocks are skipped or masked.");
  }
  if (!good.empty() && all_bad([](const Result& r) { return !r.p.causal; }))
    out.push_back("only non-causal shapes fail: the code taken when causal is off (the full key range, the last partial block).");
  if (!good.empty() && all_bad([](const Result& r) { return r.c.q_scale != 1.0; }))
    out.push_back("only the large-logit shapes (Q x 20) fail: exp of a score that was not reduced by the running max "
                  "overflows; subtract the (running) max before exp.");
  if (!good.empty() && all_bad([](const Result& r) { return r.p.H_kv != r.p.H; }) && any_good([](const Result& r) { return r.p.H_kv == r.p.H; }))
    out.push_back("only shapes with H_kv < H (GQA/MQA) fail: query head h reads K/V head h / (H / H_kv).");
  {
    int64_t min_bad_nk = INT64_MAX, max_good_nk = 0;
    for (const Result* r : bad) min_bad_nk = std::min(min_bad_nk, r->p.Nk);
    for (const Result* r : good) max_good_nk = std::max(max_good_nk, r->p.Nk);
    if (!good.empty() && max_good_nk == 1 && min_bad_nk > 1)
      out.push_back("only shapes with Nk = 1 pass: with a single key P = 1 whatever the weights, so look at the "
                    "normalisation: the sum l and the division of O by it.");
    else if (!good.empty() && max_good_nk < min_bad_nk)
      out.push_back("every shape with Nk <= " + std::to_string(max_good_nk) + " passes and the failures all have Nk >= " +
                    std::to_string(min_bad_nk) +
                    ": only key sequences that span more than one key block fail. Look at what carries from one key "
                    "block to the next: the running max m, the running sum l (rescaled by e^(m_old - m_new)), and the "
                    "rescale of the accumulator O when m changes.");
  }
  if (!backward) {
    const bool o_bad = std::any_of(bad.begin(), bad.end(), [](const Result* r) { return failed(*r, "O"); });
    const bool l_bad = std::any_of(bad.begin(), bad.end(), [](const Result* r) { return failed(*r, "L"); });
    if (o_bad && !l_bad)
      out.push_back("L is right everywhere but O is not: each row's max and sum are right, so the softmax weights are; "
                    "look at the accumulator O: its rescale by e^(m_old - m_new) when the max changes, the weights P~ V "
                    "it adds, and the final division by l.");
    if (l_bad && !o_bad)
      out.push_back("O is right everywhere but L is not: L = m + log(l) per row (natural log, of the scaled scores; "
                    "+inf on a row that sees no key), with m and l the final running max and sum.");
  } else {
    std::set<std::string> bad_t;
    for (const Result* r : bad)
      for (const Check& c : r->checks)
        if (!c.pass) bad_t.insert(c.tensor);
    if (bad_t == std::set<std::string>{"dQ"})
      out.push_back("only dQ fails (dK, dV pass, so P and dS are right): dQ_i gets a share from every key block j, "
                    "dQ_i += scale * dS_ij K_j, added atomically in fp32 since many blocks add to the same rows.");
    if (bad_t.count("dK") && bad_t.count("dQ") && !bad_t.count("dV"))
      out.push_back("dV passes but dQ and dK fail: P = exp(S - L) is right, so look at dS = P o (dP - D), with "
                    "D_i = rowsum(dO_i o O_i) and dP = dO V^T.");
    if (bad_t.count("dV"))
      out.push_back("dV fails: dV_j = sum_i P_ij^T dO_i needs P_ij = exp(S_ij - L_i) with L the forward's logsumexp "
                    "(not the running max m: exp(S - m) is not normalised).");
  }
  return out;
}

// Why each numerics case exists (tests/test_gpu_numerics.cpp): what failing it usually means.
std::string numerics_hint(const std::string& name) {
  if (name.rfind("scores_1e4", 0) == 0)
    return "scores up to 10^4: exp of an unreduced score overflows; subtract the running max before exp, and compute "
           "e^(m_old - m_new) from the same rounded products, so an unchanged max gives exactly 1.";
  if (name == "all_scores_equal")
    return "every score of a row equal and in the hundreds: e^s alone overflows fp32; only the max subtraction gives "
           "e^0 = 1 per key, and O must be the plain mean of the visible V rows.";
  if (name == "one_dominant_key")
    return "one key dominates each row (P > 0.99) with a tail of e^-10 weights: a lost tail or a wrong max shows here.";
  if (name.rfind("fp16_edge", 0) == 0)
    return "values near fp16's largest (65504): accumulate in fp32 and round only the final O (and gradients) to the "
           "storage type.";
  if (name == "fully_masked_rows")
    return "causal with Nq > Nk: the first Nq - Nk rows see no key and must give O = 0, L = +inf (and dQ = 0) "
           "exactly, never NaN from -inf - (-inf) or 0/0.";
  return "";
}

// The numerics cases, as tests/test_gpu_numerics.cpp runs them: each storage type of the step at d = 64
// and its largest head dim, judged by the rule, and on top: O = 0, L = +inf, dQ = 0 exactly on rows that
// see no key, every other value finite. Appends to rs; returns a hint per failing case.
std::vector<std::string> run_numerics(const Step& s, bool backward, std::vector<Result>& rs) {
  using namespace fl::test;
  std::vector<std::string> hints;
  std::set<std::string> hinted;
  for (const NumCase& c : numerics_cases()) {
    std::vector<int64_t> dims = {64, s.head_dims.empty() ? 128 : s.head_dims.back()};
    dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
    for (DType t : s.dtypes)
      for (int64_t d : dims) {
        Result r{Case{-1, c.Nq, c.Nk, 0, c.causal, 1.0}, numerics_shape(c, t, d)};
        r.numerics = c.name;
        const std::string why = s.refusal(r.p);
        int64_t odd = 0;  // values that are not finite, or not exactly 0 / +inf on rows that see no key
        std::string first_odd;
        if (!why.empty()) {
          r.error = "refused: " + why;
        } else {
          try {
            const Inputs in = c.build(r.p, seed_of(c));
            r.p = in.p;  // the case may have set the scale
            const bool bwd = backward && (r.p.dtype != DType::f16 || c.fp16_backward);
            const Outputs got = run_step(s, in, bwd);
            const Verdict v = verify(in, got, expected_for(in, bwd), bwd);
            r.checks = v.checks;
            r.tol_used = v.tol_used;
            const Problem& p = r.p;
            const int64_t unseen = unseen_rows(p);
            for (int64_t b = 0; b < p.B; ++b)
              for (int64_t h = 0; h < p.H; ++h)
                for (int64_t i = 0; i < p.Nq; ++i) {
                  const bool none = i < unseen;
                  const float L = got.lse[size_t(p.lse_at(b, h, i))];
                  bool ok = none ? (std::isinf(L) && L > 0) : std::isfinite(L);
                  for (int64_t k = 0; k < p.d && ok; ++k) {
                    const size_t at = size_t(p.q_row(b, h, i) + k);
                    const float o = got.o[at], dq = bwd ? got.dq[at] : 0.f;
                    ok = none ? (o == 0.f && dq == 0.f) : (std::isfinite(o) && std::isfinite(dq));
                  }
                  if (!ok && odd++ == 0)
                    first_odd = "row (" + std::to_string(b) + ", " + std::to_string(h) + ", " + std::to_string(i) + ")" +
                                (none ? ", which sees no key: O = 0, L = +inf (and dQ = 0) exactly expected"
                                      : ": a NaN or Inf in O, L (or dQ)");
                }
            r.pass = v.pass && odd == 0;
          } catch (const std::exception& e) {
            r.error = e.what();
          }
        }
        if (!r.pass) {
          std::cout << "FAIL  " << shape(r) << "  seed " << seed_of(c) << "\n";
          if (!r.error.empty()) std::cout << "      error: " << r.error << "\n";
          for (const Check& ch : r.checks)
            if (!ch.pass)
              std::cout << "      " << ch.tensor << ": " << ch.bad << " bad entries (" << ch.nans << " NaN, " << ch.infs
                        << " Inf); largest error among finite entries " << ch.max_err << " = " << std::setprecision(3)
                        << 100 * ch.frac << "% of the tolerance " << ch.tol << "; first bad " << ch.first_bad << "\n";
          if (odd > 0) std::cout << "      " << odd << " rows with values that must not be there; first " << first_odd << "\n";
          if (hinted.insert(c.name).second) hints.push_back("numerics case " + std::string(c.name) + " fails: " + numerics_hint(c.name));
        } else {
          std::cout << "pass  " << shape(r) << "  tolerance used " << std::setprecision(3) << 100 * r.tol_used << "%\n";
        }
        std::cout << std::flush;
        rs.push_back(std::move(r));
      }
  }
  return hints;
}

// A GPU step's speed, once it is correct: the student's step and the step before it (its base, which
// the exercise's build links on purpose: cmake/lab.cmake), timed the ladder's way on the headline
// problem (fp16, B = 4, H = 16, N = 4096, d = 128). Informative: a slow solution is not a failure,
// but the exercise's README says what speed to expect and why.
void time_against_base(const Step& s, bool backward) {
  Problem p;
  p.B = 4, p.H = 16, p.H_kv = 16, p.Nq = 4096, p.Nk = 4096, p.d = 128, p.dtype = DType::f16;
  TimeOptions opt;
  opt.reps = 30;
  auto line = [&](const Step& st, bool bwd) {
    const std::string why = st.refusal(p);
    if (!why.empty()) {
      std::cout << "  " << st.folder << (bwd ? " backward" : "") << ": not timed: " << why << "\n";
      return;
    }
    const Stats t = time_step(st, p, bwd, opt);
    const double flops = 4.0 * double(p.B * p.H) * double(p.Nq) * double(p.Nk) * double(p.d) * (bwd ? 2.5 : 1.0);
    std::cout << "  " << std::left << std::setw(22) << st.folder + (bwd ? " backward" : "") << std::right
              << std::fixed << std::setprecision(3) << std::setw(9) << t.median_ms << " ms  " << std::setprecision(1)
              << std::setw(7) << flops / (t.median_ms * 1e9) << " TFLOP/s\n" << std::defaultfloat;
  };
  std::cout << "\nlab check: speed at " << p.describe() << " (median of " << opt.reps
            << " launches; FLOPs 4·B·H·Nq·Nk·d, backward 2.5x):\n";
  try {
    line(s, backward);
    const Step* base = s.base_step();
    if (base && base->impl && (!backward || base->has_backward())) line(*base, backward);
    else if (base) std::cout << "  (the step before, " << base->folder << ", has no " << (backward ? "backward" : "build here")
                             << " to compare with)\n";
  } catch (const std::exception& e) {
    std::cout << "  not timed: " << e.what() << "\n";
  }
}

int run(const Step& s) {
  const bool backward = s.has_backward();
  std::cout << "lab check: step " << s.folder << " (" << s.change << ")\n"
            << "  your source in place of steps/" << s.folder << ", against the fp64 oracle by the tolerance rule "
            << "(max|yours - oracle| <= 2 max|Algorithm 0 at your precision - oracle| + floor), "
            << (backward ? "forward and backward, " : "") << "on the ragged shape matrix (B = 3, H = 9, seeds "
            << kSeed << " + case) and the numerics cases (scores up to 1e4, equal scores, a dominant key, fp16's edge, "
            << "rows that see no key)\n" << std::flush;
  if (s.gpu()) {
    std::string why;
    if (!gpu_device(&why)) {
      const char* req = std::getenv("FLASHLADDER_REQUIRE_GPU");
      const bool required = req && *req && std::strcmp(req, "0") != 0;
      std::cout << "lab check: step " << s.folder << " needs a GPU: " << why
                << (required ? " (FLASHLADDER_REQUIRE_GPU is set: that is a failure)" : " (skipped)") << "\n";
      return required ? 1 : 77;
    }
  }
  std::vector<Result> rs;
  for (const Case& c : fl::test::ragged_cases()) {
    Result r{c, fl::test::problem_for(c, s)};
    const std::string why = s.refusal(r.p);
    if (!why.empty()) {
      r.error = "refused: " + why;
    } else {
      InputOptions opt;
      opt.q_scale = c.q_scale;
      const Inputs in = make_inputs(r.p, kSeed + uint64_t(c.index), opt);
      try {
        const Outputs got = run_step(s, in, backward);
        const Expected e = expected_for(in, backward);
        const Verdict v = verify(in, got, e, backward);
        r.pass = v.pass;
        r.checks = v.checks;
        r.tol_used = v.tol_used;
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
    if (!r.pass) {
      std::cout << "FAIL  " << shape(r) << "  seed " << kSeed + uint64_t(c.index) << "\n";
      if (!r.error.empty()) std::cout << "      error: " << r.error << "\n";
      for (const Check& ch : r.checks)
        if (!ch.pass)
          std::cout << "      " << ch.tensor << ": " << ch.bad << " bad entries (" << ch.nans << " NaN, " << ch.infs
                    << " Inf); largest error among finite entries " << ch.max_err << " = " << std::setprecision(3)
                    << 100 * ch.frac << "% of the tolerance " << ch.tol << "; first bad " << ch.first_bad << "\n";
    } else {
      std::cout << "pass  " << shape(r) << "  tolerance used " << std::setprecision(3) << 100 * r.tol_used << "%\n";
    }
    std::cout << std::flush;
    rs.push_back(std::move(r));
  }
  const std::vector<std::string> num_hints = run_numerics(s, backward, rs);
  const size_t n_pass = size_t(std::count_if(rs.begin(), rs.end(), [](const Result& r) { return r.pass; }));
  double worst = 0;
  for (const Result& r : rs) worst = std::max(worst, r.tol_used);
  std::cout << "\nlab check: " << n_pass << " of " << rs.size() << " shapes pass (the ragged matrix and the numerics cases)";
  if (n_pass == rs.size()) {
    std::cout << "; the most of the tolerance any used: " << std::setprecision(3) << 100 * worst
              << "%\nlab check: PASS: step " << s.folder << " is correct on every shape of the suite\n";
    if (s.gpu()) time_against_base(s, backward);
    return 0;
  }
  std::cout << "\nlab check: FAIL: what the failing shapes have in common:\n";
  std::vector<Result> ragged;  // the shape patterns are about the ragged matrix only
  for (const Result& r : rs)
    if (r.numerics.empty()) ragged.push_back(r);
  auto hints = diagnose(ragged, backward);
  hints.insert(hints.end(), num_hints.begin(), num_hints.end());
  if (hints.empty()) std::cout << "  (no single pattern: start with the first failing shape above)\n";
  for (const std::string& h : hints) std::cout << "  - " << h << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: lab_suite STEP (run by 'flashladder lab check DIR')\n";
    return 2;
  }
  const fl::Step* s = fl::find_step(argv[1]);
  if (!s) {
    std::cerr << "lab_suite: unknown step '" << argv[1] << "'\n";
    return 2;
  }
  if (!s->impl) {
    std::cerr << "lab_suite: step " << s->folder << " is not in this program (a GPU step, and the flashladder build it links was made without CUDA)\n";
    return 2;
  }
  try {
    return run(*s);
  } catch (const std::exception& e) {
    std::cerr << "lab_suite: error: " << e.what() << "\n";
    return 2;
  }
}

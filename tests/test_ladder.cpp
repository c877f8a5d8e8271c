// flashladder — tests/test_ladder.cpp: every registered step over the ragged matrix, by the
// tolerance rule against the oracle. A step joins this suite by being in steps/ladder.cpp.
#include <gtest/gtest.h>

#include <list>
#include <tuple>

#include "app/cases.hpp"
#include "gpu_gate.hpp"
#include "reference/verify.hpp"

namespace fl::test {
namespace {

constexpr uint64_t kSeed = 20260521;

// The oracle for (case, d, type, backward), shared by consecutive steps that run the same problem:
// the tests run case by case, so a short cache of recent entries is enough.
struct Oracle {
  int case_index;
  int64_t d;
  DType dtype;
  bool backward;
  Inputs in;
  Expected e;
};

const Oracle& oracle_for(const Case& c, const Problem& p, bool backward) {
  static std::list<Oracle> cache;
  for (const Oracle& o : cache)
    if (o.case_index == c.index && o.d == p.d && o.dtype == p.dtype && o.backward == backward) return o;
  InputOptions opt;
  opt.q_scale = c.q_scale;
  Inputs in = make_inputs(p, kSeed + uint64_t(c.index), opt);
  Expected e = expected_for(in, backward);
  cache.push_front({c.index, p.d, p.dtype, backward, std::move(in), std::move(e)});
  if (cache.size() > 4) cache.pop_back();
  return cache.front();
}

using Param = std::tuple<Case, const Step*>;

std::vector<Param> params(bool backward) {
  std::vector<Param> out;
  for (const Case& c : ragged_cases())
    for (const Step& s : ladder())
      if (!backward || s.backward) out.emplace_back(c, &s);
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return case_name(std::get<0>(info.param), *std::get<1>(info.param));
}

class Forward : public ::testing::TestWithParam<Param> {};
class Backward : public ::testing::TestWithParam<Param> {};

void check_step(const Case& c, const Step& s, bool backward) {
  const Problem p = problem_for(c, s);
  const std::string why = s.refusal(p);
  ASSERT_TRUE(why.empty()) << "step " << s.folder << " refused a shape of the matrix: " << why;
  const Oracle& o = oracle_for(c, p, backward);
  Outputs got = run_step(s, o.in, backward);
  Verdict v = verify(o.in, got, o.e, backward);
  for (const Check& ch : v.checks) {
    EXPECT_TRUE(ch.pass) << p.describe() << " seed " << o.in.seed << "\n  " << ch.summary();
    ::testing::Test::RecordProperty(ch.tensor + "_tol_used", std::to_string(ch.frac));
  }
  std::cout << "  [" << s.folder << (backward ? " bwd" : "") << "] " << p.describe() << "  tolerance used "
            << 100 * v.tol_used << "%\n";
}

TEST_P(Forward, MatchesOracle) {
  const auto& [c, s] = GetParam();
  if (s->gpu()) FL_NEED_GPU();
  check_step(c, *s, false);
}

TEST_P(Backward, MatchesOracle) {
  const auto& [c, s] = GetParam();
  if (s->gpu()) FL_NEED_GPU();
  ASSERT_TRUE(s->has_backward()) << s->folder << " declares a backward but this build has none";
  check_step(c, *s, true);
}

INSTANTIATE_TEST_SUITE_P(Ragged, Forward, ::testing::ValuesIn(params(false)), param_name);
// GTEST_ALLOW_UNINSTANTIATED: until a step with a backward is registered, this suite is empty.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Backward);
INSTANTIATE_TEST_SUITE_P(Ragged, Backward, ::testing::ValuesIn(params(true)), param_name);

}  // namespace
}  // namespace fl::test

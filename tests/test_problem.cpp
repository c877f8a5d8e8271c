// flashladder — tests/test_problem.cpp: impossible problems and unsupported requests are refused
// before any work, with a message that names the limit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "app/runner.hpp"
#include "steps/knob.hpp"
#include "steps/ladder.hpp"

namespace fl {
namespace {

Problem ok() {
  Problem p;
  p.B = 2; p.H = 4; p.H_kv = 2; p.Nq = 5; p.Nk = 7; p.d = 8;
  p.dtype = DType::f32;
  return p;
}

void expect_refused(Problem p, const std::string& words) {
  const std::string why = p.invalid_reason();
  EXPECT_NE(why.find(words), std::string::npos) << "message was: " << why;
  EXPECT_THROW(p.validate(), Error);
  Inputs dummy;
  dummy.p = p;
  EXPECT_THROW(run_step(*find_step("01"), dummy), Error);  // refused before touching the (empty) data
}

TEST(Problem, Refusals) {
  Problem p = ok();
  EXPECT_EQ(p.invalid_reason(), "");
  p = ok(); p.d = 0; expect_refused(p, "d = 0 is not allowed: it must be at least 1");
  p = ok(); p.Nq = 0; expect_refused(p, "Nq = 0");
  p = ok(); p.Nk = -3; expect_refused(p, "Nk = -3");
  p = ok(); p.B = 0; expect_refused(p, "B = 0");
  p = ok(); p.H = 6; p.H_kv = 4; expect_refused(p, "H = 6 is not a multiple of H_kv = 4");
  p = ok(); p.scale = -1; expect_refused(p, "softmax scale = -1 is not allowed");
  p = ok(); p.scale = INFINITY; expect_refused(p, "must be finite and > 0");

  p = ok(); p.Nq = p.Nk = int64_t(1) << 30; p.H = 1 << 12; p.H_kv = 1; expect_refused(p, "the limit is 2^40");
  // B · Nq wrapped int64 to 0 and passed the limit (flashladder check -B 2^62 -N 4: the oracle then
  // read far out of bounds); every size is bounded, and the product taken in double.
  p = ok(); p.B = int64_t(1) << 62; p.Nq = p.Nk = 4; p.H = p.H_kv = p.d = 1;
  expect_refused(p, "B = 4611686018427387904 is more than the limit 2^40");
  p = ok(); p.B = int64_t(1) << 33; p.Nq = p.Nk = int64_t(1) << 31; p.H = p.H_kv = p.d = 1;
  expect_refused(p, "elements in one tensor; the limit is 2^40");
  p = ok(); p.B = std::numeric_limits<int64_t>::max(); expect_refused(p, "B = 9223372036854775807 is more than");
}

TEST(Problem, DerivedSizesAndMask) {
  Problem p = ok();
  EXPECT_EQ(p.q_elems(), 2 * 4 * 5 * 8);
  EXPECT_EQ(p.kv_elems(), 2 * 2 * 7 * 8);
  EXPECT_EQ(p.kv_head(3), 1);
  p.causal = true;  // bottom-right: query i sees key j iff j <= i + Nk − Nq = i + 2
  EXPECT_TRUE(p.visible(0, 2));
  EXPECT_FALSE(p.visible(0, 3));
  EXPECT_TRUE(p.visible(4, 6));
  EXPECT_DOUBLE_EQ(p.softmax_scale(), 1 / std::sqrt(8.0));
  EXPECT_DOUBLE_EQ(flops_forward(p), 0.5 * 4 * 2 * 4 * 5 * 7 * 8);
  EXPECT_DOUBLE_EQ(flops_backward(p), 2.5 * flops_forward(p));
}

TEST(Ladder, EveryStepIsWellFormedAndFindable) {
  std::string prev = "00";
  for (const Step& s : ladder()) {
    EXPECT_GT(s.folder, prev) << "steps must be listed in ladder order";
    prev = s.folder;
    EXPECT_EQ(s.folder.substr(0, 2), s.number.substr(0, 2));
    EXPECT_FALSE(s.change.empty());
    EXPECT_FALSE(s.dtypes.empty());
    EXPECT_EQ(find_step(s.number), &s);
    EXPECT_EQ(find_step(s.folder), &s);
    if (!s.gpu()) EXPECT_NE(s.impl, nullptr) << "CPU steps are always built";
  }
  EXPECT_EQ(find_step("no_such_step"), nullptr);
}

// Every step but the first names a base earlier in the ladder (the step its diff is against); only a
// step that adds the backward to a forward-only base is shown whole (steps/ladder.hpp).
TEST(Ladder, EveryStepNamesAnEarlierBase) {
  const auto& L = ladder();
  EXPECT_EQ(L.front().base_step(), nullptr);
  for (size_t i = 1; i < L.size(); ++i) {
    const Step* b = L[i].base_step();
    ASSERT_NE(b, nullptr) << L[i].folder << " names no base step ('" << L[i].base << "')";
    EXPECT_LT(b, &L[i]) << L[i].folder << "'s base " << b->folder << " is not before it";
    EXPECT_EQ(L[i].diff_whole(), L[i].backward && !b->backward) << L[i].folder;
  }
  EXPECT_EQ(find_step("09")->base_step(), find_step("08d"));
  EXPECT_EQ(find_step("09b")->base_step(), find_step("09"));
}

TEST(Ladder, UnsupportedTypeAndHeadDimAreRefusedByName) {
  Problem p = ok();
  p.dtype = DType::f16;
  EXPECT_NE(find_step("01")->refusal(p).find("does not support storage type fp16; it supports fp32"), std::string::npos);
  for (const Step& s : ladder())
    if (!s.head_dims.empty()) {
      Problem q = ok();
      q.dtype = s.dtypes.front();
      q.d = 7;
      EXPECT_NE(s.refusal(q).find("does not support head dim d = 7"), std::string::npos) << s.folder;
    }
}

// The steps take the scale and the softcap in fp32: beyond what fp32 holds every step refuses, naming the
// limit (a softcap of 1e308 ran `run` to outputs of NaN, exit 0); the oracle, in double, takes them.
TEST(Ladder, ScaleAndSoftcapBeyondFp32AreRefusedByEveryStep) {
  for (const Step& s : ladder()) {
    Problem q = ok();
    q.dtype = s.dtypes.front();
    q.scale = 1e39;
    EXPECT_NE(s.refusal(q).find("takes the softmax scale in fp32, which holds 1.18e-38 to 3.4e38, not 1e+39"),
              std::string::npos) << s.folder << ": " << s.refusal(q);
    q.scale = 1e-46;
    EXPECT_NE(s.refusal(q).find("not 1e-46"), std::string::npos) << s.folder;
    q = ok();
    q.dtype = s.dtypes.front();
    q.softcap = 1e308;
    EXPECT_NE(s.refusal(q).find("takes the softcap in fp32"), std::string::npos) << s.folder;
  }
  Problem q = ok();
  q.scale = 1e300;
  EXPECT_EQ(q.invalid_reason(), "");  // the problem itself is valid: the oracle computes it in double
}

// The step's name goes on a refusal once: refusal() names it, why_not() does not (for lines that
// start with the folder: "08e_wgmma: not run: …"). A line that printed both said "step X: step X: …".
size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(Ladder, RefusalNamesTheStepOnceAndWhyNotNever) {
  for (const Step& s : ladder()) {
    std::vector<Problem> refused;
    Problem t = ok();
    t.dtype = s.gpu() ? DType::f32 : DType::f16;  // no GPU step stores fp32; the CPU steps only fp32
    refused.push_back(t);
    if (!s.head_dims.empty()) {
      Problem d = ok();
      d.dtype = s.dtypes.front();
      d.d = 7;
      refused.push_back(d);
    }
    Problem bad = ok();
    bad.Nq = 0;
    refused.push_back(bad);
    const std::string name = "step " + s.folder;
    for (const Problem& p : refused) {
      const std::string named = s.refusal(p), why = s.why_not(p);
      ASSERT_FALSE(why.empty()) << s.folder << " accepts " << p.describe();
      EXPECT_EQ(named, s.named(why));
      EXPECT_EQ(named.rfind(name + ": ", 0), 0u) << named;
      EXPECT_EQ(count_of(named, name), 1u) << named;
      EXPECT_EQ(count_of(why, name), 0u) << why;
    }
  }
}

}  // namespace
}  // namespace fl

namespace fl {
namespace {

// The timing's host inputs (app/runner.cpp): make_inputs' values, shared with the next request for the
// same problem, seeds and count, drawn anew for anything else (a packed batch's offsets included).
TEST(TimingInputs, SameRequestSharedOtherRequestsDrawnAnew) {
  Problem p;
  p.B = 2; p.H = 3; p.H_kv = 1; p.Nq = 17; p.Nk = 29; p.d = 32; p.dtype = DType::f16;
  const auto a = timing_inputs(p, 7, 2);
  ASSERT_EQ(a->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const Inputs want = make_inputs(p, 7 + uint64_t(i));
    EXPECT_EQ((*a)[size_t(i)].q, want.q);
    EXPECT_EQ((*a)[size_t(i)].k, want.k);
    EXPECT_EQ((*a)[size_t(i)].v, want.v);
    EXPECT_EQ((*a)[size_t(i)].dO, want.dO);
  }
  EXPECT_EQ(timing_inputs(p, 7, 2).get(), a.get()) << "the same request draws again";
  const auto b = timing_inputs(p, 8, 2);
  EXPECT_NE(b.get(), a.get());
  EXPECT_EQ((*b)[0].q, make_inputs(p, 8).q);
  EXPECT_EQ((*a)[0].q, make_inputs(p, 7).q) << "an earlier caller's sets stay valid";
  Problem causal = p;
  causal.causal = true;
  EXPECT_NE(timing_inputs(causal, 8, 2).get(), b.get());
  Problem packed = p;  // the same totals, other offsets: other inputs
  packed.Nq = 24;       // the longest sequence
  packed.cu_seqlens_q = {0, 10, 34};
  packed.cu_seqlens_k = {0, 29, 58};
  const auto c = timing_inputs(packed, 8, 1);
  Problem packed2 = packed;
  packed2.cu_seqlens_q = {0, 14, 34};
  const auto c2 = timing_inputs(packed2, 8, 1);
  EXPECT_NE(c2.get(), c.get());
  EXPECT_EQ((*c2)[0].p.cu_seqlens_q, packed2.cu_seqlens_q);
}

}  // namespace
}  // namespace fl

// steps/knob.hpp: the launchers' tuning knobs from the environment (FLASHLADDER_SPLITS and the
// others). Unset or empty is "no knob"; a whole number in range is taken; anything else is refused
// naming the variable, the value, the range and the meaning, not read as 0 or clamped.
TEST(EnvKnob, TakesAWholeNumberInRangeAndRefusesAnythingElseByName) {
  const char* name = "FLASHLADDER_TEST_KNOB";
  unsetenv(name);
  EXPECT_FALSE(fl::env_knob(name, 1, INT64_MAX, "blocks").has_value());
  setenv(name, "", 1);
  EXPECT_FALSE(fl::env_knob(name, 1, INT64_MAX, "blocks").has_value());
  setenv(name, "12", 1);
  EXPECT_EQ(fl::env_knob(name, 1, INT64_MAX, "blocks").value(), 12);
  setenv(name, "0", 1);
  EXPECT_EQ(fl::env_knob(name, 0, 5, "bytes").value(), 0);
  for (const char* bad : {"abc", "4x", " ", "1.5", "-3", "0", "99999999999999999999", "7"}) {
    setenv(name, bad, 1);
    try {
      fl::env_knob(name, 1, 6, "the most blocks");
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const fl::Error& e) {
      const std::string why = e.what();
      EXPECT_EQ(why, std::string(name) + " = '" + bad + "' is not a whole number from 1 to 6 (the most blocks)");
    }
  }
  setenv(name, "-1", 1);
  try {
    fl::env_knob(name, 0, INT64_MAX, "bytes");
    ADD_FAILURE() << "-1 was taken";
  } catch (const fl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a whole number >= 0 (bytes)"), std::string::npos) << e.what();
  }
  unsetenv(name);
}

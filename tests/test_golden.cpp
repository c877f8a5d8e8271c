// flashladder — tests/test_golden.cpp: golden sets and `oracle check` (reference/golden.cpp, what
// the CLI prints). A correct candidate passes; each kind of wrong candidate (perturbed, NaN, a finite
// L where the row sees no key, transposed, wrong shape, wrong dtype) fails with its own message; a
// step run on the files passes; a broken golden set or a missing file is bad input (fl::Error).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "app/runner.hpp"
#include "reference/golden.hpp"
#include "reference/verify.hpp"

namespace fl {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kSeed = 20260607;

// Causal with Nq > Nk, so the first Nq − Nk rows see no key (O = 0, L = +inf); GQA; d divides nothing.
Problem small(DType t) {
  Problem p;
  p.B = 2;
  p.H = 4;
  p.H_kv = 2;
  p.Nq = 21;
  p.Nk = 13;
  p.d = 7;
  p.causal = true;
  p.dtype = t;
  return p;
}

struct Dirs {
  fs::path root;
  explicit Dirs(const std::string& name)
      : root(fs::temp_directory_path() / ("fl_golden_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(root);
    fs::create_directories(root / "cand");
  }
  ~Dirs() { fs::remove_all(root); }
  std::string golden() const { return (root / "golden").string(); }
  std::string cand() const { return (root / "cand").string(); }
};

// The golden f8 file of `name` as doubles, and a writer for a candidate tensor in f8.
std::vector<double> golden_values(const Dirs& d, const std::string& name) {
  return golden::to_double(npy::read((fs::path(d.golden()) / (name + ".npy")).string()));
}
void put(const Dirs& d, const std::string& name, const std::vector<double>& xs, std::vector<int64_t> shape) {
  npy::Array a;
  a.kind = npy::Kind::f8;
  a.shape = std::move(shape);
  a.data.resize(xs.size() * 8);
  std::memcpy(a.data.data(), xs.data(), a.data.size());
  npy::write((fs::path(d.cand()) / (name + ".npy")).string(), a);
}
// The candidate = the golden outputs themselves (all five).
void copy_golden(const Dirs& d, const golden::Manifest& m) {
  for (const golden::TensorInfo& t : m.tensors)
    if (!t.input) put(d, t.name, golden_values(d, t.name), t.shape);
}
const golden::TensorResult& result(const golden::Report& r, const std::string& name) {
  for (const auto& t : r.tensors)
    if (t.name == name) return t;
  throw Error("no result for " + name);
}

TEST(Golden, ManifestHoldsTheToleranceCompareComputes) {
  Dirs d("tol");
  const Problem p = small(DType::f16);
  golden::generate(p, kSeed, d.golden());
  const golden::Manifest m = golden::read_manifest(d.golden());
  EXPECT_EQ(m.p.describe(), [&] { Problem q = p; q.scale = p.softmax_scale(); return q.describe(); }());
  EXPECT_EQ(m.seed, kSeed);
  // The same inputs, the same oracle, the same tolerance: exactly, not approximately.
  const Inputs in = make_inputs(p, kSeed);
  const Inputs back = golden::read_inputs(d.golden(), m);
  EXPECT_EQ(back.q, in.q);
  EXPECT_EQ(back.dO, in.dO);
  const Expected e = expected_for(in, true);
  EXPECT_EQ(m.at("o").tol.tol, tolerance_for(e.fwd.o, e.base_fwd.o, p.dtype).tol);
  EXPECT_EQ(m.at("lse").tol.tol, tolerance_for(e.fwd.lse, e.base_fwd.lse, DType::f32).tol);
  EXPECT_EQ(m.at("dk").tol.tol, tolerance_for(e.bwd.dk, e.base_bwd.dk, p.dtype).tol);
  EXPECT_EQ(golden_values(d, "o"), e.fwd.o);
  const std::vector<double> lse = golden_values(d, "lse");
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] > 0) << "row 0 sees no key: L = +inf";
}

TEST(Golden, CorrectCandidatePasses) {
  Dirs d("pass");
  const golden::Manifest m = golden::generate(small(DType::f16), kSeed, d.golden());
  copy_golden(d, m);
  const golden::Report r = golden::check(d.golden(), d.cand(), true);
  EXPECT_TRUE(r.pass);
  ASSERT_EQ(r.tensors.size(), 5u);
  for (const auto& t : r.tensors) EXPECT_EQ(t.check.frac, 0) << t.name;
}

TEST(Golden, StepsRunOnTheFilesPass) {
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    Dirs d(std::string("steps_") + dtype_name(t));
    const golden::Manifest m = golden::generate(small(t), kSeed, d.golden());
    for (const char* name : {"01", "02"}) {
      Inputs in = golden::read_inputs(d.golden(), m);
      in.p.dtype = DType::f32;  // CPU steps compute in fp32; fp16/bf16 values are exact in it
      golden::write_outputs(d.cand(), in.p, run_step(*find_step(name), in, false), false);
      const golden::Report r = golden::check(d.golden(), d.cand(), false);
      EXPECT_TRUE(r.pass) << name << " " << dtype_name(t) << ": " << result(r, "o").check.summary() << " | "
                          << result(r, "lse").check.summary();
    }
  }
}

TEST(Golden, PerturbedEntryFailsNamingIt) {
  Dirs d("perturbed");
  const golden::Manifest m = golden::generate(small(DType::f16), kSeed, d.golden());
  copy_golden(d, m);
  std::vector<double> o = golden_values(d, "o");
  const Problem& p = m.p;
  const int64_t at = p.q_row(1, 2, 19) + 5;  // (1, 2, 19, 5)
  o[at] += 1.5 * m.at("o").tol.tol;
  put(d, "o", o, m.at("o").shape);
  const golden::Report r = golden::check(d.golden(), d.cand(), false);
  EXPECT_FALSE(r.pass);
  const auto& res = result(r, "o");
  EXPECT_FALSE(res.pass);
  EXPECT_EQ(res.check.bad, 1);
  EXPECT_NEAR(res.check.frac, 1.5, 1e-6);
  EXPECT_NE(res.check.first_bad.find("(1, 2, 19, 5)"), std::string::npos) << res.check.first_bad;
  EXPECT_NE(res.check.first_bad.find("seed 20260607"), std::string::npos) << res.check.first_bad;
  EXPECT_TRUE(result(r, "lse").pass);
  // Just inside the tolerance passes: the rule is err <= tol, not a guess.
  o[at] -= 0.6 * m.at("o").tol.tol;
  put(d, "o", o, m.at("o").shape);
  EXPECT_TRUE(golden::check(d.golden(), d.cand(), false).pass);
}

TEST(Golden, NaNAndInfinitiesFail) {
  Dirs d("nan");
  const golden::Manifest m = golden::generate(small(DType::bf16), kSeed, d.golden());
  copy_golden(d, m);
  std::vector<double> dq = golden_values(d, "dq");
  dq[3] = NAN;
  dq[4] = INFINITY;
  put(d, "dq", dq, m.at("dq").shape);
  std::vector<double> lse = golden_values(d, "lse");
  lse[0] = 1e30;  // a row that sees no key must give +inf, not a big number
  lse[1] = NAN;
  put(d, "lse", lse, m.at("lse").shape);
  const golden::Report r = golden::check(d.golden(), d.cand(), false);  // dq present: judged anyway
  EXPECT_FALSE(r.pass);
  const Check& q = result(r, "dq").check;
  EXPECT_EQ(q.nans, 1);
  EXPECT_EQ(q.infs, 1);
  EXPECT_EQ(q.bad, 2);
  EXPECT_NE(q.first_bad.find("step=nan"), std::string::npos) << q.first_bad;
  const Check& l = result(r, "lse").check;
  EXPECT_EQ(l.bad, 2);
  EXPECT_EQ(l.nans, 1);
  EXPECT_NE(l.first_bad.find("(0, 0, 0) step=1e+30 oracle=inf"), std::string::npos) << l.first_bad;
  EXPECT_TRUE(result(r, "o").pass);
}

TEST(Golden, TransposedFails) {
  Dirs d("transposed");
  const golden::Manifest m = golden::generate(small(DType::f16), kSeed, d.golden());
  copy_golden(d, m);
  const Problem& p = m.p;
  const std::vector<double> o = golden_values(d, "o");
  // [B][H][Nq][d] written as [B][H][d][Nq]: the shape gives it away.
  std::vector<double> t(o.size());
  for (int64_t bh = 0; bh < p.B * p.H; ++bh)
    for (int64_t i = 0; i < p.Nq; ++i)
      for (int64_t c = 0; c < p.d; ++c) t[(bh * p.d + c) * p.Nq + i] = o[(bh * p.Nq + i) * p.d + c];
  put(d, "o", t, {p.B, p.H, p.d, p.Nq});
  golden::Report r = golden::check(d.golden(), d.cand(), false);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(result(r, "o").mismatch.find("shape mismatch: o.npy has shape (2, 4, 7, 21) but the manifest says "
                                         "(2, 4, 21, 7) (the same dimensions in another order: transposed?)"),
            std::string::npos)
      << result(r, "o").mismatch;
  // The same transposed values reshaped to the expected shape: the values give it away.
  put(d, "o", t, m.at("o").shape);
  r = golden::check(d.golden(), d.cand(), false);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(result(r, "o").mismatch.empty());
  EXPECT_GT(result(r, "o").check.bad, 0);
}

TEST(Golden, WrongShapeAndDtypeAreReportedAsSuch) {
  Dirs d("shape");
  const golden::Manifest m = golden::generate(small(DType::bf16), kSeed, d.golden());
  copy_golden(d, m);
  std::vector<double> lse = golden_values(d, "lse");
  lse.pop_back();
  put(d, "lse", lse, {int64_t(lse.size())});
  // o in fp16 when the storage type is bf16: neither bf16 bits nor a wider float.
  npy::Array o16;
  o16.kind = npy::Kind::f2;
  o16.shape = m.at("o").shape;
  o16.data.assign(size_t(o16.count()) * 2, 0);
  npy::write((fs::path(d.cand()) / "o.npy").string(), o16);
  const golden::Report r = golden::check(d.golden(), d.cand(), false);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(result(r, "lse").mismatch.find("shape mismatch: lse.npy has shape (167,) but the manifest says (2, 4, 21)"),
            std::string::npos)
      << result(r, "lse").mismatch;
  EXPECT_NE(result(r, "o").mismatch.find("dtype mismatch: o.npy is <f2 but the manifest's storage type for o is bf16"),
            std::string::npos)
      << result(r, "o").mismatch;
}

TEST(Golden, MissingOrMalformedFilesAreBadInput) {
  Dirs d("missing");
  const golden::Manifest m = golden::generate(small(DType::f16), kSeed, d.golden());
  auto throws = [&](const std::string& cand, bool bwd, const std::string& what) {
    try {
      golden::check(d.golden(), cand, bwd);
      ADD_FAILURE() << "no error; wanted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  throws(d.cand(), false, "o.npy: missing");
  copy_golden(d, m);
  fs::remove(fs::path(d.cand()) / "dv.npy");
  EXPECT_TRUE(golden::check(d.golden(), d.cand(), false).pass);  // forward only: dv not needed
  throws(d.cand(), true, "dv.npy: missing");
  throws((d.root / "nowhere").string(), false, "the candidate folder does not exist");
  std::ofstream(fs::path(d.cand()) / "o.npy") << "not numpy";
  throws(d.cand(), false, "not a .npy file");
  // A broken manifest is refused with the field it breaks.
  const fs::path man = fs::path(d.golden()) / "manifest.json";
  std::string text;
  {
    std::ifstream f(man);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto with = [&](const std::string& from, const std::string& to, const std::string& what) {
    std::string t = text;
    const size_t at = t.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    std::ofstream(man) << t;
    try {
      golden::read_manifest(d.golden());
      ADD_FAILURE() << "accepted a manifest with " << to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  with("\"Nq\": 21", "\"Nq\": 22", "shape (2, 4, 21, 7) disagrees with the problem");
  with("\"H_kv\": 2", "\"H_kv\": 3", "H = 4 is not a multiple of H_kv = 3");
  with("\"tol\": ", "\"tol\": -", "field 'tol' = -");
  with("\"tol\": ", "\"tol\": -", "must be a finite number >= 0");
  with("\"seed\": ", "\"seed\": \"x\", \"s\": ", "field 'seed' = \"x\" is not allowed: it must be an integer from 0 to");
  // Issue 13: non-integers, negatives and out-of-range integers, quoted as written, never truncated.
  with("\"B\": 2", "\"B\": 1.9", "field 'B' = 1.9 is not allowed: it must be an integer from 1 to 1099511627776");
  with("\"B\": 2", "\"B\": 1e300", "field 'B' = 1e300 is not allowed");
  with("\"B\": 2", "\"B\": 18446744073709551615", "field 'B' = 18446744073709551615 is out of range");
  with("\"B\": 2", "\"B\": -2", "field 'B' = -2 is out of range");
  with("\"format_version\": 1", "\"format_version\": 1.9", "field 'format_version' = 1.9 is not allowed");
  with("\"seed\": ", "\"seed\": -1, \"s\": ", "field 'seed' = -1 is out of range: it must be an integer from 0 to 18446744073709551615");
  // A tol that is not 2 · baseline_err + floor: refused, not trusted to pass anything.
  with("\"tol\": ", "\"tol\": 1e300, \"t\": ", "tol = 1e300 disagrees with the manifest's own rule: 2 * baseline_err (");
  with("{", "[", "not valid JSON");
  with("flashladder-golden", "something-else", "not a flashladder golden manifest");
}

// A forward-only write into a folder that holds gradients from an earlier run left them beside the
// new o and lse, and oracle check (which judges the gradients it finds) passed 5 tensors of two runs.
// The folder is refused, naming the files, before anything is written.
TEST(Golden, ForwardOutputsRefuseStaleGradients) {
  Dirs d("stale_gradients");
  const golden::Manifest m = golden::generate(small(DType::f16), kSeed, d.golden());
  copy_golden(d, m);
  fs::remove(fs::path(d.cand()) / "o.npy");
  fs::remove(fs::path(d.cand()) / "dk.npy");
  Inputs in = golden::read_inputs(d.golden(), m);
  in.p.dtype = DType::f32;
  const Outputs out = run_step(*find_step("01"), in, false);
  try {
    golden::write_outputs(d.cand(), in.p, out, false);
    ADD_FAILURE() << "wrote o and lse beside an earlier run's dq and dv";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds dq.npy, dv.npy from an earlier run"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(fs::path(d.cand()) / "o.npy")) << "refused after writing";
  for (const char* f : {"dq.npy", "dv.npy"}) fs::remove(fs::path(d.cand()) / f);
  EXPECT_EQ(golden::write_outputs(d.cand(), in.p, out, false).size(), 2u);
}

// A generate that fails must not leave a set that mixes two problems: one refused for its tolerance
// (scale 1e300: the baseline overflows) had already replaced q, k, v, do under the old manifest and
// answers, and every correct step then failed its check. It now touches nothing; and one whose writes
// fail partway (here lse.npy cannot be written; a full disk in life) leaves no manifest.json, so the
// folder is refused as a golden set instead of checked against the old answers.
TEST(Golden, FailedGenerateLeavesNoMixedSet) {
  Dirs d("failed_generate");
  golden::generate(small(DType::f16), kSeed, d.golden());
  auto bytes = [&](const char* f) {
    std::ifstream in(fs::path(d.golden()) / f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string q = bytes("q.npy"), manifest = bytes("manifest.json");
  Problem huge = small(DType::f16);
  huge.scale = 1e300;
  EXPECT_THROW(golden::generate(huge, kSeed + 1, d.golden()), Error);
  EXPECT_TRUE(bytes("q.npy") == q) << "a refused generate replaced the inputs";
  EXPECT_TRUE(bytes("manifest.json") == manifest) << "a refused generate replaced the manifest";
  const fs::path lse = fs::path(d.golden()) / "lse.npy";
  fs::remove(lse);
  fs::create_directory(lse);
  try {
    golden::generate(small(DType::f16), kSeed + 1, d.golden());
    ADD_FAILURE() << "wrote a golden set without its lse.npy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is incomplete: it has no manifest.json"), std::string::npos) << e.what();
  }
  try {
    golden::read_manifest(d.golden());
    ADD_FAILURE() << "a half-written golden set kept a manifest";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("manifest.json: cannot be opened"), std::string::npos) << e.what();
  }
}

// JSON nested 100000 deep (200 KB) inside the problem crashed the reader (exit 139): nlohmann copies,
// prints and compares a value by recursion, one stack frame a level. The reader refuses a nesting past
// its limit while parsing, naming the limit; a manifest nests 4 deep.
TEST(Golden, DeeplyNestedManifestIsRefusedNamingTheLimit) {
  Dirs d("deep");
  golden::generate(small(DType::f16), kSeed, d.golden());
  std::string text;
  {
    std::ifstream f(fs::path(d.golden()) / "manifest.json");
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t at = text.find("\"problem\": {");
  ASSERT_NE(at, std::string::npos);
  auto nested = [&](size_t depth) {
    std::string t = text;
    t.insert(at + 12, "\"junk\": " + std::string(depth, '[') + std::string(depth, ']') + ", ");
    return t;
  };
  for (size_t depth : {size_t(100000), size_t(63)}) {
    try {
      golden::parse_manifest_text(nested(depth), "m.json");
      ADD_FAILURE() << "accepted a manifest nested " << depth << " deep";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("m.json: nested deeper than 64 levels of arrays and objects"), std::string::npos)
          << e.what();
    }
  }
  // Within the limit, an unknown field is ignored as before (the problem's object is level 2).
  EXPECT_NO_THROW(golden::parse_manifest_text(nested(62), "m.json"));
}

// Issue 13: a golden set whose answers are NaN, or whose floor its answers do not give, is broken:
// refused as bad input whatever the candidate (here the golden set itself, which would otherwise pass).
TEST(Golden, BrokenAnswersAreRefusedWhateverTheCandidate) {
  Dirs d("broken");
  const golden::Manifest m = golden::generate(small(DType::f16), kSeed, d.golden());
  copy_golden(d, m);
  ASSERT_TRUE(golden::check(d.golden(), d.cand(), true).pass);
  const std::string opath = (fs::path(d.golden()) / "o.npy").string();
  npy::Array o = npy::read(opath);
  const npy::Array o_good = o;
  auto refused = [&](const std::string& what) {
    try {
      golden::check(d.golden(), d.cand(), false);
      ADD_FAILURE() << "a broken golden set was used; wanted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const double nan = std::nan(""), big = 1e6;
  std::memcpy(o.data.data() + 8 * 5, &nan, 8);
  npy::write(opath, o);
  refused("o.npy: the golden set is broken: entry 5 is nan");
  o = o_good;
  std::memcpy(o.data.data(), &big, 8);  // finite, but the manifest's floor came from max|o| < 1e6
  npy::write(opath, o);
  refused("floor = ");
  refused("disagrees with o.npy, whose largest entry gives");
}


// --- Issue 21: the variants ----------------------------------------------------------------------

struct VariantSet {
  const char* name;
  std::function<void(Problem&)> set;
};
const std::vector<VariantSet>& variant_sets() {
  static const std::vector<VariantSet> v = {
      {"window", [](Problem& p) { p.window_left = 6; p.window_right = 0; p.causal = false; }},
      {"softcap", [](Problem& p) { p.softcap = 1.5; }},
      {"alibi_heads", [](Problem& p) { p.alibi = Alibi::heads; }},
      {"alibi_batch_heads", [](Problem& p) { p.alibi = Alibi::batch_heads; p.causal = false; }},
      {"varlen", [](Problem& p) { p.cu_seqlens_q = {0, 21, 30}; p.cu_seqlens_k = {0, 5, 18}; }},
      {"varlen_seqused", [](Problem& p) { p.cu_seqlens_q = {0, 3, 24}; p.cu_seqlens_k = {0, 13, 18}; p.seqused_k = {4, 5}; }},
      {"seqused", [](Problem& p) { p.seqused_k = {13, 2}; }},
      {"everything", [](Problem& p) {
         p.window_left = 3; p.window_right = 2; p.softcap = 4; p.alibi = Alibi::batch_heads;
         p.cu_seqlens_q = {0, 17, 30}; p.cu_seqlens_k = {0, 11, 20}; p.seqused_k = {9, 9};
       }},
  };
  return v;
}

// Each variant's golden set round-trips: the manifest gives back the problem, every variant field
// included; the files give back the inputs, slopes included; the golden outputs pass as a candidate
// and a perturbed one fails; steps 01 and 02 run on the files pass.
TEST(GoldenVariants, EveryVariantRoundTrips) {
  for (const VariantSet& v : variant_sets()) {
    for (DType t : {DType::bf16, DType::f32}) {
      SCOPED_TRACE(std::string(v.name) + " " + dtype_name(t));
      Dirs d(std::string("variant_") + v.name + "_" + dtype_name(t));
      Problem p = small(t);
      v.set(p);
      ASSERT_EQ(p.invalid_reason(), "");
      golden::generate(p, kSeed, d.golden());
      const golden::Manifest m = golden::read_manifest(d.golden());
      EXPECT_EQ(m.p.window_left, p.window_left);
      EXPECT_EQ(m.p.window_right, p.window_right);
      EXPECT_EQ(m.p.softcap, p.softcap);
      EXPECT_EQ(m.p.alibi, p.alibi);
      EXPECT_EQ(m.p.cu_seqlens_q, p.cu_seqlens_q);
      EXPECT_EQ(m.p.cu_seqlens_k, p.cu_seqlens_k);
      EXPECT_EQ(m.p.seqused_k, p.seqused_k);
      EXPECT_EQ(m.at("q").shape, p.q_shape());
      EXPECT_EQ(m.at("dk").shape, p.kv_shape());
      EXPECT_EQ(m.at("lse").shape, p.lse_shape());
      EXPECT_EQ(m.tensors.size(), p.alibi == Alibi::none ? 9u : 10u);
      const Inputs in = make_inputs(p, kSeed), back = golden::read_inputs(d.golden(), m);
      EXPECT_EQ(back.q, in.q);
      EXPECT_EQ(back.k, in.k);
      EXPECT_EQ(back.dO, in.dO);
      EXPECT_EQ(back.alibi_slopes, in.alibi_slopes);
      // The answers are the oracle's on these inputs, the tolerance the rule's.
      const Expected e = expected_for(in, true);
      EXPECT_EQ(golden_values(d, "o"), e.fwd.o);
      EXPECT_EQ(golden_values(d, "dk"), e.bwd.dk);
      EXPECT_EQ(m.at("dq").tol.tol, tolerance_for(e.bwd.dq, e.base_bwd.dq, t).tol);
      copy_golden(d, m);
      ASSERT_TRUE(golden::check(d.golden(), d.cand(), true).pass);
      std::vector<double> o = golden_values(d, "o");
      o[o.size() / 2] += 3 * m.at("o").tol.tol;
      put(d, "o", o, m.at("o").shape);
      EXPECT_FALSE(golden::check(d.golden(), d.cand(), true).pass);
      // The steps' forward outputs go where no gradients are (write_outputs refuses to leave them beside).
      for (const char* f : {"dq.npy", "dk.npy", "dv.npy"}) fs::remove(fs::path(d.cand()) / f);
      for (const char* name : {"01", "02"}) {
        Inputs x = golden::read_inputs(d.golden(), m);
        x.p.dtype = DType::f32;
        golden::write_outputs(d.cand(), x.p, run_step(*find_step(name), x, false), false);
        const golden::Report r = golden::check(d.golden(), d.cand(), false);
        EXPECT_TRUE(r.pass) << name << ": " << result(r, "o").check.summary() << " | " << result(r, "lse").check.summary();
      }
    }
  }
}

// The manifest's variant fields are checked like every other field: a malformed one is refused with
// its name; one that is absent (a set written before issue 21) is the plain problem's.
TEST(GoldenVariants, MalformedVariantFieldsAreRefusedByName) {
  Dirs d("variant_fields");
  golden::generate(small(DType::f16), kSeed, d.golden());
  const fs::path man = fs::path(d.golden()) / "manifest.json";
  std::string text;
  {
    std::ifstream f(man);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  auto refused = [&](const std::string& from, const std::string& to, const std::string& what) {
    try {
      golden::parse_manifest_text(edited(from, to), "m.json");
      ADD_FAILURE() << "accepted a manifest with " << to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused("\"window_left\": -1", "\"window_left\": -2",
          "m.json problem: field 'window_left' = -2 is out of range: it must be an integer from -1 to 1099511627776");
  refused("\"window_right\": -1", "\"window_right\": 0.5", "field 'window_right' = 0.5 is not allowed");
  refused("\"softcap\": null", "\"softcap\": 0", "field 'softcap' = 0 is not allowed: it must be null (no softcap) or a finite number > 0");
  refused("\"softcap\": null", "\"softcap\": -1e300", "field 'softcap' = -1e300 is not allowed");
  refused("\"softcap\": null", "\"softcap\": \"30\"", "field 'softcap' = \"30\" must be null (no softcap) or a finite number > 0");
  refused("\"alibi\": \"none\"", "\"alibi\": \"tails\"", "field 'alibi' = \"tails\" is not one of \"none\", \"heads\", \"batch_heads\"");
  refused("\"alibi\": \"none\"", "\"alibi\": \"heads\"", "tensors: missing field 'alibi_slopes'");
  refused("\"cu_seqlens_q\": []", "\"cu_seqlens_q\": [0, 21]", "cu_seqlens_q is given without cu_seqlens_k");
  refused("\"cu_seqlens_q\": []", "\"cu_seqlens_q\": [0, -1]", "field 'cu_seqlens_q[1]' = -1 is out of range: it must be an integer from 0 to 2147483647");
  refused("\"cu_seqlens_q\": []", "\"cu_seqlens_q\": 7", "field 'cu_seqlens_q' = 7 must be an array of integers");
  refused("\"seqused_k\": []", "\"seqused_k\": [1, 2, 3]",
          "seqused_k has 3 entries; it must have B = 2");
  refused("\"seqused_k\": []", "\"seqused_k\": [1, 14]", "seqused_k[1] = 14 is more than the 13 keys sequence 1 holds (Nk)");
  // Offsets that agree with themselves but not with the tensors' shapes: the shapes give it away.
  std::string t = edited("\"cu_seqlens_q\": []", "\"cu_seqlens_q\": [0, 21, 42]");
  t.replace(t.find("\"cu_seqlens_k\": []"), 18, "\"cu_seqlens_k\": [0, 13, 26]");
  try {
    golden::parse_manifest_text(t, "m.json");
    ADD_FAILURE() << "accepted packed offsets with [B][H][Nq][d] shapes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.json tensors.q: shape (2, 4, 21, 7) disagrees with the problem, which gives (42, 4, 7)"),
              std::string::npos)
        << e.what();
  }
  // Absent fields: the plain problem.
  std::string old = text;
  for (const char* f : {"window_left", "window_right", "softcap", "alibi", "cu_seqlens_q", "cu_seqlens_k", "seqused_k"}) {
    const size_t at = old.find(std::string("\"") + f + "\"");
    ASSERT_NE(at, std::string::npos) << f;
    old.erase(at, old.find('\n', at) - at + 1);
  }
  ASSERT_EQ(old.find("window_left"), std::string::npos);
  const size_t dtype = old.find("\"dtype\": \"fp16\",");  // the problem's last field now: no comma after it
  ASSERT_NE(dtype, std::string::npos);
  old.erase(dtype + 15, 1);
  const golden::Manifest m = golden::parse_manifest_text(old, "old.json");
  EXPECT_FALSE(m.p.has_variant());
  EXPECT_EQ(m.p.describe(), golden::parse_manifest_text(text, "m.json").p.describe());
}
}  // namespace
}  // namespace fl

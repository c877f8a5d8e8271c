// flashladder — reference/golden.cpp: writing, reading and judging golden sets.
#include "reference/golden.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "reference/verify.hpp"

namespace fl::golden {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // keeps the manifest in the order a reader expects

namespace {

constexpr const char* kFormat = "flashladder-golden";
constexpr int kFormatVersion = 1;

// The tensors of a golden set, in manifest order, with shapes and types derived from the problem:
// q, k, v, do (and alibi_slopes, fp32, with ALiBi), then o, lse, dq, dk, dv. Variable length: the
// packed shapes ([total_q, H, d], [total_k, H_kv, d], lse [H, total_q]).
std::vector<TensorInfo> layout(const Problem& p) {
  const std::vector<int64_t> qs = p.q_shape(), kvs = p.kv_shape(), ls = p.lse_shape();
  const npy::Kind in = kind_for(p.dtype);
  auto t = [](const char* n, bool input, std::vector<int64_t> shape, npy::Kind k, DType st) {
    TensorInfo i;
    i.name = n;
    i.file = std::string(n) + ".npy";
    i.input = input;
    i.shape = std::move(shape);
    i.kind = k;
    i.storage = st;
    return i;
  };
  std::vector<TensorInfo> ts = {t("q", true, qs, in, p.dtype), t("k", true, kvs, in, p.dtype),
                                t("v", true, kvs, in, p.dtype), t("do", true, qs, in, p.dtype)};
  if (p.alibi != Alibi::none)
    ts.push_back(t("alibi_slopes", true, p.alibi == Alibi::heads ? std::vector<int64_t>{p.H} : std::vector<int64_t>{p.B, p.H},
                   npy::Kind::f4, DType::f32));
  for (TensorInfo o : {t("o", false, qs, npy::Kind::f8, p.dtype), t("lse", false, ls, npy::Kind::f8, DType::f32),
                       t("dq", false, qs, npy::Kind::f8, p.dtype), t("dk", false, kvs, npy::Kind::f8, p.dtype),
                       t("dv", false, kvs, npy::Kind::f8, p.dtype)})
    ts.push_back(o);
  return ts;
}

// The variants' fields of the manifest's problem (written for every set, the plain one's defaults
// included, so a reader never has to guess what an absent field means).
json variant_fields(const Problem& p) {
  json j;
  j["window_left"] = p.window_left;
  j["window_right"] = p.window_right;
  j["softcap"] = p.softcap ? json(*p.softcap) : json(nullptr);
  j["alibi"] = alibi_name(p.alibi);
  j["cu_seqlens_q"] = p.cu_seqlens_q;
  j["cu_seqlens_k"] = p.cu_seqlens_k;
  j["seqused_k"] = p.seqused_k;
  return j;
}

npy::Array from_double(const std::vector<double>& xs, const std::vector<int64_t>& shape) {
  npy::Array a;
  a.kind = npy::Kind::f8;
  a.shape = shape;
  a.data.resize(xs.size() * sizeof(double));
  if (!xs.empty()) std::memcpy(a.data.data(), xs.data(), a.data.size());
  return a;
}

std::string kinds_text(const std::vector<npy::Kind>& ks) {
  std::string s;
  for (npy::Kind k : ks) s += std::string(s.empty() ? "" : ", ") + npy::descr(k) + (k == npy::Kind::u2 ? " (bf16 bits)" : "");
  return s;
}

// A manifest field, or fl::Error naming the manifest and the field.
template <class T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw Error(where + ": missing field '" + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw Error(where + ": field '" + key + "' has the wrong type (" + e.what() + ")");
  }
}

// A manifest field bound in place, or fl::Error naming the manifest and the field. field<json> would
// copy the value, and nlohmann copies by recursion.
const json& member(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw Error(where + ": missing field '" + key + "'");
  return j.at(key);
}

// The text of every floating-point number of a manifest as it was written, by the double's bits: a
// refused value is quoted as the user wrote it ("1e300", not nlohmann's "1e+300").
using RawFloats = std::map<uint64_t, std::string>;

uint64_t bits_of(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// How deep arrays and objects may nest in a manifest (it nests 4: the manifest, tensors, one tensor,
// its shape). nlohmann parses without recursion but copies, prints, compares and destroys a value
// recursively, a stack frame a level: 100000 levels of [[[…]]] (200 KB) overflowed the stack.
constexpr int kMaxDepth = 64;

// nlohmann's DOM parser, with every number_float event's raw text recorded on the way, refusing a
// nesting deeper than kMaxDepth before it is built.
struct RecordingSax {
  nlohmann::detail::json_sax_dom_parser<json> dom;
  RawFloats& raw;
  const std::string& where;
  int depth = 0;
  RecordingSax(json& j, RawFloats& r, const std::string& w) : dom(j, true), raw(r), where(w) {}
  void deeper() {
    if (++depth > kMaxDepth)
      throw Error(where + ": nested deeper than " + std::to_string(kMaxDepth) +
                  " levels of arrays and objects (the limit; a golden manifest nests 4 deep)");
  }
  bool null() { return dom.null(); }
  bool boolean(bool v) { return dom.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    raw.emplace(bits_of(v), s);
    return dom.number_float(v, s);
  }
  bool string(std::string& v) { return dom.string(v); }
  bool binary(json::binary_t& v) { return dom.binary(v); }
  bool start_object(std::size_t n) { return deeper(), dom.start_object(n); }
  bool key(std::string& k) { return dom.key(k); }
  bool end_object() { return --depth, dom.end_object(); }
  bool start_array(std::size_t n) { return deeper(), dom.start_array(n); }
  bool end_array() { return --depth, dom.end_array(); }
  bool parse_error(std::size_t pos, const std::string& tok, const nlohmann::detail::exception& e) {
    return dom.parse_error(pos, tok, e);
  }
};

std::string written(const json& v, const RawFloats& raw) {
  if (v.is_number_float()) {
    auto it = raw.find(bits_of(v.get<double>()));
    if (it != raw.end()) return it->second;
  }
  return v.dump();
}

// An integer field in [lo, hi]. nlohmann would truncate 1.9 to 1 and turn 1e300 into garbage, and
// read -1 as 2^64 - 1 for an unsigned field: here anything but a JSON integer in range is refused,
// quoting the value as written.
template <class T>
T integer_field(const json& j, const char* key, const std::string& where, T lo, T hi, const RawFloats& raw) {
  if (!j.is_object() || !j.contains(key)) throw Error(where + ": missing field '" + key + "'");
  const json& v = j.at(key);
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!v.is_number_integer())
    throw Error(where + ": field '" + key + "' = " + written(v, raw) + " is not allowed: it must be " + range);
  bool ok;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = u <= uint64_t(hi) && (lo <= 0 || u >= uint64_t(lo));
  } else {  // a negative integer
    const int64_t i = v.get<int64_t>();
    ok = lo < 0 && i >= int64_t(lo) && (hi < 0 ? i <= int64_t(hi) : true);
  }
  if (!ok) throw Error(where + ": field '" + key + "' = " + written(v, raw) + " is out of range: it must be " + range);
  return v.get<T>();
}

double finite_field(const json& j, const char* key, const std::string& where, const RawFloats& raw) {
  const double x = field<double>(j, key, where);
  if (!std::isfinite(x)) throw Error(where + ": field '" + key + "' = " + written(j.at(key), raw) + " must be finite");
  return x;
}

double finite_nonneg(const json& j, const char* key, const std::string& where, const RawFloats& raw) {
  const double x = field<double>(j, key, where);
  if (!(std::isfinite(x) && x >= 0))
    throw Error(where + ": field '" + key + "' = " + written(j.at(key), raw) + " must be a finite number >= 0");
  return x;
}

// floor of the rule for golden values g at storage type t: unit roundoff × max(1, max|g|), exactly
// as tolerance_for() computes it when the set is generated.
double floor_of(const std::vector<double>& g, DType t) {
  double max_ref = 0;
  for (double x : g)
    if (std::isfinite(x)) max_ref = std::max(max_ref, std::fabs(x));
  return unit_roundoff(t) * std::max(1.0, max_ref);
}

Manifest parse_manifest(const json& j, const RawFloats& raw, const std::string& where);

// An array of offsets or lengths: JSON integers from 0 to 2^31 - 1, each refused as written otherwise.
std::vector<int32_t> int32_list(const json& j, const char* key, const std::string& where, const RawFloats& raw) {
  const json& v = j.at(key);
  if (!v.is_array()) throw Error(where + ": field '" + key + "' = " + written(v, raw) + " must be an array of integers");
  std::vector<int32_t> out;
  for (size_t n = 0; n < v.size(); ++n) {
    const std::string name = std::string(key) + "[" + std::to_string(n) + "]";
    json one = json::object();
    one[name] = v[n];
    out.push_back(integer_field<int32_t>(one, name.c_str(), where, 0, INT32_MAX, raw));
  }
  return out;
}

// A shape: JSON integers from 0 to 2^62 (nlohmann would turn 1.8e20 into an undefined conversion).
std::vector<int64_t> int64_list(const json& j, const char* key, const std::string& where, const RawFloats& raw) {
  if (!j.is_object() || !j.contains(key)) throw Error(where + ": missing field '" + key + "'");
  const json& v = j.at(key);
  if (!v.is_array()) throw Error(where + ": field '" + key + "' = " + written(v, raw) + " must be an array of integers");
  std::vector<int64_t> out;
  for (size_t n = 0; n < v.size(); ++n) {
    const std::string name = std::string(key) + "[" + std::to_string(n) + "]";
    json one = json::object();
    one[name] = v[n];
    out.push_back(integer_field<int64_t>(one, name.c_str(), where, 0, int64_t(1) << 62, raw));
  }
  return out;
}

// The variants' fields of a manifest's problem. Each may be absent (a set written before issue 21, or
// by a tool that knows only the plain problem): then the plain problem's value. Present, it must be
// well formed; Problem::invalid_reason then judges how the fields fit together.
void read_variants(const json& pj, const std::string& pw, const RawFloats& raw, Problem& p) {
  const int64_t kMaxDim = int64_t(1) << 40;
  if (pj.contains("window_left")) p.window_left = integer_field<int64_t>(pj, "window_left", pw, -1, kMaxDim, raw);
  if (pj.contains("window_right")) p.window_right = integer_field<int64_t>(pj, "window_right", pw, -1, kMaxDim, raw);
  if (pj.contains("softcap") && !pj.at("softcap").is_null()) {
    const json& c = pj.at("softcap");
    if (!c.is_number())
      throw Error(pw + ": field 'softcap' = " + written(c, raw) + " must be null (no softcap) or a finite number > 0");
    const double x = c.get<double>();
    if (!(std::isfinite(x) && x > 0))
      throw Error(pw + ": field 'softcap' = " + written(c, raw) + " is not allowed: it must be null (no softcap) or a finite number > 0");
    p.softcap = x;
  }
  if (pj.contains("alibi")) {
    const std::string a = field<std::string>(pj, "alibi", pw);
    const auto al = parse_alibi(a);
    if (!al) throw Error(pw + ": field 'alibi' = \"" + a + "\" is not one of \"none\", \"heads\", \"batch_heads\"");
    p.alibi = *al;
  }
  for (auto [key, dest] : {std::pair{"cu_seqlens_q", &p.cu_seqlens_q}, std::pair{"cu_seqlens_k", &p.cu_seqlens_k},
                           std::pair{"seqused_k", &p.seqused_k}})
    if (pj.contains(key)) *dest = int32_list(pj, key, pw, raw);
}

}  // namespace

npy::Kind kind_for(DType t) {
  switch (t) {
    case DType::f16: return npy::Kind::f2;
    case DType::bf16: return npy::Kind::u2;
    case DType::f32: return npy::Kind::f4;
  }
  return npy::Kind::f4;
}

std::vector<npy::Kind> accepted_kinds(DType t) {
  std::vector<npy::Kind> ks = {kind_for(t)};
  for (npy::Kind wider : {npy::Kind::f4, npy::Kind::f8})
    if (ks[0] != wider) ks.push_back(wider);
  return ks;
}

std::vector<double> to_double(const npy::Array& a) {
  const int64_t n = a.count();
  std::vector<double> out(size_t(n), 0.0);
  switch (a.kind) {
    case npy::Kind::f8:
      if (n) std::memcpy(out.data(), a.data.data(), size_t(n) * 8);
      break;
    case npy::Kind::f4: {
      std::vector<float> f = unpack(DType::f32, a.data.data(), n);
      std::copy(f.begin(), f.end(), out.begin());
      break;
    }
    case npy::Kind::f2:
    case npy::Kind::u2: {
      std::vector<float> f = unpack(a.kind == npy::Kind::f2 ? DType::f16 : DType::bf16, a.data.data(), n);
      std::copy(f.begin(), f.end(), out.begin());
      break;
    }
  }
  return out;
}

npy::Array from_float(DType t, const std::vector<float>& xs, const std::vector<int64_t>& shape) {
  npy::Array a;
  a.kind = kind_for(t);
  a.shape = shape;
  a.data = pack(t, xs);
  return a;
}

const TensorInfo& Manifest::at(const std::string& name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return t;
  throw Error("the golden set has no tensor '" + name + "'");
}

Manifest generate(const Problem& p, uint64_t seed, const std::string& dir, InputOptions opt) {
  p.validate();
  Manifest m;
  m.p = p;
  m.seed = seed;
  m.opt = opt;
  m.tensors = layout(p);
  const Inputs in = make_inputs(p, seed, opt);
  const Expected e = expected_for(in, true);
  const std::map<std::string, const std::vector<float>*> inputs = {
      {"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"do", &in.dO}, {"alibi_slopes", &in.alibi_slopes}};
  const std::map<std::string, std::pair<const std::vector<double>*, const std::vector<float>*>> outputs = {
      {"o", {&e.fwd.o, &e.base_fwd.o}},     {"lse", {&e.fwd.lse, &e.base_fwd.lse}}, {"dq", {&e.bwd.dq, &e.base_bwd.dq}},
      {"dk", {&e.bwd.dk, &e.base_bwd.dk}}, {"dv", {&e.bwd.dv, &e.base_bwd.dv}}};
  // Every tolerance before any file is written: a problem refused here (a baseline that overflows)
  // had already replaced the inputs of the set in dir, under its old manifest and answers.
  for (TensorInfo& t : m.tensors) {
    if (t.input) continue;
    const auto [oracle, base] = outputs.at(t.name);
    t.tol = tolerance_for(*oracle, *base, t.storage);
    if (!std::isfinite(t.tol.tol))
      throw Error("the baseline of " + t.name + " is not finite for " + p.describe() + " (seed " +
                  std::to_string(seed) + "): no tolerance can be given");
  }

  json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["problem"] = {{"B", p.B}, {"H", p.H}, {"H_kv", p.H_kv}, {"Nq", p.Nq}, {"Nk", p.Nk}, {"d", p.d},
                  {"causal", p.causal}, {"softmax_scale", p.softmax_scale()}, {"dtype", dtype_name(p.dtype)}};
  j["problem"].update(variant_fields(p));
  j["seed"] = seed;
  j["inputs"] = {{"mean", opt.mean}, {"q_scale", opt.q_scale},
                 {"how", "Normal(mean, 1) from std::mt19937_64 with Box-Muller (common/tensor.cpp), q times q_scale, "
                         "rounded to dtype; order q, k, v, do"}};
  if (p.alibi == Alibi::heads) j["inputs"]["alibi_slopes"] = "ALiBi's geometric slopes for H heads (common/tensor.cpp alibi_slopes_for)";
  if (p.alibi == Alibi::batch_heads)
    j["inputs"]["alibi_slopes"] = "[B][H]: the geometric slope of head h times 2^u, u uniform in [-1, 1) from "
                                  "std::mt19937_64(seed ^ 0xa11b1) (common/tensor.cpp alibi_slopes_batch)";
  j["conventions"] = {
      {"layout", p.varlen() ? "C order, packed (variable length): q, o, do, dq: [total_q][H][d]; k, v, dk, dv: "
                              "[total_k][H_kv][d]; lse: [H][total_q]; sequence b holds rows cu_seqlens_q[b] .. "
                              "cu_seqlens_q[b+1]-1 (keys: cu_seqlens_k)"
                            : "C order; q, o, do, dq: [B][H][Nq][d]; k, v, dk, dv: [B][H_kv][Nk][d]; lse: [B][H][Nq]"},
      {"gqa", "query head h reads K/V head h / (H / H_kv); dk, dv are summed over the query heads that share one"},
      {"causal", "bottom-right aligned: query i sees key j iff j <= i + Nk - Nq"},
      {"lse", "natural-log logsumexp of the scaled scores; a row that sees no key has o = 0 and lse = +inf"},
      {"bf16", "numpy has no bf16: <u2 files hold bf16 bit patterns; widen with (a.astype('<u4') << 16).view('<f4')"}};
  if (p.has_variant())
    j["conventions"]["variants"] =
        "docs/variants.md. Per sequence b (Nq, Nk read as its own lengths; Nk = seqused_k[b] when given), "
        "diag = i + Nk - Nq: query i sees key j iff (not causal or j <= diag) and (window_left < 0 or j >= diag - "
        "window_left) and (window_right < 0 or j <= diag + window_right); logit = cap(scale * q.k) - slope[b,h] * "
        "|diag - j|, cap(x) = softcap * tanh(x / softcap) (x without a softcap), slope 0 without ALiBi; keys past "
        "seqused_k get dk = dv = 0";
  j["tolerance_rule"] =
      "every entry |candidate - golden| <= tol, written so that NaN fails; where golden is +inf the candidate "
      "must be +inf; tol = 2 * baseline_err + floor, baseline_err = max|baseline - oracle| for Algorithm 0 at "
      "the storage type (S and P rounded, fp32 accumulation), floor = unit roundoff of the storage type * "
      "max(1, max|oracle|). A candidate may be written in its storage type or a wider float.";
  json ts = json::object();
  for (const TensorInfo& t : m.tensors) {
    json x = {{"file", t.file}, {"role", t.input ? "input" : "output"}, {"shape", t.shape},
              {"npy_dtype", npy::descr(t.kind)}, {"dtype", t.input ? dtype_name(t.storage) : "fp64"}};
    if (!t.input) {
      std::vector<std::string> acc;
      for (npy::Kind k : accepted_kinds(t.storage)) acc.push_back(npy::descr(k));
      x["storage"] = dtype_name(t.storage);
      x["accepted_npy_dtypes"] = acc;
      x["baseline_err"] = t.tol.baseline_err;
      x["floor"] = t.tol.floor;
      x["tol"] = t.tol.tol;
    }
    ts[t.name] = x;
  }
  j["tensors"] = ts;

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw Error(dir + ": cannot create the output folder" + (ec ? ": " + ec.message() : ""));
  // The manifest is what makes a folder a golden set: the old one goes before the first tensor is
  // replaced, and the new one comes last, whole (written aside, then renamed). A write that fails
  // between (a full disk) leaves a folder that is refused as a golden set, never one that mixes the
  // new inputs with the old answers and then blames every correct candidate.
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  if (!fs::remove(mpath, ec) && ec) throw Error(mpath + ": cannot remove the old manifest: " + ec.message());
  const std::string incomplete = "; the golden set in " + dir + " is incomplete: it has no manifest.json";
  try {
    for (const TensorInfo& t : m.tensors) {
      const std::string path = (fs::path(dir) / t.file).string();
      if (t.input) npy::write(path, from_float(t.storage, *inputs.at(t.name), t.shape));
      else npy::write(path, from_double(*outputs.at(t.name).first, t.shape));
    }
    const std::string tmp = mpath + ".tmp";
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    f.close();
    if (!f) {
      fs::remove(tmp, ec);
      throw Error(tmp + ": write failed (disk full?)");
    }
    fs::rename(tmp, mpath, ec);
    if (ec) throw Error(mpath + ": cannot be written: " + ec.message());
  } catch (const Error& e) {
    throw Error(e.what() + incomplete);
  }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string where = (fs::path(dir) / "manifest.json").string();
  std::error_code ec;
  if (fs::exists(where, ec) && !fs::is_regular_file(where, ec))  // a folder read as "basic_filebuf::underflow"
    throw Error(where + ": not a regular file (is " + dir + " a folder made by 'flashladder oracle generate'?)");
  std::ifstream f(where);
  if (!f) throw Error(where + ": cannot be opened (is " + dir + " a folder made by 'flashladder oracle generate'?)");
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw Error(where + ": read failed: " + e.what());
  }
  if (f.bad()) throw Error(where + ": read failed");
  return parse_manifest_text(text, where);
}

Manifest parse_manifest_text(const std::string& text, const std::string& where) {
  json j;
  RawFloats raw;
  try {
    RecordingSax sax(j, raw, where);
    json::sax_parse(text, &sax);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  return parse_manifest(j, raw, where);
}

namespace {

Manifest parse_manifest(const json& j, const RawFloats& raw, const std::string& where) {
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    throw Error(where + ": not a flashladder golden manifest (field 'format' is not \"" + kFormat + "\")");
  if (integer_field<int64_t>(j, "format_version", where, 0, INT64_MAX, raw) != kFormatVersion)
    throw Error(where + ": format_version " + j["format_version"].dump() + " is not the version read here (" +
                std::to_string(kFormatVersion) + ")");
  Manifest m;
  const json& pj = member(j, "problem", where);
  const std::string pw = where + " problem";
  // Sizes from 1 to 2^40, the most Problem allows in one tensor (its validation checks products).
  const int64_t kMaxDim = int64_t(1) << 40;
  m.p.B = integer_field<int64_t>(pj, "B", pw, 1, kMaxDim, raw);
  m.p.H = integer_field<int64_t>(pj, "H", pw, 1, kMaxDim, raw);
  m.p.H_kv = integer_field<int64_t>(pj, "H_kv", pw, 1, kMaxDim, raw);
  m.p.Nq = integer_field<int64_t>(pj, "Nq", pw, 1, kMaxDim, raw);
  m.p.Nk = integer_field<int64_t>(pj, "Nk", pw, 1, kMaxDim, raw);
  m.p.d = integer_field<int64_t>(pj, "d", pw, 1, kMaxDim, raw);
  m.p.causal = field<bool>(pj, "causal", pw);
  m.p.scale = field<double>(pj, "softmax_scale", pw);
  const std::string dt = field<std::string>(pj, "dtype", pw);
  const auto t = parse_dtype(dt);
  if (!t) throw Error(pw + ": unknown dtype '" + dt + "'");
  m.p.dtype = *t;
  read_variants(pj, pw, raw, m.p);
  const std::string why = m.p.invalid_reason();
  if (!why.empty()) throw Error(pw + ": " + why);
  m.seed = integer_field<uint64_t>(j, "seed", where, 0, UINT64_MAX, raw);
  const json& ij = member(j, "inputs", where);
  m.opt.mean = finite_field(ij, "mean", where + " inputs", raw);
  m.opt.q_scale = finite_field(ij, "q_scale", where + " inputs", raw);
  m.tensors = layout(m.p);
  const json& ts = member(j, "tensors", where);
  for (TensorInfo& ti : m.tensors) {
    const std::string tw = where + " tensors." + ti.name;
    const json& x = member(ts, ti.name.c_str(), where + " tensors");
    if (field<std::string>(x, "file", tw) != ti.file) throw Error(tw + ": file is not '" + ti.file + "'");
    const std::vector<int64_t> shape = int64_list(x, "shape", tw, raw);
    if (shape != ti.shape)
      throw Error(tw + ": shape " + npy::shape_text(shape) + " disagrees with the problem, which gives " +
                  npy::shape_text(ti.shape));
    if (field<std::string>(x, "npy_dtype", tw) != npy::descr(ti.kind))
      throw Error(tw + ": npy_dtype is not '" + npy::descr(ti.kind) + "', which the problem's dtype gives");
    if (!ti.input) {
      ti.tol.baseline_err = finite_nonneg(x, "baseline_err", tw, raw);
      ti.tol.floor = finite_nonneg(x, "floor", tw, raw);
      ti.tol.tol = finite_nonneg(x, "tol", tw, raw);
      // The rule recomputed: a tol that is not 2 · baseline_err + floor (an edited manifest, or
      // one written by another tool) would judge every candidate by a number nobody derived.
      // generate() writes the three doubles exactly (JSON round-trips them), so equality is exact.
      const double expect = 2 * ti.tol.baseline_err + ti.tol.floor;
      if (ti.tol.tol != expect)
        throw Error(tw + ": tol = " + written(x.at("tol"), raw) + " disagrees with the manifest's own rule: 2 * baseline_err (" +
                    written(x.at("baseline_err"), raw) + ") + floor (" + written(x.at("floor"), raw) + ") = " +
                    json(expect).dump() + "; the golden set is broken: regenerate it with 'flashladder oracle generate'");
    }
  }
  return m;
}

}  // namespace

Inputs read_inputs(const std::string& dir, const Manifest& m) {
  Inputs in;
  in.p = m.p;
  in.seed = m.seed;
  in.opt = m.opt;
  auto load = [&](const char* name) {
    const TensorInfo& t = m.at(name);
    npy::Array a = npy::read_expect((fs::path(dir) / t.file).string(), t.kind, t.shape);
    return unpack(m.p.dtype, a.data.data(), a.count());
  };
  in.q = load("q");
  in.k = load("k");
  in.v = load("v");
  in.dO = load("do");
  if (m.p.alibi != Alibi::none) {
    const TensorInfo& t = m.at("alibi_slopes");
    npy::Array a = npy::read_expect((fs::path(dir) / t.file).string(), t.kind, t.shape);
    in.alibi_slopes = unpack(DType::f32, a.data.data(), a.count());
    const std::string why = alibi_slopes_reason(m.p, in.alibi_slopes);
    if (!why.empty()) throw Error((fs::path(dir) / t.file).string() + ": " + why);
  }
  return in;
}

void check_output_folder(const std::string& dir, bool backward) {
  if (backward) return;  // all five are written
  // Refused rather than removed: the gradients may be another tool's outputs, or the ones a user
  // means to keep; deleting them is not this run's to do. Refusing changes nothing on disk and names
  // the files, so neither a check of two runs' outputs nor a lost file can follow from it.
  std::string stale;
  std::error_code ec;
  for (const char* f : {"dq.npy", "dk.npy", "dv.npy"})
    if (fs::exists(fs::path(dir) / f, ec)) stale += std::string(stale.empty() ? "" : ", ") + f;
  if (!stale.empty())
    throw Error(dir + " holds " + stale + " from an earlier run: a forward run writes only o.npy and lse.npy, and "
                "oracle check would judge those gradients with them; remove them, run with --backward, or write "
                "to another folder");
}

std::vector<std::string> write_outputs(const std::string& dir, const Problem& p, const Outputs& out, bool backward) {
  check_output_folder(dir, backward);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw Error(dir + ": cannot create the output folder" + (ec ? ": " + ec.message() : ""));
  std::vector<std::string> files;
  auto put = [&](const char* name, DType t, const std::vector<float>& xs, std::vector<int64_t> shape) {
    const std::string path = (fs::path(dir) / (std::string(name) + ".npy")).string();
    npy::write(path, from_float(t, xs, shape));
    files.push_back(path);
  };
  const std::vector<int64_t> qs = p.q_shape(), kvs = p.kv_shape();
  put("o", p.dtype, out.o, qs);
  put("lse", DType::f32, out.lse, p.lse_shape());
  if (backward) {
    put("dq", p.dtype, out.dq, qs);
    put("dk", p.dtype, out.dk, kvs);
    put("dv", p.dtype, out.dv, kvs);
  }
  return files;
}

Report check(const std::string& golden_dir, const std::string& candidate_dir, bool backward) {
  const Manifest m = read_manifest(golden_dir);
  if (!fs::is_directory(candidate_dir)) throw Error(candidate_dir + ": the candidate folder does not exist");
  Report r;
  r.pass = true;
  for (const TensorInfo& t : m.tensors) {
    if (t.input) continue;
    const bool required = t.name == "o" || t.name == "lse" || backward;
    const std::string cpath = (fs::path(candidate_dir) / t.file).string();
    if (!fs::exists(cpath)) {
      if (required)
        throw Error(cpath + ": missing; o.npy and lse.npy are required" +
                    std::string(backward ? ", and dq.npy, dk.npy, dv.npy with --backward" : ""));
      continue;
    }
    TensorResult res;
    res.name = t.name;
    res.present = true;
    res.check.tensor = t.name;
    const std::string gpath = (fs::path(golden_dir) / t.file).string();
    const npy::Array golden = npy::read_expect(gpath, t.kind, t.shape);
    const std::vector<double> gv = to_double(golden);
    // A broken golden set is bad input whatever the candidate: NaN fails every comparison, so a NaN
    // in the answers would blame any candidate. Only lse may hold +inf (a row that sees no key).
    for (size_t n = 0; n < gv.size(); ++n)
      if (!(std::isfinite(gv[n]) || (t.name == "lse" && gv[n] == INFINITY)))
        throw Error(gpath + ": the golden set is broken: entry " + std::to_string(n) + " is " + std::to_string(gv[n]) +
                    " (the oracle's answers are finite" + (t.name == "lse" ? ", or +inf on a row that sees no key" : "") +
                    "); regenerate it with 'flashladder oracle generate'");
    // The floor of the rule, recomputed from the answers themselves (read_manifest has checked tol
    // against baseline_err and floor).
    const double floor_here = floor_of(gv, t.storage);
    if (floor_here != t.tol.floor)
      throw Error((fs::path(golden_dir) / "manifest.json").string() + " tensors." + t.name + ": floor = " +
                  json(t.tol.floor).dump() + " disagrees with " + t.file + ", whose largest entry gives " + json(floor_here).dump() +
                  "; the golden set is broken: regenerate it with 'flashladder oracle generate'");
    const npy::Array cand = npy::read(cpath);
    const std::vector<npy::Kind> ok = accepted_kinds(t.storage);
    if (std::find(ok.begin(), ok.end(), cand.kind) == ok.end()) {
      res.mismatch = std::string("dtype mismatch: ") + t.file + " is " + npy::descr(cand.kind) + " but the manifest's " +
                     "storage type for " + t.name + " is " + dtype_name(t.storage) + "; accepted: " + kinds_text(ok);
    } else if (cand.shape != t.shape) {
      std::vector<int64_t> a = cand.shape, b = t.shape;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      res.mismatch = "shape mismatch: " + t.file + " has shape " + npy::shape_text(cand.shape) +
                     " but the manifest says " + npy::shape_text(t.shape) +
                     (a == b ? " (the same dimensions in another order: transposed?)" : "");
    } else {
      res.check = compare_with_tol(t.name, to_double(cand), gv, t.tol, t.shape, m.seed);
      res.pass = res.check.pass;
    }
    r.pass = r.pass && res.pass;
    r.tensors.push_back(std::move(res));
  }
  return r;
}

}  // namespace fl::golden

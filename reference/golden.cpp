// flashladder — reference/golden.cpp: writing, reading and judging golden sets.
#include "reference/golden.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reference/verify.hpp"

namespace fl::golden {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // keeps the manifest in the order a reader expects

namespace {

constexpr const char* kFormat = "flashladder-golden";
constexpr int kFormatVersion = 1;

// The tensors of a golden set, in manifest order, with shapes and types derived from the problem.
std::vector<TensorInfo> layout(const Problem& p) {
  const std::vector<int64_t> qs = {p.B, p.H, p.Nq, p.d}, kvs = {p.B, p.H_kv, p.Nk, p.d}, ls = {p.B, p.H, p.Nq};
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
  return {t("q", true, qs, in, p.dtype),          t("k", true, kvs, in, p.dtype),
          t("v", true, kvs, in, p.dtype),          t("do", true, qs, in, p.dtype),
          t("o", false, qs, npy::Kind::f8, p.dtype), t("lse", false, ls, npy::Kind::f8, DType::f32),
          t("dq", false, qs, npy::Kind::f8, p.dtype), t("dk", false, kvs, npy::Kind::f8, p.dtype),
          t("dv", false, kvs, npy::Kind::f8, p.dtype)};
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

double finite_nonneg(const json& j, const char* key, const std::string& where) {
  const double x = field<double>(j, key, where);
  if (!(std::isfinite(x) && x >= 0)) throw Error(where + ": field '" + key + "' must be a finite number >= 0");
  return x;
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
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw Error(dir + ": cannot create the output folder" + (ec ? ": " + ec.message() : ""));
  Manifest m;
  m.p = p;
  m.seed = seed;
  m.opt = opt;
  m.tensors = layout(p);
  const Inputs in = make_inputs(p, seed, opt);
  const Expected e = expected_for(in, true);
  const std::vector<const std::vector<float>*> inputs = {&in.q, &in.k, &in.v, &in.dO};
  const std::vector<const std::vector<double>*> oracle = {&e.fwd.o, &e.fwd.lse, &e.bwd.dq, &e.bwd.dk, &e.bwd.dv};
  const std::vector<const std::vector<float>*> base = {&e.base_fwd.o, &e.base_fwd.lse, &e.base_bwd.dq,
                                                       &e.base_bwd.dk, &e.base_bwd.dv};
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    TensorInfo& t = m.tensors[i];
    const std::string path = (fs::path(dir) / t.file).string();
    if (t.input) {
      npy::write(path, from_float(p.dtype, *inputs[i], t.shape));
      continue;
    }
    const size_t k = i - inputs.size();
    t.tol = tolerance_for(*oracle[k], *base[k], t.storage);
    if (!std::isfinite(t.tol.tol))
      throw Error("the baseline of " + t.name + " is not finite for " + p.describe() + " (seed " +
                  std::to_string(seed) + "): no tolerance can be given");
    npy::write(path, from_double(*oracle[k], t.shape));
  }

  json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["problem"] = {{"B", p.B}, {"H", p.H}, {"H_kv", p.H_kv}, {"Nq", p.Nq}, {"Nk", p.Nk}, {"d", p.d},
                  {"causal", p.causal}, {"softmax_scale", p.softmax_scale()}, {"dtype", dtype_name(p.dtype)}};
  j["seed"] = seed;
  j["inputs"] = {{"mean", opt.mean}, {"q_scale", opt.q_scale},
                 {"how", "Normal(mean, 1) from std::mt19937_64 with Box-Muller (common/tensor.cpp), q times q_scale, "
                         "rounded to dtype; order q, k, v, do"}};
  j["conventions"] = {
      {"layout", "C order; q, o, do, dq: [B][H][Nq][d]; k, v, dk, dv: [B][H_kv][Nk][d]; lse: [B][H][Nq]"},
      {"gqa", "query head h reads K/V head h / (H / H_kv); dk, dv are summed over the query heads that share one"},
      {"causal", "bottom-right aligned: query i sees key j iff j <= i + Nk - Nq"},
      {"lse", "natural-log logsumexp of the scaled scores; a row that sees no key has o = 0 and lse = +inf"},
      {"bf16", "numpy has no bf16: <u2 files hold bf16 bit patterns; widen with (a.astype('<u4') << 16).view('<f4')"}};
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
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  std::ofstream f(mpath);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) throw Error(mpath + ": write failed");
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string where = (fs::path(dir) / "manifest.json").string();
  std::ifstream f(where);
  if (!f) throw Error(where + ": cannot be opened (is " + dir + " a folder made by 'flashladder oracle generate'?)");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    throw Error(where + ": not a flashladder golden manifest (field 'format' is not \"" + kFormat + "\")");
  if (field<int>(j, "format_version", where) != kFormatVersion)
    throw Error(where + ": format_version " + j["format_version"].dump() + " is not the version read here (" +
                std::to_string(kFormatVersion) + ")");
  Manifest m;
  const json pj = field<json>(j, "problem", where);
  const std::string pw = where + " problem";
  m.p.B = field<int64_t>(pj, "B", pw);
  m.p.H = field<int64_t>(pj, "H", pw);
  m.p.H_kv = field<int64_t>(pj, "H_kv", pw);
  m.p.Nq = field<int64_t>(pj, "Nq", pw);
  m.p.Nk = field<int64_t>(pj, "Nk", pw);
  m.p.d = field<int64_t>(pj, "d", pw);
  m.p.causal = field<bool>(pj, "causal", pw);
  m.p.scale = field<double>(pj, "softmax_scale", pw);
  const std::string dt = field<std::string>(pj, "dtype", pw);
  const auto t = parse_dtype(dt);
  if (!t) throw Error(pw + ": unknown dtype '" + dt + "'");
  m.p.dtype = *t;
  const std::string why = m.p.invalid_reason();
  if (!why.empty()) throw Error(pw + ": " + why);
  m.seed = field<uint64_t>(j, "seed", where);
  const json ij = field<json>(j, "inputs", where);
  m.opt.mean = field<double>(ij, "mean", where + " inputs");
  m.opt.q_scale = field<double>(ij, "q_scale", where + " inputs");
  m.tensors = layout(m.p);
  const json ts = field<json>(j, "tensors", where);
  for (TensorInfo& ti : m.tensors) {
    const std::string tw = where + " tensors." + ti.name;
    const json x = field<json>(ts, ti.name.c_str(), where + " tensors");
    if (field<std::string>(x, "file", tw) != ti.file) throw Error(tw + ": file is not '" + ti.file + "'");
    const auto shape = field<std::vector<int64_t>>(x, "shape", tw);
    if (shape != ti.shape)
      throw Error(tw + ": shape " + npy::shape_text(shape) + " disagrees with the problem, which gives " +
                  npy::shape_text(ti.shape));
    if (field<std::string>(x, "npy_dtype", tw) != npy::descr(ti.kind))
      throw Error(tw + ": npy_dtype is not '" + npy::descr(ti.kind) + "', which the problem's dtype gives");
    if (!ti.input) {
      ti.tol.baseline_err = finite_nonneg(x, "baseline_err", tw);
      ti.tol.floor = finite_nonneg(x, "floor", tw);
      ti.tol.tol = finite_nonneg(x, "tol", tw);
    }
  }
  return m;
}

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
  return in;
}

std::vector<std::string> write_outputs(const std::string& dir, const Problem& p, const Outputs& out, bool backward) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw Error(dir + ": cannot create the output folder" + (ec ? ": " + ec.message() : ""));
  std::vector<std::string> files;
  auto put = [&](const char* name, DType t, const std::vector<float>& xs, std::vector<int64_t> shape) {
    const std::string path = (fs::path(dir) / (std::string(name) + ".npy")).string();
    npy::write(path, from_float(t, xs, shape));
    files.push_back(path);
  };
  const std::vector<int64_t> qs = {p.B, p.H, p.Nq, p.d}, kvs = {p.B, p.H_kv, p.Nk, p.d};
  put("o", p.dtype, out.o, qs);
  put("lse", DType::f32, out.lse, {p.B, p.H, p.Nq});
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
    const npy::Array golden = npy::read_expect((fs::path(golden_dir) / t.file).string(), t.kind, t.shape);
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
      res.check = compare_with_tol(t.name, to_double(cand), to_double(golden), t.tol, t.shape, m.seed);
      res.pass = res.check.pass;
    }
    r.pass = r.pass && res.pass;
    r.tensors.push_back(std::move(res));
  }
  return r;
}

}  // namespace fl::golden

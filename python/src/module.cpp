// flashladder — python/src/module.cpp: the private extension flashladder._core (pybind11).
//
// The public API is python/flashladder/__init__.py: it checks dtypes and shapes, converts numpy
// arrays and torch tensors, and calls the functions here with contiguous float32/float64 arrays (or,
// for step(), raw pointers of tensors it keeps alive). This file only reaches the library's public
// API: fl::ref::forward/backward (reference/oracle.hpp), fl::expected_for (reference/verify.hpp),
// fl::tolerance_for + fl::compare_with_tol (common/compare.hpp, exactly what `flashladder oracle
// check` runs in reference/golden.cpp) and the step list (steps/ladder.hpp). So a change to the oracle
// (its memory blocking, say) reaches Python without a change here.
//
// Why pybind11 and not nanobind: Debian 12 packages pybind11 (pybind11-dev 2.10) but not nanobind, so
// tools/install-deps gets the binding library from apt and the CI build needs no PyPI; pip builds get
// it from PyPI through pyproject.toml. Nothing here needs nanobind's smaller binaries or faster calls:
// every call does O(N²) work in C++.
//
// Errors: fl::Error (every message the library gives a user) becomes flashladder.Error, a
// RuntimeError carrying the C++ message; the GIL is released while the oracle or a step runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/tensor.hpp"
#include "reference/oracle.hpp"
#include "reference/verify.hpp"
#include "steps/ladder.hpp"

namespace py = pybind11;

namespace {

// No forcecast: the Python layer hands over exactly these types, so nothing is converted silently.
using ArrF32 = py::array_t<float, py::array::c_style>;
using ArrF64 = py::array_t<double, py::array::c_style>;

fl::DType dtype_of(const std::string& name) {
  const auto t = fl::parse_dtype(name);
  if (!t) throw fl::Error("unknown storage type '" + name + "'; use fp16, bf16 or fp32");
  return *t;
}

// The variants (issue 21) as the Python layer passes them: window (-1, -1) and alibi "none" are the
// plain problem; empty offsets mean no varlen, no seqused_k.
struct Variants {
  int64_t window_left = -1, window_right = -1;
  std::optional<double> softcap;
  std::string alibi = "none";
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k;
};

// The problem, unchecked (refusal() reports what is wrong with it as text).
fl::Problem problem_of(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, bool causal,
                       std::optional<double> scale, const std::string& dtype, const Variants& v) {
  fl::Problem p;
  p.B = B; p.H = H; p.H_kv = H_kv; p.Nq = Nq; p.Nk = Nk; p.d = d;
  p.causal = causal;
  p.scale = scale;
  p.dtype = dtype_of(dtype);
  p.window_left = v.window_left;
  p.window_right = v.window_right;
  p.softcap = v.softcap;
  const auto a = fl::parse_alibi(v.alibi);
  if (!a) throw fl::Error("alibi '" + v.alibi + "' is not one of none, heads, batch_heads");
  p.alibi = *a;
  p.cu_seqlens_q = v.cu_seqlens_q;
  p.cu_seqlens_k = v.cu_seqlens_k;
  p.seqused_k = v.seqused_k;
  return p;
}

fl::Problem make_problem(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, bool causal,
                         std::optional<double> scale, const std::string& dtype, const Variants& v = {}) {
  fl::Problem p = problem_of(B, H, H_kv, Nq, Nk, d, causal, scale, dtype, v);
  p.validate();
  return p;
}

std::vector<py::ssize_t> shape(const std::vector<int64_t>& s) { return std::vector<py::ssize_t>(s.begin(), s.end()); }

// The array's values, after checking that its element count is the one the problem derives (the
// Python layer checked the shape; this is the guard against a caller that did not).
std::vector<float> take(const ArrF32& a, int64_t want, const char* name) {
  if (a.size() != want)
    throw fl::Error(std::string(name) + " has " + std::to_string(a.size()) + " elements; the problem needs " +
                    std::to_string(want));
  return std::vector<float>(a.data(), a.data() + a.size());
}

ArrF64 to_array(const std::vector<double>& xs, std::vector<py::ssize_t> shape) {
  ArrF64 a(shape);
  if (!xs.empty()) std::memcpy(a.mutable_data(), xs.data(), xs.size() * sizeof(double));
  return a;
}

fl::Inputs make_inputs(const fl::Problem& p, const ArrF32& q, const ArrF32& k, const ArrF32& v,
                       const std::optional<ArrF32>& dO, const std::optional<ArrF32>& slopes) {
  fl::Inputs in;
  in.p = p;
  in.q = take(q, p.q_elems(), "q");
  in.k = take(k, p.kv_elems(), "k");
  in.v = take(v, p.kv_elems(), "v");
  if (dO) in.dO = take(*dO, p.q_elems(), "do");
  if (slopes) in.alibi_slopes = std::vector<float>(slopes->data(), slopes->data() + slopes->size());
  fl::require_alibi_slopes(p, in.alibi_slopes);
  return in;
}

// The oracle: O, L and, when dO is given, dQ, dK, dV, all in double.
py::tuple oracle(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, bool causal,
                 std::optional<double> scale, const ArrF32& q, const ArrF32& k, const ArrF32& v,
                 const std::optional<ArrF32>& dO, const Variants& var, const std::optional<ArrF32>& slopes) {
  // The storage type plays no part in the oracle (it reads the values it is given in double).
  const fl::Problem p = make_problem(B, H, H_kv, Nq, Nk, d, causal, scale, "fp32", var);
  const fl::Inputs in = make_inputs(p, q, k, v, dO, slopes);
  fl::ref::Forward f;
  fl::ref::Backward g;
  {
    py::gil_scoped_release nogil;
    f = fl::ref::forward(in);
    if (dO) g = fl::ref::backward(in, f);
  }
  const std::vector<py::ssize_t> qs = shape(p.q_shape()), kvs = shape(p.kv_shape()), ls = shape(p.lse_shape());
  if (!dO) return py::make_tuple(to_array(f.o, qs), to_array(f.lse, ls));
  return py::make_tuple(to_array(f.o, qs), to_array(f.lse, ls), to_array(g.dq, qs), to_array(g.dk, kvs),
                        to_array(g.dv, kvs));
}

// The index of the first value of a that the storage type cannot hold exactly (NaN counts as
// inexact), or -1. The rule compares a candidate with the oracle on the very inputs the candidate saw,
// so inputs must already be in the storage type.
int64_t first_inexact(const ArrF32& a, const std::string& dtype) {
  const fl::DType t = dtype_of(dtype);
  const float* x = a.data();
  for (py::ssize_t n = 0; n < a.size(); ++n)
    if (!(fl::round_to(t, x[n]) == x[n])) return n;
  return -1;
}

// One tensor's verdict as a dict: the numbers of fl::Check and of its Tolerance.
py::dict check_dict(const std::string& name, const fl::Check& c, const fl::Tolerance& t) {
  py::dict r;
  r["name"] = name;
  r["passed"] = c.pass;
  r["max_err"] = c.max_err;
  r["tol"] = c.tol;
  r["baseline_err"] = t.baseline_err;
  r["floor"] = t.floor;
  r["frac"] = c.frac;
  r["bad"] = c.bad;
  r["nonfinite"] = c.nonfinite;
  r["nans"] = c.nans;
  r["infs"] = c.infs;
  r["first_bad"] = c.first_bad;
  return r;
}

// The rule, exactly as `flashladder oracle generate` + `oracle check` apply it (reference/golden.cpp):
// oracle and baseline from expected_for(), tol = tolerance_for(oracle, baseline, storage) with the
// storage type of the tensor (fp32 for lse), then compare_with_tol() on the candidate held in double.
// candidates maps "o", "lse", "dq", "dk", "dv" to arrays the Python layer widened to float64 and
// shaped as the problem says. The result lists them in that order.
py::list check(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, bool causal,
               std::optional<double> scale, const std::string& dtype, const ArrF32& q, const ArrF32& k,
               const ArrF32& v, const std::optional<ArrF32>& dO, const std::map<std::string, ArrF64>& candidates,
               uint64_t seed, const Variants& var, const std::optional<ArrF32>& slopes) {
  const fl::Problem p = make_problem(B, H, H_kv, Nq, Nk, d, causal, scale, dtype, var);
  fl::Inputs in = make_inputs(p, q, k, v, dO, slopes);
  in.seed = seed;
  const bool backward = candidates.count("dq") || candidates.count("dk") || candidates.count("dv");
  if (backward && !dO) throw fl::Error("dq, dk and dv are judged against the backward of do: give do");
  struct Item {
    const char* name;
    std::vector<int64_t> dims;
    fl::DType storage;
  };
  const std::vector<int64_t> qs = p.q_shape(), kvs = p.kv_shape(), ls = p.lse_shape();
  const std::vector<Item> items = {{"o", qs, p.dtype}, {"lse", ls, fl::DType::f32}, {"dq", qs, p.dtype},
                                   {"dk", kvs, p.dtype}, {"dv", kvs, p.dtype}};
  std::vector<std::pair<std::string, std::vector<double>>> got;
  for (const Item& it : items) {
    auto c = candidates.find(it.name);
    if (c == candidates.end()) continue;
    int64_t want = 1;
    for (int64_t x : it.dims) want *= x;
    if (c->second.size() != want)
      throw fl::Error(std::string(it.name) + " has " + std::to_string(c->second.size()) +
                      " elements; the problem needs " + std::to_string(want));
    got.emplace_back(it.name, std::vector<double>(c->second.data(), c->second.data() + c->second.size()));
  }
  std::vector<std::pair<fl::Check, fl::Tolerance>> results;
  {
    py::gil_scoped_release nogil;
    const fl::Expected e = fl::expected_for(in, backward);
    for (const auto& [name, values] : got) {
      const std::vector<double>* oracle = nullptr;
      const std::vector<float>* base = nullptr;
      const Item* item = nullptr;
      for (const Item& it : items)
        if (name == it.name) item = &it;
      if (name == "o") oracle = &e.fwd.o, base = &e.base_fwd.o;
      if (name == "lse") oracle = &e.fwd.lse, base = &e.base_fwd.lse;
      if (name == "dq") oracle = &e.bwd.dq, base = &e.base_bwd.dq;
      if (name == "dk") oracle = &e.bwd.dk, base = &e.base_bwd.dk;
      if (name == "dv") oracle = &e.bwd.dv, base = &e.base_bwd.dv;
      const fl::Tolerance t = fl::tolerance_for(*oracle, *base, item->storage);
      results.emplace_back(fl::compare_with_tol(name, values, *oracle, t, item->dims, seed), t);
    }
  }
  py::list out;
  for (size_t i = 0; i < results.size(); ++i) out.append(check_dict(got[i].first, results[i].first, results[i].second));
  return out;
}

// The seeded inputs of `flashladder oracle generate --seed` (fl::make_inputs: Normal(mean, 1) from
// std::mt19937_64 with the project's own Box-Muller, q times q_scale, rounded to the storage type), as
// float32 arrays holding values exact in that type.
py::tuple inputs(int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d, const std::string& dtype,
                 uint64_t seed, double mean, double q_scale) {
  const fl::Problem p = make_problem(B, H, H_kv, Nq, Nk, d, false, std::nullopt, dtype);
  fl::InputOptions opt;
  opt.mean = mean;
  opt.q_scale = q_scale;
  fl::Inputs in;
  {
    py::gil_scoped_release nogil;
    in = fl::make_inputs(p, seed, opt);
  }
  auto arr = [](const std::vector<float>& xs, std::vector<py::ssize_t> shape) {
    ArrF32 a(shape);
    if (!xs.empty()) std::memcpy(a.mutable_data(), xs.data(), xs.size() * sizeof(float));
    return a;
  };
  const std::vector<py::ssize_t> qs = {B, H, Nq, d}, kvs = {B, H_kv, Nk, d};
  return py::make_tuple(arr(in.q, qs), arr(in.k, kvs), arr(in.v, kvs), arr(in.dO, qs));
}

// --- Steps -------------------------------------------------------------------------------------

const fl::Step& find(const std::string& name) {
  const fl::Step* s = fl::find_step(name);
  if (!s) throw fl::Error("unknown step '" + name + "'; flashladder.steps() lists them");
  return *s;
}

py::dict describe(const fl::Step& s) {
  py::dict r;
  r["number"] = s.number;
  r["folder"] = s.folder;
  r["change"] = s.change;
  r["gpu"] = s.gpu();
  r["backward"] = s.has_backward();
  r["compiled"] = s.impl != nullptr;
  std::vector<std::string> dts;
  for (fl::DType t : s.dtypes) dts.push_back(fl::dtype_name(t));
  r["dtypes"] = dts;
  r["head_dims"] = s.head_dims;  // empty: any d
  return r;
}

py::list steps() {
  py::list out;
  for (const fl::Step& s : fl::ladder()) out.append(describe(s));
  return out;
}

// "" when the step can run the problem; otherwise the step's own refusal (steps/ladder.cpp), which
// names the limit, or that it has no backward pass.
std::string refusal(const std::string& name, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d,
                    bool causal, std::optional<double> scale, const std::string& dtype, bool backward,
                    const Variants& var) {
  const fl::Step& s = find(name);
  const fl::Problem p = problem_of(B, H, H_kv, Nq, Nk, d, causal, scale, dtype, var);
  std::string why = s.refusal(p);
  if (why.empty() && backward && !s.has_backward()) why = "step " + s.folder + " has no backward pass";
  return why;
}

// Runs the step's forward on pointers the caller owns (host memory for CPU steps, device memory for
// GPU steps, launched on `stream`). The refusal is checked again here, so nothing is launched on a
// problem the step refuses, whoever calls.
// The variants' pointers (where the step runs; 0 where unused) on a step's arguments.
template <class Args>
Args with_variants(Args a, uintptr_t slopes, uintptr_t cu_q, uintptr_t cu_k, uintptr_t used) {
  a.alibi_slopes = reinterpret_cast<const float*>(slopes);
  a.cu_seqlens_q = reinterpret_cast<const int32_t*>(cu_q);
  a.cu_seqlens_k = reinterpret_cast<const int32_t*>(cu_k);
  a.seqused_k = reinterpret_cast<const int32_t*>(used);
  return a;
}

void forward(const std::string& name, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d,
             bool causal, std::optional<double> scale, const std::string& dtype, uintptr_t q, uintptr_t k,
             uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t ws, uintptr_t stream, const Variants& var,
             uintptr_t slopes, uintptr_t cu_q, uintptr_t cu_k, uintptr_t used) {
  const std::string why = refusal(name, B, H, H_kv, Nq, Nk, d, causal, scale, dtype, false, var);
  if (!why.empty()) throw fl::Error(why);
  const fl::Step& s = find(name);
  const fl::Problem p = make_problem(B, H, H_kv, Nq, Nk, d, causal, scale, dtype, var);
  py::gil_scoped_release nogil;
  s.impl->forward(p, with_variants(fl::ForwardArgs{(const void*)q, (const void*)k, (const void*)v, (void*)o, (float*)lse,
                                                   (void*)ws, (void*)stream},
                                   slopes, cu_q, cu_k, used));
}

void backward(const std::string& name, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk, int64_t d,
              bool causal, std::optional<double> scale, const std::string& dtype, uintptr_t q, uintptr_t k,
              uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dO, uintptr_t dq, uintptr_t dk, uintptr_t dv,
              uintptr_t ws, uintptr_t stream, const Variants& var, uintptr_t slopes, uintptr_t cu_q, uintptr_t cu_k,
              uintptr_t used) {
  const std::string why = refusal(name, B, H, H_kv, Nq, Nk, d, causal, scale, dtype, true, var);
  if (!why.empty()) throw fl::Error(why);
  const fl::Step& s = find(name);
  const fl::Problem p = make_problem(B, H, H_kv, Nq, Nk, d, causal, scale, dtype, var);
  py::gil_scoped_release nogil;
  s.impl->backward(p, with_variants(fl::BackwardArgs{(const void*)q, (const void*)k, (const void*)v, (const void*)o,
                                                     (const float*)lse, (const void*)dO, (void*)dq, (void*)dk, (void*)dv,
                                                     (void*)ws, (void*)stream},
                                    slopes, cu_q, cu_k, used));
}

size_t workspace_bytes(const std::string& name, int64_t B, int64_t H, int64_t H_kv, int64_t Nq, int64_t Nk,
                       int64_t d, bool causal, std::optional<double> scale, const std::string& dtype, bool backward,
                       const Variants& var) {
  const std::string why = refusal(name, B, H, H_kv, Nq, Nk, d, causal, scale, dtype, backward, var);
  if (!why.empty()) throw fl::Error(why);
  const fl::Step& s = find(name);
  const fl::Problem p = make_problem(B, H, H_kv, Nq, Nk, d, causal, scale, dtype, var);
  return backward ? s.impl->backward_workspace_bytes(p) : s.impl->workspace_bytes(p);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "flashladder's C++ (the fp64 oracle, the tolerance rule, the steps); use the flashladder package";
  py::register_exception<fl::Error>(m, "Error", PyExc_RuntimeError);
#ifdef FLASHLADDER_HAVE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  using namespace pybind11::literals;
  // The variants travel as one object built from keywords (flashladder/__init__.py checks them first).
  py::class_<Variants>(m, "Variants")
      .def(py::init([](int64_t wl, int64_t wr, std::optional<double> softcap, std::string alibi,
                       std::vector<int32_t> cu_q, std::vector<int32_t> cu_k, std::vector<int32_t> used) {
             return Variants{wl, wr, softcap, std::move(alibi), std::move(cu_q), std::move(cu_k), std::move(used)};
           }),
           "window_left"_a = -1, "window_right"_a = -1, "softcap"_a = py::none(), "alibi"_a = "none",
           "cu_seqlens_q"_a = std::vector<int32_t>(), "cu_seqlens_k"_a = std::vector<int32_t>(),
           "seqused_k"_a = std::vector<int32_t>());
  m.def("oracle", &oracle, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "causal"_a, "scale"_a, "q"_a.noconvert(),
        "k"_a.noconvert(), "v"_a.noconvert(), "do"_a.noconvert().none(true), "variants"_a = Variants{},
        "alibi_slopes"_a.noconvert() = py::none());
  m.def("first_inexact", &first_inexact, "a"_a.noconvert(), "dtype"_a);
  m.def("check", &check, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "causal"_a, "scale"_a, "dtype"_a,
        "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "do"_a.noconvert().none(true), "candidates"_a,
        "seed"_a, "variants"_a = Variants{}, "alibi_slopes"_a.noconvert() = py::none());
  m.def("inputs", &inputs, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "dtype"_a, "seed"_a, "mean"_a, "q_scale"_a);
  m.def("steps", &steps);
  m.def("step_info", [](const std::string& name) { return describe(find(name)); }, "name"_a);
  m.def("refusal", &refusal, "name"_a, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "causal"_a, "scale"_a,
        "dtype"_a, "backward"_a, "variants"_a = Variants{});
  m.def("workspace_bytes", &workspace_bytes, "name"_a, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "causal"_a,
        "scale"_a, "dtype"_a, "backward"_a, "variants"_a = Variants{});
  // The variants' data as pointers where the step runs (0: unused), held alive by the caller.
  m.def("forward", &forward, "name"_a, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "causal"_a, "scale"_a,
        "dtype"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "ws"_a, "stream"_a, "variants"_a = Variants{},
        "alibi_slopes"_a = 0, "cu_seqlens_q"_a = 0, "cu_seqlens_k"_a = 0, "seqused_k"_a = 0);
  m.def("backward", &backward, "name"_a, "B"_a, "H"_a, "H_kv"_a, "Nq"_a, "Nk"_a, "d"_a, "causal"_a, "scale"_a,
        "dtype"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "do"_a, "dq"_a, "dk"_a, "dv"_a, "ws"_a, "stream"_a,
        "variants"_a = Variants{}, "alibi_slopes"_a = 0, "cu_seqlens_q"_a = 0, "cu_seqlens_k"_a = 0, "seqused_k"_a = 0);
}

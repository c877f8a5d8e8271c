// flashladder — common/problem.cpp: validation, names and the FLOP convention.
#include "common/problem.hpp"

#include <sstream>

namespace fl {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "f32" || s == "float" || s == "float32") return DType::f32;
  if (s == "fp16" || s == "f16" || s == "half" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  return std::nullopt;
}

int dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

std::string Problem::invalid_reason() const {
  std::ostringstream e;
  auto positive = [&](const char* name, int64_t v) {
    if (v < 1) e << name << " = " << v << " is not allowed: it must be at least 1. ";
  };
  positive("B", B);
  positive("H", H);
  positive("H_kv", H_kv);
  positive("Nq", Nq);
  positive("Nk", Nk);
  positive("d", d);
  if (H >= 1 && H_kv >= 1 && H % H_kv != 0)
    e << "H = " << H << " is not a multiple of H_kv = " << H_kv
      << ": each K/V head must serve a whole number of query heads (MQA/GQA). ";
  if (scale && !(std::isfinite(*scale) && *scale > 0))
    e << "softmax scale = " << *scale << " is not allowed: it must be finite and > 0. ";
  // 2^40 elements (4 TiB of fp32) per tensor keeps every index product inside int64 with room.
  const int64_t kMax = int64_t(1) << 40;
  if (e.str().empty()) {
    const double q = double(B) * H * Nq * d, kv = double(B) * H_kv * Nk * d;
    if (q > double(kMax) || kv > double(kMax))
      e << "the problem has " << (q > kv ? q : kv) << " elements in one tensor; the limit is 2^40. ";
  }
  std::string s = e.str();
  if (!s.empty()) s.pop_back();
  return s;
}

void Problem::validate() const {
  std::string why = invalid_reason();
  if (!why.empty()) throw Error("invalid problem: " + why);
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B=" << B << " H=" << H << " H_kv=" << H_kv << " Nq=" << Nq << " Nk=" << Nk << " d=" << d
    << " causal=" << (causal ? 1 : 0) << " " << dtype_name(dtype) << " scale=" << softmax_scale()
    << (deterministic ? " deterministic" : "");
  return s.str();
}

double flops_forward(const Problem& p) {
  double f = 4.0 * p.B * p.H * double(p.Nq) * double(p.Nk) * p.d;
  return p.causal ? f / 2 : f;
}

double flops_backward(const Problem& p) { return 2.5 * flops_forward(p); }

}  // namespace fl
